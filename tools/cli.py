"""The `ars` command: wiring only. Sub-commands live in their modules and load on first use,
so `ars --help` and the per-run calls agents make (`ars stop check`, `ars ledger append`)
start without importing pandas, git or tmux libraries."""

from __future__ import annotations

import copy
import importlib
from pathlib import Path
from typing import TYPE_CHECKING

import click

from autoresearch_skills import __version__
from autoresearch_skills.errors import BadInput, run_cli

if TYPE_CHECKING:
    from autoresearch_skills.campaign.store import Campaign

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
    "dashboard": ("autoresearch_skills.dashboard.cli:cli", "A live page of the campaigns: slots, chart, tree, ledger."),
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
            command = getattr(importlib.import_module(module_name), attribute)
            return with_campaign_best(command) if name == "ledger" else command
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


# ---------------------------------------------------------------- `ars ledger best` in a campaign


def with_campaign_best(ledger_group: click.Group) -> click.Group:
    """`ars ledger`: ledger.py's group, with `best` able to find the campaign's ledger and direction.
    ledger.py sits below the campaign (ARCHITECTURE.md's layers), so the lookup is wired in here;
    `python tools/ledger.py best PATH -d DIR` keeps the explicit form alone."""
    group = copy.copy(ledger_group)
    group.commands = {**ledger_group.commands, "best": ledger_best, "show": ledger_show}
    return group


@click.command("show")
@click.argument("path", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--status", "statuses", multiple=True, help="only rows with this status (repeatable)")
@click.option("--campaign", "ref", help="campaign name or folder (default: the current one)")
@click.option("--json", "as_json", is_flag=True, help="a JSON array of rows")
@click.pass_context
def ledger_show(
    ctx: click.Context, path: Path | None, statuses: tuple[str, ...], ref: str | None, as_json: bool
) -> None:
    """Print the ledger as an aligned table (or JSON).

    PATH, else the ledger of the current campaign (or of --campaign).

    \b
    Examples:
      ars ledger show
      ars ledger show --campaign lr-sweep --status keep
      ars ledger show results.tsv --json
    """
    from autoresearch_skills import ledger

    if path is None or ref is not None:
        path = _campaign_of(path, ref, "show").ledger  # type: ignore[union-attr]
    bad = [s for s in statuses if s not in ledger.STATUSES]
    if bad:
        raise BadInput(f"--status {bad[0]!r} is not one of {', '.join(ledger.STATUSES)}")
    ctx.invoke(ledger.show_cmd, path=path, statuses=statuses, as_json=as_json)


@click.command("best")
@click.argument("path", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-d",
    "--direction",
    type=click.Choice(["min", "max"]),
    help="lower or higher is better (default: the campaign's)",
)
@click.option("--campaign", "ref", help="campaign name or folder (default: the current one)")
@click.option("--json", "as_json", is_flag=True)
def ledger_best(path: Path | None, direction: str | None, ref: str | None, as_json: bool) -> None:
    """Print the best result. Exit 1 when no row is kept yet.

    Inside a campaign, with no arguments: the campaign's best, the one
    `ars campaign status` names. A -d that contradicts the campaign's
    direction is warned about on stderr and answered as asked.

    The best is the kept commit whose mean over its runs (reruns pooled by
    commit and `rerun_of`) is best, among rows of the latest fingerprint; a
    candidate awaiting its rerun never is. Without commits or reruns: the best
    kept row. `index` is the commit's first row; --json adds `indexes`, `n`
    and `mean` (= `metric_value`), the rest from its latest kept row.

    \b
    Examples:
      ars ledger best
      ars ledger best --campaign lr-sweep --json
      ars ledger best results.tsv --direction min
    """
    from autoresearch_skills import ledger

    campaign = _campaign_of(path, ref)
    if campaign is not None:
        path, wanted = campaign.ledger, campaign.settings.direction
        if direction is not None and direction != wanted:
            click.echo(
                f"warning: -d {direction} contradicts campaign {campaign.settings.name}'s direction "
                f"({wanted}); answering for {direction} (`ars ledger best` alone names the campaign's best)",
                err=True,
            )
        direction = direction or wanted
    if path is None or direction is None:  # with no PATH, _campaign_of found a campaign or raised
        raise BadInput(
            f"{path} is no campaign's ledger: give its direction, -d min or -d max "
            "(see `ars ledger best --help`)"
        )
    ledger.print_best(ledger.best(ledger.read(path), direction), as_json)


def _campaign_of(path: Path | None, ref: str | None, verb: str = "best") -> Campaign | None:
    """The campaign whose ledger `ars ledger best` (or `show`) reads: --campaign's, else the current one when
    no PATH is given, else the one whose folder holds PATH; None for a ledger of no campaign."""
    from autoresearch_skills.campaign.store import find

    if path is None:
        try:
            return find(ref)
        except BadInput as err:
            if ref:
                raise
            raise BadInput(
                f"{err.message}; outside a campaign give the ledger"
                + (
                    " and its direction: ars ledger best results.tsv -d min"
                    if verb == "best"
                    else ": ars ledger show results.tsv"
                )
            ) from None
    if ref is None:
        folder = path.parent
        return find(str(folder)) if (folder / "campaign.yaml").is_file() else None
    campaign = find(ref)
    if campaign.ledger.resolve() != path.resolve():
        raise BadInput(f"{path} is not the ledger of campaign {ref} ({campaign.ledger})")
    return campaign


def main() -> None:
    run_cli(cli, prog_name="ars")


if __name__ == "__main__":
    main()
