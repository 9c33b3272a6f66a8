"""`ars exp`: the agent's hands on the lifecycle (baseline, start, commit, run, wait, cancel, mark).

Exit codes, everywhere: 0 done (a row was written, whatever its status; or still running after
`wait --for`), 1 a clean "no" (a stop condition is met and nothing started; `wait`: a run ended),
2 bad input, 4 the machine refused a write (disk full, quota, read-only: one line names the file
and what was kept; the same command goes on once there is room), 130/143/129 a signal ended the
wait (SIGINT/SIGTERM/SIGHUP): the runs keep running, detached, and `ars exp wait` records them.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator
from typing import Any

import click

from autoresearch_skills import knobs, notices, runoutputs
from autoresearch_skills.accelerators import cores as cpu_cores
from autoresearch_skills.accelerators.machine import VISIBILITY
from autoresearch_skills.campaign import experiment, noise, outputs, owed, prediction, scheduler, screening
from autoresearch_skills.campaign.allocation import ASKED as ALLOCATION_ASKED
from autoresearch_skills.campaign.experiment import select, settled_state
from autoresearch_skills.campaign.finish import finished, wrap_up
from autoresearch_skills.campaign.record import Experiment, Phase, Result
from autoresearch_skills.campaign.status import in_flight_facts
from autoresearch_skills.campaign.store import Campaign, find
from autoresearch_skills.campaign.watch import Watchers
from autoresearch_skills.clock import duration_given, format_duration
from autoresearch_skills.errors import BadInput, Interrupted, StopConditionMet, Stopped, run_cli, signal_name
from autoresearch_skills.ledger import STATUSES
from autoresearch_skills.outcome import CrashCause, Status
from autoresearch_skills.stoprule import Verdict

campaign_option = click.option("--campaign", "ref", help="campaign name or folder (default: the current one)")


def _seconds(text: str | None, option: str = "--timeout") -> float | None:
    """A limit given on the command line, or None when it was not given."""
    return duration_given(text, option, zero_ok=True) if text else None


def _result_facts(ended: scheduler.Ended) -> dict:
    """A finished run as `--json` shows it to whoever chooses the next idea: without the held-out
    value, which is shown at the end only."""
    result = {k: v for k, v in ended.result.to_json().items() if k != "holdout"}
    return {
        "key": ended.key,
        "result": result,
        "row": ended.row.to_dict(holdout=False) if ended.row else None,
    }


def _print_ended(campaign: Campaign, ended: scheduler.Ended) -> None:
    s = campaign.settings
    result, row = ended.result, ended.row
    value = f"{result.metric_value:.6f}" if result.metric_value is not None else "none"
    click.echo(f"experiment: {ended.key}")
    click.echo(f"{s.metric}: {value}")
    click.echo(f"status: {result.shown_status()} ({result.reason})")
    if result.cause:
        click.echo(f"cause: {result.cause}")
    click.echo(f"elapsed: {result.elapsed_min:.2f} min")
    if result.steps is not None or result.throughput is not None:
        pace = [f"{result.steps} steps" if result.steps is not None else None]
        if result.throughput is not None:
            pace.append(f"{result.throughput:g} {result.throughput_key or 'throughput'} (median)")
        click.echo(f"pace: {', '.join(p for p in pace if p)}")
    for flag in result.flags:
        if screening.is_rule_flag(flag):
            continue  # which rule decided: the status line says it
        said = CANDIDATE_SAID if flag == noise.CANDIDATE_FLAG else flag
        click.echo(f"warning: {said}")
    if row is None:
        click.echo(
            f"decision: pending; record it with `ars exp mark keep|discard|crash {ended.key} --reason TEXT`"
        )
    else:
        click.echo(f"ledger: row {row.index} in {campaign.ledger}")


def _rows_as_ended(campaign: Campaign, indexes: list[int]) -> list[scheduler.Ended]:
    rows = {r.index: r for r in campaign.rows()}
    out = []
    for index in indexes:
        row = rows.get(index)
        if row is None:
            continue
        metric = row.metric_value if row.status.is_finished() else None
        result = Result(
            status=row.status, cause=row.cause, reason=row.reason or str(row.status), metric_value=metric,
            elapsed_min=row.elapsed_min,
        )  # fmt: skip
        out.append(scheduler.Ended(row.branch.rsplit("/", 1)[-1], result, row))
    return out


def _report(
    campaign: Campaign, ended: list[scheduler.Ended], as_json: bool, extra: dict | None = None
) -> None:
    verdict = campaign.verdict()
    if as_json:
        payload = {
            "ended": [_result_facts(e) for e in ended],
            "verdict": verdict.to_json(),
            "in_flight": [in_flight_facts(e) for e in scheduler.in_flight(campaign)],
            **(extra or {}),
        }
        if len(ended) == 1:  # the single-run shape `ars exp run --json` always had
            payload.update(result=payload["ended"][0]["result"], row=payload["ended"][0]["row"])
        action = _next_rerun(campaign, verdict)
        if finished(campaign) and action is None:  # the owed rerun comes before the end
            payload["finished"] = wrap_up(campaign)
        payload["next_rerun"] = action.__dict__ if action else None
        click.echo(json.dumps(payload, indent=2, default=str))
        return
    for n, item in enumerate(ended):
        if n:
            click.echo("")
        _print_ended(campaign, item)
    action = _next_rerun(campaign, verdict)
    if action is None:  # while a rerun is owed the campaign is not over: its best may still change
        _wrap_up_if_over(campaign)
    for item in ended:  # a broken run is fixed (or dropped) before any noise bookkeeping
        row = item.row
        if row is not None and row.status.is_failure() and not row.rerun_of:
            slug = row.branch.rsplit("/", 1)[-1]
            if slug != "baseline":
                click.echo(
                    f"next: if {slug}'s change has a bug, fix it: `ars exp retry {slug}`, edit, "
                    f"`ars exp run {slug}`; a broken idea: move on"
                )
    if action is not None:
        click.echo(f"next: ars exp rerun '#{action.rerun_of}'  ({action.reason})")
        if not verdict.should_continue:
            click.echo(f"{verdict.line}; the rerun it owes comes first, then the campaign ends")
            return
    click.echo(verdict.line)


CANDIDATE_SAID = "candidate: within noise of the best, not kept until its rerun (the `next:` line) decides"


def _next_rerun(campaign: Campaign, verdict: Verdict) -> noise.Action | None:
    """The rerun the noise rule asks for: before a new experiment, and after a count stopped the
    campaign while time remains (the best must not rest on one draw)."""
    return owed.owed_rerun(campaign)


def _wrap_up_if_over(campaign: Campaign) -> None:
    """The hand-driven path ends as cleanly as the loop: checkout home, worktrees gone."""
    if finished(campaign):
        for line in wrap_up(campaign):
            click.echo(line)


def _watchers(campaign: Campaign) -> Watchers:
    return Watchers(campaign, say=lambda line: click.echo(f"watch: {line}", err=True))


def _progress(campaign: Campaign) -> Callable[[list[Experiment]], None]:
    def show(launched: list[Experiment]) -> None:
        for facts in (in_flight_facts(e) for e in launched):
            click.echo(f"  {facts['line']}", err=True)

    return show


def _announce(record: Experiment, err: bool = True) -> None:
    """Where a launched run goes. On stderr while the command goes on to wait (its result is the
    output); on stdout, in order before the verdict, when it is all a `--detach` call prints."""
    facts = in_flight_facts(record)
    if record.phase is Phase.QUEUED:
        click.echo(f"queued: {facts['key']} (no free slot; it starts when one frees)", err=err)
        return
    run = record.launched
    click.echo(f"running: {record.branch} @ {(record.commit or '')[:8]}", err=err)
    visible = [f"{name}={run.env[name]}" for name in VISIBILITY.values() if name in run.env]
    where = ", ".join(
        [f"slot {facts['slot']}", *visible, *([cpu_cores.phrase(record.cores)] if record.cores else [])]
    )
    click.echo(f"where: {where}; {run.launcher} {run.run_id}", err=err)
    if run.extra.get(ALLOCATION_ASKED):  # the campaign's Slurm allocation was asked for with this run
        click.echo(run.extra[ALLOCATION_ASKED], err=err)
    click.echo(f"log: {run.log_path}", err=err)
    if record.timeout is not None:  # set at every launch
        click.echo(f"timeout: {format_duration(record.timeout)}", err=err)


@contextlib.contextmanager
def _runs_go_on(ref: str | None) -> Iterator[None]:
    """A signal while a command waits: say which runs keep running (they are detached: a local
    supervisor, a tmux session, a Slurm job) and how to record them; exit 128 + N."""
    try:
        yield
    except Interrupted as stop:
        raise Stopped(stop.signum, _still_running(ref, stop.signum)) from None


def _still_running(ref: str | None, signum: int) -> list[str]:
    name = signal_name(signum)
    try:
        launched = settled_state(find(ref)).launched
    except (BadInput, OSError):
        launched = []
    if not launched:
        return [
            f"interrupted ({name}): nothing is running",
            "`ars campaign status` shows where the campaign stands",
        ]
    listed = ", ".join(
        f"{e.key} ({e.run.launcher} {e.run.run_id})" if e.run else f"{e.key} ({e.phase})" for e in launched
    )
    return [
        f"interrupted ({name}): {len(launched)} experiment(s) keep going, nothing was cancelled: {listed}",
        "`ars exp wait` records their rows; `ars exp cancel SLUG` stops one",
    ]


def _waits(command: Callable[..., None]) -> Callable[..., None]:
    """For a command that waits on runs: a signal ends it with 128 + N and `_still_running`."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        campaign = (
            kwargs["campaign_ref"] if "campaign_ref" in kwargs else kwargs.get("ref")
        )  # rerun's REF is a row
        with _runs_go_on(campaign):
            return command(*args, **kwargs)

    return wrapper


def _run_until_ended(
    campaign: Campaign, key: str, timeout: float | None, as_json: bool, again: bool = False
) -> list[scheduler.Ended]:
    record = experiment.request_run(campaign, key, timeout=timeout)
    if not as_json and not again:
        _announce(record)
    return _wait_for(campaign, key, as_json)


def _wait_for(campaign: Campaign, key: str, as_json: bool) -> list[scheduler.Ended]:
    """Wait (and watch) until experiment `key` has ended; its attempt, as one item or none."""
    ended = scheduler.wait(
        campaign,
        {key},
        progress=None if as_json else _progress(campaign),
        reporting={key},
        watchers=_watchers(campaign),
    )
    return [e for e in ended if e.key == key]


def run_and_report(
    campaign: Campaign,
    ref: str | None,
    timeout: float | None,
    force: bool,
    detach: bool,
    as_json: bool,
    overridden_ok: bool = False,
) -> None:
    state, record = experiment.select_or_reopen(
        campaign, ref, phases=(Phase.OPEN, Phase.QUEUED, Phase.RUNNING), verb="run"
    )
    if record.phase is Phase.OPEN:
        shadowed = experiment.shadowed_knobs(campaign, record)
        if shadowed and not overridden_ok:  # an attempt spent on a change that cannot take effect
            more = f" (and {len(shadowed) - 1} more)" if len(shadowed) > 1 else ""
            raise BadInput(
                f"{shadowed[0]}{more}; nothing ran. If the script reads this file after its command "
                "line, run it anyway with --even-if-overridden"
            )
        for line in shadowed:
            click.echo(f"warning: {line}", err=True)
        record = experiment.request_run(campaign, record.key, timeout=timeout, force=force)
        if not as_json:
            _announce(record, err=not detach)
    elif not as_json:
        click.echo(f"adopting {record.key} ({record.phase})", err=True)
    key = record.key
    if detach:
        facts = in_flight_facts(settled_state(campaign).experiments.get(key, record))
        if as_json:
            click.echo(json.dumps({"detached": facts, "verdict": campaign.verdict().to_json()}, indent=2))
        else:
            click.echo(f"detached: {key} ({facts['phase']}); `ars exp wait {key}` reports its row")
            click.echo(campaign.verdict().line)
        return
    mine = _wait_for(campaign, key, as_json)
    if not mine:
        click.echo(f"{key}: recorded by another command")
        click.echo(campaign.verdict().line)
        return
    _report(campaign, mine, as_json)


@click.group("exp")
def cli() -> None:
    """Experiments: baseline first, then one hypothesis per branch, each run recorded.

    \b
    Examples:
      ars exp baseline
      ars exp start higher-lr -m "raise LR 0.04 -> 0.06: loss still falling at the end"
      (edit train.py in the printed workdir)
      ars exp run
      ars exp run higher-lr --detach && ars exp wait --for 9m
    """
    notices.show_with(lambda line: click.echo(line, err=True))  # the engine's warnings


@cli.command("baseline")
@campaign_option
@click.option("--timeout", help="per-run limit for this run (tighter of this and the campaign's)")
@click.option("--no-run", is_flag=True, help="only create the branch")
@click.option("--detach", is_flag=True, help="launch and return at once; `ars exp wait` reports the row")
@click.option("--json", "as_json", is_flag=True)
@_waits
def baseline_cmd(ref: str | None, timeout: str | None, no_run: bool, detach: bool, as_json: bool) -> None:
    """Create <prefix>/baseline (empty commit "baseline: record starting point") and run it.

    \b
    Examples:
      ars exp baseline
      ars exp baseline --timeout 15m
      ars exp baseline --detach
    """
    campaign = find(ref)
    record = experiment.start_baseline(campaign)
    click.echo(f"branch: {record.branch}", err=True)
    click.echo(f"workdir: {record.workdir}", err=True)
    if no_run:
        return
    if detach:
        run_and_report(campaign, record.key, _seconds(timeout), False, True, as_json)
        return
    ended = _run_until_ended(campaign, record.key, _seconds(timeout), as_json)
    # The baseline is run `baseline_repeats` times: its spread is the first noise estimate.
    while ended and ended[-1].result.status is Status.KEEP:
        action = _next_rerun(campaign, campaign.verdict())
        if action is None or action.rerun_of != 0:
            break
        again = experiment.reopen(campaign, "#0", "rerun")
        if not as_json:
            click.echo(f"rerun of the baseline: {action.reason}", err=True)
        more = _run_until_ended(campaign, again.key, _seconds(timeout), as_json, again=True)
        if not more:
            break
        ended += more
    _report(campaign, ended, as_json)


@cli.command("start")
@click.argument("slug")
@click.option(
    "-m", "--message", "description", required=True, help="the hypothesis, one sentence with its reason"
)
@click.option("--parent", default="best", show_default=True, help="baseline, best, or any git ref")
@click.option("--no-baseline-check", is_flag=True, help="allow experiments before a baseline result exists")
@click.option(
    "--predict",
    metavar="CHANGE",
    help='the change of the metric you expect, registered before the run: "-0.01", "-2%" or "val_bpb -0.01"',
)
@click.option(
    "--force", is_flag=True, help="open it even when a stop condition is met (the user extended it)"
)
@click.option(
    "--args",
    "arg_items",
    multiple=True,
    metavar="KEY=VALUE",
    help="a command-line knob of this experiment (repeatable), written into the command as `args_style` "
    "says; a KEY written as a flag (`-n`, `--lr`) is passed as written. Recorded in the commit, rerun alike",
)
@campaign_option
@click.option("--json", "as_json", is_flag=True)
def start_cmd(
    slug: str,
    description: str,
    parent: str,
    no_baseline_check: bool,
    predict: str | None,
    force: bool,
    arg_items: tuple[str, ...],
    ref: str | None,
    as_json: bool,
) -> None:
    """Create the experiment branch <prefix>/<slug> from a parent and check it out.

    Then edit the files in the printed workdir and `ars exp run SLUG`. Several experiments may
    be open at once; each gets its own workdir (a git worktree beside the first). With `--args`
    the hypothesis may be command-line knobs alone: `ars exp run` then needs no edit.

    \b
    Examples:
      ars exp start higher-lr -m "raise LR 0.04 -> 0.06: loss still falling at the end"
      ars exp start wider-mlp -m "MLP ratio 4 -> 6" --parent baseline --predict "val_bpb -0.01"
      ars exp start wider -m "n_embd 64 -> 128" --args n_embd=128 --args learning_rate=1e-3
      ars exp start more-workers -m "8 data workers" --args -n=8
    """
    campaign = find(ref)
    expected = prediction.parse(predict, campaign.settings.metric).text if predict else None
    args = _parse_args(arg_items)
    record = experiment.start(
        campaign, slug, description, parent=parent, skip_baseline_check=no_baseline_check, force=force,
        prediction=expected, **({"args": args} if args else {}),
    )  # fmt: skip
    if as_json:
        facts = {k: getattr(record, k) for k in ("key", "slug", "branch", "parent_commit", "workdir", "args")}
        click.echo(json.dumps(facts, indent=2))
        return
    click.echo(f"experiment: {record.key}")
    click.echo(f"branch: {record.branch}")
    click.echo(f"parent: {record.parent_ref} @ {record.parent_commit[:8]}")
    click.echo(f"workdir: {record.workdir}")
    if args:
        click.echo(f"command: {experiment.command_of(campaign, record)}")
        for line in knobs.overridden_args(args, record.command(campaign.settings.command)):
            click.echo(f"warning: {line}", err=True)
        click.echo(
            f"next: edit files in the workdir if the hypothesis needs it, then `ars exp run {record.key}`"
        )
        return
    click.echo(f"next: edit files in the workdir, then `ars exp run {record.key}`")


def _parse_args(items: tuple[str, ...]) -> dict:
    """`--args KEY=VALUE` items as a mapping; each VALUE read as campaign.yaml reads it (YAML 1.2:
    `1e-3` a float, `128` an int, `true` a bool), so a knob gets the type its file would give it."""
    from autoresearch_skills.yamlfile import scalar

    args = {}
    for item in items:
        key, equals, value = item.partition("=")
        if not equals or not key.strip("-+ "):
            raise BadInput(f"--args {item!r}: give KEY=VALUE, e.g. --args learning_rate=1e-3 or --args -n=8")
        args[key] = scalar(value)
    return args


@cli.command("commit")
@click.argument("slug", required=False)
@click.option("-m", "--message", help="commit message (default: the hypothesis; later commits are fix-ups)")
@campaign_option
def commit_cmd(slug: str | None, message: str | None, ref: str | None) -> None:
    """Commit the experiment's changed files only (never anything else).

    SLUG may be left out when one experiment is open.

    \b
    Examples:
      ars exp commit
      ars exp commit higher-lr -m "fix shape mismatch in attention"
    """
    campaign = find(ref)
    sha = experiment.commit(campaign, slug, message)
    click.echo(f"commit: {sha}")


@cli.command("run")
@click.argument("slug", required=False)
@click.option("--timeout", help="per-run limit (the tighter of this and the campaign's wins)")
@click.option("--force", is_flag=True, help="run even when a stop condition is met")
@click.option("--detach", is_flag=True, help="launch (or queue for a free slot) and return at once")
@click.option(
    "--even-if-overridden",
    "overridden_ok",
    is_flag=True,
    help="run a file change although the command line also sets that knob (a script that reads "
    "its config file after its command line)",
)
@campaign_option
@click.option("--json", "as_json", is_flag=True)
@_waits
def run_cmd(
    slug: str | None,
    timeout: str | None,
    force: bool,
    detach: bool,
    overridden_ok: bool,
    ref: str | None,
    as_json: bool,
) -> None:
    """Run an experiment under its timeout, read the metric, write its ledger row.

    Commits pending edits first, waits for a free slot if the pool is full, prints the metric,
    the status and the stop verdict. SLUG may be left out when one experiment is open.
    With --detach it returns as soon as the run is launched or queued: `ars exp wait` reports the
    row, so no single call has to last as long as the run.
    Exit 0: recorded (any status) or detached; 1: a stop condition is met, nothing started; 2: bad
    input, or a file change the command line overrides (`--n_embd=64` in the command, `n_embd`
    changed in the config: nothing runs; give it with `ars exp start SLUG --args` instead).
    If a previous `ars exp run` died while its run went on, this adopts and waits for it.

    \b
    Examples:
      ars exp run
      ars exp run higher-lr --timeout 10m --json
      ars exp run higher-lr --detach
    """
    campaign = find(ref)
    run_and_report(campaign, slug, _seconds(timeout), force, detach, as_json, overridden_ok)


@cli.command("rerun")
@click.argument("ref", required=False)
@click.option("--times", type=click.IntRange(min=1), default=1, show_default=True, help="how many more runs")
@click.option("--timeout", help="per-run limit (the tighter of this and the campaign's wins)")
@click.option("--detach", is_flag=True, help="launch (or queue) and return at once; `ars exp wait` reports")
@click.option("--campaign", "campaign_ref", help="campaign name or folder (default: the current one)")
@click.option("--json", "as_json", is_flag=True)
@_waits
def rerun_cmd(
    ref: str | None, times: int, timeout: str | None, detach: bool, campaign_ref: str | None, as_json: bool
) -> None:
    """Run a recorded commit again, unchanged: each run a new row on the same branch, marked as a
    rerun of the original row, so the runs of one commit pool into a mean and a noise estimate.

    REF: a slug, a branch or a ledger row (#3); default: the latest finished row. Use it to
    confirm a result within noise of the best (the verdict says when), or to measure the noise.

    \b
    Examples:
      ars exp rerun higher-lr
      ars exp rerun '#0' --times 2
      ars exp rerun higher-lr --detach && ars exp wait --for 9m
    """
    campaign = find(campaign_ref)
    if ref is None:
        finished = [r for r in campaign.rows() if r.status.is_finished()]
        if not finished:
            raise BadInput("no finished run to rerun yet: name one (a slug, a branch or #INDEX)")
        ref = f"#{finished[-1].index}"
    keys = []
    for _ in range(times):
        record = experiment.reopen(campaign, ref, "rerun")
        record = experiment.request_run(campaign, record.key, timeout=_seconds(timeout))
        keys.append(record.key)
        if not as_json:
            _announce(record, err=not detach)
    if detach:
        if as_json:
            click.echo(json.dumps({"detached": keys, "verdict": campaign.verdict().to_json()}, indent=2))
        else:
            click.echo(f"detached: {', '.join(keys)}; `ars exp wait` reports their rows")
            click.echo(campaign.verdict().line)
        return
    ended: list[scheduler.Ended] = []
    waiting = set(keys)
    while waiting:
        done = scheduler.wait(
            campaign, waiting, progress=None if as_json else _progress(campaign), reporting=set(keys)
        )
        ended += [e for e in done if e.key in keys]
        waiting -= {e.key for e in done}
        if not done and not settled_state(campaign).launched:
            break
    _report(campaign, ended, as_json)


@cli.command("retry")
@click.argument("ref")
@click.option("--campaign", "campaign_ref", help="campaign name or folder (default: the current one)")
@click.option("--json", "as_json", is_flag=True)
def retry_cmd(ref: str, campaign_ref: str | None, as_json: bool) -> None:
    """Reopen a crashed or timed-out experiment's branch for a fix-up: edit, then `ars exp run`.

    The next row names the row it retries. (`ars exp commit SLUG` / `ars exp run SLUG` in the
    place where that branch is still checked out do the same by themselves.)

    \b
    Examples:
      ars exp retry wider-mlp
      (fix the shape mismatch in the printed workdir)
      ars exp run wider-mlp
    """
    campaign = find(campaign_ref)
    record = experiment.reopen(campaign, ref, "retry")
    if as_json:
        click.echo(
            json.dumps({k: getattr(record, k) for k in ("key", "branch", "workdir", "retry_of")}, indent=2)
        )
        return
    click.echo(f"experiment: {record.key} (retries #{record.retry_of})")
    click.echo(f"branch: {record.branch}")
    click.echo(f"workdir: {record.workdir}")
    click.echo(f"next: fix the code in the workdir, then `ars exp run {record.key}`")


@cli.command("wait")
@click.argument("slug", required=False)
@click.option("--for", "seconds", default="9m", show_default=True, help="return after this long at most")
@campaign_option
@click.option("--json", "as_json", is_flag=True)
@_waits
def wait_cmd(slug: str | None, seconds: str, ref: str | None, as_json: bool) -> None:
    """Wait until a run (any, or SLUG's) ends; print its row and the verdict.

    Also starts queued experiments as slots free. Keep each call shorter than your tool-call
    limit and call again while it exits 0.
    Exit 1: a run ended (its row and the verdict are printed); 0: the time passed and runs are
    still going (they are listed); 2: nothing is in flight.

    \b
    Examples:
      ars exp wait --for 9m
      ars exp wait higher-lr --for 5m --json
    """
    campaign = find(ref)
    limit = _seconds(seconds, "--for")
    keys = None
    if slug:
        phases = (Phase.QUEUED, Phase.RUNNING, Phase.DECIDE, Phase.OPEN)
        keys = {select(settled_state(campaign), slug, phases=phases).key}
    earlier = _rows_as_ended(campaign, scheduler.take_unreported(campaign, {slug} if slug else None))
    if earlier:
        _report(campaign, earlier, as_json)
        raise SystemExit(1)
    if not settled_state(campaign).launched:
        raise BadInput("nothing is running or queued: launch one with `ars exp run SLUG --detach`")
    ended = scheduler.wait(
        campaign,
        keys,
        seconds=limit,
        progress=None if as_json else _progress(campaign),
        watchers=_watchers(campaign),
        reporting=keys,  # rows of other experiments stay for the next `ars exp wait`
    )
    mine = [e for e in ended if keys is None or e.key in keys]
    if mine:
        _report(campaign, mine, as_json)
        raise SystemExit(1)
    launched = settled_state(campaign).launched
    if as_json:
        click.echo(
            json.dumps(
                {
                    "ended": [],
                    "in_flight": [in_flight_facts(e) for e in launched],
                    "verdict": campaign.verdict().to_json(),
                },
                indent=2,
                default=str,
            )
        )
    else:
        for facts in (in_flight_facts(e) for e in launched):
            click.echo(f"still {facts['phase']}: {facts['line']}")
        click.echo(campaign.verdict().line)
    raise SystemExit(0)


@cli.command("cancel")
@click.argument("slug", required=False)
@click.option("--reason", default="cancelled by hand", show_default=True)
@campaign_option
def cancel_cmd(slug: str | None, reason: str, ref: str | None) -> None:
    """Cancel a running experiment (its whole process tree) and record it as cancelled.

    \b
    Examples:
      ars exp cancel --reason "loss diverged at step 200; no point finishing"
      ars exp cancel wider-mlp --reason "superseded by deeper"
    """
    campaign = find(ref)
    with campaign.lock():
        record = select(settled_state(campaign), slug, phases=(Phase.RUNNING, Phase.QUEUED), verb="cancel")
        if record.phase is Phase.RUNNING:
            experiment.cancel(campaign, record.key, reason=reason)
        row = experiment.record(campaign, record.key, Status.CANCELLED, CrashCause.CANCELLED, reason=reason)
    click.echo(f"ledger: row {row.index} cancelled in {campaign.ledger}")
    _wrap_up_if_over(campaign)
    click.echo(campaign.verdict().line)


@cli.command("mark")
@click.argument("status", type=click.Choice(STATUSES))
@click.argument("slug", required=False)
@click.option("--reason", required=True, help="why: e.g. 'flat result, simpler code'")
@campaign_option
def mark_cmd(status: str, slug: str | None, reason: str, ref: str | None) -> None:
    """Decide a finished run (--decide manual) or close an experiment that never ran.

    \b
    Examples:
      ars exp mark keep --reason "flat val_bpb but 40 fewer lines"
      ars exp mark cancelled wider-mlp --reason "idea superseded before running"
    """
    campaign = find(ref)
    state = settled_state(campaign)
    record = select(state, slug, phases=(Phase.DECIDE, Phase.OPEN), verb="mark")
    if record.phase is Phase.OPEN and Status(status).is_finished():
        raise BadInput("this experiment has not run: only crash or cancelled can be recorded")
    row = experiment.record(campaign, record.key, Status(status), CrashCause.MARKED, reason=reason)
    click.echo(f"ledger: row {row.index} {status} in {campaign.ledger}")
    _wrap_up_if_over(campaign)
    click.echo(campaign.verdict().line)


@cli.command("outputs")
@click.argument("name")
@campaign_option
@click.option("--json", "as_json", is_flag=True, help="each run's folder and files as data")
def outputs_cmd(name: str, ref: str | None, as_json: bool) -> None:
    """What an experiment's runs left: each run's outputs folder and its files, largest first.

    NAME is a slug, a branch or a ledger row (`#3`); every run of its commit is listed (reruns too).
    A run whose outputs `keep_outputs:` dropped says so. Exit 0; 2 when no such experiment.

    \b
    Examples:
      ars exp outputs accum2-lr-6x
      ars exp outputs '#10' --json
    """
    campaign = find(ref)
    rows = campaign.rows()
    chosen = experiment.row_for(campaign, rows, name)
    runs = [r for r in rows if (r.commit and r.commit == chosen.commit) or r.index == chosen.index]
    listed = []
    for row in runs:
        folder = outputs.folder_of(campaign, row)
        files = runoutputs.largest(folder, n=10_000) if folder else []
        listed.append({
            "index": row.index,
            "status": str(row.status),
            "seed": row.seed or None,
            "outputs": str(folder) if folder else None,
            "dropped": bool(row.outputs) and folder is None,
            "files": [{"path": str(p.relative_to(folder)), "bytes": size} for p, size in files] if folder else [],
        })  # fmt: skip
    if as_json:
        click.echo(json.dumps({"experiment": chosen.branch, "runs": listed}, indent=2))
        return
    click.echo(f"experiment: {chosen.branch}")
    for run in listed:
        where = run["outputs"] or (
            "dropped (keep_outputs)" if run["dropped"] else "none: the run wrote no file"
        )
        seed = f" (seed {run['seed']})" if run["seed"] else ""
        click.echo(f"#{run['index']} {run['status']}{seed}: {where}")
        for f in run["files"]:
            click.echo(f"  {f['path']}  {runoutputs.human_size(f['bytes'])}")


__all__ = ["StopConditionMet", "cli"]


def main() -> None:
    run_cli(cli, prog_name="ars exp")


if __name__ == "__main__":
    main()
