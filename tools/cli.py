"""The `ars` command: wiring only. Sub-commands live in their modules and load on first use,
so `ars --help` and the per-run calls agents make (`ars stop check`, `ars ledger append`)
start without importing pandas, git or tmux libraries."""

from __future__ import annotations

import importlib

import click

from autoresearch_skills import __version__
from autoresearch_skills.errors import run_cli

# name -> "module:attribute"; each module also runs as `python tools/<module>.py`.
COMMANDS = {
    "ledger": "autoresearch_skills.ledger:cli",
    "stop": "autoresearch_skills.stoprule:cli",
    "metric": "autoresearch_skills.metrics:cli",
    "profile": "autoresearch_skills.reward_profile:cli",
    "watch": "autoresearch_skills.monitor:cli",
    "doctor": "autoresearch_skills.doctor:cli",
    "campaign": "autoresearch_skills.campaign:cli",
    "exp": "autoresearch_skills.experiment:cli",
    "memory": "autoresearch_skills.memory:cli",
    "report": "autoresearch_skills.report:cli",
    "skills": "autoresearch_skills.skills:cli",
    "run": "autoresearch_skills.runs:run_command",
    "status": "autoresearch_skills.runs:status_command",
    "cancel": "autoresearch_skills.runs:cancel_command",
    "wait": "autoresearch_skills.tmux_wait:cli",
    "init": "autoresearch_skills.targets:cli",
}


class LazyGroup(click.Group):
    def __init__(self, *args, lazy: dict[str, str], **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            module_name, attribute = self.lazy[name].split(":")
            return getattr(importlib.import_module(module_name), attribute)
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ars")
def cli() -> None:
    """autoresearch-skills: run ML research campaigns safely and fast.

    Baseline first, one hypothesis per git branch, every run under a hard
    timeout, one ledger row per attempt, stop rules checked after every run.

    \b
    Examples:
      ars stop parse "24 experiments or 6h total, 10m each"
      ars ledger show results.tsv --status keep
      ars metric extract run.log --preset karpathy
    """


def main() -> None:
    run_cli(cli, prog_name="ars")


if __name__ == "__main__":
    main()
