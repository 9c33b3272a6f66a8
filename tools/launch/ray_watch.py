"""What a Ray cluster says about our jobs: one watcher per cluster, one question for all jobs in flight.

Contract: `watcher(address).look(submission_id)` answers what the cluster last said about a job
(a `Job`: Ray's `JobDetails`, or none when the cluster knows no such job, and an error when the
cluster did not answer). However many callers ask, and however often (every Run of the
scheduler's tick, the launcher's own wait, several Run objects for one job), the cluster is
asked on the watcher's schedule only, the schedule of Slurm's watcher (slurm_watch.py):

- at once for a job the watcher has not seen (0.5 s on for one this process has just submitted:
  Ray holds a new job PENDING while it starts a worker for it), and after `hint` (the job's
  command ended, its log started, its log follower saw the stream end) or `invalidate` (after
  `stop_job`);
- otherwise once the newest answer is older than the backoff: 0.5 s after a submit or a change,
  growing by 1.5x to 5 s while nothing changes; 0.1 s, growing the same way, while a job whose
  command has ended (its `<log>.exit` appeared) is still RUNNING for Ray, which notes the end of
  the entrypoint within about 0.1 s. Then one question refreshes every job in flight:
  `get_job_info` for each while at most ONE_BY_ONE are, else one `list_jobs()` for all.

`client(address)` is the process's one `JobSubmissionClient` per address: Ray is imported on
first use only (it is an optional extra, and `import ray.job_submission` costs 1.3 s and 100 MB).
An explicit address wins over RAY_ADDRESS, as a command-line flag does; without one, Ray's own
rules apply (RAY_API_SERVER_ADDRESS, RAY_ADDRESS, then the cluster started on this machine).

Limits, measured on a local head (Ray 2.60, 2 CPUs): `get_job_info` answers in about 5 ms;
`list_jobs()` in 20-25 ms with a few dozen jobs, 120 ms with 376 (`get_job_info` 6 ms, at the same
moment of a busy machine): it returns every job the cluster remembers, so with more than ONE_BY_ONE
jobs in flight a head with thousands of old jobs answers slower (delete old ones with
`ray job delete`). A cluster that does not answer is
asked again on the same schedule; `unanswered_for` says since when it has been silent, and the
launcher calls its runs lost after LOST_AFTER seconds of that. One process, one thread.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from autoresearch_skills.errors import BadInput

FIRST = 0.5  # seconds to the next query after a submit, a change of state, a hint or a stop ...
GROWTH = 1.5
MOST = 5.0  # ... growing to this while nothing changes: one question every 5 s for all jobs
ENDING = 0.1  # ... or from this, for a job whose command has ended: Ray notes the end within ~0.1 s
ONE_BY_ONE = 8  # jobs asked one get_job_info() each; more at once: one list_jobs() for all
IN_FLIGHT = frozenset({"PENDING", "RUNNING"})  # Ray's JobStatus values that are not final
ADDRESS_VARIABLES = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")  # Ray's client reads these first
INSTALL = "pip install 'autoresearch-skills[ray]' (Ray's job client, ray[default])"


@dataclass
class Job:
    """What the cluster last said about one job; shared by every Run of that id in this process."""

    submission_id: str
    details: Any = None  # ray.job_submission.JobDetails; None: not known (yet, or any more)
    asked: bool = False  # the cluster has answered about it at least once
    error: str = ""  # why the cluster did not answer the latest query ("" when it did)
    stale: bool = True  # ask at the next look, whatever the schedule
    hints: set[str] = field(default_factory=set)  # local events already acted on (once each)

    @property
    def status(self) -> str:
        """Ray's JobStatus as text: PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED; "" when unknown."""
        return str(getattr(self.details.status, "value", self.details.status)) if self.details else ""

    @property
    def forgotten(self) -> bool:
        return self.asked and not self.error and self.details is None

    @property
    def final(self) -> bool:
        return self.forgotten or (self.details is not None and self.status not in IN_FLIGHT)

    @property
    def ending(self) -> bool:
        """Its command has ended (a local sign), and Ray has not said so yet."""
        return "ended" in self.hints and not self.final


class RayWatcher:
    """The jobs of one cluster in this process and the schedule on which it is asked about them."""

    def __init__(self, address: str | None) -> None:
        self.address = address
        self.jobs: dict[str, Job] = {}
        self.delay = FIRST
        self.due = 0.0  # time.monotonic() at which the jobs in flight are asked again
        self.silent_since: float | None = None  # time.time() of the first unanswered query in a row
        self.queries = 0  # list_jobs() calls made (the benchmark reads it)

    def track(self, submission_id: str) -> Job:
        job = self.jobs.get(submission_id)
        if job is None:
            job = self.jobs[submission_id] = Job(submission_id)
            self.delay = FIRST
        return job

    def submitted(self, submission_id: str) -> Job:
        """A job this process has just submitted: Ray holds it PENDING for a while (it starts a
        worker for the job), so it is first asked FIRST seconds on, not at the next look."""
        job = self.track(submission_id)
        job.stale = False
        now = time.monotonic()
        self.due = now + FIRST if self.due <= now else min(self.due, now + FIRST)
        return job

    def look(self, submission_id: str) -> Job:
        """The job's entry, refreshed first (with every job in flight) when it is due."""
        job = self.track(submission_id)
        if job.stale or (not job.final and time.monotonic() >= self.due):
            self.refresh()
        return job

    def hint(self, submission_id: str, event: str) -> None:
        """A local sign that the job moved ("started": its log grew; "ended": the log stream
        closed): ask at the next look, once per event, unless the cluster already said so."""
        job = self.track(submission_id)
        if event in job.hints:
            return
        job.hints.add(event)
        moved = job.final if event == "ended" else job.asked and job.status not in ("", "PENDING")
        if not moved:
            job.stale = True
            self.delay = FIRST

    def invalidate(self, submission_id: str) -> None:
        """Forget what the cluster said (after stop_job): ask at the next look, and soon after."""
        job = self.track(submission_id)
        job.stale = True
        self.delay = FIRST

    @property
    def unanswered_for(self) -> float:
        """Seconds since the cluster stopped answering (0 while it answers)."""
        return 0.0 if self.silent_since is None else time.time() - self.silent_since

    def refresh(self) -> None:
        """One question for every job in flight (and every stale one); then the next due time."""
        asked = [job for job in self.jobs.values() if job.stale or not job.final]
        if not asked:
            return
        before = {job.submission_id: (job.asked, job.status) for job in asked}
        expected = any(job.stale for job in asked)
        self.queries += 1
        try:
            listed = ask(client(self.address), [job.submission_id for job in asked])
            error = ""
        except BadInput as err:
            listed, error = {}, err.message
        except Exception as err:  # requests' ConnectionError, Ray's RuntimeError: the cluster is away
            listed, error = {}, f"{type(err).__name__}: {first_line(str(err))}"
        if error:
            self.silent_since = self.silent_since or time.time()
            forget_client(self.address)  # a restarted head may come back elsewhere: resolve again
        else:
            self.silent_since = None
        for job in asked:
            job.stale = False
            job.error = error
            if not error:
                job.asked, job.details = True, listed.get(job.submission_id)
        changed = any(before[job.submission_id] != (job.asked, job.status) for job in asked)
        start = ENDING if any(job.ending for job in asked) else FIRST
        self.delay = start if changed or expected else min(self.delay * GROWTH, MOST)
        self.due = time.monotonic() + self.delay


def ask(ray: Any, submission_ids: list[str]) -> dict[str, Any]:
    """JobDetails by submission id, for these jobs (one missing: the cluster does not know it).
    `get_job_info` job by job while few are asked: `list_jobs()` returns every job the cluster
    remembers, and its cost grows with that history."""
    if len(submission_ids) > ONE_BY_ONE:
        wanted = set(submission_ids)
        return {d.submission_id: d for d in ray.list_jobs() if d.submission_id in wanted}
    found = {}
    for submission_id in submission_ids:
        try:
            found[submission_id] = ray.get_job_info(submission_id)
        except RuntimeError as err:  # "Request failed with status code 404: Job x does not exist."
            if "does not exist" not in str(err):
                raise
    return found


_WATCHERS: dict[str | None, RayWatcher] = {}
_CLIENTS: dict[str | None, Any] = {}


def watcher(address: str | None) -> RayWatcher:
    """The one watcher of this process for the cluster at `address`."""
    if address not in _WATCHERS:
        _WATCHERS[address] = RayWatcher(address)
    return _WATCHERS[address]


def client(address: str | None) -> Any:
    """The `JobSubmissionClient` for `address` (an http:// dashboard URL, host:port, ray://, or
    None for Ray's own lookup); BadInput, saying what to do, when Ray is missing or the cluster
    does not answer."""
    if address in _CLIENTS:
        return _CLIENTS[address]
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as err:
        raise BadInput(f"the ray launcher needs Ray's job client ({err}): {INSTALL}") from err
    try:
        with explicit(address):
            made = JobSubmissionClient(address)
    except Exception as err:  # ConnectionError, RuntimeError, ValueError: Ray's client raises all three
        where = address or os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS")
        raise BadInput(
            f"no Ray cluster answers at {where or 'this machine (no RAY_ADDRESS set)'}: "
            f"{first_line(str(err))}; start one (`ray start --head`) or give its dashboard address "
            "(--ray-address http://HEAD:8265, `ray_address:` or RAY_ADDRESS)"
        ) from err
    _CLIENTS[address] = made
    return made


def forget_client(address: str | None) -> None:
    _CLIENTS.pop(address, None)


@contextlib.contextmanager
def explicit(address: str | None) -> Iterator[None]:
    """Hide RAY_ADDRESS and RAY_API_SERVER_ADDRESS while an explicit address is resolved: Ray's
    client lets them override its argument, and a flag the user typed must win."""
    saved = {name: os.environ.pop(name) for name in ADDRESS_VARIABLES if address and name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def first_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    # Ray's errors often carry a server traceback: its last line says what went wrong.
    line = lines[-1] if lines and lines[0].startswith("Request failed") and len(lines) > 1 else ""
    chosen = (lines[0] + (": " + line if line else "")) if lines else ""
    return chosen[:limit]


def is_local(url: str) -> bool:
    """Whether the dashboard at `url` runs on this machine (loopback, or one of its names)."""
    host = urlparse(url if "://" in url else f"http://{url}").hostname or ""
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return True
    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    with contextlib.suppress(OSError):
        return host in socket.gethostbyname_ex(socket.gethostname())[2]
    return False
