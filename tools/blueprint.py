"""Blueprints: one experiment written down so completely that another agent can run it without
asking anything (AgentJet's format; references/blueprint-format.md has the long form).

Contract:
    ars blueprint new     writes filled blueprints from flags or a plan file; never overwrites one
                          (unless --force). Exit 0, or 2 for bad input.
    ars blueprint check   exit 0 and one summary line when every blueprint is sound; exit 2 and one
                          `FILE: problem — fix` line on stderr per problem otherwise.
    ars blueprint run     checks them all (exit 2, nothing started, on any problem), then runs them as
                          a swarm on a GPU pool (swarm.py): one tmux session and one attempt at a time
                          per blueprint. Exit 0 when nothing waits for a fix, 1 when a failed attempt does.
    ars blueprint status  one line per blueprint (queued, running, between attempts, finished),
                          read from its result dir and the campaign ledger. Always exit 0.
    ars blueprint finish  results.md, then finish.flag (last); refuses a blueprint already finished.

The logic lives in the `blueprints` package (reading, checking, writing, resultdir) and in
swarm.py; this module is the command line and re-exports the names callers use.
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
from dataclasses import asdict
from pathlib import Path

import click

if not __package__:  # run as `python tools/blueprint.py` from a checkout with nothing installed
    import _checkout  # noqa: F401

from autoresearch_skills import notices
from autoresearch_skills.blueprints.checking import check, check_all, validation_file
from autoresearch_skills.blueprints.reading import (
    _TEMPLATE_HINT,
    DEFAULT_FIRST_STEP_PATTERN,
    DEFAULT_FIRST_STEP_TIMEOUT,
    DEFAULT_GPUS,
    DEFAULT_MAX_TIME,
    FINAL_STATUSES,
    FINISH_FLAG,
    RESULTS,
    TRIAL_LOG,
    Blueprint,
    Problem,
    find_blueprints,
    launch_environment,
    parse,
    parse_gpus,
    parse_text,
    session_name,
    slugify,
)
from autoresearch_skills.blueprints.resultdir import (
    Attempt,
    MetricSummary,
    Results,
    Status,
    blueprint_status,
    diagnose,
    end_attempt,
    new_attempt_log,
    pick_headline,
    read_flag,
    read_trial_log,
    start_attempt,
    summarize,
    write_finish_flag,
    write_results,
)
from autoresearch_skills.blueprints.writing import Spec, read_plan, render, write_new
from autoresearch_skills.errors import BadInput, run_cli, signal_exit_code

__all__ = [
    "DEFAULT_FIRST_STEP_PATTERN", "DEFAULT_FIRST_STEP_TIMEOUT", "DEFAULT_GPUS", "DEFAULT_MAX_TIME",
    "FINAL_STATUSES", "FINISH_FLAG", "RESULTS", "TRIAL_LOG", "Attempt", "Blueprint", "MetricSummary",
    "Problem", "Results", "Spec", "Status", "blueprint_status", "check", "check_all", "diagnose",
    "end_attempt", "find_blueprints", "launch_environment", "new_attempt_log", "parse", "parse_gpus",
    "parse_text", "pick_headline", "read_flag", "read_plan", "read_trial_log", "render", "session_name",
    "slugify", "start_attempt", "summarize", "validation_file", "write_finish_flag", "write_new",
    "write_results", "cli", "main",
]  # fmt: skip


# ---------------------------------------------------------------- command line


@click.group("blueprint", context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Experiment blueprints (AgentJet's format): write them, check them, run them as a swarm on a
    GPU pool, see where they stand, and end them with their results document and finish.flag.

    \b
    Examples:
      ars blueprint new --name math_topk50 --purpose "top-k 50 raises pass@1" --codebase /data/project \\
          --command "python -m ajet.launcher --conf topk50.yaml" --yaml topk50.yaml --gpus 4
      ars blueprint new --from plan.yaml --out-dir blueprints/
      ars blueprint check blueprints/*.md
      ars blueprint run blueprints/ --gpus 0-7 --for 9m
      ars blueprint status blueprints/
      ars blueprint finish blueprints/math_topk50.md --status ok
    """
    notices.show_with(lambda line: click.echo(line, err=True))  # the engine's warnings


@cli.command("new")
@click.option(
    "--from", "plan", type=click.Path(dir_okay=False, path_type=Path), help="a YAML/JSON plan of several"
)
@click.option(
    "--out-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("blueprints"),
    show_default=True,
    help="where --from writes <name>.md",
)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="the file [blueprints/<name>.md]"
)
@click.option("--name", default="", help="short name: session names and the result folder [from the purpose]")
@click.option("--purpose", default=None, help="the hypothesis in one sentence")
@click.option("--prediction", default="", help="what you expect, written before the run")
@click.option("--differs-from", default="", help="which knob differs from the sibling blueprints")
@click.option(
    "--codebase", type=click.Path(file_okay=False, path_type=Path), help="the code to run (cd here)"
)
@click.option(
    "--python", type=click.Path(path_type=Path), help="the environment's python [<codebase>/.venv/bin/python]"
)
@click.option("--yaml", "yaml_path", default="", help="the training config, or NA [NA]")
@click.option("--command", "command", default=None, help="the exact launch command, run from the codebase")
@click.option(
    "--result-dir", type=click.Path(path_type=Path), help="[<codebase>/auto_agent/exp_results/<name>/]"
)
@click.option("--max-time", default="24h", show_default=True, help="hard limit of the whole run")
@click.option(
    "--gpus",
    default=str(DEFAULT_GPUS),
    show_default=True,
    help="how many GPUs (4), or which devices (4,5,6,7 or 4-7; one device: 4,)",
)
@click.option(
    "--first-step-pattern",
    default=DEFAULT_FIRST_STEP_PATTERN,
    show_default=True,
    help="the line that proves training started",
)
@click.option(
    "--first-step-timeout", default="20m", show_default=True, help="the first step must print by then"
)
@click.option("--note", "notes", multiple=True, help="a line for Other Notes (repeatable)")
@click.option("--force", is_flag=True, help="replace blueprint files that exist")
@click.option("--json", "as_json", is_flag=True, help="print the written files as JSON")
def new_cmd(plan, out_dir, output, force, as_json, **flags) -> None:
    """Write filled blueprints: one from flags, or one per entry of a plan (--from). Paths become
    absolute (relative ones are relative to the codebase); unset values take the defaults (24h,
    first `actor/kl_loss:` within 20m, result dir under <codebase>/auto_agent/exp_results/).
    An existing file is never replaced without --force.

    \b
    Examples:
      ars blueprint new --name math_topk50 --purpose "top-k 50 raises task_pass_rate@1 over top-k 20" \\
          --codebase /data/project --yaml tests/bench/benchmark_math/topk50.yaml \\
          --command "python -m ajet.launcher --conf tests/bench/benchmark_math/topk50.yaml" --gpus 4
      ars blueprint new --from plan.yaml --out-dir blueprints/
      ars init blueprint-plan plan.yaml
    """
    given = {k for k, v in flags.items() if v not in (None, "", ()) and v != _NEW_DEFAULTS.get(k)}
    if plan is not None:
        if given or output is not None:
            shown = ", ".join("--" + k.replace("_", "-") for k in sorted(given)) or "-o"
            raise BadInput(f"--from takes every value from the plan; drop {shown} or put it in the plan")
        specs = read_plan(plan)
        pairs = [(spec, out_dir / f"{spec.slug}.md") for spec in specs]
    else:
        missing = [f"--{k}" for k in ("purpose", "codebase", "command") if not flags.get(k)]
        if missing:
            raise BadInput(f"give {', '.join(missing)} (or --from plan.yaml for several blueprints)")
        spec = Spec(
            purpose=flags["purpose"],
            codebase=flags["codebase"],
            command=flags["command"],
            name=flags["name"],
            python=flags["python"],
            yaml=flags["yaml_path"],
            result_dir=flags["result_dir"],
            max_time=flags["max_time"],
            gpus=flags["gpus"],
            first_step_pattern=flags["first_step_pattern"],
            first_step_timeout=flags["first_step_timeout"],
            prediction=flags["prediction"],
            differs_from=flags["differs_from"],
            notes=list(flags["notes"]),
        )
        pairs = [(spec, output or Path("blueprints") / f"{spec.slug}.md")]
    written = write_new(pairs, force=force)
    if as_json:
        click.echo(json.dumps({"written": [str(p) for p in written]}, indent=2))
        return
    for path in written:
        click.echo(f"written: {path}")
    click.echo(f"next: ars blueprint check {' '.join(shlex.quote(str(p)) for p in written)}")


_NEW_DEFAULTS = {
    "max_time": "24h",
    "gpus": str(DEFAULT_GPUS),
    "first_step_pattern": DEFAULT_FIRST_STEP_PATTERN,
    "first_step_timeout": "20m",
}


@cli.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="one JSON object: each file, its problems")
def check_cmd(files: tuple[Path, ...], as_json: bool) -> None:
    """Check blueprints before anything runs: every section present and filled, the paths, that the
    python starts, that the YAML parses, the limits, that the result dir can be written, and the
    AgentJet/verl settings people get wrong (execute_test, val_before_train, test_freq, total_epochs,
    n_gpus_per_node against the blueprint's GPUs, val_print_to_markdown_file_path).

    Exit 0 with one summary line when all are sound; exit 2 with one `FILE: problem — fix` line per
    problem on stderr. A folder stands for the blueprints in it.

    \b
    Examples:
      ars blueprint check blueprints/math_topk50.md
      ars blueprint check blueprints/
      ars blueprint check blueprints/*.md --json
    """
    blueprints: list[Blueprint] = []
    unreadable: list[Problem] = []
    for given in files:
        if given.is_dir():
            found = find_blueprints([given])
            if not found:
                unreadable.append(
                    Problem(str(given), "", "holds no blueprint (no .md file with `## [exp_...]` sections)",
                            "give the blueprint files, or write some with `ars blueprint new`")
                )  # fmt: skip
            blueprints += [parse(path) for path in found]
            continue
        try:
            blueprints.append(parse(given))
        except BadInput as err:
            unreadable.append(Problem(str(given), "", err.message.removeprefix(f"{given} "), _TEMPLATE_HINT))
    unique = {bp.path.resolve(): bp for bp in blueprints}  # `check a.md blueprints/` names a.md twice
    blueprints = list(unique.values())
    problems = unreadable + check_all(blueprints)
    bad = {p.file for p in problems}
    if as_json:
        report = {
            "ok": not problems,
            "problems": [asdict(p) for p in unreadable],
            "blueprints": [
                {
                    "file": str(bp.path),
                    "name": bp.slug,
                    "ok": str(bp.path) not in bad,
                    "problems": [asdict(p) for p in problems if p.file == str(bp.path)],
                    "parsed": bp.to_dict(),
                }
                for bp in blueprints
            ],
        }
        click.echo(json.dumps(report, indent=2))
    else:
        for p in problems:
            click.echo(str(p), err=True)
        if problems:
            click.echo(
                f"problems: {len(problems)} in {len(bad)} of {len(blueprints) + len(unreadable)} blueprint files"
            )
        else:
            names = ", ".join(bp.slug for bp in blueprints)
            click.echo(f"sound: {len(blueprints)} blueprint{'s' * (len(blueprints) != 1)} ({names})")
    if problems:
        sys.exit(2)


@cli.command("status")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--ledger", type=click.Path(dir_okay=False, path_type=Path), help="[results.tsv in DIR or here]"
)
@click.option("--json", "as_json", is_flag=True, help="a JSON array, one object per blueprint")
def status_cmd(paths: tuple[Path, ...], ledger: Path | None, as_json: bool) -> None:
    """One line per blueprint: queued, running (attempt, GPUs, elapsed, session), between attempts
    (the last verdict and diagnosis), or finished (final status and headline figure). Read from each
    blueprint's result dir and the campaign ledger: --ledger, results.tsv in DIR or here, else the
    ledger and runs in flight of the swarm `ars blueprint run` made for them. DIR defaults to
    blueprints/ (or the current folder when there is none). Reads only; writes nothing.

    \b
    Examples:
      ars blueprint status
      ars blueprint status blueprints/ --json
      ars blueprint status blueprints/math_topk50.md --ledger results.tsv
    """
    if not paths:
        paths = (Path("blueprints") if Path("blueprints").is_dir() else Path("."),)
    files = find_blueprints(list(paths))
    parsed: dict[Path, Blueprint | BadInput] = {}
    for path in files:
        try:
            parsed[path] = parse(path)
        except BadInput as err:
            parsed[path] = err
    in_flight = {}
    if ledger is None:
        candidates = [p / "results.tsv" for p in paths if p.is_dir()] + [Path("results.tsv")]
        ledger = next((c for c in candidates if c.is_file()), None)
    if ledger is None:  # blueprints run by `ars blueprint run`: their swarm's ledger and runs in flight
        from autoresearch_skills.blueprints import swarm

        found = swarm.locate([bp for bp in parsed.values() if isinstance(bp, Blueprint)])
        if found is not None:
            ledger = found.ledger
            in_flight = {e.slug: e for e in found.state.read().experiments.values()}
    rows = []
    if ledger is not None and Path(ledger).is_file():
        from autoresearch_skills import ledger as ledger_module

        rows = ledger_module.read(ledger)
    from autoresearch_skills import gitflow

    statuses = []
    for path, bp in parsed.items():
        if isinstance(bp, BadInput):
            statuses.append(Status(str(path), "", "invalid", detail=bp.message))
        else:
            statuses.append(blueprint_status(bp, rows, in_flight=in_flight.get(gitflow.slugify(bp.slug))))
    if as_json:
        click.echo(json.dumps([asdict(s) for s in statuses], indent=2))
        return
    for s in statuses:
        click.echo(s.line())
    counts: dict[str, int] = {}
    for s in statuses:
        counts[s.state] = counts.get(s.state, 0) + 1
    summary = ", ".join(f"{n} {state.replace('_', ' ')}" for state, n in counts.items())
    click.echo(f"blueprints: {len(statuses)}" + (f" ({summary})" if summary else ""))


@cli.command("finish")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--status", "final", required=True, type=click.Choice(FINAL_STATUSES), help="the final status")
@click.option("--note", default="", help="what a reader must know: why it failed, what the figures mean")
@click.option(
    "--preset", default="verl", show_default=True, help="metric preset for the files (any of ars metric)"
)
@click.option("--metric", "metrics", multiple=True, help="a metric to report first (repeatable)")
@click.option(
    "--validation", type=click.Path(dir_okay=False, path_type=Path), help="[the YAML's validation file]"
)
@click.option("--log", type=click.Path(dir_okay=False, path_type=Path), help="[the newest attempt-<n>.log]")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
def finish_cmd(file: Path, final: str, note: str, preset: str, metrics, validation, log, as_json) -> None:
    """End a blueprint: write results.md from the run's own files (the validation file, the last
    attempt's log, the trial log), then finish.flag with the final status, last. Use it when a run
    is over, and also when it failed beyond repair (say why in --note): whoever schedules
    blueprints waits for finish.flag. Refuses when finish.flag is already there.

    \b
    Examples:
      ars blueprint finish blueprints/math_topk50.md --status ok
      ars blueprint finish blueprints/math_topk50.md --status failed --note "OOM at every batch size tried"
      ars blueprint finish blueprints/lm.md --status ok --preset karpathy --metric val_bpb
    """
    bp = parse(file)
    if bp.result_dir is None:
        raise BadInput(f"{file}: [exp_result_dir] is not set; run `ars blueprint check {file}`")
    flag = bp.result_dir / FINISH_FLAG
    if flag.exists():
        done = read_flag(flag).get("status", "unknown")
        raise BadInput(
            f"{flag} exists (status {done}): this blueprint is over; remove the flag to finish it again"
        )
    results = write_results(
        bp, final, log=log, validation=validation, preset=preset, metrics=metrics, note=note
    )
    written = write_finish_flag(bp.result_dir, final, results.headline)
    if as_json:
        out = {
            "results": str(results.path),
            "headline": results.headline,
            "flag": str(written),
            "status": final,
        }
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"results: {results.path}")
    click.echo(f"headline: {results.headline or 'none (no metric found; see results.md)'}")
    click.echo(f"finish.flag: {written} (status {final})")


@cli.command("run")
@click.argument("files", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--gpus",
    default=None,
    help="the GPU pool: device ids (0-7, 0,1,2,3) or a count (8: devices 0-7) [the swarm's; new: all GPUs listed]",
)
@click.option(
    "--parallel", type=int, default=None, help="at most this many blueprints at once [as many as fit]"
)
@click.option("--socket", default=None, help="tmux socket name (tmux -L) for the sessions [tmux's default]")
@click.option(
    "-l",
    "--launcher",
    type=click.Choice(["tmux", "ray"]),
    default=None,
    help="tmux on this machine's GPU pool, or ray: a job each, placed on its GPUs by Ray [the swarm's; new: tmux]",
)
@click.option(
    "--ray-address", default=None, help="--launcher ray: the cluster [RAY_ADDRESS, else one on this machine]"
)
@click.option("--name", default=None, help="the swarm's name [the blueprints' folder name]")
@click.option("--for", "for_", default=None, help="follow this long, then return with runs going (e.g. 9m)")
@click.option("--detach", is_flag=True, help="start what can start, then return at once")
@click.option("--final", is_flag=True, help="last attempt: a failure writes finish.flag with it")
@click.option("--retry", is_flag=True, help="relaunch failed blueprints also without a recorded fix")
@click.option(
    "--max-attempts", type=click.IntRange(1), default=None, help="failed attempts before finish.flag [3]"
)
@click.option("--metric", default=None, help="the figure each ledger row records [actor/kl_loss]")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object at the end")
def run_cmd(
    files, gpus, parallel, socket, launcher, ray_address, name, for_, detach, final, retry, max_attempts,
    metric, as_json,
) -> None:  # fmt: skip
    """Run blueprints as a swarm on a GPU pool: check them all (exit 2, nothing started, on any
    problem), then give each one that is not over its next attempt, on GPUs of its own
    (CUDA_VISIBLE_DEVICES) or queued until they free up, in tmux session ajet_<name> (a retry:
    ajet_<name>_try<n>), on branch <prefix>/<name> in a worktree, stopped at its max time and when
    no first-step line (actor/kl_loss:) came within its first-step timeout. One line per start
    (session, GPUs, log) and per end. A blueprint that ends ok (or at its max time) gets
    results.md, then finish.flag; a failed one waits for you: write `- fix: ...` under its attempt
    in trial_log.md and run this again (the next attempt runs your checkout as it is then), or pass
    --final to end it with the failure. After --max-attempts failures finish.flag records it.

    It follows the swarm until nothing is in flight (--for: at most that long; --detach: not at
    all). Run it again any time, also after it was killed: it adopts the runs still going and
    records the ones that ended; nothing starts twice. The swarm is a campaign
    (reports/auto_research/<name>/ in the codebases' repository): `ars exp wait --campaign NAME`
    and `ars campaign status --campaign NAME` work on it. Exit 0: no blueprint waits for a fix; 1: one does;
    2: bad input.

    \b
    Examples:
      ars blueprint run blueprints/ --gpus 0-7
      ars blueprint run blueprints/*.md --gpus 0-7 --parallel 2 --for 9m
      ars blueprint run blueprints/math_topk50.md --final
      ars blueprint run --name blueprints --for 9m
      ars blueprint run blueprints/ --launcher ray --ray-address http://head:8265 --parallel 4
    """
    from autoresearch_skills.blueprints import swarm
    from autoresearch_skills.clock import parse_duration

    seconds = None
    if for_:
        try:
            seconds = parse_duration(for_)
        except ValueError:
            raise BadInput(f"--for {for_!r} is not a duration: write it as 9m, 30s or 1h") from None
    if not files and not name:
        raise BadInput("give blueprint files or their folder (or --name SWARM to follow a swarm)")
    if launcher == "ray" and gpus:
        raise BadInput(
            "--gpus names this machine's pool; with --launcher ray, Ray places each blueprint on its GPUs"
        )
    opts = swarm.Options(
        gpus=gpus, parallel=parallel, socket=socket, name=name, final=final, retry=retry,
        max_attempts=max_attempts, metric=metric, seconds=seconds, detach=detach, launcher=launcher,
        ray_address=ray_address,
    )  # fmt: skip
    say = (lambda line: None) if as_json else click.echo
    try:
        report = swarm.run(list(files), opts, say) if files else swarm.resume(name, opts, say)
    except swarm.ProblemsFound as err:
        for problem in err.problems:
            click.echo(str(problem), err=True)
        click.echo(f"problems: {len(err.problems)}; nothing was started (fix them, then run again)")
        sys.exit(2)
    except KeyboardInterrupt as err:  # SIGTERM and SIGHUP arrive as one too (errors.Interrupted)
        click.echo("interrupted: the runs go on; run the same command again to follow them", err=True)
        sys.exit(signal_exit_code(getattr(err, "signum", signal.SIGINT)))
    if as_json:
        click.echo(json.dumps({**report.to_dict(), "exit_code": report.exit_code}, indent=2))
    else:
        click.echo(report.summary())
        if report.in_flight:
            again = " ".join(shlex.quote(str(f)) for f in files) or f"--name {report.campaign}"
            click.echo(
                f"still in flight: {', '.join(report.in_flight)}; follow with `ars blueprint run {again} --for 9m`"
            )
        elif report.over:
            click.echo(
                f"over: every blueprint has finish.flag; read each results.md (ledger {report.ledger})"
            )
    sys.exit(report.exit_code)


def main() -> None:
    run_cli(cli, prog_name="blueprint.py")


if __name__ == "__main__":
    main()
