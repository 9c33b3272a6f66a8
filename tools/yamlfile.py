"""Reading the YAML files users write (campaign files, stop rules) with one-line errors."""

from __future__ import annotations

from pathlib import Path

from autoresearch_skills.errors import BadInput


def read_yaml(path: str | Path, missing_hint: str = ""):
    """The parsed document; BadInput naming the file (and the hint) when absent or malformed."""
    import yaml

    path = Path(path)
    try:
        return yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise BadInput(f"{path} does not exist{'; ' + missing_hint if missing_hint else ''}") from None
    except yaml.YAMLError as err:
        raise BadInput(f"{path} is not valid YAML: {str(err).splitlines()[0]}") from None
