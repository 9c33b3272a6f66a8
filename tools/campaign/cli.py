"""`ars campaign`: init, status, tree, pause, and the unattended loop (run, resume). Wiring only:
the campaign folder lives in `store`, the tree in `lineage`, the loop in `loop` (imported inside
the commands that need it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from autoresearch_skills import notices
from autoresearch_skills.campaign import lineage, noise
from autoresearch_skills.campaign.pareto import pareto_line
from autoresearch_skills.campaign.settings import SETTINGS, Key
from autoresearch_skills.campaign.status import status_facts
from autoresearch_skills.campaign.store import create, find
from autoresearch_skills.campaign.tried import tried
from autoresearch_skills.errors import BadInput, run_cli
from autoresearch_skills.gitflow import TreeState


@click.group("campaign")
def cli() -> None:
    """Campaigns: settings, ledger and state for one research objective.

    \b
    Examples:
      ars campaign init lr-sweep --metric val_bpb --direction min \\
          --stop "24 experiments or 6h total, 10m each" --command "python train.py"
      ars campaign status
      ars campaign tree
      ars campaign pause --reason "new data arrives tomorrow"
    """
    notices.show_with(lambda line: click.echo(line, err=True))  # the engine's warnings


def _declared_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """One option per setting a command line can hold, built from settings.SETTINGS: its spelling
    (`gpus_per_run` -> `--gpus-per-run`), type, default and help."""
    for key in reversed([k for k in SETTINGS.values() if k.options]):
        flags, extra = _click_form(key)
        option = click.option(*flags, key.name, **{"help": key.help, "required": key.required, **extra})
        command = option(command)
    return command


def _click_form(key: Key) -> tuple[tuple[str, ...], dict]:
    kind, default = key.kind, key.default
    shown = {"default": default, "show_default": True} if isinstance(default, (str, int, float)) else {}
    if kind.form == "flag":  # `--keep-ties`, or `--require-baseline/--no-require-baseline` when on by default
        return key.options, {"default": bool(default), "show_default": bool(default), "is_flag": True}
    if kind.form == "choice":
        return key.options, {"type": click.Choice(kind.choices()), **shown}
    if kind.form == "integer":
        minimum = None if kind.minimum is None else int(kind.minimum)
        return key.options, {"type": click.IntRange(min=minimum), **shown}
    if kind.form == "number":
        return key.options, {"type": click.FloatRange(min=kind.minimum, min_open=kind.open_minimum), **shown}
    if kind.form == "paths":
        return key.options, {"multiple": True, "help": key.help + "; repeat for several"}
    if kind.form == "folder":
        return key.options, {"type": click.Path(file_okay=False, path_type=Path)}
    return key.options, {"type": _Checked(key), **shown}


class _Checked(click.ParamType):
    """A value the declaration's own check accepts (a duration, a GPU spec, a Slurm value ...)."""

    name = "text"

    def __init__(self, key: Key):
        self.key = key

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        problem = self.key.problem(value, param.opts[0] if param else None)
        if problem:
            raise BadInput(problem)
        return value


def _validate_options(name: str, values: dict) -> None:
    """The checks `ars campaign validate` makes (one function), on the options given: a command
    whose program is missing is refused before a folder exists; warnings go to stderr."""
    from autoresearch_skills.campaign.config import Validation, validation_of

    given = {"name": name, **{k: v for k, v in values.items() if v is not None and v != []}}
    result = validation_of(given, Path.cwd(), Validation("ars campaign init"), needs_policy=False)
    if not result.ok:
        more = f" ({len(result.problems)} problems)" if len(result.problems) > 1 else ""
        raise BadInput("; ".join(result.problems[:3]) + more)
    for line in result.warnings:
        click.echo(f"warning: {line}", err=True)


@cli.command("init")
@click.argument("name")
@_declared_options
@click.option("--json", "as_json", is_flag=True)
def init_cmd(name: str, as_json: bool, **values: Any) -> None:
    """Create a campaign: folder, settings, empty ledger, absolute deadline.

    Refuses to overwrite an existing campaign. Reports the working tree: uncommitted
    work is never stashed, reset or committed; experiments then run in worktrees.
    Every option is a campaign.yaml key (references/campaign-settings.md).

    \b
    Examples:
      ars campaign init lr-sweep --metric val_bpb --direction min \\
          --stop "24 experiments or 6h total, 10m each" --command "uv run train.py" --launcher tmux \\
          --tmux-socket lr-sweep --frozen prepare.py
      ars campaign init rl-reward --metric validation/accuracy --direction max \\
          --preset nemo-rl --command "bash run_grpo.sh" --stop "10 experiments"
      ars campaign init gpu-sweep --metric val_bpb --direction min --command "python train.py" \\
          --launcher tmux --gpus 0-7 --gpus-per-run 2 --stop "40 experiments or 12h total, 30m each"
    """
    from autoresearch_skills import gitflow

    for key, value in values.items():
        if SETTINGS[key].kind.form == "paths":
            values[key] = list(value)
    _validate_options(name, values)
    campaign = create(name, stop_text=values.pop("stop"), **values)
    s = campaign.settings
    tree = gitflow.tree_state(s.repo)
    facts = {
        "campaign": s.name,
        "folder": str(campaign.folder),
        "ledger": str(campaign.ledger),
        "metric": f"{s.metric} ({s.direction})",
        "command": s.command,
        "launcher": s.launcher,
        "prefix": s.prefix,
        "stop_rules": campaign.settings.stop_rules().describe(),
        "deadline": s.stop.get("deadline", "none"),
        "working_tree": tree.summary(),
        "isolation": _isolation(s.worktrees, tree, s.pool().parallel),
        "frozen": ", ".join(s.frozen_paths()) or "none (pass --frozen FILE for the evaluation code)",
        "pool": s.pool().describe() + allocation_note(s),
        "next": "ars exp baseline",
    }
    if as_json:
        click.echo(json.dumps(facts, indent=2))
        return
    for key, value in facts.items():
        for line in value if isinstance(value, list) else [value]:
            click.echo(f"{key}: {line}")


def allocation_note(s: Any) -> str:
    """How the pool's runs reach the cluster when the campaign holds an allocation of its own."""
    if s.launcher == "ray" and s.ray_allocation == "campaign":
        return (
            "; in the campaign's holders: one Ray job per slot for the night, each running the runs in turn"
        )
    if s.launcher == "slurm" and s.slurm_allocation == "campaign":
        return "; as job steps of the campaign's one Slurm allocation"
    return ""


def _isolation(worktrees: str, tree: TreeState, parallel: int = 1) -> str:
    if worktrees != "off":
        return (
            "every experiment runs in a git worktree under the campaign folder: your checkout, its changes and "
            "its ignored files stay untouched; each run's outputs go to runs/NNN-name/outputs/"
        )
    if tree.dirty_tracked:
        return "worktrees are off and the tree has uncommitted changes: experiments will refuse to start"
    return "experiments run in your checkout (worktrees: off): a run writes over files of yours there"


@cli.command("status")
@click.option("--campaign", "ref", help="campaign name or folder (default: the current one)")
@click.option("--json", "as_json", is_flag=True)
def status_cmd(ref: str | None, as_json: bool) -> None:
    """Attempted and remaining, best so far, every experiment in flight, the queue, verdict.

    Exit 0 while the campaign should go on, 1 once a stop condition is met.

    \b
    Examples:
      ars campaign status
      ars campaign status --campaign lr-sweep --json
    """
    facts = status_facts(find(ref))
    if as_json:
        click.echo(json.dumps(facts, indent=2, default=str))
    else:
        for key in ("name", "folder", "metric", "direction", "stop_rules", "deadline", "attempted",
                    "remaining_experiments", "remaining_time", "best", "claim", "noise", "keep_rule", "latest",
                    "current_branch", "pool"):  # fmt: skip
            value = facts[key]
            if key == "claim" and value is None:
                continue  # the noise rule: `best:` says it all
            click.echo(f"{key}: {value if value is not None else '-'}")
        for key in ("slurm_allocation", "ray_allocation"):
            if facts[key]:
                click.echo(f"{key}: {facts[key]}")
        for item in facts["in_flight"]:
            click.echo(f"in_flight: {item['line']}")
        if not facts["in_flight"]:
            click.echo("in_flight: -")
        if facts["pareto"]:
            click.echo(f"pareto: {pareto_line(facts['pareto'])}")
        for line in facts["confirmed"]["lines"] if facts["confirmed"] else []:
            click.echo(line)
        click.echo(facts["outputs"])
        if facts["best_outputs"]:
            click.echo(facts["best_outputs"])
        if facts["queue"]:
            click.echo(f"queue: {', '.join(facts['queue'])}")
        if facts.get("paused"):
            click.echo(f"paused: {facts['paused']}")
        if facts["pending_decision"]:
            click.echo(
                f"pending_decision: {facts['pending_decision']} (decide with `ars exp mark keep|discard|crash`)"
            )
        click.echo(facts["verdict"])
    raise SystemExit(0 if facts["should_continue"] else 1)


@cli.command("export")
@click.option(
    "--optuna", "to_optuna", is_flag=True, required=True, help="write the attempts as an Optuna study"
)
@click.option("--storage", help="an Optuna storage URL (default: sqlite:///<campaign folder>/study.db)")
@click.option("--campaign", "ref", help="campaign name or folder (default: the current one)")
def export_cmd(to_optuna: bool, storage: str | None, ref: str | None) -> None:
    """Write the campaign's attempts, whatever proposed them, as an Optuna study: one trial per
    attempt (its knob values as params, the mean of its runs as its value, FAIL for a crash,
    PRUNED for a cancelled run), to open in optuna-dashboard. Needs the `optuna` extra; exit 2
    without it.

    \b
    Examples:
      ars campaign export --optuna
      optuna-dashboard sqlite:///reports/auto_research/lr-sweep/study.db
      ars campaign export --optuna --storage sqlite:///all.db --campaign lr-sweep
    """
    from autoresearch_skills.campaign.study_export import default_storage, export

    campaign = find(ref)
    s = campaign.settings
    url = storage or default_storage(campaign.folder)
    count = export(campaign.rows(), url, s.name, s.direction, s.objective_list()[1:])
    click.echo(f"study: {s.name} ({count} trial(s)) in {url}")
    click.echo(f"next: optuna-dashboard {url}")


@cli.command("tried")
@click.option("--campaign", "ref", help="campaign name or folder (default: the current one)")
@click.option(
    "--json", "as_json", is_flag=True, help="the same, as data: knobs and files, each with its attempts"
)
def tried_cmd(ref: str | None, as_json: bool) -> None:
    """What was tried, to read before proposing: each knob's values with their outcome (the mean
    of the attempt's runs) and the parent they were tried from; changes without knob values by the
    files they touched. `ars exp run` refuses the same change from the same parent.

    \b
    Examples:
      ars campaign tried
      ars campaign tried --campaign lr-sweep --json

    \b
    Output:
      knob LR:
        0.02: #1 lr-0-02: keep 1.1 (2 runs) from 1a2b3c4d
        0.05: #3 lr-0-05: discard 1.2 from 1a2b3c4d
      files model.py:
        #4 swiglu: crash from 5e6f7a8b
    """
    campaign = find(ref)
    found = tried(campaign.rows(), campaign.repo)
    if as_json:
        click.echo(json.dumps(found.to_dict(), indent=2, default=str))
        return
    for line in found.lines():
        click.echo(line)


@cli.command("tree")
@click.option("--campaign", "ref", help="campaign name or folder (default: the current one)")
@click.option(
    "--json", "as_json", is_flag=True, help="the same tree as data: each experiment with its children"
)
def tree_cmd(ref: str | None, as_json: bool) -> None:
    """The experiments as a tree: each under the one it grew from (its parent commit).

    One line per experiment, two spaces deeper per generation: its first row's index, branch,
    status (a candidate awaiting its rerun says so), the mean of its runs and how many were pooled;
    a candidate a rerun kept says `confirmed by #N`. Reruns are runs of their experiment, not lines
    of their own; a retry is its own line beside the crash it retries. `<- best` marks the best.

    \b
    Examples:
      ars campaign tree
      ars campaign tree --campaign lr-sweep --json

    \b
    Output:
      #0 baseline: keep 1.010000 (2 runs)
        #2 near: discard 1.010000 (2 runs)
        #4 far: keep 0.905000 (2 runs, confirmed by #5) <- best
          #6 wider: crash (oom)
    """
    campaign = find(ref)
    s = campaign.settings
    rows = campaign.rows()
    tree = lineage.build(rows, s.direction)
    best = noise.best(rows, s.direction)
    if as_json:
        facts = {
            "campaign": s.name,
            "metric": s.metric,
            "direction": s.direction,
            "best": tree.owner[best.key] if best else None,  # the experiment that holds the best
            "experiments": [node.to_json(tree) for node in tree.roots],
        }
        click.echo(json.dumps(facts, indent=2))
        return
    shown = lineage.lines(tree, best.key if best else None)
    click.echo("\n".join(shown) if shown else "no rows yet: record the baseline with `ars exp baseline`")


@cli.command("finish")
@click.option("--campaign", "ref", help="campaign name or folder (default: the current one)")
@click.option(
    "--branch",
    "branch",
    metavar="NAME",
    help="also make branch NAME: the best's change as one commit on the commit the campaign started from",
)
@click.option("--force", is_flag=True, help="with --branch: move an existing result branch NAME to a new one")
@click.option("--json", "as_json", is_flag=True)
def finish_cmd(ref: str | None, branch: str | None, force: bool, as_json: bool) -> None:
    """End a campaign cleanly: checkout back on its starting branch, worktrees removed,
    the session subtask closed, and where the best result lives.

    Runs by itself when the stop condition is met after `ars exp run`; call it to end a
    campaign early (it is then paused: `ars campaign resume` reopens it). Refuses while
    experiments are in flight (wait for, cancel or record them first).

    --branch NAME makes a branch to review: one commit on the commit the campaign started
    from, holding the best's files, its message the gain, the chain of kept changes, the
    baseline, the best and the ledger's path. Written with git plumbing: the checkout, the
    index and every file stay as they are. Refused without a change beyond the baseline and
    when NAME exists (`--force` moves a result branch). On a campaign whose stop condition is
    met, which was wrapped up then, it only makes the branch (the checkout stays where you
    put it); plain `ars campaign finish` repeats the wrap-up.

    \b
    Examples:
      ars campaign finish
      ars campaign finish --campaign lr-sweep --json
      ars campaign finish --branch lr-sweep-result
      git diff main lr-sweep-result
    """
    from autoresearch_skills.campaign import resultbranch
    from autoresearch_skills.campaign.finish import finished, wrap_up

    if force and branch is None:
        raise BadInput("--force moves a result branch: pass it with --branch NAME")
    campaign = find(ref)
    in_flight = campaign.state.read().experiments
    if in_flight:
        listed = ", ".join(f"{k} ({e.phase})" for k, e in in_flight.items())
        raise BadInput(
            f"experiments in flight: {listed}: wait for running ones (`ars exp wait`) or cancel them "
            "(`ars exp cancel SLUG --reason ...`); close open ones (`ars exp mark cancelled SLUG --reason ...`); then finish"
        )
    if branch is not None:
        resultbranch.check(campaign, branch, force)  # refused before anything is done
    # the engine wraps a campaign up as its stop condition is met: the branch alone, asked for later
    over = branch is not None and finished(campaign)
    if campaign.verdict().should_continue and not campaign.paused:
        campaign.pause("finished by hand before its stop condition")  # nothing new starts; hooks let go
    lines = [] if over else wrap_up(campaign)
    made = resultbranch.make(campaign, branch, force) if branch is not None else None
    verdict = campaign.verdict()
    if as_json:
        facts: dict[str, Any] = {"done": lines, "verdict": verdict.to_json()}
        if made is not None:
            facts["branch"] = made.to_json()
        click.echo(json.dumps(facts, indent=2))
        return
    for line in [*lines, *([made.line()] if made else [])]:
        click.echo(line)
    click.echo(verdict.line)


@cli.command("confirm")
@click.option("--campaign", "ref", help="campaign name or folder (default: the current one)")
@click.option(
    "-k",
    "--top",
    type=click.IntRange(min=1),
    help="results to confirm besides the baseline (default `confirm.top`)",
)
@click.option("--json", "as_json", is_flag=True, help="progress lines on stderr, then one JSON object")
def confirm_cmd(ref: str | None, top: int | None, as_json: bool) -> None:
    """Run the baseline and the best results once more at a larger scale (`confirm:` in
    campaign.yaml: its `set:` and `args:` knobs, `command:`, `timeout:`), and compare each gain on
    the proxy with its gain at scale, both against the baseline at the same scale.

    The results are the campaign's best and the next ones in its order (`confirm.top`, or
    --top), distinct commits; each runs once, on a branch of its own (`<prefix>/confirm-<name>`),
    with the campaign's launcher, as slots free up, while its time limit fits before the
    deadline; a result confirmed before is not run again. Waits for every run, one progress line
    each. Confirmation runs are ledger rows (`confirms` names the row they confirm) that never
    enter a keep decision, the best or the stop rules' counts. On a campaign that has ended, the
    closing lines of `ars campaign finish` follow.

    Exit 0: every result has its run at scale; 1: nothing to confirm (no kept result besides the
    baseline) or no time left before the deadline for a run (not started, said so); 2: bad input
    (no `confirm:`, a knob the mutable files do not hold).

    \b
    Examples:
      ars campaign confirm
      ars campaign confirm --top 3 --campaign lr-sweep
      ars campaign confirm --json

    \b
    Output:
      confirm: baseline at scale: started confirm-baseline on slot 0 (local 4242, 30m limit)
      confirm: #14 confirm-baseline: val_bpb 2.541000 at scale
      confirmed at scale: baseline proxy 1.019, at scale 2.541
      confirmed at scale: lr-2 proxy -3.1% (0.987 vs 1.019), at scale -1.2% (2.51 vs 2.541)
      order changed at scale: wider-mlp beats lr-2
    """
    from autoresearch_skills.campaign import confirm
    from autoresearch_skills.campaign.finish import finished, wrap_up

    campaign = find(ref)

    def say(line: str) -> None:
        click.echo(line, err=as_json)

    outcome = confirm.run(campaign, top, say=say)
    shown = outcome.lines
    if outcome.rows and finished(campaign):  # its worktrees go, the closing lines say it all
        shown = wrap_up(campaign)
    if as_json:
        click.echo(json.dumps({**outcome.to_dict(), "lines": shown}, indent=2))
    else:
        for line in shown:
            click.echo(line)
    raise SystemExit(outcome.exit_code)


interrupt_option = click.option(
    "--on-interrupt",
    type=click.Choice(["wait", "cancel"]),
    default="wait",
    show_default=True,
    help="on Ctrl-C/SIGTERM: let the current run finish, or cancel it; its row is written either way",
)


@cli.command("validate")
@click.argument("campaign_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="the checks and problems as one JSON object")
def validate_cmd(campaign_file: Path, as_json: bool) -> None:
    """Check a campaign file without starting anything: every check `campaign run` makes first.

    Unknown keys (with the closest known one), types and ranges, stop rules, the policy and its
    proposals and knobs, the command's programs and scripts, the launcher, the mutable and frozen
    files. For your own repository it warns when no committed file prints the metric's name and
    when worktrees would miss ignored files (prepared data) that `.worktreeinclude` does not list.
    Exit 0 and `ok: FILE (N checks)` (warnings on stderr), or exit 2 and one problem per line.

    \b
    Examples:
      ars campaign validate campaign.yaml
      ars campaign validate campaign.yaml --json
    """
    from autoresearch_skills.campaign.config import validation

    result = validation(campaign_file, Path.cwd())
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    elif result.ok:
        click.echo(f"ok: {campaign_file} ({len(result.checked)} checks)")
        for line in result.shown:
            click.echo(line)
    for warning in [] if as_json else result.warnings:
        click.echo(f"warning: {warning}", err=True)
    for problem in [] if as_json else result.problems:
        click.echo(problem, err=True)
    raise SystemExit(0 if result.ok else 2)


@cli.command("run")
@click.argument("campaign_file", type=click.Path(dir_okay=False, path_type=Path))
@interrupt_option
@click.option("--json", "as_json", is_flag=True, help="one JSON object per event")
def run_cmd(campaign_file: Path, on_interrupt: str, as_json: bool) -> None:
    """Run a campaign unattended: baseline, then proposals until a stop rule is met.

    Creates the campaign on first use (from the file); a second call continues it.
    Proposals come from the file's `policy:` (queue, grid, random or command).
    The file is checked first exactly as `ars campaign validate` checks it: a problem exits 2
    before any branch or row exists. Exit 0: a stop rule ended it; 1: the policy ran out of
    proposals before a stop rule was met (the closing line says so); 2: bad input.

    \b
    Examples:
      ars campaign run campaign.yaml
      ars campaign run campaign.yaml --on-interrupt cancel --json
    """
    from autoresearch_skills.campaign import loop

    def warn(line: str) -> None:
        click.echo(f"warning: {line}", err=True)

    raise SystemExit(loop.run_campaign(loop.open_campaign(campaign_file, warn=warn), on_interrupt, as_json))


@cli.command("pause")
@click.option("--campaign", "ref", help="campaign name or folder (default: the current one)")
@click.option("--reason", default="", help="why, in a few words (shown by status and to agents)")
def pause_cmd(ref: str | None, reason: str) -> None:
    """Pause a campaign: agents' stop hooks let them stop; `ars campaign resume` continues.

    Writes a `paused` file (reason, time) into the campaign folder. Nothing running is
    cancelled and no row is written: a run in flight finishes and is recorded as usual. A
    campaign's Slurm allocation or Ray holders (`slurm_allocation` / `ray_allocation: campaign`) are
    released once no run is in them.

    \b
    Examples:
      ars campaign pause --reason "GPU node goes down for maintenance at 18:00"
      ars campaign pause --campaign lr-sweep
    """
    campaign = find(ref)
    record = campaign.pause(reason)
    click.echo(f"paused: {campaign.settings.name} ({record['reason']})")
    from autoresearch_skills.campaign import allocation

    released = allocation.release(campaign)  # its GPUs go back once the runs in flight have ended
    if released:
        click.echo(released)
    click.echo("resume with: ars campaign resume" + (f" {ref}" if ref else ""))


@cli.command("resume")
@click.argument("ref", required=False)
@interrupt_option
@click.option("--json", "as_json", is_flag=True, help="one JSON object per event")
def resume_cmd(ref: str | None, on_interrupt: str, as_json: bool) -> None:
    """Clear a pause and continue. A campaign with a policy continues its unattended loop
    (adopting a run still going); one an agent drives prints `resumed:` and the verdict line.

    \b
    Examples:
      ars campaign resume
      ars campaign resume tiny-lm-demo
    """
    campaign = find(ref)
    was_paused = campaign.unpause()
    from autoresearch_skills.blueprints.swarm import SWARM_FILE

    if (campaign.folder / SWARM_FILE).exists():  # a blueprint swarm: adopt, record, start what is queued
        from autoresearch_skills.blueprints import swarm

        report = swarm.resume(str(campaign.folder), say=lambda line: click.echo(line))
        raise SystemExit(report.exit_code)
    if campaign.settings.policy:
        from autoresearch_skills.campaign import loop

        raise SystemExit(loop.resume(str(campaign.folder), on_interrupt, as_json))
    verdict = campaign.verdict()
    if as_json:
        click.echo(json.dumps({"event": "resumed", "campaign": campaign.settings.name, "was_paused": was_paused,
                               "verdict": verdict.line, "should_continue": verdict.should_continue}))  # fmt: skip
        return
    click.echo(f"resumed: {campaign.settings.name}")
    click.echo(verdict.line)


def main() -> None:
    run_cli(cli, prog_name="ars campaign")


if __name__ == "__main__":
    main()
