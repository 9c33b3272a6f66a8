"""`ars campaign`: init, status, pause, and the unattended loop (run, resume). Wiring only: the
campaign folder lives in `store`, the loop in `loop` (imported inside the commands that need it)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from autoresearch_skills.campaign.store import LAUNCHERS, PRESETS, create, find, status_facts
from autoresearch_skills.errors import run_cli


@click.group("campaign")
def cli() -> None:
    """Campaigns: settings, ledger and state for one research objective.

    \b
    Examples:
      ars campaign init lr-sweep --metric val_bpb --direction min \\
          --stop "24 experiments or 6h total, 10m each" --command "python train.py"
      ars campaign status
      ars campaign pause --reason "new data arrives tomorrow"
    """


@cli.command("init")
@click.argument("name")
@click.option("--metric", required=True, help="the metric the ledger ranks by, e.g. val_bpb")
@click.option(
    "--direction", type=click.Choice(["min", "max"]), required=True, help="lower or higher is better"
)
@click.option("--command", "command", required=True, help='the training command, e.g. "uv run train.py"')
@click.option("--stop", "stop_text", help='stop rule in words: "24 experiments or 6h total, 10m each"')
@click.option("--prefix", help="branch prefix (default autoresearch/<YYYYmmdd>-<name>)")
@click.option("--launcher", type=click.Choice(LAUNCHERS), default="local", show_default=True)
@click.option(
    "--preset",
    type=click.Choice(PRESETS),
    default="karpathy",
    show_default=True,
    help="how to read the metric from the log",
)
@click.option(
    "--strategy",
    type=click.Choice(["branches", "ratchet"]),
    default="branches",
    show_default=True,
    help="ratchet: one branch, reset on discard (only when asked for)",
)
@click.option(
    "--worktrees",
    type=click.Choice(["auto", "always", "off"]),
    default="auto",
    show_default=True,
    help="run in a git worktree when the tree has uncommitted changes",
)
@click.option(
    "--decide",
    type=click.Choice(["auto", "manual"]),
    default="auto",
    show_default=True,
    help="manual: `ars exp mark` writes the row",
)
@click.option("--keep-ties", is_flag=True, help="a result equal to the best counts as kept")
@click.option(
    "--tmux-socket", "--socket", "tmux_socket", help="private tmux server for the runs (tmux -L NAME)"
)
@click.option(
    "--keep-sessions",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="tmux sessions of the latest finished runs left open; older ones are closed (logs stay)",
)
@click.option(
    "--frozen",
    multiple=True,
    help="a file no experiment may change (the evaluation, e.g. prepare.py); repeat for several",
)
@click.option(
    "--baseline-repeats",
    type=click.IntRange(min=1),
    help="runs of the baseline (and of every new best) that measure the noise (default 3 under 30-min runs)",
)
@click.option(
    "--noise-margin", type=click.FloatRange(min=0, min_open=True), help="sigma a pooled mean must lead by"
)
@click.option("--parallel", type=click.IntRange(min=1), help="experiments in flight at once (default 1)")
@click.option(
    "--gpus", help='device pool, e.g. "0-7" or "0,1,2,3": each run gets its own CUDA_VISIBLE_DEVICES'
)
@click.option(
    "--gpus-per-run", type=click.IntRange(min=1), help="GPUs per run (from the pool, or asked of Slurm)"
)
@click.option(
    "--dir",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    help="campaign folder (default reports/auto_research/<name>)",
)
@click.option("--json", "as_json", is_flag=True)
def init_cmd(
    name,
    metric,
    direction,
    command,
    stop_text,
    prefix,
    launcher,
    preset,
    strategy,
    worktrees,
    decide,
    keep_ties,
    tmux_socket,
    keep_sessions,
    frozen,
    baseline_repeats,
    noise_margin,
    parallel,
    gpus,
    gpus_per_run,
    folder,
    as_json,
) -> None:
    """Create a campaign: folder, settings, empty ledger, absolute deadline.

    Refuses to overwrite an existing campaign. Reports the working tree: uncommitted
    work is never stashed, reset or committed; experiments then run in worktrees.

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

    campaign = create(
        name, metric, direction, command, stop_text=stop_text, prefix=prefix, launcher=launcher, preset=preset,
        folder=folder, strategy=strategy, worktrees=worktrees, decide=decide, keep_ties=keep_ties, tmux_socket=tmux_socket,
        keep_sessions=keep_sessions, parallel=parallel, gpus=gpus, gpus_per_run=gpus_per_run, frozen=list(frozen),
        baseline_repeats=baseline_repeats, noise_margin=noise_margin,
    )  # fmt: skip
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
        "pool": s.pool().describe(),
        "next": "ars exp baseline",
    }
    if as_json:
        click.echo(json.dumps(facts, indent=2))
        return
    for key, value in facts.items():
        for line in value if isinstance(value, list) else [value]:
            click.echo(f"{key}: {line}")


def _isolation(worktrees: str, tree, parallel: int = 1) -> str:
    if parallel > 1:
        return "each experiment in flight runs in its own git worktree under the campaign folder"
    if worktrees == "always" or (worktrees == "auto" and tree.dirty_tracked):
        return "experiments run in git worktrees (your uncommitted changes stay untouched)"
    if tree.dirty_tracked:
        return "worktrees are off and the tree has uncommitted changes: experiments will refuse to start"
    return "experiments run in place (tree clean)"


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
                    "remaining_experiments", "remaining_time", "best", "noise", "latest", "current_branch", "pool"):  # fmt: skip
            value = facts[key]
            click.echo(f"{key}: {value if value is not None else '-'}")
        for item in facts["in_flight"]:
            click.echo(f"in_flight: {item['line']}")
        if not facts["in_flight"]:
            click.echo("in_flight: -")
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


@cli.command("finish")
@click.option("--campaign", "ref", help="campaign name or folder (default: the current one)")
@click.option("--json", "as_json", is_flag=True)
def finish_cmd(ref: str | None, as_json: bool) -> None:
    """End a campaign cleanly: checkout back on its starting branch, worktrees removed,
    the session subtask closed, and where the best result lives.

    Runs by itself when the stop condition is met after `ars exp run`; call it to end a
    campaign early (it is then paused: `ars campaign resume` reopens it). Refuses while
    experiments are in flight (wait for, cancel or record them first).

    \b
    Examples:
      ars campaign finish
      ars campaign finish --campaign lr-sweep --json
    """
    from autoresearch_skills.campaign.finish import wrap_up
    from autoresearch_skills.errors import BadInput

    campaign = find(ref)
    in_flight = campaign.load_state().get("experiments", {})
    if in_flight:
        listed = ", ".join(f"{k} ({e.get('phase')})" for k, e in in_flight.items())
        raise BadInput(
            f"experiments in flight: {listed}: wait for running ones (`ars exp wait`) or cancel them "
            "(`ars exp cancel SLUG --reason ...`); close open ones (`ars exp mark cancelled SLUG --reason ...`); then finish"
        )
    if campaign.verdict().should_continue and not campaign.paused:
        campaign.pause("finished by hand before its stop condition")  # nothing new starts; hooks let go
    lines = wrap_up(campaign)
    verdict = campaign.verdict()
    if as_json:
        click.echo(json.dumps({"done": lines, "verdict": verdict.to_json()}, indent=2))
        return
    for line in lines:
        click.echo(line)
    click.echo(verdict.line)


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
    proposals, the command's programs and scripts, the launcher, the mutable and frozen files.
    Exit 0 and `ok: FILE (N checks)`, or exit 2 and one problem per line on stderr.

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

    \b
    Examples:
      ars campaign run campaign.yaml
      ars campaign run campaign.yaml --on-interrupt cancel --json
    """
    from autoresearch_skills.campaign import loop

    raise SystemExit(loop.run_campaign(loop.open_campaign(campaign_file), on_interrupt, as_json))


@cli.command("pause")
@click.option("--campaign", "ref", help="campaign name or folder (default: the current one)")
@click.option("--reason", default="", help="why, in a few words (shown by status and to agents)")
def pause_cmd(ref: str | None, reason: str) -> None:
    """Pause a campaign: agents' stop hooks let them stop; `ars campaign resume` continues.

    Writes a `paused` file (reason, time) into the campaign folder. Nothing running is
    cancelled and no row is written: a run in flight finishes and is recorded as usual.

    \b
    Examples:
      ars campaign pause --reason "GPU node goes down for maintenance at 18:00"
      ars campaign pause --campaign lr-sweep
    """
    campaign = find(ref)
    record = campaign.pause(reason)
    click.echo(f"paused: {campaign.settings.name} ({record['reason']})")
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
    from autoresearch_skills.swarm import SWARM_FILE

    if (campaign.folder / SWARM_FILE).exists():  # a blueprint swarm: adopt, record, start what is queued
        from autoresearch_skills import swarm

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
