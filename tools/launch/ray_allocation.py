"""Holders of a campaign on a Ray cluster (`ray_allocation: campaign`): `parallel` Ray jobs that each
hold one run's GPUs, CPUs and memory for the night and run the campaign's runs one after another, so
a run starts within a quarter of a second instead of after Ray's start of a job of its own (a worker
process per job, about 1 s on a 2-core head: bench/bench_ray.py).

    folder/allocation.json   the record: the holders now (submission ids), and every earlier one
    folder/heartbeat         touched by whoever moves the campaign on (`beat`)
    folder/holder-ID.sh      holder ID's script: the job's entrypoint is `bash holder-ID.sh`
    folder/requests/         one launch script per run, dropped there by the launcher (ray_steps.py)
    folder/claimed/          ... moved here as `ID--NAME.sh` by the holder that runs it (a rename:
                             claimed once, whichever holder is free first)
    folder/release           asks every holder to end once it runs nothing; release-ID asks one

A holder is a bash loop, so a node needs nothing of ours, only the file system the campaign's
folder is on (what a `shared` working dir needs already). Ray places it as it places any job, with
the run's `entrypoint_num_gpus`, `entrypoint_num_cpus` and `entrypoint_memory`, and sets its
CUDA_VISIBLE_DEVICES, which each of its runs inherits. It ends by itself, freeing its GPUs, when it
runs nothing and either a release file exists, the folder is gone, or nobody has touched the
heartbeat for the grace period: that check lives on the cluster, so a loop killed with kill -9
never leaves GPUs held longer than the grace. A run still running keeps its holder.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from autoresearch_skills.errors import BadInput
from autoresearch_skills.launch.base import slug
from autoresearch_skills.launch.holder_files import RECORD, beat, folder_lock, load_record, save_record
from autoresearch_skills.launch.ray_watch import Job, client, first_line, is_local, watcher

POLL = 0.1  # seconds between a free holder's looks for a launch script
STOP_WAIT = 30  # RAY_JOB_STOP_WAIT_TIME_S of a holder: `ray job stop` of it, SIGTERM to SIGKILL

HOLDER = """\
#!/bin/bash
# Holder {me} of campaign {name} on Ray, written by autoresearch-skills: it runs the launch scripts
# dropped in requests/, one at a time, and ends (freeing what Ray placed it with) when it runs
# nothing and release or release-{me} exists, the campaign's folder is gone, or the heartbeat is
# older than {grace}s.
cd -- {folder} || exit 1
me={me}
export ARS_HOLDER=$me
mkdir -p requests claimed
shopt -s nullglob
echo "holder $me on $(uname -n), CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES-unset}}"
quiet=$SECONDS
run=""
while :; do
    if [ -n "$run" ] && ! kill -0 "$run" 2>/dev/null; then
        wait "$run"
        run=""
        quiet=$SECONDS
    fi
    if [ -z "$run" ]; then
        for launch in requests/*.sh; do
            claimed="claimed/$me--${{launch##*/}}"
            mv -- "$launch" "$claimed" 2>/dev/null || continue
            echo "runs ${{launch##*/}}"
            bash "$claimed" < /dev/null > /dev/null 2>&1 &
            run=$!
            break
        done
    fi
    if [ -z "$run" ]; then
        [ -e release ] || [ -e "release-$me" ] && {{ echo "released: the campaign is done with it"; break; }}
        [ -d {folder} ] || {{ echo "released: the campaign's folder is gone"; break; }}
        beat=$(stat -c %Y heartbeat 2>/dev/null || echo 0)
        printf -v now '%(%s)T' -1
        if (( now - beat > {grace} && SECONDS - quiet > {grace} )); then
            echo "released: no run and no word from the campaign for {grace}s"
            break
        fi
    fi
    sleep {poll}
done
"""


@dataclass(frozen=True)
class Request:
    """What the campaign asks Ray for: `parallel` holders, each with one run's placement
    (submit_job's entrypoint_num_gpus, entrypoint_num_cpus, entrypoint_memory)."""

    name: str
    address: str | None = None
    working_dir: str | None = None  # the campaign's ray_working_dir: holders need `shared`
    parallel: int = 1
    placement: dict = field(default_factory=dict)
    grace: float = 600.0


@dataclass
class Holders:
    """allocation.json: the holders now, and the ones before them."""

    folder: str
    address: str = ""  # the dashboard URL the holders were submitted to
    name: str = ""
    grace: float = 600.0
    live: list[str] = field(default_factory=list)  # submission ids not known to have ended
    asked_at: dict[str, float] = field(default_factory=dict)
    submissions: int = 0
    earlier: list[dict] = field(default_factory=list)  # the ended ones: id, ended, asked_at, ended_at

    @property
    def path(self) -> Path:
        return Path(self.folder)

    def save(self) -> None:
        save_record(self.path, self)

    def requests(self) -> Path:
        return self.path / "requests"

    def look(self, holder: str) -> Job:
        """What Ray says of one holder (the process's one watcher: one query for every job)."""
        return watcher(self.address).look(holder)


_lock = folder_lock


def load(folder: Path) -> Holders | None:
    return load_record(folder, Holders)


def ended_words(job: Job) -> str:
    """'' while the holder is pending or running (or Ray does not answer); else how it ended."""
    if job.error or not job.asked:
        return ""
    if job.forgotten:
        return "forgotten by the cluster"
    if not job.final:
        return ""
    message = first_line(getattr(job.details, "message", "") or "")
    return {
        "SUCCEEDED": "released",
        "STOPPED": "stopped (ray job stop)",
        "FAILED": f"failed: {message}" if message else "failed",
    }.get(job.status, job.status.lower())


def ensure(folder: Path, request: Request) -> tuple[Holders, str]:
    """The holders the next run starts in, as many as `parallel`: those alive are kept, ended ones
    replaced. Returns them with '' when nothing was submitted, else the line saying what was and how
    the ones before ended. One process at a time decides (a lock)."""
    url = "" if request.working_dir == "upload" else client(request.address).get_address()
    if request.working_dir == "upload" or (request.working_dir is None and not is_local(url)):
        raise BadInput(
            f"ray_allocation campaign needs a file system the cluster shares with {folder}: the holders "
            "read their runs from it and write the logs to it; set `ray_working_dir: shared` if the "
            f"cluster{f' at {url}' if url else ''} sees it, else keep `ray_allocation: per_run`"
        )
    folder.mkdir(parents=True, exist_ok=True)
    with _lock(folder)():
        holders = load(folder) or Holders(str(folder.absolute()), url, request.name, request.grace)
        ended = _settle(holders)
        beat(folder)
        if holders.live:
            (folder / "release").unlink(missing_ok=True)  # taken up again
        for holder in holders.live[request.parallel :]:  # fewer at once than before: the rest go
            (folder / f"release-{holder}").touch()
        holders.live = holders.live[: request.parallel]
        asked = [_submit(holders, request) for _ in range(request.parallel - len(holders.live))]
        holders.save()
        if not asked:
            return holders, ""
        said = f"Ray allocation: {len(asked)} holder(s) submitted ({describe_request(request)})"
        if ended:
            said += "; before them " + ", ".join(f"{holder} ended: {words}" for holder, words in ended)
        return holders, said


def _settle(holders: Holders) -> list[tuple[str, str]]:
    """Move the holders Ray says have ended to `earlier`; (holder, how) for each."""
    ended = []
    for holder in list(holders.live):
        words = ended_words(holders.look(holder))
        if words:
            holders.live.remove(holder)
            holders.earlier.append(
                {
                    "id": holder,
                    "ended": words,
                    "asked_at": holders.asked_at.pop(holder, None),
                    "ended_at": time.time(),
                }
            )
            ended.append((holder, words))
    return ended


def settled(folder: Path) -> Holders | None:
    """The record, with the holders Ray says have ended moved to `earlier` (and saved); None without one."""
    if not (folder / RECORD).exists():
        return None  # no lock file in a folder that is not there yet
    with _lock(folder)():
        holders = load(folder)
        if holders is not None and _settle(holders):
            holders.save()
        return holders


def _submit(holders: Holders, request: Request) -> str:
    holder = f"ars-{slug(request.name, 40)}-holder-{os.urandom(3).hex()}"
    folder = holders.path
    script = folder / f"holder-{holder}.sh"
    script.write_text(
        HOLDER.format(
            me=holder,
            name=request.name.replace("\n", " "),
            folder=shlex.quote(str(folder)),
            grace=int(request.grace),
            poll=POLL,
        )
    )
    for sub in ("requests", "claimed"):
        (folder / sub).mkdir(exist_ok=True)  # the holder makes them too; a launch may come first
    try:
        client(holders.address).submit_job(
            entrypoint=f"bash {shlex.quote(str(script))}",
            submission_id=holder,
            runtime_env={"env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": str(STOP_WAIT)}},
            **request.placement,
        )
    except Exception as err:
        raise BadInput(
            f"Ray refused a holder of campaign {request.name!r} ({describe_request(request)}): "
            f"{first_line(str(err))}: check the cluster's GPUs and CPUs against gpus_per_run, cpus and mem"
        ) from err
    holders.live.append(holder)
    holders.asked_at[holder] = time.time()
    holders.submissions += 1
    watcher(holders.address).submitted(holder)
    return holder


def release(folder: Path) -> str:
    """Let the holders go: each ends once it runs nothing (at once when it does not); one Ray has not
    placed yet is stopped. '' when there were none."""
    holders = settled(folder)
    if holders is None or not holders.live:
        return ""
    (folder / "release").touch()
    for holder in holders.live:  # placed or not, as Ray says now
        watcher(holders.address).invalidate(holder)
    waiting = [h for h in holders.live if holders.look(h).status in ("", "PENDING")]
    for holder in waiting:
        with contextlib.suppress(Exception):  # gone meanwhile, or the cluster away: it ends by its grace
            client(holders.address).stop_job(holder)
    placed = len(holders.live) - len(waiting)
    said = f"Ray allocation: {placed} holder(s) released once their runs end" if placed else "Ray allocation:"
    if waiting:
        said += f"{';' if placed else ''} {len(waiting)} not yet placed by Ray stopped"
    return said


def adopted(folder: Path) -> str:
    """'' without a live holder, else the line saying that the campaign takes its holders up again."""
    holders = settled(folder)
    if holders is None or not holders.live:
        return ""
    beat(folder)
    (folder / "release").unlink(missing_ok=True)  # a pause's release is withdrawn
    return f"Ray allocation: adopting {len(holders.live)} holder(s) ({_states(holders)})"


def describe(folder: Path) -> str:
    """One line for status and doctor: the holders, what Ray says of them, the runs waiting for one."""
    holders = settled(folder)
    if holders is None:
        return "none yet (holders are submitted at the first run)"
    queued = len(list(holders.requests().glob("*.sh")))
    ended = (
        f"; {len(holders.earlier)} ended before ({holders.earlier[-1]['ended']} the last)"
        if holders.earlier
        else ""
    )
    if not holders.live:
        return f"no holder now{ended}"
    return f"{len(holders.live)} holder(s): {_states(holders)}; {queued} run(s) waiting for one{ended}"


def _states(holders: Holders) -> str:
    counts: dict[str, int] = {}
    for holder in holders.live:
        status = holders.look(holder).status or "PENDING"
        word = "waiting for Ray to place it" if status == "PENDING" else status.lower()
        counts[word] = counts.get(word, 0) + 1
    return ", ".join(f"{n} {word}" for word, n in counts.items())


def describe_request(request: Request) -> str:
    names = {"entrypoint_num_gpus": "GPU(s)", "entrypoint_num_cpus": "CPU(s)"}
    parts = [f"{request.parallel} run(s) at once"]
    for key, value in request.placement.items():
        if key == "entrypoint_memory":
            parts.append(f"{value / 1024**3:g} GiB each")
        elif value:
            parts.append(f"{value:g} {names[key]} each")
    parts.append(f"released after {request.grace:g}s idle")
    return ", ".join(parts)
