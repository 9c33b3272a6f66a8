"""`python tools/swarm.py ...` is `ars blueprint run ...`: many blueprints at once on the campaign
engine's GPU pool (the swarm itself lives in blueprints/swarm.py)."""

from __future__ import annotations

import sys

if not __package__:  # run as `python tools/swarm.py` from a checkout with nothing installed
    import _checkout  # noqa: F401

from autoresearch_skills.blueprint import cli
from autoresearch_skills.errors import run_cli


def main() -> None:
    sys.argv[1:1] = ["run"]
    run_cli(cli, prog_name="swarm.py")


if __name__ == "__main__":
    main()
