"""`python tools/<module>.py` from a checkout with nothing installed: make the tools/ folder
importable as the `autoresearch_skills` package (an installed package, if any, wins)."""

import importlib.util
import sys
from pathlib import Path

if "autoresearch_skills" not in sys.modules and importlib.util.find_spec("autoresearch_skills") is None:
    _tools = Path(__file__).resolve().parent
    _spec = importlib.util.spec_from_file_location(
        "autoresearch_skills", _tools / "__init__.py", submodule_search_locations=[str(_tools)]
    )
    if _spec is None or _spec.loader is None:
        raise ImportError(f"cannot load the autoresearch_skills package from {_tools}")
    _package = importlib.util.module_from_spec(_spec)
    sys.modules["autoresearch_skills"] = _package
    _spec.loader.exec_module(_package)
