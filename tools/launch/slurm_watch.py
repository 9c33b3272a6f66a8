"""What Slurm says about our jobs: one watcher per process, one query for all jobs in flight.

Contract: `watcher().look(job_id, job_name)` answers what Slurm last said about a job (a `Job`:
scontrol-style fields, where they came from, an error when Slurm did not answer). However many
callers ask, and however often (every Run of the scheduler's tick, the launcher's own wait,
several Run objects for one job id), Slurm is asked on the watcher's schedule only:

- at once for a job the watcher has not seen (a fresh `ars status` answers in one call);
- at once after `hint` (the job's exit file appeared, its log started) or `invalidate` (scancel);
- otherwise once the newest answer is older than the backoff: 0.5 s after a submit or a change,
  growing by 1.5x to 5 s while nothing changes. Then one call refreshes every job in flight.

Mechanism, as submitit's InfoWatcher: one `squeue --jobs=ID,ID,... --states=all` for all
tracked jobs. A job squeue does not list (or lists under another name: a reused id) is asked of
`scontrol show job` alone, and once the controller has forgotten it (MinJobAge) of `sacct -c`
(the jobcomp file), then `sacct -X` (slurmdbd). A job in a final state leaves the refresh set; its
answer stays cached, and the launcher writes it to the run file, after which nothing is asked.

Limits, measured on the single-node cluster of .ci/slurm-up (Slurm 22.05, squeue ~5 ms a call),
4 runs polled as campaign/scheduler.py polls them (a status of each per tick, a 0.25 s wait on
one between ticks): before this watcher 18 `scontrol` calls a second (20 under `ars exp wait` in
a campaign); with it 0.30 queries a second over a minute (0.37 under `ars exp wait`, whose fresh
process asks once for each job it has not seen yet): 6 queries in the first 10 s while the
backoff grows, then one every 5 s. An end is still seen within about a second of its exit file
(0.14 s measured): the launcher stats that file (no Slurm call) and hints the watcher. Each
process has its own watcher, so two `ars exp wait` at once ask twice as often. When squeue
itself fails (an option an old Slurm lacks), each refresh asks scontrol once per job; when a
call times out (SLURM_TIMEOUT), nothing more is asked until the next refresh, and the backoff
keeps growing meanwhile. One process, one thread: nothing here is locked.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass, field

from autoresearch_skills.errors import BadInput

SLURM_TIMEOUT = 60.0  # seconds for a Slurm command to answer (a busy controller is slow)
NO_ANSWER = 124  # call()'s exit status when SLURM_TIMEOUT passed (as coreutils `timeout`)
FIRST = 0.5  # seconds to the next query after a submit, a change of state, a hint or scancel ...
GROWTH = 1.5
MOST = 5.0  # ... growing to this while nothing changes: one query every 5 s for all jobs together

# Slurm states of a job still in flight (refreshed); any other state is final (kept as is).
PENDING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
RUNNING = frozenset(
    {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "RESIZING", "SIGNALING", "STAGE_OUT"}
)

# squeue's columns; the name goes last, so a `|` inside it cannot shift the others.
SQUEUE_COLUMNS = ("JobID", "JobState", "Reason", "ExitCode", "StartTime", "BatchHost", "JobName")
SQUEUE_FORMAT = "JobID:|,State:|,Reason:|,exit_code:|,StartTime:|,BatchHost:|,Name:"
SCONTROL_KEYS = ("JobName", "JobState", "Reason", "ExitCode", "StartTime", "BatchHost", "TimeLimit")


@dataclass
class Job:
    """What Slurm last said about one job; shared by every Run of that job id in this process."""

    job_id: str
    job_name: str | None  # ours: a job of another name under this id is not ours (a reused id)
    fields: dict[str, str] = field(default_factory=dict)  # scontrol's keys: JobState, ExitCode ...
    source: str = ""  # squeue | scontrol | sacct | forgotten (known nowhere) | "" (never answered)
    error: str = ""  # why Slurm did not answer the latest query ("" when it did)
    stale: bool = True  # ask at the next look, whatever the schedule
    hints: set[str] = field(default_factory=set)  # local events already acted on (once each)

    @property
    def state(self) -> str:
        return self.fields.get("JobState", "").split(" ")[0]

    @property
    def final(self) -> bool:
        if self.source == "forgotten":
            return True
        return bool(self.source) and self.state not in PENDING | RUNNING


class SlurmWatcher:
    """The jobs of this process and the schedule on which Slurm is asked about them."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
        self.delay = FIRST
        self.due = 0.0  # time.monotonic() at which the jobs in flight are asked again

    def track(self, job_id: str, job_name: str | None = None) -> Job:
        """The job's entry, created (to be asked at the next look) when it is new."""
        job = self.jobs.get(job_id)
        if job is None:
            job = self.jobs[job_id] = Job(job_id, job_name)
            self.delay = FIRST
        elif job.job_name is None:
            job.job_name = job_name
        return job

    def look(self, job_id: str, job_name: str | None = None) -> Job:
        """The job's entry, refreshed first (with every job in flight) when it is due."""
        job = self.track(job_id, job_name)
        if job.stale or (not job.final and time.monotonic() >= self.due):
            self.refresh()
        return job

    def hint(self, job_id: str, event: str) -> None:
        """A local sign that the job moved ("started": its log or pid file appeared; "ended": its
        exit file did): ask at the next look, once per event, unless Slurm already said so."""
        job = self.track(job_id)
        if event in job.hints:
            return
        job.hints.add(event)
        moved = job.final if event == "ended" else job.source != "" and job.state not in PENDING
        if not moved:
            job.stale = True
            self.delay = FIRST

    def invalidate(self, job_id: str) -> None:
        """Forget what Slurm said (after scancel): the next look asks, and soon again after that."""
        job = self.track(job_id)
        job.stale = True
        self.delay = FIRST

    def refresh(self) -> None:
        """One query for every job in flight (and every stale one); then the next due time."""
        asked = [job for job in self.jobs.values() if job.stale or not job.final]
        if not asked:
            return
        before = {job.job_id: (job.source, job.state) for job in asked}
        expected = any(job.stale for job in asked)  # a new job, a hint, a scancel: a change is near
        answers, error = ask(asked)
        for job in asked:
            job.stale = False
            job.error = "" if job.job_id in answers else error
            if job.job_id in answers:
                job.source, job.fields = answers[job.job_id]
        changed = any(before[job.job_id] != (job.source, job.state) for job in asked)
        self.delay = FIRST if changed or expected else min(self.delay * GROWTH, MOST)
        self.due = time.monotonic() + self.delay


_WATCHER = SlurmWatcher()


def watcher() -> SlurmWatcher:
    """The one watcher of this process."""
    return _WATCHER


# -- asking Slurm -----------------------------------------------------------------


def ask(jobs: list[Job]) -> tuple[dict[str, tuple[str, dict[str, str]]], str]:
    """{job id: (source, fields)} for the jobs Slurm answered about, and why not for the rest."""
    ids = ",".join(job.job_id for job in jobs)
    result = call(
        ["squeue", "--noheader", "--all", "--states=all", f"--jobs={ids}", f"--Format={SQUEUE_FORMAT}"],
        what="squeue",
    )
    if result.returncode == NO_ANSWER:  # an overloaded controller: ask it nothing more now
        return {}, "Slurm does not answer: " + result.stderr
    # Exit 1 with "Invalid job id" when it knows none of them; another failure (an option this
    # Slurm lacks?) lists none either, and scontrol may still answer for each.
    listed = parse_squeue(result.stdout) if result.returncode == 0 else {}
    answers: dict[str, tuple[str, dict[str, str]]] = {}
    for job in jobs:
        fields = listed.get(job.job_id)
        if fields is not None and ours(job, fields):
            answers[job.job_id] = ("squeue", fields)
            continue
        if fields is None:  # not listed: scontrol, the job's own record at the controller
            result = call(["scontrol", "show", "job", "-o", job.job_id], what="scontrol")
            if result.returncode != 0 and not invalid_id(result):
                return answers, "Slurm does not answer: " + result.stderr.strip().replace("\n", " ")[-300:]
            fields = parse_fields(result.stdout) if result.returncode == 0 else {}
            if fields and ours(job, fields):
                answers[job.job_id] = ("scontrol", fields)
                continue
        record = accounting_fields(job.job_id, job.job_name)  # the controller has forgotten it
        answers[job.job_id] = ("sacct", record) if record else ("forgotten", {})
    return answers, ""


def ours(job: Job, fields: dict[str, str]) -> bool:
    return job.job_name is None or fields.get("JobName") in (None, job.job_name)


def accounting_fields(job_id: str, job_name: str | None) -> dict[str, str]:
    """JobState and ExitCode from `sacct -c` (the jobcomp file), then `sacct -X` (slurmdbd);
    empty when neither has a record of the job under our name."""
    query = ["-n", "-P", "-S", "2000-01-01", "-j", job_id, "-o", "JobID,JobName,State,ExitCode"]
    for source in (["-c"], ["-X"]):
        result = call(["sacct", *source, *query], what="sacct")
        rows = [line.split("|") for line in result.stdout.splitlines() if result.returncode == 0]
        mine = [row for row in rows if len(row) >= 4 and row[0] == job_id and row[1] == (job_name or row[1])]
        if mine:  # the last one: a reused id appends a newer record
            return {"JobState": mine[-1][2], "ExitCode": mine[-1][3]}
    return {}


def parse_squeue(text: str) -> dict[str, dict[str, str]]:
    """squeue's lines (SQUEUE_FORMAT) as scontrol's fields. squeue prints ExitCode as a wait
    status (768: exit 3; 9: killed by signal 9); scontrol's form is "3:0" / "0:9"."""
    jobs = {}
    for line in text.splitlines():
        values = line.split("|", len(SQUEUE_COLUMNS) - 1)
        if len(values) != len(SQUEUE_COLUMNS):
            continue
        fields = dict(zip(SQUEUE_COLUMNS, values))
        job_id = fields.pop("JobID").strip()
        with_status = fields["ExitCode"].strip()
        if with_status.isdigit():
            status = int(with_status)
            fields["ExitCode"] = f"{status >> 8}:{status & 0x7F}"
        if fields["BatchHost"] in ("n/a", "(null)"):
            fields["BatchHost"] = ""
        jobs[job_id] = fields
    return jobs


def parse_fields(text: str) -> dict[str, str]:
    """`scontrol show job -o`'s one line, the keys we read (their values hold no spaces)."""
    found = {}
    for key in SCONTROL_KEYS:
        match = re.search(rf"(?:^|\s){key}=(\S*)", text)
        if match:
            found[key] = match.group(1)
    return found


def invalid_id(result: subprocess.CompletedProcess[str]) -> bool:
    """Slurm's answer for a job it does not know (squeue says so only when it knows none)."""
    return "invalid job id" in result.stderr.lower()


def call(argv: list[str], what: str) -> subprocess.CompletedProcess[str]:
    """A Slurm command; a timeout is an answer (NO_ANSWER, why on stderr), a missing one BadInput."""
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=SLURM_TIMEOUT, stdin=subprocess.DEVNULL, check=False
        )
    except FileNotFoundError as err:
        raise BadInput(
            f"{what} not found: run on a Slurm login node, or choose --launcher local or tmux"
        ) from err
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(
            argv, NO_ANSWER, "", f"{what} did not answer in {SLURM_TIMEOUT:g}s"
        )
