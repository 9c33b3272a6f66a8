"""Runs in the holders of a campaign on Ray (ray_allocation.py): start, judge, cancel.

`start` writes two scripts beside the run's log and drops the launch script in the holders'
requests folder; the first free holder claims it within a tenth of a second:

    <log>.launch.sh   run by the holder: the step script, and beside it a look for <log>.cancel
                      every 0.2 s (found first: nothing runs; found later: SIGTERM to the step, once);
                      it ends with the step, so the holder is free at once
    <log>.step.sh     the step: its pid file, the command in the background, its exit file,
                      output to the log. At the run's limit (to the second) or on SIGTERM (a cancel,
                      `ray job stop` of the holder) the command's whole tree gets SIGTERM, and
                      SIGKILL after the grace: found through /proc, so a process that left the
                      command's session goes too

    <log>.pid    "HOST PID PGID START HOLDER DEVICES" once the step runs (DEVICES: the holder's
                 CUDA_VISIBLE_DEVICES, `-` when Ray set none)
    <log>.exit   "STATUS exited", "STATUS timeout" or "STATUS stopped": the command ended by itself,
                 at its limit, or because the step was told to stop (a cancel, or its holder stopped)

Judging reads these files first (stats, no Ray call): a run's end is a local event. Ray is asked
only about the holders, through the process's one watcher, so however many runs are in flight one
query answers for all. A run whose holder ended under it (`ray job stop` of it, its node lost) is
`cancelled` with `extra["allocation_ended"]` saying how, so the campaign records that cause and
submits a new holder at its next run.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import time
from pathlib import Path

from autoresearch_skills.errors import BadInput
from autoresearch_skills.launch import holder_files
from autoresearch_skills.launch.base import FINISHED, Run, RunSpec, State, shell_exports, slug, wait_polling
from autoresearch_skills.launch.holder_files import drop_request, mark_running
from autoresearch_skills.launch.local import prepare_run, record
from autoresearch_skills.launch.ray_allocation import Holders, ended_words, load
from autoresearch_skills.launch.runindex import remember

LOCAL_POLL = 0.05  # seconds between looks at the run's files while waiting (stats only)
CANCEL_WAIT = 30.0  # beyond the grace, for the step to write its exit

STEP = """\
#!/bin/bash
# Step script of run {name}, written by autoresearch-skills; a holder of the campaign on Ray runs it.
exec > {log} 2>&1
read -ra _ars_stat 2>/dev/null < /proc/$$/stat
printf '%s %s %s %s %s %s\\n' "$(uname -n)" "$$" "${{_ars_stat[4]:-$$}}" "${{_ars_stat[21]:-}}" "${{ARS_HOLDER:-?}}" "${{CUDA_VISIBLE_DEVICES:--}}" > {pid_file}
_ars_exit() {{ printf '%s %s\\n' "$1" "$2" > {exit_tmp} && mv -f {exit_tmp} {exit_file}; exit "$1"; }}
cd -- {cwd} || _ars_exit 126 exited
export PYTHONUNBUFFERED=1
{exports}_ars_tree() {{  # "PID:START" of a pid and every process below it, from /proc (setsid or not)
    local -A kids=() born=(); local stat line fields pid todo=$1 next found=""
    for stat in /proc/[0-9]*/stat; do
        read -r line 2>/dev/null < "$stat" || continue
        pid=${{line%% *}}
        read -ra fields <<< "${{line##*) }}"
        kids[${{fields[1]}}]+=" $pid"
        born[$pid]=${{fields[19]}}
    done
    while [ -n "$todo" ]; do
        next=""
        for pid in $todo; do found+=" $pid:${{born[$pid]}}"; next+="${{kids[$pid]}}"; done
        todo=$next
    done
    echo $found
}}
_ars_signal() {{  # SIGNAL PID:START ...: each process still alive and still the one listed (no reused pid)
    local sig=$1 entry line fields
    shift
    for entry in "$@"; do
        read -r line 2>/dev/null < "/proc/${{entry%%:*}}/stat" || continue
        read -ra fields <<< "${{line##*) }}"
        [ "${{fields[19]}}" = "${{entry#*:}}" ] && kill -"$sig" "${{entry%%:*}}" 2>/dev/null
    done
}}
_ars_stop() {{  # SIGTERM to the command's whole tree, SIGKILL to what is left of it after the grace
    [ -n "$_ars_why" ] && return
    _ars_why=$1
    local tree; tree=$(_ars_tree "$_ars_child")
    _ars_signal TERM $tree
    ( sleep {grace}; _ars_signal KILL $tree $(_ars_tree "$_ars_child") ) > /dev/null 2>&1 &
}}
trap '_ars_trapped=1; _ars_stop stopped' TERM
trap '_ars_trapped=1; _ars_stop timeout' USR1
( trap - INT QUIT; exec {command} ) < /dev/null &
_ars_child=$!
{clock}while :; do  # a trap cuts `wait` short (128+N): wait again, bash keeps the command's status
    _ars_trapped=""
    wait "$_ars_child"
    _ars_status=$?
    [ -z "$_ars_trapped" ] && break
done
if [ -n "$_ars_clock" ]; then  # the clock and its sleep: the kernel's list of its children, else a scan
    read -r _ars_sleep 2>/dev/null < "/proc/$_ars_clock/task/$_ars_clock/children" \\
        && kill $_ars_sleep "$_ars_clock" 2>/dev/null || _ars_signal TERM $(_ars_tree "$_ars_clock")
fi
_ars_exit $_ars_status "${{_ars_why:-exited}}"
"""

LAUNCH = """\
#!/bin/bash
# Launch of run {name} in a holder of the campaign on Ray, written by autoresearch-skills.
[ -e {cancel_file} ] && exit 0
bash {step_script} < /dev/null > /dev/null 2>&1 &
step=$!
( while kill -0 "$step" 2>/dev/null; do
    [ -e {cancel_file} ] && {{ kill -TERM "$step" 2>/dev/null; break; }}
    sleep 0.2
done ) &
wait "$step"
"""


def start(spec: RunSpec, folder: Path, launcher: str) -> Run:
    holders = load(folder)
    if holders is None or not holders.live:
        raise BadInput(f"no Ray holders in {folder}: the campaign submits them before its first run")
    run = prepare_run(spec, launcher, f"ars-{slug(spec.name, 40)}-{os.urandom(3).hex()}")
    files = {key: f"{run.log_path}.{key}" for key in ("pid", "exit", "cancel")}
    for stale in files.values():
        Path(stale).unlink(missing_ok=True)
    Path(run.log_path).write_text("")
    step_script, launch_script = f"{run.log_path}.step.sh", f"{run.log_path}.launch.sh"
    Path(step_script).write_text(step_text(run, files))
    Path(launch_script).write_text(
        LAUNCH.format(
            name=run.name.replace("\n", " "),
            cancel_file=shlex.quote(files["cancel"]),
            step_script=shlex.quote(step_script),
        )
    )
    request = holders.requests() / f"{time.time_ns()}-{run.run_id}.sh"  # the holders take them in order
    run.extra.update(
        allocation=holders.folder,
        address=holders.address,
        working_dir="shared",
        request=request.name,
        pid_file=files["pid"],
        exit_file=files["exit"],
        cancel_file=files["cancel"],
        submitted_at=run.started_at,
    )
    run.save()
    remember(run)
    drop_request(request, launch_script)
    return run


def step_text(run: Run, files: dict[str, str]) -> str:
    clock = ""
    if run.timeout:  # the limit, to the second: the command's tree is stopped as by a cancel
        seconds = math.ceil(run.timeout)
        clock = f"( sleep {seconds}; kill -USR1 $$ ) > /dev/null 2>&1 &\n_ars_clock=$!\n"
    quote = shlex.quote
    return STEP.format(
        name=run.name.replace("\n", " "),
        log=quote(run.log_path),
        pid_file=quote(files["pid"]),
        exit_file=quote(files["exit"]),
        exit_tmp=quote(files["exit"] + ".tmp"),
        cwd=quote(run.cwd or "."),
        exports=shell_exports(run.env),
        grace=max(1, math.ceil(run.grace)),
        command=shlex.join(run.argv),
        clock=clock,
    )


# -- judging ------------------------------------------------------------------------


def status(run: Run) -> State:
    current = run.reload()
    if current.state in FINISHED:
        return current.recorded_state()
    state = judge(current)
    if _devices(current) and "devices" not in current.extra:
        current.extra["devices"] = _devices(current)  # what Ray gave its holder: the ledger's `devices`
    if state.finished:
        record(current, state)
        ended = holder_files.file_time(
            current.extra["exit_file"]
        )  # when it ended, not when somebody looked (a resume)
        if ended:
            current.ended_at = ended
            with contextlib.suppress(OSError):
                current.save()
        return state
    if state.name == "running" and current.state != "running":
        mark_running(current, current.extra["pid_file"])
    return state


def judge(run: Run) -> State:
    extra = run.extra
    holders = load(Path(extra["allocation"]))
    ended = exit_words(run)
    if ended is not None:
        code, how = ended
        if how == "timeout":
            return State("timeout", code, f"killed at its {run.timeout:g}s limit (in {holder_of(run)})")
        if how == "stopped" or (code != 0 and Path(extra["cancel_file"]).exists()):
            if Path(extra["cancel_file"]).exists():
                return _cancelled(run)
            # stopped with its holder (`ray job stop` of it): not the command's doing
            gone = _holder_ended(holders, holder_of(run)) or "stopped from outside"
            return _allocation_ended(run, holder_of(run), gone, "while it ran")
        return State("exited", code, f"in {holder_of(run)}" if holder_of(run) else "")
    holder = holder_of(run)
    if holder:
        gone = _holder_ended(holders, holder)
        if gone:
            return _allocation_ended(run, holder, gone, "while it ran")
        host = (_read(extra["pid_file"]) or "?").split()[0]
        devices = f" (CUDA_VISIBLE_DEVICES={_devices(run)})" if _devices(run) else ""
        return State("running", None, f"in {holder} on {host}{devices}")
    claimed = _claimed_by(run)
    if claimed:
        gone = _holder_ended(holders, claimed)
        if gone:
            return _allocation_ended(run, claimed, gone, "before it started")
        return State("pending", None, f"starting in {claimed}")
    if holders is None or not any(not _holder_ended(holders, h) for h in holders.live):
        return _allocation_ended(run, "every holder", "ended", "before it started")
    placed = sum(holders.look(h).status == "RUNNING" for h in holders.live)
    return State(
        "pending",
        None,
        f"waiting for a free holder of the campaign on Ray ({len(holders.live)} holder(s), {placed} placed)",
    )


def _holder_ended(holders: Holders | None, holder: str) -> str:
    if holders is None:
        return "its record is gone"
    return ended_words(holders.look(holder))


def _allocation_ended(run: Run, holder: str, how: str, when: str) -> State:
    run.extra["allocation_ended"] = how
    return State("cancelled", None, f"Ray: {holder} of the campaign ended {when}: {how}")


def _cancelled(run: Run) -> State:
    return State("cancelled", None, f"cancelled in {holder_of(run) or 'its holder'}")


def exit_words(run: Run) -> tuple[int, str] | None:
    return holder_files.exit_words(run.extra["exit_file"])


def holder_of(run: Run) -> str:
    """The holder running it, from its pid file ('' until the step runs)."""
    parts = (_read(run.extra["pid_file"]) or "").split()
    return parts[4] if len(parts) >= 5 else ""


def _devices(run: Run) -> str:
    """The CUDA_VISIBLE_DEVICES its holder got from Ray, from its pid file ('' when none)."""
    parts = (_read(run.extra["pid_file"]) or "").split()
    return parts[5] if len(parts) >= 6 and parts[5] != "-" else ""


def _claimed_by(run: Run) -> str:
    """The holder that claimed the launch script ('' while it waits in requests/)."""
    for path in (Path(run.extra["allocation"]) / "claimed").glob(f"*--{run.extra['request']}"):
        return path.name.split("--", 1)[0]
    return ""


_read = holder_files.read


# -- cancel -------------------------------------------------------------------------


def cancel(run: Run) -> State:
    """The run only, never its holder: a launch not yet claimed is withdrawn; a claimed one is told
    (its cancel file: the step gets SIGTERM, its command's tree SIGKILL after the grace)."""
    current = run.reload()
    state = status(current)
    if state.finished:
        return state
    Path(current.extra["cancel_file"]).touch()
    request = Path(current.extra["allocation"]) / "requests" / current.extra["request"]
    with contextlib.suppress(OSError):
        os.replace(request, request.with_name(request.name + ".withdrawn"))
        return record(current, State("cancelled", None, "cancelled before a holder took it"))
    state = wait(current, current.grace + CANCEL_WAIT)
    if not state.finished:
        return State(
            state.name, None, f"cancel sent; {holder_of(current) or 'its holder'} has not ended it yet"
        )
    return state


def wait(run: Run, seconds: float | None = None) -> State:
    return wait_polling(status, run, seconds, LOCAL_POLL)
