"""Blueprint swarms: many blueprints at once, each on its own GPUs from a pool, on the campaign engine.

Contract (`ars blueprint run FILE|DIR ... [--gpus 0-7] [--parallel N] [--for 9m | --detach]`):
    Every blueprint is checked first: any problem, and nothing starts (exit 2). Then each blueprint
    that is not over gets one attempt in flight at most: started at once on GPUs of its own, or
    queued until enough of the pool is free. The command follows the swarm until nothing of it is
    in flight (or `--for` has passed, or at once with `--detach`), printing one line per start
    (session name, GPUs, log) and one per end (verdict, what happens next). Exit 0 when no
    blueprint waits for a fix, 1 when a failed attempt waits for one, 2 for bad input.

What a swarm is: a campaign (`reports/auto_research/<name>/` in the git repository holding every
blueprint's codebase; launcher tmux; stop rule "no limit"), so the ledger, state.json, the slot
pool, `ars exp wait --campaign <name>` and `ars campaign status` work on it as on any campaign.
Each blueprint is one experiment on its own branch `<prefix>/<name>`, run in a worktree of its own:
    its commit       the repository as it is in your checkout (HEAD, plus uncommitted edits to
                     tracked files) plus the blueprint file and its YAML, committed on the branch
                     without touching your checkout; a relaunch adds a `fix-up:` commit the same way
    its run          the blueprint's launch command, from the codebase's place in the worktree,
                     with its python's bin/ first on PATH, CUDA_VISIBLE_DEVICES from the pool, the
                     max time as the limit, in tmux session `ajet_<name>` (`_try<n>` later)
    its files        in the result dir: the engine's log `<NNN>-<name>.log` (linked as
                     `attempt-<n>.log`), trial_log.md, and at the end results.md, then finish.flag
    swarm.json       (campaign folder; its owner: blueprints/swarmfile) which blueprint files belong
                     to the swarm, their attempt limit, which attempt was started as the final one, and
                     each attempt's number and which of its lines its trial log holds

Attempts. The first-step watch stops an attempt that printed no first-step line (`actor/kl_loss:`)
within the blueprint's first-step timeout: row `cancelled`, verdict `first_step_timeout` in
trial_log.md. An attempt that ends `ok` (exit 0 after a first step) or reaches the max time
(`timeout`, the normal end of a long run) ends the blueprint: results.md, then finish.flag. A failed
one leaves the blueprint open: `ars blueprint run` starts the next attempt on the same branch only
once a `- fix:` line is written under the attempt in trial_log.md (or with --retry), and writes
finish.flag with the failure after the final attempt (`--final`, or `--max-attempts`, default 3).

Crash safety: nothing here is kept only in memory. The trial log, results.md and finish.flag are
derived from the ledger rows, the run files, state.json and swarm.json by `sync`, which any later
`ars blueprint run` repeats (under a lock; every write is done once: swarm.json says which lines are
written, and a write a kill may have cut short is checked in the trial log before it is made again):
kill -9 of this process loses nothing, and running it again adopts the live tmux sessions rather
than starting them twice.

Limits: the worktree holds what git tracks (plus the blueprint and its YAML); untracked data,
checkpoints or caches the run reads by relative path must be named by absolute path. What a run
writes by relative path stays in its worktree (reused by a later attempt there, kept when the swarm
is over), except a relative validation file, copied to its place under the codebase after each
attempt. Blueprints that pin devices (`gpus: 4,5,6,7`) get that many GPUs from the pool, not those
devices. The first step is watched while an `ars blueprint run` follows the swarm; `ars exp wait`
alone reaps and starts runs but does not watch it, and the documents of what it reaped are written
by the next `ars blueprint run`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from autoresearch_skills import gitflow, outcome
from autoresearch_skills.accelerators import machine
from autoresearch_skills.blueprints.checking import check_all, validation_file
from autoresearch_skills.blueprints.reading import (
    FINISH_FLAG,
    TRIAL_LOG,
    Blueprint,
    Problem,
    find_blueprints,
    launch_environment,
    parse,
    session_name,
)
from autoresearch_skills.blueprints.resultdir import (
    Attempt,
    Status,
    blueprint_status,
    diagnose,
    end_attempt,
    read_flag,
    read_trial_log,
    start_attempt,
    write_finish_flag,
    write_results,
)
from autoresearch_skills.blueprints.swarmfile import SWARM_FILE, Logged, Member, SwarmFile, SwarmState
from autoresearch_skills.campaign import experiment, scheduler, store
from autoresearch_skills.campaign.pool import CLUSTER_LAUNCHERS, GpuSpec, parse_devices
from autoresearch_skills.campaign.record import Experiment, Overrides, Phase
from autoresearch_skills.campaign.state import CampaignState
from autoresearch_skills.campaign.store import CAMPAIGNS_DIR, find, load
from autoresearch_skills.campaign.workdirs import worktrees_dir
from autoresearch_skills.clock import format_duration
from autoresearch_skills.errors import BadInput, StopConditionMet
from autoresearch_skills.launch.base import Run, state_path_for
from autoresearch_skills.metrics import guess_direction

PRESET = "verl"  # AgentJet's console lines are verl's (`step:N - actor/kl_loss:0.01 - ...`)
DEFAULT_METRIC = "actor/kl_loss"  # every training step prints it; `--metric` names another
ENDS_BLUEPRINT = ("ok", "timeout")  # verdicts after which a blueprint is over, whatever the count
# Anomalies the engine watches for every run of a swarm (its own watchers, when it has them): stop
# what cannot recover (a CUDA OOM leaves the other ranks in NCCL's 30-minute timeout), note the rest.
# Long RL runs go quiet for a long time (validation), so there is no stall rule.
WATCH = {
    "nan_loss": "cancel",
    "cuda_oom": "cancel",
    "nccl": "cancel",
    "cuda_error": "cancel",
    "divergence": "warn",  # an RL run's KL climbs and settles; a person judges it
    "traceback": "warn",
    "killed": "warn",
    "native_crash": "warn",
    "disk_full": "warn",
    "stall": "warn",
    "stall_after": "off",
    "first_step": "off",  # per blueprint (its own pattern and timeout): see Swarm._watch
}
_FIRST_STEP_READ = 64 * 1024 * 1024  # bytes of a log searched for the first step (it comes early)


class ProblemsFound(BadInput):
    """The blueprints did not pass `check`: nothing was started."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__(f"{len(problems)} problem(s) in the blueprints; nothing was started")


@dataclass
class Options:
    gpus: str | None = None  # the pool; None: the swarm's, or every GPU nvidia-smi lists
    parallel: int | None = None
    socket: str | None = None  # tmux -L name
    launcher: str | None = None  # tmux (default), or a cluster (slurm, ray) that places runs on GPUs itself
    ray_address: str | None = None  # launcher ray: the cluster's dashboard address
    name: str | None = None  # the swarm (campaign) name; None: the blueprints' folder
    final: bool = False  # this is each blueprint's last attempt
    retry: bool = False  # relaunch failed blueprints with no fix recorded
    max_attempts: int | None = None  # None: the swarm's (default 3)
    metric: str | None = None
    seconds: float | None = None  # follow this long (None: until nothing is in flight)
    detach: bool = False


@dataclass
class Event:
    kind: str  # started queued adopted ended finished waiting skipped paused warning
    blueprint: str
    line: str
    attempt: int | None = None


@dataclass
class Report:
    campaign: str
    folder: str
    ledger: str
    events: list[Event]
    blueprints: list[Status]
    waiting: list[str]  # blueprints whose failed attempt waits for a fix
    in_flight: list[str]  # blueprints queued or running when the command returned

    @property
    def over(self) -> bool:
        return all(s.state == "finished" for s in self.blueprints)

    @property
    def exit_code(self) -> int:
        return 1 if self.waiting else 0

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for s in self.blueprints:
            state = "waiting for a fix" if s.slug in self.waiting else s.state.replace("_", " ")
            counts[state] = counts.get(state, 0) + 1
        parts = ", ".join(f"{n} {state}" for state, n in counts.items())
        return f"blueprints: {len(self.blueprints)} ({parts})"

    def to_dict(self) -> dict:
        return {
            "campaign": self.campaign,
            "folder": self.folder,
            "ledger": self.ledger,
            "over": self.over,
            "waiting": self.waiting,
            "in_flight": self.in_flight,
            "events": [asdict(e) for e in self.events],
            "blueprints": [asdict(s) for s in self.blueprints],
        }


@dataclass
class _Ending:
    """How one attempt ended, read from its ledger row and run file."""

    verdict: str  # ok failed timeout first_step_timeout cancelled lost
    exit_code: int | None
    reason: str
    elapsed_min: float
    cwd: str | None  # where it ran (the codebase inside its worktree)


# ---------------------------------------------------------------- entry points


def run(paths: Sequence[Path], opts: Options, say: Callable[[str], None] = lambda line: None) -> Report:
    """`ars blueprint run`: check, open (or find) the swarm, start or adopt each blueprint, follow."""
    blueprints = _read(paths)
    problems = check_all(blueprints, finished_ok=True)
    problems += _name_clashes(blueprints)
    if problems:
        raise ProblemsFound(problems)
    swarm = Swarm.open(blueprints, opts, say)
    swarm.register(blueprints, opts)
    swarm.sync()
    for bp in blueprints:
        swarm.launch(bp, opts)
    swarm.sync()
    if not opts.detach:
        swarm.follow(opts.seconds)
    return swarm.finish()


def resume(ref: str, opts: Options | None = None, say: Callable[[str], None] = lambda line: None) -> Report:
    """Follow a swarm by name or folder (every blueprint it holds): after its runner was killed,
    adopt what still runs, record what ended, and start what is queued. Starts no new attempt."""
    opts = opts or Options()
    swarm = Swarm(find(ref), say)
    if not swarm.file.exists():
        raise BadInput(
            f"campaign {swarm.campaign.settings.name!r} is not a blueprint swarm (no {SWARM_FILE})"
        )
    swarm.sync()
    for bp in swarm.blueprints():
        record = swarm.record(bp)
        if record is not None and record.phase.is_open:
            swarm.launch(bp, opts)
    swarm.sync()
    if not opts.detach:
        swarm.follow(opts.seconds)
    return swarm.finish()


def locate(blueprints: Sequence[Blueprint]):
    """The swarm (a Campaign) that holds any of these blueprints, or None: what `ars blueprint
    status` reads the ledger and the in-flight experiments from."""
    wanted = {str(bp.path.resolve()) for bp in blueprints}
    repos = set()
    for bp in blueprints:
        with contextlib.suppress(BadInput, OSError):
            if bp.codebase is not None:
                repos.add(gitflow.repo_root(bp.codebase))
    for repo in sorted(repos):
        for marker in sorted((repo / CAMPAIGNS_DIR).glob(f"*/{SWARM_FILE}")):
            with contextlib.suppress(BadInput, OSError):
                files = {m.file for m in SwarmFile(marker.parent).read().blueprints.values()}
                if files & wanted:
                    with contextlib.suppress(BadInput):
                        return load(marker.parent)
    return None


# ---------------------------------------------------------------- the swarm


class Swarm:
    def __init__(self, campaign, say: Callable[[str], None] = lambda line: None):
        self.campaign = campaign
        self.say = say
        self.events: list[Event] = []
        self.known_logs: set[str] = set()  # logs whose start lines are in their trial log
        self.file = SwarmFile(self.campaign.folder)  # swarm.json, and the lock of the swarm

    # -- opening ------------------------------------------------------------------

    @classmethod
    def open(cls, blueprints: Sequence[Blueprint], opts: Options, say: Callable[[str], None]) -> Swarm:
        """The swarm these blueprints belong to: found by name in their repository, or created."""
        repo = _one_repo(blueprints)
        earlier = None if opts.name else locate(blueprints)  # a blueprint stays in the swarm that ran it
        name = gitflow.slugify(opts.name or (earlier.settings.name if earlier else _folder_name(blueprints)))
        folder = repo / store.CAMPAIGNS_DIR / name
        existing = None
        if (folder / "campaign.yaml").exists():
            if not (folder / SWARM_FILE).exists():
                raise BadInput(
                    f"campaign {name!r} ({folder}) is not a blueprint swarm; pass --name to start one"
                )
            existing = store.load(folder)
        launcher = opts.launcher or (existing.settings.launcher if existing else "tmux")
        if launcher in CLUSTER_LAUNCHERS:  # the cluster places each run on GPUs of its own
            gpus = None
        else:
            gpus = opts.gpus or (existing.settings.gpus if existing else None) or _detected_gpus()
            devices = parse_devices(gpus)
            for bp in blueprints:  # before anything is written: a blueprint that can never start
                if (bp.gpus or 1) > len(devices):
                    raise BadInput(
                        f"{bp.path}: needs {bp.gpus} GPUs but the swarm's pool ({','.join(map(str, devices))}) "
                        f"has {len(devices)}; give a larger pool with --gpus"
                    )
        if existing is not None:
            campaign = existing
            _update_pool(campaign, opts)
        else:
            metric = opts.metric or _metric(blueprints)
            cluster: dict[str, Any] = {"ray_address": opts.ray_address} if launcher == "ray" else {}
            campaign = store.create(
                name, metric, guess_direction(metric), f"ars blueprint run {_shown_paths(blueprints)}",
                stop_text="no limit", launcher=launcher, preset=PRESET, cwd=repo,
                parallel=opts.parallel or (len(blueprints) if gpus is None else None), gpus=gpus,
                gpus_per_run=min(bp.gpus or 1 for bp in blueprints), tmux_socket=opts.socket, worktrees="always",
                require_baseline=False, prune="off", watch=dict(WATCH), **cluster,
            )  # fmt: skip
            SwarmFile(folder).write(SwarmState())
        swarm = cls(campaign, say)
        pool = campaign.settings.pool()
        created = existing is None
        say(
            f"swarm: {campaign.settings.name} ({'new' if created else 'continued'}) in {campaign.folder}; "
            f"{pool.describe()}; ledger {campaign.ledger}"
        )
        return swarm

    def register(self, blueprints: Sequence[Blueprint], opts: Options) -> None:
        """Record the blueprints in swarm.json (their files and attempt limit)."""
        with self.file.edit() as swarm:
            for bp in blueprints:
                member = self._member(swarm, bp)
                if opts.max_attempts is not None:
                    member.max_attempts = opts.max_attempts
                if bp.devices:
                    self._event(
                        "warning", bp,
                        f"{bp.slug}: names GPUs {','.join(map(str, bp.devices))}; the swarm gives it "
                        f"{bp.gpus} GPU(s) from its pool instead",
                    )  # fmt: skip

    # -- swarm.json and its lock ---------------------------------------------------

    def lock(self):
        """Exclusive across processes (reentrant within one): two runners of one swarm never write
        an entry twice, nor open the same blueprint's attempt twice."""
        return self.file.lock()

    def _member(self, swarm: SwarmState, bp: Blueprint) -> Member:
        return swarm.join(self.key(bp), str(bp.path.resolve()), bp.slug)

    def blueprints(self) -> list[Blueprint]:
        """Every blueprint of the swarm whose file can still be read."""
        found = []
        for member in self.file.read().blueprints.values():
            with contextlib.suppress(BadInput):
                bp = parse(member.file)
                if bp.result_dir is not None:
                    found.append(bp)
        return found

    # -- names ---------------------------------------------------------------------

    @staticmethod
    def key(bp: Blueprint) -> str:
        return gitflow.slugify(bp.slug)  # the engine's experiment slug (`math_topk50` -> `math-topk50`)

    def branch(self, bp: Blueprint) -> str:
        return f"{self.campaign.settings.prefix}/{self.key(bp)}"

    def record(self, bp: Blueprint, state: CampaignState | None = None) -> Experiment | None:
        """The blueprint's experiment in flight (any phase), or None."""
        state = state if state is not None else experiment.settled_state(self.campaign)
        key = self.key(bp)
        found = [r for r in state.experiments.values() if r.slug == key]
        return found[-1] if found else None

    # -- starting ------------------------------------------------------------------

    def launch(self, bp: Blueprint, opts: Options) -> None:
        """Give the blueprint its next attempt when it has none in flight and may have one."""
        with self.lock():  # another runner of this swarm decides after this one, and sees its attempt
            self._launch(bp, opts)

    def _launch(self, bp: Blueprint, opts: Options) -> None:
        record = self.record(bp)
        result_dir = _result_dir(bp)
        flag = result_dir / FINISH_FLAG
        if flag.exists():
            status = read_flag(flag).get("status", "unknown")
            self._event(
                "skipped", bp, f"{bp.slug}: already finished ({status}); its result dir holds finish.flag"
            )
            return
        if record is not None:
            if record.phase.is_open:  # opened by a runner killed before launching it
                self._prepare_retry(bp, record)
                self._request(bp, record.key)
            else:
                attempt = (record.blueprint or {}).get("attempt")
                self._event(
                    "adopted", bp, f"{bp.slug}: attempt {attempt} is {record.phase}; following it", attempt
                )
            return
        attempts = read_trial_log(result_dir)
        last = attempts[-1] if attempts else None
        if last is not None and last.running:
            self._event(
                "skipped", bp,
                f"{bp.slug}: attempt {last.number} in {result_dir / TRIAL_LOG} has no end and is not in flight "
                "here; record how it ended (`- ended:`, `- verdict:`) before running the blueprint again",
            )  # fmt: skip
            return
        limit = self._member(self.file.read(), bp).max_attempts
        if last is not None and last.verdict in ENDS_BLUEPRINT:
            return  # over; `sync` writes its documents
        if last is not None:
            if opts.retry or last.fix:
                if last.number >= limit:
                    done = self._finish(
                        bp, last.verdict or "failed", last.number, why=f"attempt limit {limit} reached"
                    )
                    self._event("finished", bp, f"{bp.slug}: {done}", last.number)
                    return
                self._open(bp, last.number + 1, opts.final, fix=last.fix)
            elif opts.final:
                done = self._finish(bp, last.verdict or "failed", last.number, why="--final, no fix recorded")
                self._event("finished", bp, f"{bp.slug}: {done}", last.number)
            else:
                self._event(
                    "waiting", bp,
                    f"{bp.slug}: attempt {last.number} {last.verdict or 'failed'}; not relaunched: write what you "
                    f"changed as `- fix: ...` under `## Attempt {last.number}` in {result_dir / TRIAL_LOG} "
                    "(or pass --retry, or --final to finish it with this failure)",
                    last.number,
                )  # fmt: skip
            return
        self._open(bp, 1, opts.final)

    def _open(self, bp: Blueprint, number: int, final: bool, fix: str = "") -> None:
        with self.file.edit() as swarm:
            self._member(swarm, bp).final_attempt = number if final else None
        own = {"file": str(bp.path.resolve()), "attempt": number}
        repo = self.campaign.repo
        if not gitflow.branch_exists(repo, self.branch(bp)):
            head = gitflow.head_commit(repo)
            commit = _snapshot(repo, bp, head, f"blueprint {bp.slug}: {bp.purpose}")
            record = experiment.start(
                self.campaign, self.key(bp), bp.purpose, parent=head, skip_baseline_check=True,
                branch_start=commit, commits=[commit], overrides=self._overrides(bp, number), blueprint=own,
            )  # fmt: skip
        else:
            record = experiment.reopen(
                self.campaign, self.key(bp), "retry", overrides=self._overrides(bp, number), blueprint=own
            )
            self._prepare_retry(bp, record, fix)
        self._request(bp, record.key)

    def _prepare_retry(self, bp: Blueprint, record: Experiment, fix: str = "") -> None:
        """Make a reopened attempt runnable: its `fix-up:` commit (your checkout as it is now) on the
        branch in its worktree. The engine adopts that commit as the attempt's own when it is asked
        to run it; this never edits state.json. Done once: a runner killed halfway leaves an open
        record whose commit, if it was made, is adopted here instead of made again."""
        if record.commits or experiment.adopt_commits(self.campaign, record.key):
            return  # ready (a first attempt, or a retry prepared before)
        workdir = record.worktree
        message = f"fix-up: {fix}" if fix else "fix-up: run again as it is"
        commit = _snapshot(self.campaign.repo, bp, gitflow.head_commit(workdir), message)
        gitflow.git(workdir, "merge", "--ff-only", "--quiet", commit)

    def _overrides(self, bp: Blueprint, number: int) -> Overrides:
        """This attempt's run settings, which the engine applies at launch (experiment._start_run)."""
        codebase = os.path.relpath(_codebase(bp).resolve(), self.campaign.repo.resolve())
        return Overrides(
            command=bp.command,
            timeout=bp.max_time_seconds,
            env=launch_environment(bp, devices=()),  # the pool pins CUDA_VISIBLE_DEVICES
            name=session_name(bp, number),
            log_dir=str(bp.result_dir),
            gpus=bp.gpus or 1,
            watch={
                "first_step": re.escape(bp.first_step_pattern),
                "first_step_timeout": bp.first_step_timeout_seconds,
            },
            cwd=None if codebase == "." else codebase,
        )

    def _request(self, bp: Blueprint, key: str) -> None:
        try:
            record = experiment.request_run(
                self.campaign, key, refuse_repeats=False
            )  # a blueprint is the user's own choice
        except StopConditionMet as err:
            self._event("paused", bp, f"{bp.slug}: not started: {err.message}")
            return
        if record.phase is Phase.RUNNING:
            self.sync()  # its start line now, before the next blueprint's
        elif record.phase is Phase.QUEUED:
            attempt = (record.blueprint or {}).get("attempt")
            self._event(
                "queued", bp, f"{bp.slug}: attempt {attempt} queued (needs {bp.gpus or 1} GPU(s); starts when they free up)",
                attempt,
            )  # fmt: skip

    # -- following -----------------------------------------------------------------

    def follow(self, seconds: float | None = None) -> None:
        """Wait on the swarm's runs, recording each end, until none is in flight or `seconds` pass."""
        end = None if seconds is None else time.monotonic() + seconds
        while True:
            self.sync()
            if not [r for r in experiment.settled_state(self.campaign).launched if r.blueprint]:
                return
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return
            scheduler.wait(self.campaign, None, seconds=left, on_poll=self._poll)

    def _poll(self, running: list[Experiment]) -> None:
        """After each scheduler tick: write the start lines of runs that just started. (The
        engine's run watchers stop a run with no first step within its blueprint's timeout: the
        blueprint's `watch:` travels with the experiment.)"""
        if any(r.launched.log_path not in self.known_logs for r in running if r.blueprint):
            self.sync()

    # -- recording -----------------------------------------------------------------

    def sync(self) -> None:
        """Bring every blueprint's result dir up to date with the ledger and state.json: start lines
        of attempts that started, end lines of attempts that ended, and for a blueprint that is
        over, results.md then finish.flag. Safe to repeat; each line is written once."""
        with self.lock():
            swarm = self.file.read()
            state = experiment.settled_state(self.campaign)
            rows = self.campaign.rows()
            for key, member in swarm.blueprints.items():
                try:
                    bp = parse(member.file)
                except BadInput:
                    continue  # the file was moved away; its rows stay in the ledger
                if bp.result_dir is None or self.key(bp) != key:
                    continue
                if _settle(member, bp.result_dir):
                    self.file.write(swarm)
                self._sync_one(bp, member, swarm, state, rows)

    def _sync_one(self, bp: Blueprint, member: Member, swarm: SwarmState, state: CampaignState, rows: list) -> None:  # fmt: skip
        """One blueprint's documents, from its rows, its record in flight and its member of swarm.json
        (settled: `member.attempts` says what its trial log holds)."""
        mine = [r for r in rows if r.branch == self.branch(bp)]
        record = self.record(bp, state)
        for log in record.lost_runs if record else []:
            self._lost_lines(bp, member, swarm, log)
        ended = [found for row in mine if (found := self._row_lines(bp, member, swarm, row))]
        if record is not None and record.phase is Phase.RUNNING:
            self._running_lines(bp, member, swarm, record)
        # The blueprint's latest attempt decides whether it is over; decided on every pass, so a
        # runner killed between an attempt's end lines and its finish.flag finishes it next time.
        last = mine[-1] if mine and record is None and not (_result_dir(bp) / FINISH_FLAG).exists() else None
        self._conclude(bp, member, last, ended)

    def _lost_lines(self, bp: Blueprint, member: Member, swarm: SwarmState, log: str) -> None:
        """End lines for an attempt whose runner died (the engine starts it once more)."""
        mark = _attempts(member).get(log)
        if mark is None or mark.ended:
            return
        result_dir = _result_dir(bp)
        diagnosis = "its runner died (the machine, the orchestrator or a kill); the engine started the attempt once more"  # fmt: skip
        self._append(swarm, mark, "end", lambda: end_attempt(result_dir, mark.number, verdict="lost", diagnosis=diagnosis))  # fmt: skip
        self._event(
            "ended", bp, f"{bp.slug}: attempt {mark.number} lost its runner; started once more", mark.number
        )

    def _row_lines(
        self, bp: Blueprint, member: Member, swarm: SwarmState, row
    ) -> tuple[int, object, _Ending] | None:
        """The lines of a finished attempt (its row) not yet written: its start lines when no follower
        saw it start (reaped by `ars exp wait`), then its end lines. (number, row, ending) when its end
        is written now."""
        attempts, result_dir = _attempts(member), _result_dir(bp)
        mark = attempts.get(row.log_path)
        if mark is None:
            mark = attempts[row.log_path] = Logged(_next_number(member, result_dir))
        if not mark.started:
            self._start_lines(
                swarm, bp, mark, row.started_at, row.job_id, row.devices, row.log_path, row.commit
            )
        self.known_logs.add(row.log_path)
        if mark.ended:
            return None
        ending = _ending(row, bp.first_step_pattern)
        diagnosis, suggestion = ending.reason, ""
        if ending.verdict != "ok":
            found, suggestion = diagnose(row.log_path)
            if found:
                diagnosis = f"{ending.reason}; {found}" if ending.reason else found
        self._append(swarm, mark, "end", lambda: end_attempt(
            result_dir, mark.number, verdict=ending.verdict, exit_status=ending.exit_code,
            diagnosis=diagnosis, suggestion=suggestion, ended_at=row.ended_at,
        ))  # fmt: skip
        _bring_back_validation(bp, ending.cwd)
        return mark.number, row, ending

    def _running_lines(self, bp: Blueprint, member: Member, swarm: SwarmState, record: Experiment) -> None:
        """The start lines of the attempt running now, once, under the number it was opened with."""
        run, attempts = record.launched, _attempts(member)
        log = run.log_path
        mark = attempts.get(log)
        if mark is None:
            number = int((record.blueprint or {}).get("attempt") or 0)
            if not number or number in member.numbers:
                number = _next_number(member, _result_dir(bp))
            mark = attempts[log] = Logged(number)
        if not mark.started:
            devices = ",".join(str(d) for d in record.devices)
            self._start_lines(
                swarm, bp, mark, record.started_at or "", run.run_id, devices, log, record.commit or ""
            )
            where = f" on GPUs {devices}" if devices else ""
            self._event(
                "started", bp, f"{bp.slug}: attempt {mark.number} started {self._place(record)}{where}; log {log}",
                mark.number,
            )  # fmt: skip
        self.known_logs.add(log)

    def _conclude(
        self, bp: Blueprint, member: Member, last, ended: list[tuple[int, object, _Ending]]
    ) -> None:
        """Say how each attempt that just ended went; finish the blueprint when `last`, its latest
        finished attempt with nothing in flight, ends it (ok, timeout, its final attempt or its
        attempt limit)."""
        for number, row, ending in ended:
            if row is not last:
                self._event("ended", bp, _end_line(bp, number, ending), number)
        if last is None:
            return
        number = _attempts(member)[last.log_path].number
        just = next((e for n, r, e in ended if r is last), None)
        ending = just or _ending(last, bp.first_step_pattern)
        head = _end_line(bp, number, ending)
        limit = member.max_attempts
        final = member.final_attempt == number
        if ending.verdict in ENDS_BLUEPRINT or final or number >= limit:
            why = (
                ""
                if ending.verdict in ENDS_BLUEPRINT
                else ("final attempt" if final else f"attempt limit {limit} reached")
            )
            done = self._finish(bp, ending.verdict, number, why=why, log=last.log_path, ran_in=ending.cwd)
            if just:
                self._event("ended", bp, f"{head}; {done}", number)
            else:  # its end was recorded before, by a runner that died before finishing it
                self._event("finished", bp, f"{bp.slug}: {done}", number)
        elif just:
            self._event(
                "ended", bp,
                f"{head}; fix it, write `- fix: ...` under `## Attempt {number}` in {_result_dir(bp) / TRIAL_LOG}, then run it again",
                number,
            )  # fmt: skip

    def _append(self, swarm: SwarmState, mark: Logged, lines: str, write: Callable[[], object]) -> None:
        """Append an attempt's `lines` (start or end) to its trial log once: swarm.json says so
        before (`writing`) and after, so a kill in between is found out (`_settle`)."""
        mark.writing = lines
        self.file.write(swarm)
        write()
        mark.wrote(lines)
        self.file.write(swarm)

    def _place(self, record) -> str:
        """Where an attempt runs, as its start line says it: a tmux session, or a cluster's job."""
        s = self.campaign.settings
        if s.launcher == "tmux":
            socket = f" (tmux -L {s.tmux_socket})" if s.tmux_socket else ""
            return f"in tmux session {record.run.run_id}{socket}"
        gpus = f", {record.gpus} GPU(s)" if record.gpus else ""
        return f"as {s.launcher} job {record.run.run_id}{gpus}"

    def _start_lines(self, swarm: SwarmState, bp: Blueprint, mark: Logged, started_at: str, session: str, devices: str, log: str, commit: str) -> None:  # fmt: skip
        attempt = Attempt(mark.number, started_at=started_at, session=session, devices=devices, command=bp.command,
                          log=log, other={"branch": self.branch(bp), "commit": commit})  # fmt: skip
        result_dir = _result_dir(bp)
        self._append(swarm, mark, "start", lambda: start_attempt(result_dir, attempt, title=bp.slug))
        link = result_dir / f"attempt-{mark.number}.log"
        if not os.path.lexists(link):  # the documented name of attempt n's log, beside the engine's
            with contextlib.suppress(OSError):
                link.symlink_to(os.path.relpath(log, result_dir))

    def _finish(
        self, bp: Blueprint, verdict: str, attempts: int, why: str = "", log: str | None = None,
        ran_in: str | None = None,
    ) -> str:  # fmt: skip
        """results.md, then finish.flag (last): the blueprint is over. Returns what was done."""
        status = verdict if verdict in _FINAL else "failed"
        if log is None:
            log = self._member(self.file.read(), bp).last_log
            if ran_in is None and log:
                ran_in = _run_cwd(log)
        note = f"Ended by `ars blueprint run`: {why}." if why else ""
        validation = validation_file(bp)
        if validation is not None and not validation.exists() and ran_in:
            validation = validation_file(bp, Path(ran_in))
        results = write_results(
            bp, status, log=log if log and Path(log).exists() else None, validation=validation,
            preset=self.campaign.settings.preset, note=note,
        )  # fmt: skip
        write_finish_flag(_result_dir(bp), status, results.headline, attempts=attempts)
        figure = f": {results.headline}" if results.headline else ""
        because = f" ({why})" if why else ""
        return f"finished {status}{because}{figure}; results.md, then finish.flag"

    def _event(self, kind: str, bp: Blueprint, line: str, attempt: int | None = None) -> None:
        self.events.append(Event(kind, bp.slug, line, attempt))
        self.say(f"{kind}: {line}")

    # -- reporting -----------------------------------------------------------------

    def finish(self) -> Report:
        """The report. Once every blueprint is over, say where the worktrees are: they stay, since
        a run's own outputs written by relative path (checkpoints, caches) are only there."""
        report = self.report()
        folder = worktrees_dir(self.campaign)
        if report.over and not report.in_flight and any(folder.glob("wt-*")):
            self.say(
                f"worktrees: {folder} keeps what the runs wrote there; each attempt's code is on its branch "
                f"(remove them with `git worktree remove` when done)"
            )
        return report

    def report(self) -> Report:
        state = experiment.settled_state(self.campaign)
        rows = self.campaign.rows()
        statuses, waiting, in_flight = [], [], []
        for bp in self.blueprints():
            record = self.record(bp, state)
            status = blueprint_status(bp, rows, in_flight=record)
            statuses.append(status)
            if record is not None:
                in_flight.append(bp.slug)
            elif status.state == "between_attempts" and status.status not in ENDS_BLUEPRINT:
                waiting.append(bp.slug)
        s = self.campaign
        return Report(
            s.settings.name, str(s.folder), str(s.ledger), self.events, statuses, waiting, in_flight
        )


_FINAL = ("ok", "failed", "timeout", "first_step_timeout", "cancelled", "lost")


# ---------------------------------------------------------------- helpers


def _read(paths: Sequence[Path]) -> list[Blueprint]:
    files = find_blueprints(list(paths))
    if not files:
        shown = ", ".join(str(p) for p in paths)
        raise BadInput(f"no blueprint in {shown} (no .md file with `## [exp_...]` sections)")
    unique: dict[Path, Blueprint] = {}
    for path in files:
        unique.setdefault(path.resolve(), parse(path))
    return list(unique.values())


def _name_clashes(blueprints: Sequence[Blueprint]) -> list[Problem]:
    """Two names that differ only in `_` and `-` would share a branch and an experiment."""
    seen: dict[str, Blueprint] = {}
    problems = []
    for bp in blueprints:
        key = Swarm.key(bp)
        other = seen.setdefault(key, bp)
        if other is not bp and other.slug != bp.slug:
            problems.append(
                Problem(str(bp.path), "exp_purpose", f"name {bp.slug!r} and {other.slug!r} ({other.path}) "
                        f"both become branch `{key}`", "give one of them another `- name:`")
            )  # fmt: skip
    return problems


def _one_repo(blueprints: Sequence[Blueprint]) -> Path:
    repos: dict[Path, Blueprint] = {}
    for bp in blueprints:
        repos.setdefault(gitflow.repo_root(_codebase(bp)).resolve(), bp)
    if len(repos) > 1:
        (one, a), (two, b) = list(repos.items())[:2]
        raise BadInput(
            f"the blueprints' codebases lie in different git repositories ({a.slug}: {one}, {b.slug}: {two}); "
            "a swarm runs in one: run each repository's blueprints as a swarm of their own"
        )
    return next(iter(repos))


def _folder_name(blueprints: Sequence[Blueprint]) -> str:
    common = Path(os.path.commonpath([str(bp.path.resolve().parent) for bp in blueprints]))
    return common.name or "swarm"


def _shown_paths(blueprints: Sequence[Blueprint]) -> str:
    folders = sorted({str(bp.path.resolve().parent) for bp in blueprints})
    return " ".join(folders)


def _metric(blueprints: Sequence[Blueprint]) -> str:
    """The figure each row records: the first-step line's key (`actor/kl_loss:` -> actor/kl_loss),
    which every training step prints."""
    key = blueprints[0].first_step_pattern.strip().rstrip(":").strip()
    return key if re.fullmatch(r"[\w./@-]+", key) else DEFAULT_METRIC


def _detected_gpus() -> str:
    found = machine.found()
    if not found.devices or found.vendor == "apple":
        raise BadInput(f"no GPU pool found here ({found.note}): give the pool with --gpus, e.g. --gpus 0-7")
    ids = tuple(device.index for device in found.devices)
    return str(GpuSpec(len(ids), ids))  # "0," for one device: a bare "0" would be a count


def _update_pool(campaign, opts: Options) -> None:
    """--gpus, --parallel and --socket given again replace the swarm's settings for what starts
    from now on (runs in flight keep their devices)."""
    s = campaign.settings
    changed = False
    for name, value in (("gpus", opts.gpus), ("parallel", opts.parallel), ("tmux_socket", opts.socket)):
        if value is not None and getattr(s, name) != value:
            setattr(s, name, value)
            changed = True
    if changed:
        s.pool()  # refuse a pool that cannot work before writing it
        store.write_settings(campaign)


def _snapshot(repo: Path, bp: Blueprint, parent: str, message: str) -> str:
    """A commit of your checkout as it is (HEAD plus uncommitted edits to tracked files) plus the
    blueprint file and its YAML, on top of `parent`. Made in a private copy of the index: your
    index, files and branches are not touched."""
    index = Path(gitflow.git(repo, "rev-parse", "--path-format=absolute", "--git-path", "index"))
    with tempfile.TemporaryDirectory(prefix="ars-swarm-") as tmp:
        private = Path(tmp) / "index"
        env = {"GIT_INDEX_FILE": str(private)}
        if index.exists():
            shutil.copyfile(index, private)  # keeps git's stat cache: no file is hashed twice
        else:
            gitflow.git(repo, "read-tree", "HEAD", env=env)
        gitflow.git(repo, "add", "--update", "--", ".", env=env)
        own = [
            os.path.relpath(path.resolve(), repo)
            for path in (bp.path, bp.yaml)
            if path is not None and path.is_file() and path.resolve().is_relative_to(repo)
        ]
        if own:
            gitflow.git(repo, "add", "--force", "--", *own, env=env)
        tree = gitflow.git(repo, "write-tree", env=env)
    return gitflow.git(repo, "commit-tree", tree, "-p", parent, "-m", message, env=gitflow.identity_env(repo))


def _next_number(member: Member, folder: Path) -> int:
    """One past every attempt of the blueprint: those the swarm recorded, and every attempt-<n>.log
    in its result dir (a run by hand)."""
    numbers = list(member.numbers)
    numbers += [
        int(m.group(1))
        for p in folder.glob("attempt-*.log")
        if (m := re.match(r"attempt-(\d+)\.log$", p.name))
    ]
    return max(numbers, default=0) + 1


def _result_dir(bp: Blueprint) -> Path:
    """The blueprint's result folder. Every blueprint of a swarm has one: `check` refuses a
    blueprint without it, and `sync` skips a file that has lost it since."""
    if bp.result_dir is None:
        raise BadInput(
            f"{bp.path}: [exp_result_dir] is missing: write the absolute path of its result folder"
        )
    return bp.result_dir


def _codebase(bp: Blueprint) -> Path:
    """The blueprint's codebase; like its result folder, `check` refuses a blueprint without one."""
    if bp.codebase is None:
        raise BadInput(
            f"{bp.path}: [exp_codebase_dir] is missing: write the absolute path of the code to run"
        )
    return bp.codebase


def _attempts(member: Member) -> dict[str, Logged]:
    """The member's attempts by log: `sync` reads them from the trial log (`_settle`) first."""
    assert member.attempts is not None, f"{member.slug}: its attempts are read before they are settled"
    return member.attempts


def _settle(member: Member, folder: Path) -> bool:
    """Make the member's record whole before it is read, from its trial log where the record cannot
    say: a member not yet recorded takes the attempts the log holds, and a write a kill may have cut
    short (`writing`) counts as done when its lines are there. Whether anything changed."""
    if member.attempts is not None and not any(m.writing for m in member.attempts.values()):
        return False
    written = {a.number: a for a in read_trial_log(folder)}
    if member.attempts is None:  # a blueprint new to the swarm, or a swarm.json of an older release
        member.attempts = {
            a.log: Logged(a.number, started=True, ended=bool(a.ended_at)) for a in written.values() if a.log
        }
    for mark in member.attempts.values():
        shown = written.get(mark.number)
        if mark.writing == "start" and shown is not None:
            mark.wrote("start")
        elif mark.writing == "end" and shown is not None and shown.ended_at:
            mark.wrote("end")
        mark.writing = ""  # not there: written again
    return True


def _end_line(bp: Blueprint, number: int, ending: _Ending) -> str:
    return (
        f"{bp.slug}: attempt {number} ended {ending.verdict}"
        + (f" (exit {ending.exit_code})" if ending.exit_code is not None else "")
        + f" after {format_duration(ending.elapsed_min * 60)}"
        + (f": {ending.reason}" if ending.reason and ending.verdict != "ok" else "")
    )


def _bring_back_validation(bp: Blueprint, ran_in: str | None) -> None:
    """A relative val_print_to_markdown_file_path is written inside the worktree the run ran in;
    copy it to the same place under the codebase (where it lands when a blueprint is run by hand),
    so results.md and the reader find it in the documented place after the worktree is reused."""
    if not ran_in:
        return
    home, there = validation_file(bp), validation_file(bp, Path(ran_in))
    if home is None or there is None or home == there or not there.is_file():
        return
    with contextlib.suppress(OSError):
        home.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(there, home)


def _run_cwd(log: str) -> str | None:
    try:
        return Run.load(state_path_for(log)).cwd
    except (OSError, ValueError, TypeError):
        return None


def _ending(row, first_step_pattern: str) -> _Ending:
    """The verdict of a finished attempt, from data alone: its run file's state and exit code, its
    row's status and cause (its reason is only shown). `ok` needs exit 0 and a first step in the
    log: a launcher that printed its usage and exited 0 trained nothing."""
    try:
        run = Run.load(state_path_for(row.log_path))
        state, code, cwd = run.state, run.exit_code, run.cwd
    except (OSError, ValueError, TypeError):
        state, code, cwd = None, None, None
    reason = row.reason
    exited_ok = (state == "exited" and code == 0) or (state is None and row.status.is_finished())
    if exited_ok and _printed(row.log_path, first_step_pattern):
        verdict, reason = "ok", ""
    elif exited_ok:
        verdict, reason = "failed", f"exited 0 without a `{first_step_pattern}` line: nothing was trained"
    elif row.status is outcome.Status.TIMEOUT:
        verdict = "timeout"
    elif row.cause is outcome.CrashCause.FIRST_STEP_TIMEOUT:
        verdict = "first_step_timeout"
    elif row.status is outcome.Status.CANCELLED:
        verdict = "cancelled"
    elif state == "lost" or row.cause in (outcome.CrashCause.RUNNER_DIED, outcome.CrashCause.LOST):
        verdict = "lost"
    else:
        verdict = "failed"
    return _Ending(verdict, code, reason, row.elapsed_min, cwd)


def _printed(log: str, pattern: str) -> bool:
    """Whether the log holds `pattern` (searched in its first 64 MB: the first step comes early)."""
    needle = pattern.encode()
    try:
        with open(log, "rb") as handle:
            tail = b""
            read = 0
            while read < _FIRST_STEP_READ:
                chunk = handle.read(1 << 20)
                if not chunk:
                    return False
                if needle in tail + chunk:
                    return True
                tail, read = chunk[-len(needle) :], read + len(chunk)
    except OSError:
        return False
    return False


def _unescape(regex: str) -> str:
    return re.sub(r"\\(.)", r"\1", regex)
