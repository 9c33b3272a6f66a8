"""One Slurm allocation for a whole campaign: a holder job whose batch script starts each run as a job
step inside it (`slurm_allocation: campaign`), so a run waits in the queue once per night, not once
per run.

    folder/allocation.json   the record: the holder's job id, when it was asked for, every earlier one
    folder/heartbeat         touched by whoever moves the campaign on (`beat`)
    folder/holder-N.sh       the N-th holder's batch script; holder-J.out the output of job J
    folder/requests-J/       one launch script per run, dropped there by the launcher (slurm_steps.py)
    folder/claimed-J/        ... moved here by the holder as it starts them (a rename: claimed once)
    folder/usage-J           "BUSY IDLE STARTED UPDATED USED SLOTS", written by the holder: seconds with a
                             step running and with none, and slot-seconds in use out of SLOTS per second
    folder/release-J         asks the holder to end once no step of its runs is left

The holder loops every quarter of a second: it claims each launch script and runs it in the background (the
script's `srun --exact` starts the step), and it ends by itself, releasing the allocation, when no
step runs and either `release-J` exists, the folder is gone (the campaign deleted), or nobody has
touched the heartbeat for the grace period.
That check lives in the allocation, so it holds when the process that asked for it was killed with
kill -9: an allocation never sits on idle GPUs longer than the grace, whatever happened to the loop.
A step still running keeps it: its GPUs are not idle, and its result is recorded on resume.

Its time limit is the campaign's time left plus MARGIN, capped by the partition's MaxTime.
"""

from __future__ import annotations

import math
import re
import shlex
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from autoresearch_skills.clock import format_duration
from autoresearch_skills.errors import BadInput
from autoresearch_skills.launch.base import slug
from autoresearch_skills.launch.holder_files import beat, folder_lock, load_record, save_record
from autoresearch_skills.launch.slurm_watch import PENDING, Job, call, watcher

MARGIN = 10 * 60.0  # seconds past the campaign's deadline the allocation may live (the last records)
POLL = 0.25  # seconds between the holder's looks for launch scripts

HOLDER = """\
#!/bin/bash
# Holder of campaign {name}'s Slurm allocation, written by autoresearch-skills: it starts each run
# dropped in requests-$SLURM_JOB_ID/ as a job step, and ends (releasing the allocation) when no step
# runs and release-$SLURM_JOB_ID exists, the campaign's folder is gone, or the heartbeat is older
# than {grace}s.
cd -- {folder} || exit 1
me=$SLURM_JOB_ID
mkdir -p "requests-$me" "claimed-$me"
shopt -s nullglob
slots=${{SLURM_NTASKS:-1}}
started=$(date +%s); last=$started; quiet=$started; busy=0; idle=0; used=0
usage() {{ printf '%s %s %s %s %s %s\\n' "$busy" "$idle" "$started" "$last" "$used" "$slots" > "usage-$me.tmp" && mv -f "usage-$me.tmp" "usage-$me"; }}
usage
while :; do
    for launch in "requests-$me"/*.sh; do
        mv -- "$launch" "claimed-$me/" 2>/dev/null || continue
        bash "claimed-$me/${{launch##*/}}" < /dev/null > /dev/null 2>&1 &
    done
    now=$(date +%s)
    steps=$(jobs -rp | wc -l)
    if (( steps > 0 )); then busy=$((busy + now - last)); quiet=$now; else idle=$((idle + now - last)); fi
    used=$((used + (now - last) * (steps < slots ? steps : slots)))
    (( now != last )) && {{ last=$now; usage; }}
    if (( steps == 0 )); then
        [ -e "release-$me" ] && {{ echo "released: the campaign is done with it"; break; }}
        [ -d {folder} ] || {{ echo "released: the campaign's folder is gone"; break; }}
        beat=$(stat -c %Y heartbeat 2>/dev/null || echo 0)
        if (( now - beat > {grace} && now - quiet > {grace} )); then
            echo "released: no step and no word from the campaign for {grace}s"
            break
        fi
    fi
    sleep {poll}
done
usage
"""


@dataclass(frozen=True)
class Request:
    """What the campaign asks Slurm for: `parallel` runs at once, each with `gpus_per_run` GPUs,
    `cpus_per_run` CPUs and `mem_per_run` memory (Slurm's spelling, 64G); until `deadline`."""

    name: str
    parallel: int = 1
    gpus_per_run: int = 0
    cpus_per_run: int = 1
    mem_per_run: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    deadline: float | None = None  # time.time() when the campaign's budget ends; None: no budget
    grace: float = 600.0

    def sbatch_options(self, partition_limit: float | None) -> list[str]:
        """One task per slot, so Slurm places each run's CPUs and GPUs on one node."""
        options = [f"--ntasks={self.parallel}", f"--cpus-per-task={self.cpus_per_run}"]
        if self.gpus_per_run:
            options.append(f"--gpus-per-task={self.gpus_per_run}")
        if self.mem_per_run:
            options.append(f"--mem-per-cpu={mem_per_cpu(self.mem_per_run, self.cpus_per_run)}")
        for key in ("partition", "account", "qos", "constraint"):
            value = getattr(self, key)
            if value:
                options.append(f"--{key}={value}")
        minutes = self.minutes(partition_limit)
        if minutes is not None:
            options.append(f"--time={minutes}")
        return options

    def minutes(self, partition_limit: float | None) -> int | None:
        """The time left plus MARGIN, within the partition's limit; None: the partition's default."""
        limits = [partition_limit] if partition_limit else []
        if self.deadline is not None:
            limits.append(max(0.0, self.deadline - time.time()) + MARGIN)
        return max(1, math.ceil(min(limits) / 60)) if limits else None


@dataclass
class Allocation:
    """allocation.json: the holder job now, and the ones before it."""

    folder: str
    job_id: str = ""
    job_name: str = ""
    asked_at: float = 0.0  # time.time() of the sbatch
    grace: float = 600.0
    started_at: float | None = None  # when Slurm started the holder (queued until then)
    ended_at: float | None = None
    ended: str = ""  # Slurm's final state of the holder, once it has one
    submissions: int = 0
    earlier: list[dict] = field(default_factory=list)  # the ended ones: job_id, ended, asked_at ...

    @property
    def path(self) -> Path:
        return Path(self.folder)

    def save(self) -> None:
        save_record(self.path, self)

    def requests(self) -> Path:
        return self.path / f"requests-{self.job_id}"

    def claimed(self) -> Path:
        return self.path / f"claimed-{self.job_id}"

    def look(self) -> Job:
        """What Slurm says of the holder (the process's one watcher: one query for every job)."""
        return watcher().look(self.job_id, self.job_name)

    def usage(self) -> tuple[float, float, float]:
        """Seconds with a step running and without one, and the share of the slots' time in use, as
        the holder counted them."""
        try:
            numbers = [float(x) for x in (self.path / f"usage-{self.job_id}").read_text().split()]
        except (OSError, ValueError):
            return 0.0, 0.0, 0.0
        busy, idle, _, _, used, slots = (numbers + [0.0] * 6)[:6]
        held = (busy + idle) * max(slots, 1.0)
        return busy, idle, used / held if held else 0.0


_lock = folder_lock


def load(folder: Path) -> Allocation | None:
    return load_record(folder, Allocation)


def ensure(folder: Path, request: Request) -> tuple[Allocation, str]:
    """The live allocation, or a new one asked for; with a line to say when one was asked for and why
    (the first one, or how the one before ended). One process at a time decides (a lock)."""
    folder.mkdir(parents=True, exist_ok=True)
    with _lock(folder)():
        current = load(folder)
        if current is not None and current.job_id:
            state = settle(current)
            if not state:
                (folder / f"release-{current.job_id}").unlink(missing_ok=True)  # taken up again
                beat(folder)
                return current, ""
        allocation = submit(folder, request, current)
        said = f"Slurm allocation: asked for job {allocation.job_id} ({describe_request(request)})"
        if current is not None and current.job_id:
            said += f"; job {current.job_id} before it ended: {current.ended}"
        return allocation, said


def settle(allocation: Allocation) -> str:
    """'' while the holder is pending or running; else its final state, recorded once."""
    if allocation.ended:
        return allocation.ended
    job = allocation.look()
    if job.error:
        return ""  # Slurm did not answer: assume it lives, ask again later
    if not job.final:
        if job.state not in PENDING and allocation.started_at is None:
            allocation.started_at = started_time(job.fields.get("StartTime", "")) or time.time()
            _note(allocation, started_at=allocation.started_at)
        return ""
    allocation.ended, allocation.ended_at = ended_words(job), time.time()
    _note(allocation, ended=allocation.ended, ended_at=allocation.ended_at)
    return allocation.ended


def _note(allocation: Allocation, **changes: object) -> None:
    """Write what was learnt of the holder into the record, unless a newer holder replaced it meanwhile
    (another process may have asked for one)."""
    with _lock(allocation.path)():
        current = load(allocation.path)
        if current is None or current.job_id != allocation.job_id:
            return
        for key, value in changes.items():
            if getattr(current, key) in (None, ""):
                setattr(current, key, value)
        current.save()


def ended_words(job: Job) -> str:
    """How the holder ended, for people: `released`, `cancelled (scancel)`, `its time limit (TIMEOUT)`."""
    state = job.state or "gone"
    return {
        "COMPLETED": "released",
        "CANCELLED": "cancelled (scancel)",
        "TIMEOUT": "its time limit (TIMEOUT)",
        "PREEMPTED": "preempted by another job (PREEMPTED)",
        "NODE_FAIL": "its node failed (NODE_FAIL)",
    }.get(state, state)


def submit(folder: Path, request: Request, before: Allocation | None) -> Allocation:
    if before is not None and before.job_id:
        record = {
            k: v
            for k, v in asdict(before).items()
            if k in ("job_id", "asked_at", "started_at", "ended_at", "ended")
        }
        record["busy"], record["idle"], record["slots_used"] = before.usage()
        earlier = [*before.earlier, record]
    else:
        earlier = []
    name = slug(f"ars-{request.name}-allocation", 60)
    options = request.sbatch_options(partition_limit(request.partition))
    script = folder / f"holder-{len(earlier) + 1}.sh"  # Slurm names it in the job's Command
    script.write_text(
        HOLDER.format(
            name=request.name.replace("\n", " "),
            folder=shlex.quote(str(folder.absolute())),
            grace=int(request.grace),
            poll=POLL,
        )  # fmt: skip
    )
    beat(folder)
    output = folder.absolute() / "holder-%j.out"
    result = call(
        ["sbatch", "--parsable", f"--job-name={name}", f"--output={output}", *options, str(script)],
        what="sbatch",
    )
    job_id = result.stdout.strip().split(";")[0]
    if result.returncode != 0 or not job_id.isdigit():
        message = (result.stderr or result.stdout).strip().replace("\n", " ")[-500:]
        raise BadInput(
            f"sbatch refused the campaign's allocation ({' '.join(options)}): {message or 'no output'}: "
            "check partition, account, qos, constraint, gpus_per_run, cpus and mem against the cluster's limits"
        )
    for sub in ("requests", "claimed"):
        (folder / f"{sub}-{job_id}").mkdir(
            exist_ok=True
        )  # the holder makes them too; a launch may come first
    allocation = Allocation(
        str(folder.absolute()), job_id, name, time.time(), request.grace,
        submissions=(before.submissions if before else 0) + 1, earlier=earlier,
    )  # fmt: skip
    allocation.save()
    watcher().track(job_id, name)
    return allocation


def release(folder: Path) -> str:
    """Let the allocation go: a queued one is cancelled; a running one ends once no step of its runs
    is left (at once when none is). '' when there was none to release."""
    allocation = load(folder)
    if allocation is None or not allocation.job_id or settle(allocation):
        return ""
    if allocation.look().state in PENDING:
        # Asked again: the watcher's answer may predate the holder's start (its polls back off),
        # and a running holder must finish its steps, not be cancelled under them.
        watcher().invalidate(allocation.job_id)
    if allocation.look().state in PENDING:
        call(["scancel", allocation.job_id], what="scancel")
        watcher().invalidate(allocation.job_id)
        return f"Slurm allocation: job {allocation.job_id} cancelled while it waited in the queue"
    (folder / f"release-{allocation.job_id}").touch()
    return f"Slurm allocation: job {allocation.job_id} released once its last step ends"


def adopted(folder: Path) -> str:
    """'' without a live allocation, else the line saying that the campaign takes it up again."""
    allocation = load(folder)
    if allocation is None or not allocation.job_id or settle(allocation):
        return ""
    beat(folder)
    (folder / f"release-{allocation.job_id}").unlink(missing_ok=True)  # a pause's release is withdrawn
    where = "waiting in the queue" if allocation.look().state in PENDING else "running"
    return f"Slurm allocation: adopting job {allocation.job_id} ({where})"


def partition_limit(partition: str | None) -> float | None:
    """The partition's MaxTime in seconds (the default partition when None); None: unlimited or unknown."""
    argv = ["scontrol", "show", "partition", "-o", *([partition] if partition else [])]
    result = call(argv, what="scontrol")
    lines = result.stdout.splitlines() if result.returncode == 0 else []
    if not partition:
        lines = [line for line in lines if re.search(r"(?:^|\s)Default=YES", line)] or lines[:1]
    match = re.search(r"(?:^|\s)MaxTime=(\S+)", lines[0]) if lines else None
    return slurm_seconds(match.group(1)) if match else None


def slurm_seconds(text: str) -> float | None:
    """Slurm's [D-]HH:MM:SS, MM:SS or minutes as seconds; None for UNLIMITED / INFINITE."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text.strip())
    if not match:
        return None
    days, first, second, third = match.groups()
    if second is None:  # minutes, or D-HH
        seconds = int(first) * (3600 if days else 60)
    elif third is None:  # MM:SS, or D-HH:MM
        seconds = int(first) * 3600 + int(second) * 60 if days else int(first) * 60 + int(second)
    else:
        seconds = int(first) * 3600 + int(second) * 60 + int(third)
    return float(seconds + int(days or 0) * 86400)


def mem_per_cpu(mem: str, cpus: int) -> str:
    """Per-run memory (64G) as --mem-per-cpu in MB, so the job's memory grows with its tasks."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)B?", str(mem).strip(), re.IGNORECASE)
    if not match:
        raise BadInput(f"mem {mem!r}: give memory as Slurm writes it (64G, 300M, or a number of MB)")
    unit = match.group(2).upper() or "M"
    megabytes = float(match.group(1)) * {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[unit]
    return f"{max(1, math.ceil(megabytes / max(1, cpus)))}M"


def started_time(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).astimezone().timestamp()  # Slurm prints local time
    except (ValueError, OSError, OverflowError):
        return None


def describe_request(request: Request) -> str:
    parts = [f"{request.parallel} run(s) at once"]
    if request.gpus_per_run:
        parts.append(f"{request.gpus_per_run} GPU(s) each")
    parts.append(f"{request.cpus_per_run} CPU(s) each")
    if request.mem_per_run:
        parts.append(f"{request.mem_per_run} each")
    minutes = request.minutes(None)
    parts.append(f"limit {format_duration(minutes * 60)}" if minutes else "the partition's time limit")
    return ", ".join(parts)


_SAID: dict[
    str, tuple[float, str]
] = {}  # folder -> (when, line): a page refreshed every second asks Slurm less
SAID_FOR = 5.0  # seconds a line is reused


def describe(folder: Path) -> str:
    """One line for status and doctor: the job, where it runs, what it holds, time left, and the
    campaign's wall time so far split into queued, running (a step in it) and idle."""
    key = str(folder.absolute())
    when, line = _SAID.get(key, (0.0, ""))
    if time.monotonic() - when > SAID_FOR:
        line = _describe(folder)
        _SAID[key] = (time.monotonic(), line)
    return line


def _describe(folder: Path) -> str:
    allocation = load(folder)
    if allocation is None or not allocation.job_id:
        return "none yet (asked for at the first run)"
    state = settle(allocation)
    split = wall_split(allocation)
    if state:
        return f"job {allocation.job_id} ended ({state}); {split}"
    fields = scontrol_fields(allocation.job_id)
    if allocation.look().state in PENDING:
        reason = fields.get("Reason", "")
        return f"job {allocation.job_id} waiting in the queue ({reason or 'pending'}); {split}"
    where = fields.get("NodeList", "?")
    holds = fields.get("AllocTRES") or fields.get("TRES", "")
    left = time_left(fields)
    return f"job {allocation.job_id} on {where}{f' ({holds})' if holds else ''}, {left} left; {split}"


def wall_split(allocation: Allocation) -> str:
    """Queued (asked for, not started), running (a step in it) and idle (none), over every allocation,
    and how much of the slots' time held was in use (a slot waiting on the others is idle too)."""
    queued = running = idle = used = 0.0
    for record in [*allocation.earlier, asdict(allocation)]:
        started = record.get("started_at")
        end = record.get("ended_at") or time.time()
        queued += (started or end) - record.get("asked_at", end)
    busy, quiet, share = allocation.usage()
    for record in [*allocation.earlier, {"busy": busy, "idle": quiet, "slots_used": share}]:
        running += record.get("busy", 0.0)
        idle += record.get("idle", 0.0)
        used += record.get("slots_used", 0.0) * (record.get("busy", 0.0) + record.get("idle", 0.0))
    held = running + idle
    slots = f" ({100 * used / held:.0f}% of the slots' time in use)" if held else ""
    return (
        f"wall: {format_duration(queued)} queued, {format_duration(running)} running, "
        f"{format_duration(idle)} idle{slots}"
    )


def scontrol_fields(job_id: str) -> dict[str, str]:
    result = call(["scontrol", "show", "job", "-o", job_id], what="scontrol")
    if result.returncode != 0:
        return {}
    return dict(
        re.findall(r"(?:^|\s)(NodeList|AllocTRES|TRES|Reason|TimeLimit|RunTime)=(\S*)", result.stdout)
    )


def time_left(fields: dict[str, str]) -> str:
    limit, ran = slurm_seconds(fields.get("TimeLimit", "")), slurm_seconds(fields.get("RunTime", ""))
    if limit is None or ran is None:
        return "no limit"
    return format_duration(max(0.0, limit - ran))
