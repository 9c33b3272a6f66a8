"""`ars run`, `ars status`, `ars cancel`: one command under a hard timeout, judged from anywhere.

`ars run` hands the command to a launcher (local, tmux or slurm; see launch/). A supervisor
process (or Slurm) owns the run, so the timeout holds even when `ars run` itself is gone
(--detach, a crash, a closed terminal). The run's record lives beside its log as
`<log>.run.json`; `ars status` and `ars cancel` find it by log path, run id (a Slurm job id)
or tmux session name.

Exit status of `ars run` (without --detach): the command's own; 124 when the timeout stopped it
(as coreutils `timeout` does); 130 when it was cancelled; 125 when it was lost (its supervisor
died, so its status is unknown).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import click

from autoresearch_skills.clock import format_duration, now, parse_duration, parse_iso
from autoresearch_skills.errors import EXIT_NEGATIVE, EXIT_OK, BadInput, catchable_stop_signals, run_cli
from autoresearch_skills.launch import LAUNCHERS, get_launcher, load_run
from autoresearch_skills.launch.base import Launcher, Run, RunSpec, State

FOLLOW_EVERY = 0.2  # seconds between copies of new log output with --follow
GENERIC_LOG_NAMES = frozenset({"run", "log", "out", "output", "stdout", "train"})


def parse_timeout(text: str) -> float | None:
    if text.strip().lower() in ("none", "no", "0"):
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as err:
        raise BadInput(f"--timeout: {err}, or `none` for no limit") from err
    if seconds <= 0:
        raise BadInput(f"--timeout must be positive, got {text!r}")
    return seconds


def parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise BadInput(f"--env {pair!r}: write KEY=VALUE")
        env[key] = value
    return env


def default_name(log_path: Path) -> str:
    """`runs/lr-3e-4.log` -> lr-3e-4; `runs/003-lr/run.log` -> 003-lr."""
    return (
        log_path.parent.name if log_path.stem in GENERIC_LOG_NAMES and log_path.parent.name else log_path.stem
    )


def describe(run: Run, state: State) -> dict:
    """Everything a person or an agent asks about a run, in print order."""
    started = _parse_time(run.started_at)
    ended = _parse_time(run.ended_at) if state.finished else None
    elapsed = ((ended or now()) - started).total_seconds() if started else None
    remaining = run.deadline - time.time() if run.deadline and not state.finished else None
    return {
        "run": run.run_id,
        "launcher": run.launcher,
        "state": state.name,
        "exit_code": state.exit_code,
        "detail": state.detail or None,
        "command": run.command,
        "log": run.log_path,
        "run_file": run.state_path,
        "session": run.extra.get("session"),
        "socket": run.extra.get("tmux_socket") or run.extra.get("socket"),
        "pid": run.extra.get("pid") or None,
        "started_at": run.started_at,
        "ended_at": run.ended_at if state.finished else None,
        "elapsed": round(elapsed, 1) if elapsed is not None else None,
        "timeout": run.timeout,
        "remaining": round(max(0.0, remaining), 1) if remaining is not None else None,
    }


def _parse_time(text: str | None):
    try:
        return parse_iso(text) if text else None
    except ValueError:
        return None


def print_info(info: dict, keys: tuple[str, ...] | None = None) -> None:
    for key in keys or tuple(info):
        value = info.get(key)
        if value is None:
            continue
        if key in ("elapsed", "timeout", "remaining"):
            value = format_duration(value)
        click.echo(f"{key}: {value}")


START_KEYS = ("run", "launcher", "session", "socket", "pid", "log", "run_file", "timeout")
END_KEYS = ("state", "exit_code", "elapsed", "detail")


@click.command(
    "run", context_settings={"help_option_names": ["-h", "--help"], "allow_interspersed_args": False}
)
@click.option(
    "-l",
    "--launcher",
    "launcher_name",
    type=click.Choice(sorted(LAUNCHERS)),
    default="local",
    show_default=True,
)
@click.option(
    "-t", "--timeout", "timeout_text", required=True, help="hard limit: 90s, 10m, 1h30m; `none` for no limit"
)
@click.option(
    "--log",
    "log_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="file for stdout+stderr (truncated); the run file goes beside it",
)
@click.option(
    "-n", "--name", help="run name (tmux session name after sanitising); default: from the log path"
)
@click.option(
    "--cwd",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="working directory (default: here)",
)
@click.option(
    "-e",
    "--env",
    "env_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="extra environment variable; repeatable",
)
@click.option(
    "--grace", "grace_text", default="10s", show_default=True, help="after SIGTERM, how long before SIGKILL"
)
@click.option("-d", "--detach", is_flag=True, help="start, print the run's id and files, return at once")
@click.option("-L", "--socket", help="tmux server: -L name, or a socket path with a `/`")
@click.option("--partition", help="Slurm partition (--launcher slurm)")
@click.option("--gpus", help="Slurm, Ray: GPUs per job, a count (2); Slurm also type:count (a100:2)")
@click.option("--mem", help="Slurm, Ray: memory per job (16G)")
@click.option("--cpus", help="Slurm: CPUs per task; Ray: CPUs per job")
@click.option(
    "--ray-address", help="Ray: the cluster (--launcher ray) [RAY_ADDRESS, else the cluster on this machine]"
)
@click.option(
    "--ray-working-dir",
    type=click.Choice(["shared", "upload"]),
    help="Ray: run in place, or upload the checkout [shared for a cluster on this machine]",
)
@click.option(
    "--follow/--no-follow",
    default=None,
    help="copy the log to stdout while waiting (default: when stdout is a terminal)",
)
@click.option("--json", "as_json", is_flag=True, help="one JSON object instead of key: value lines")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run_command(
    launcher_name: str,
    timeout_text: str,
    log_path: Path,
    name: str | None,
    cwd: Path | None,
    env_pairs: tuple[str, ...],
    grace_text: str,
    detach: bool,
    socket: str | None,
    partition: str | None,
    gpus: str | None,
    mem: str | None,
    cpus: str | None,
    ray_address: str | None,
    ray_working_dir: str | None,
    follow: bool | None,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND under a hard timeout, its output in --log; wait for it, or --detach.

    The whole process tree is stopped at the timeout (SIGTERM, then SIGKILL after
    --grace), grandchildren included, even when this command is no longer there
    to see it. Exit status: the command's own; 124 timeout; 130 cancelled
    (Ctrl-C here, `ars cancel`); 125 lost (status unknown). One COMMAND argument
    with spaces runs through bash (pipes, &&); several run as they are. The
    command's stdin is /dev/null and PYTHONUNBUFFERED=1 is set. With --launcher
    slurm the timeout is Slurm's --time, rounded up to whole minutes.

    \b
    Examples:
      ars run --timeout 10m --log runs/base.log -- python train.py
      ars run -t 1h --log runs/lr.log -l tmux -L ars --detach -- python train.py --lr 3e-4
      ars run -t 30m --log runs/x.log -- "python prep.py && python train.py 2>&1 | grep -v warn"
      ars run -t 2h --log runs/big.log -l slurm --gpus 1 --mem 32G -- python train.py
      ars run -t 2h --log runs/ray.log -l ray --ray-address http://head:8265 --gpus 2 -- python train.py
      ars status runs/lr.log; ars cancel runs/lr.log; ars wait lr 60 -L ars
    """
    spec = RunSpec(
        command=command[0] if len(command) == 1 and any(c.isspace() for c in command[0]) else list(command),
        log_path=log_path,
        cwd=cwd,
        env=parse_env(env_pairs),
        timeout=parse_timeout(timeout_text),
        grace=_parse_grace(grace_text),
        name=name or default_name(log_path),
        resources=_slurm_resources(launcher_name, partition=partition, gpus=gpus, mem=mem, cpus=cpus),
    )
    options: dict = {"socket": socket}
    if launcher_name == "ray":
        options = {"address": ray_address, "working_dir": ray_working_dir}
    elif ray_address or ray_working_dir:
        raise BadInput("--ray-address and --ray-working-dir only apply to --launcher ray")
    launcher = get_launcher(launcher_name, **options)
    interrupts = Interrupts()
    run = launcher.start(spec)
    try:
        interrupts.raise_from_now()
        if detach:
            info = describe(run, launcher.status(run))
            if as_json:
                click.echo(json.dumps(info))
            else:
                print_info(info, (*START_KEYS, "state"))
            sys.exit(EXIT_OK)
        if not as_json:
            print_info(describe(run, State("running")), START_KEYS)
        state = _wait(launcher, run, sys.stdout.isatty() if follow is None else follow)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not abandon the cleanup
        state = launcher.cancel(run)
    final = describe(run.reload(), state)
    if as_json:
        click.echo(json.dumps(final))
    else:
        print_info(final, END_KEYS)
    sys.exit(state.shell_status)


class Interrupts:
    """Ctrl-C, SIGTERM and a closed terminal cancel the run. While it starts they are only
    noted (a run must not be left behind before we know its id), then raised at once. A signal
    ignored by whoever started us stays ignored (`nohup` ignores SIGHUP; a shell's background
    job, SIGINT)."""

    def __init__(self) -> None:
        self.seen = False
        self.signals = catchable_stop_signals()
        for sig in self.signals:
            signal.signal(sig, self._note)

    def _note(self, _signum: int, _frame: object) -> None:
        self.seen = True

    def raise_from_now(self) -> None:
        for sig in self.signals:
            signal.signal(sig, self._raise)
        if self.seen:
            raise KeyboardInterrupt

    @staticmethod
    def _raise(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt


def _slurm_resources(launcher_name: str, **options: str | None) -> dict[str, str]:
    given = {key: value for key, value in options.items() if value is not None}
    if given and launcher_name not in ("slurm", "ray"):  # the Ray launcher refuses --partition itself
        flags = ", ".join(f"--{key}" for key in given)
        raise BadInput(
            f"{flags} only apply to --launcher slurm or ray; locally, set CUDA_VISIBLE_DEVICES with --env"
        )
    return given


def _parse_grace(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as err:
        raise BadInput(f"--grace: {err}") from err


def _wait(launcher: Launcher, run: Run, follow: bool) -> State:
    if not follow:
        return launcher.wait(run)
    with open(run.log_path, "rb") as log:
        while True:
            state = launcher.wait(run, FOLLOW_EVERY)
            sys.stdout.buffer.write(log.read())
            sys.stdout.buffer.flush()
            if state.finished:
                return state


@click.command("status", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("run_ref", metavar="RUN")
@click.option("-L", "--socket", help="tmux server to look the session up on (-L name or socket path)")
@click.option("--json", "as_json", is_flag=True, help="one JSON object instead of key: value lines")
def status_command(run_ref: str, socket: str | None, as_json: bool) -> None:
    """Show a run's state: running, exited (with its exit code), timeout, cancelled, lost.

    RUN is the log path, its .run.json, the run id or the tmux session name that
    `ars run` printed. Exit 0 while the run is pending or running, 1 once it ended,
    2 when no such run exists.

    \b
    Examples:
      ars status runs/lr.log
      ars status lr -L ars --json
    """
    run = load_run(run_ref, socket)
    state = get_launcher(run.launcher).status(run)
    info = describe(run.reload(), state)
    if as_json:
        click.echo(json.dumps(info))
    else:
        print_info(info)
    sys.exit(EXIT_NEGATIVE if state.finished else EXIT_OK)


@click.command("cancel", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("run_ref", metavar="RUN")
@click.option("-L", "--socket", help="tmux server to look the session up on (-L name or socket path)")
@click.option("--json", "as_json", is_flag=True, help="one JSON object instead of key: value lines")
def cancel_command(run_ref: str, socket: str | None, as_json: bool) -> None:
    """Stop a run and its whole process tree (SIGTERM, SIGKILL after its grace period).

    Waits until the tree is gone and the final state is recorded. Exit 0 when the
    run was stopped, 1 when it had already ended (its state is shown), 2 when no
    such run exists. A tmux session stays open for post-mortems.

    \b
    Examples:
      ars cancel runs/lr.log
      ars cancel lr -L ars
    """
    run = load_run(run_ref, socket)
    launcher = get_launcher(run.launcher)
    already_over = launcher.status(run).finished
    state = launcher.cancel(run)
    info = describe(run.reload(), state)
    if as_json:
        click.echo(json.dumps(info))
    else:
        print_info(info, (*END_KEYS, "run", "log"))
    sys.exit(EXIT_NEGATIVE if already_over else EXIT_OK)


@click.group("runs", context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Start runs under a hard timeout, show their state, cancel them (as `ars run|status|cancel`)."""


cli.add_command(run_command)
cli.add_command(status_command)
cli.add_command(cancel_command)


def main() -> None:
    run_cli(cli, prog_name="runs.py")


if __name__ == "__main__":
    main()
