"""What an attempt came to, as data: its `Status` (one literal per status, the way optuna has
`TrialState`), the `CrashCause` of a row without a metric, and the `Mode` a hybrid policy turned to.

Each is a `str` enum, so it is written and compared as the text the ledger holds (`Status.KEEP ==
"keep"`), and each is defined here once: code decides on these values, never on the sentence beside
them. The sentence (a row's `reason`, a description) is for people and may be reworded freely.
"""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    """A result's status. A ledger row holds one of the first five (`ROW_STATUSES`); `candidate` is
    the noise rule's decision for a result ahead of the best but not by enough, written as `discard`
    with the flag `candidate` until a rerun decides it."""

    KEEP = "keep"  # finished, better than the best: a parent for what comes next
    DISCARD = "discard"  # finished with a metric, not better (or a candidate awaiting its rerun)
    CRASH = "crash"  # failed: its `CrashCause` says how
    TIMEOUT = "timeout"  # killed at the per-run limit
    CANCELLED = "cancelled"  # stopped on purpose: a watcher's rule, the deadline, a person
    CANDIDATE = "candidate"  # a decision, never a row's status

    def is_finished(self) -> bool:
        """Ran to its end and gave its metric (keep, discard, a candidate): the runs the noise rule
        pools and the best is chosen from."""
        return self in (Status.KEEP, Status.DISCARD, Status.CANDIDATE)

    def is_failure(self) -> bool:
        """Failed on its own (crash, timeout): what a failure-rate stop rule counts."""
        return self in (Status.CRASH, Status.TIMEOUT)

    @property
    def row_status(self) -> Status:
        """The status its ledger row holds: a candidate is written as discard."""
        return Status.DISCARD if self is Status.CANDIDATE else self

    def __str__(self) -> str:
        return self.value


ROW_STATUSES = tuple(s for s in Status if s is not Status.CANDIDATE)


class CrashCause(str, Enum):
    """Why a row has no metric (status crash, timeout or cancelled): set where the row is decided,
    written in the ledger's `cause` column beside the `reason` people read. A run whose checks
    failed printed a metric, but its row holds none: the value is in its reason."""

    # stopped by the run watcher (runwatch.py: the anomaly catalogue and the pruning rules)
    FIRST_STEP_TIMEOUT = "first_step_timeout"  # no first-step line within the first-step timeout
    STALL = "stall"  # no output for the stall window
    PRUNED = "pruned"  # a pruning rule's verdict: it would not beat the finished runs
    NAN = "nan"  # the watched curve went NaN or inf
    DIVERGENCE = "divergence"  # the curve climbed back past where it started
    OOM = "oom"  # CUDA out of memory
    CUDA_ERROR = "cuda_error"  # a CUDA kernel or library call failed
    NCCL = "nccl"  # a collective failed or timed out
    TRACEBACK = "traceback"  # an exception followed by silence
    KILLED = "killed"  # a process killed by SIGKILL (the host's OOM killer)
    NATIVE_CRASH = "native_crash"  # a segmentation fault or bus error
    DISK_FULL = "disk_full"  # a write refused: the disk or quota is full, the file system read-only
    # judged when the run ended (campaign/judge.py)
    EXIT_CODE = "exit_code"  # a non-zero exit status
    METRIC_MISSING = "metric_missing"  # exit 0, but no metric in the log or the metric source
    TIMEOUT = "timeout"  # killed at the per-run limit
    DEADLINE = "deadline"  # stopped when the campaign's deadline came during the run
    RUNNER_DIED = "runner_died"  # its supervisor died twice (the machine, the orchestrator, a kill)
    LOST_SESSION = "lost_session"  # its tmux session or server vanished under it
    LOST = "lost"  # the cluster (Slurm, Ray) lost the job
    ALLOCATION_ENDED = "allocation_ended"  # the campaign's Slurm allocation or Ray holder ended under it (limit, preemption, a stop)
    CANCELLED = "cancelled"  # cancelled by a person or a signal (`ars exp cancel`, Ctrl-C, scancel)
    CHECKS_FAILED = "checks_failed"  # it gave its metric, then one of the campaign's `checks:` failed
    # decided without a run's end
    STOP_RULE = "stop_rule"  # the stop condition was met before it could start
    MARKED = "marked"  # recorded by hand (`ars exp mark`)

    def __str__(self) -> str:
        return self.value

    def tells_of_the_idea(self) -> bool:
        """Whether the run's own code ended it (NaN, OOM, an exception ...), so that trying the same
        change again would end the same way; False where the machine, a person or the campaign
        stopped it (a lost session, a deadline, a cancel), which says nothing of the idea."""
        return self not in _NOT_THE_IDEAS


_NOT_THE_IDEAS = frozenset(
    {
        CrashCause.DEADLINE, CrashCause.RUNNER_DIED, CrashCause.LOST_SESSION, CrashCause.LOST,
        CrashCause.CANCELLED, CrashCause.STOP_RULE, CrashCause.MARKED, CrashCause.DISK_FULL,
        CrashCause.ALLOCATION_ENDED,
    }
)  # fmt: skip


class Mode(str, Enum):
    """What an llm policy asks the model for; the ledger's `mode` column holds the one a hybrid
    policy turned to with a row's proposal, and a resumed hybrid policy reads it back."""

    PARAMETERS = "parameters"  # knob values and command-line arguments
    DIFF = "diff"  # a unified diff of the mutable files

    def __str__(self) -> str:
        return self.value
