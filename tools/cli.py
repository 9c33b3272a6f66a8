"""The `ars` command: wiring only. Sub-commands live in their modules and load on first use,
so `ars --help` and the per-run calls agents make (`ars stop check`, `ars ledger append`)
start without importing pandas, git or tmux libraries."""

from __future__ import annotations

import importlib

import click

from autoresearch_skills import __version__
from autoresearch_skills.errors import run_cli

# name -> ("module:attribute", one-line help). The help is kept here so that `ars --help`
# imports no sub-command module; each module also runs as `python tools/<module>.py`.
# fmt: off
COMMANDS = {
    "campaign": (
        "autoresearch_skills.campaign.cli:cli",
        "Campaigns: init, status, pause, the unattended loop (run, resume).",
    ),
    "exp": ("autoresearch_skills.campaign.exp_cli:cli", "Experiments: baseline, start, commit, run (--detach), wait, cancel, mark."),
    "stop": (
        "autoresearch_skills.stoprule:cli",
        "Stop rules: parse plain words; check them against a ledger.",
    ),
    "ledger": ("autoresearch_skills.ledger:cli", "The TSV ledger: init, append, show, best, export."),
    "metric": ("autoresearch_skills.metrics:cli", "Read metrics from logs, JSONL and TensorBoard files."),
    "run": ("autoresearch_skills.runs:run_command", "Start one run (local, tmux or Slurm) under a hard timeout."),
    "status": ("autoresearch_skills.runs:status_command", "State and exit code of a run."),
    "cancel": ("autoresearch_skills.runs:cancel_command", "Cancel a run and its whole process tree."),
    "wait": (
        "autoresearch_skills.tmux_wait:cli",
        "Wait for a tmux session's command to end (0 running, 1 ended).",
    ),
    "watch": (
        "autoresearch_skills.monitor:cli",
        "Watch a run: status blocks on a backoff schedule, anomalies.",
    ),
    "prune": ("autoresearch_skills.prune:cli", "Early stopping: stop a run its curve says will lose."),
    "blueprint": ("autoresearch_skills.blueprint:cli", "Experiment blueprints: new, check, run (a GPU swarm), status, finish."),
    "memory": ("autoresearch_skills.memory:cli", "Session memory: start, checkpoint, handoff, show, resume."),
    "hook": ("autoresearch_skills.hooks:cli", "Agent hooks: block a stop while the campaign goes on; restate it."),
    "report": ("autoresearch_skills.report:cli", "Write report.md, report.html and the charts."),
    "profile": (
        "autoresearch_skills.reward.cli:cli",
        "NeMo Gym-compatible reward profiles, pass@k, compare.",
    ),
    "doctor": (
        "autoresearch_skills.doctor:cli",
        "What this machine offers a campaign: GPUs, tmux, git, Slurm.",
    ),
    "init": ("autoresearch_skills.targets:cli", "Copy a starter training target into a fresh git repo."),
    "skills": ("autoresearch_skills.skills:cli", "Install the agent skills; validate them."),
}
# fmt: on


class LazyGroup(click.Group):
    def __init__(self, *args, lazy: dict[str, tuple[str, str]], **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*self.lazy, *(name for name in super().list_commands(ctx) if name not in self.lazy)]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            module_name, attribute = self.lazy[name][0].split(":")
            return getattr(importlib.import_module(module_name), attribute)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, self.lazy[name][1]) for name in self.list_commands(ctx) if name in self.lazy]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


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
