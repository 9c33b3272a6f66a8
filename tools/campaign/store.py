"""A campaign: its folder, its settings (`campaign.yaml`), its in-flight state (`state.json`).

    reports/auto_research/<campaign>/
        campaign.yaml   what was decided at `ars campaign init` (metric, stop rules, deadline ...)
        results.tsv     the ledger: one row per finished attempt
        state.json      what is in flight: every open, queued or running experiment (atomic replace)
        runs/<launch>-<slug>/run.log
        worktrees/wt-<n>/   one git worktree per experiment in flight beside another one (or when
                            the user's tree has uncommitted changes); reused, removed at the end

The deadline is fixed here, once, when the campaign is created. `reports/auto_research/.current`
names the campaign that `ars exp ...` commands act on when none is given.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.clock import format_duration, format_iso, now, parse_iso
from autoresearch_skills.errors import BadInput

CAMPAIGNS_DIR = Path("reports") / "auto_research"
PAUSE_FILE = "paused"  # JSON {reason, at}: written by `ars campaign pause`, removed by `ars campaign resume`
LAUNCHED = ("queued", "running", "decide")  # phases that count as an attempt started
LAUNCHERS = ("local", "tmux", "slurm")
PRESETS = ("karpathy", "nemo-rl", "verl", "agentjet", "generic")


@dataclass
class Settings:
    """campaign.yaml: everything decided up front, so a resumed agent decides nothing twice."""

    name: str
    metric: str
    direction: str  # min | max
    command: str
    repo: str
    prefix: str
    created_at: str
    preset: str = "karpathy"
    launcher: str = "local"
    stop_text: str = ""
    stop: dict = field(default_factory=dict)  # explicit rules, deadline fixed
    strategy: str = "branches"  # branches | ratchet
    worktrees: str = "auto"  # auto | always | off
    decide: str = "auto"  # auto | manual
    keep_ties: bool = False
    require_baseline: bool = True
    tmux_socket: str | None = None
    keep_sessions: int = 5  # finished runs whose tmux sessions stay open for post-mortems (logs always stay)
    policy: dict = field(default_factory=dict)  # the unattended loop's proposer settings
    parallel: int | None = None  # experiments in flight at once; None: 1, or as many as fit in `gpus`
    gpus: str | list | None = None  # device pool, e.g. "0-7"; each run gets disjoint CUDA_VISIBLE_DEVICES
    gpus_per_run: int | None = None  # devices per run (1 with a pool); on Slurm asked for through sbatch
    partition: str | None = None  # Slurm: sbatch --partition
    mem: str | None = None  # Slurm: sbatch --mem
    cpus: str | None = None  # Slurm: sbatch --cpus-per-task
    baseline_repeats: int | None = None  # baseline runs to measure noise; None: 2 under 30-min runs, else 1
    noise_margin: float | None = None  # a pooled mean must lead the best by this many sigma (1.75)
    comparable_margin: float = 0.2  # steps/throughput this far (a fraction) from the parent's: not comparable
    frozen: list = field(default_factory=list)  # files no experiment may change (hashed at the start)
    mutable: list = field(default_factory=list)  # the only files experiments may change (empty: any)
    watch: dict = field(default_factory=dict)  # anomaly actions while a run goes (cancel | warn | ignore)
    prune: str | None = (
        None  # early stopping: off | median | forecast | both; None: median for runs over 10 min
    )
    metric_source: dict | None = None  # where the metric comes from (default: the run log with the preset)
    first_step_timeout: str | None = None  # cancel a run that logged no first step in this long
    throughput_key: str | None = None  # the log key for throughput (default tok/sec for karpathy)
    max_commit_mb: float = 5  # new files larger than this stay out of hypothesis commits (5 MB)

    def stop_rules(self):
        from autoresearch_skills.stoprule import from_mapping

        return from_mapping(self.stop, source="campaign.yaml stop")

    def prune_rule(self) -> str:
        """The early-stopping rule in force. Unset: the median rule for runs longer than 10 minutes
        (bench/bench_prune.py: about half the compute saved, under 1% of eventual winners stopped),
        off for shorter ones, whose curves are too short to judge."""
        if self.prune is not None:
            return "off" if self.prune is False else str(self.prune)
        per_run = self.stop_rules().per_run_timeout
        return "median" if per_run and per_run > 600 else "off"

    def noise_policy(self):
        """The keep/discard rule that knows the noise (campaign/noise.py): every new best, the
        baseline first, is run `baseline_repeats` times; a result within noise is a candidate."""
        from autoresearch_skills.campaign.noise import default_policy

        changes = {"keep_ties": bool(self.keep_ties)}
        if self.noise_margin is not None:
            changes["margin"] = float(self.noise_margin)
        if self.baseline_repeats is not None:
            changes["best_runs"] = int(self.baseline_repeats)
        return default_policy(self.stop_rules().per_run_timeout, **changes)

    def watch_policy(self, watch: dict | None = None):
        """How runs are watched: `watch` (default: campaign.yaml's) over the defaults."""
        from autoresearch_skills.runwatch import WatchPolicy

        watch = self.watch if watch is None else watch
        first_step_timeout = None if "first_step_timeout" in (watch or {}) else self.first_step_timeout
        return WatchPolicy.from_settings(
            watch or None, self.prune_rule(), first_step_timeout, preset=self.preset
        )

    def frozen_paths(self) -> list[str]:
        """Files no experiment may change: `frozen:` and the loop policy's `frozen:`."""
        listed = [*(self.frozen or []), *((self.policy or {}).get("frozen") or [])]
        return list(dict.fromkeys(str(p) for p in listed))

    def pool(self):
        from autoresearch_skills.campaign.pool import Pool

        return Pool.from_settings(self.parallel, self.gpus, self.gpus_per_run, self.launcher)


@dataclass
class Campaign:
    folder: Path
    settings: Settings
    _lock: object = field(default=None, repr=False, compare=False)

    @property
    def ledger(self) -> Path:
        return self.folder / "results.tsv"

    @property
    def state_path(self) -> Path:
        return self.folder / "state.json"

    @property
    def repo(self) -> Path:
        return Path(self.settings.repo)

    def load_state(self) -> dict:
        """state.json; `experiments` maps a key to each experiment in flight. A state written
        by an older version (one `current` experiment) is read as a set of one."""
        try:
            state = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            state = {}
        except json.JSONDecodeError as err:
            raise BadInput(
                f"{self.state_path} is not valid JSON ({err}); restore it from {self.state_path}.bak"
            ) from None
        experiments = state.setdefault("experiments", {})
        current = state.pop("current", None)
        if current:
            current.setdefault("key", current["slug"])
            experiments.setdefault(current["key"], current)
        return state

    def save_state(self, state: dict) -> None:
        """Atomic replace, keeping the previous version as .bak."""
        state["updated_at"] = format_iso(now())
        write_text_atomic(self.state_path, json.dumps(state, indent=2) + "\n", backup=True)

    def lock(self):
        """Exclusive across processes (reentrant within one): recording an attempt is a
        read-check-append-clear sequence that two commands must never interleave."""
        if self._lock is None:
            from autoresearch_skills.filelock import ReentrantFileLock

            self._lock = ReentrantFileLock(self.folder / ".lock")
        return self._lock()

    def pause_record(self) -> dict | None:
        """The pause file ({reason, at}), or None while the campaign is not paused. A pause file
        that cannot be read still pauses: the user's intent wins over its formatting."""
        try:
            data = json.loads((self.folder / PAUSE_FILE).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {"reason": "paused (the pause file is unreadable)", "at": None}
        data = data if isinstance(data, dict) else {}
        return {"reason": str(data.get("reason") or "paused"), "at": data.get("at")}

    @property
    def paused(self) -> str | None:
        """Why the user paused the campaign (`ars campaign pause`), or None when it is not paused.
        While paused, agents' stop hooks let them stop and nothing new should start."""
        record = self.pause_record()
        return record["reason"] if record else None

    def pause(self, reason: str = "") -> dict:
        record = {"reason": reason.strip() or "paused by hand", "at": format_iso(now())}
        write_text_atomic(self.folder / PAUSE_FILE, json.dumps(record, indent=2) + "\n")
        return record

    def unpause(self) -> str | None:
        """Clear the pause; returns the reason it had (None when it was not paused)."""
        reason = self.paused
        (self.folder / PAUSE_FILE).unlink(missing_ok=True)
        return reason

    def rows(self) -> list:
        from autoresearch_skills import ledger

        return ledger.read(self.ledger) if self.ledger.exists() else []

    def verdict(self, at: datetime | None = None, state: dict | None = None, exclude: str | None = None):
        """The stop verdict; attempts still in flight (launched, not yet recorded) count as attempted.
        `exclude`: an experiment not to count (the one about to be launched)."""
        from autoresearch_skills.stoprule import evaluate

        state = self.load_state() if state is None else state
        launched = [
            e for k, e in state.get("experiments", {}).items() if k != exclude and e.get("phase") in LAUNCHED
        ]
        return evaluate(
            self.settings.stop_rules(),
            self.rows(),
            at=at,
            started_at=parse_iso(self.settings.created_at),
            in_flight=sum(1 for e in launched if e.get("rerun_of") is None),
            queued=sum(1 for e in launched if e.get("rerun_of") is None and e.get("phase") == "queued"),
            in_flight_gpu_hours=sum(_gpu_hours_so_far(e) for e in launched),
        )


def _gpu_hours_so_far(experiment: dict) -> float:
    devices = len(experiment.get("devices") or ()) or int(experiment.get("gpus") or 0)
    if not devices or not experiment.get("started_at"):
        return 0.0
    return devices * max(0.0, (now() - parse_iso(experiment["started_at"])).total_seconds()) / 3600


def _campaigns_root(repo: Path) -> Path:
    return repo / CAMPAIGNS_DIR


def load(folder: Path) -> Campaign:
    from autoresearch_skills.yamlfile import read_yaml

    config = folder / "campaign.yaml"
    data = read_yaml(config, missing_hint="not a campaign folder; see `ars campaign init --help`")
    if not isinstance(data, dict):
        raise BadInput(f"{config} is not a campaign settings file (expected a mapping)")
    from autoresearch_skills.campaign.config import check_keys

    check_keys(data, str(config))  # a hand edit with a typo must not be silently ignored
    known = set(Settings.__dataclass_fields__)
    try:
        settings = Settings(**{k: v for k, v in data.items() if k in known})
    except TypeError as err:
        raise BadInput(f"{config}: {err}") from None
    return Campaign(folder.resolve(), settings)


def find(ref: str | None = None, cwd: str | Path = ".") -> Campaign:
    """A campaign by folder path, by name in this repo, or the current one."""
    from autoresearch_skills import gitflow

    ref = ref or os.environ.get("ARS_CAMPAIGN")
    if ref and (Path(ref) / "campaign.yaml").exists():
        return load(Path(ref))
    root = _campaigns_root(gitflow.repo_root(cwd))
    if ref:
        if (root / ref / "campaign.yaml").exists():
            return load(root / ref)
        raise BadInput(f"no campaign {ref!r} (looked for {ref}/campaign.yaml and {root / ref}/campaign.yaml)")
    pointer = root / ".current"
    if pointer.exists() and (root / pointer.read_text().strip() / "campaign.yaml").exists():
        return load(root / pointer.read_text().strip())
    raise BadInput(
        f"no current campaign under {root}; create one with `ars campaign init NAME ...` or pass --campaign"
    )


def create(
    name: str,
    metric: str,
    direction: str,
    command: str,
    stop_text: str | None = None,
    prefix: str | None = None,
    launcher: str = "local",
    preset: str = "karpathy",
    cwd: str | Path = ".",
    folder: Path | None = None,
    **options,
) -> Campaign:
    from autoresearch_skills import gitflow, ledger
    from autoresearch_skills.stoprule import StopRules, parse_text

    repo = gitflow.repo_root(cwd)
    gitflow.current_branch(repo)  # refuse a detached HEAD before anything is written
    slug = gitflow.slugify(name)
    folder = (folder or _campaigns_root(repo) / slug).resolve()
    if (folder / "campaign.yaml").exists():
        raise BadInput(f"campaign {slug!r} already exists at {folder}; pick another name or continue it")
    started = now()
    rules = (parse_text(stop_text) if stop_text else StopRules()).with_defaults().fixed_at(started)
    prefix = prefix or f"autoresearch/{started:%Y%m%d}-{slug}"
    if gitflow.git(repo, "for-each-ref", "--count=1", f"refs/heads/{prefix}/", check=False):
        raise BadInput(f"branches under {prefix}/ already exist; pass another --prefix")
    settings = Settings(
        name=slug,
        metric=metric,
        direction=direction,
        command=command,
        repo=str(repo),
        prefix=prefix.rstrip("/"),
        created_at=format_iso(started),
        preset=preset,
        launcher=launcher,
        stop_text=stop_text or "",
        stop={**rules.to_dict(), **({"max_experiments": rules.max_experiments} if rules.is_default else {})},
        **options,
    )
    pool = settings.pool()  # refuse a bad pool before anything is written
    if settings.strategy == "ratchet" and pool.parallel > 1:
        raise BadInput(
            "the ratchet strategy keeps one branch: it runs one experiment at a time (parallel: 1)"
        )
    gitflow.ignore_folder(_campaigns_root(repo))
    (folder / "runs").mkdir(parents=True, exist_ok=True)
    campaign = Campaign(folder, settings)
    write_settings(campaign)
    ledger.init(campaign.ledger)
    campaign.save_state(
        {
            "experiments": {},
            "frozen": frozen_hashes(repo, "HEAD", settings.frozen_paths()),
            "home_branch": gitflow.current_branch(repo),
            "start_tree": gitflow.tree_state(repo).summary(),
        }
    )
    if folder.parent == _campaigns_root(repo):
        (folder.parent / ".current").write_text(slug + "\n")
    return campaign


def frozen_hashes(repo: Path, commit: str, paths: list[str]) -> dict[str, str]:
    """The git blob id of each frozen file in `commit` ("missing" when absent): fixed when the
    campaign starts, so the evaluation cannot be edited by the thing it evaluates."""
    from autoresearch_skills import gitflow

    hashes = {}
    for path in paths:
        blob = gitflow.git(repo, "rev-parse", "--verify", "--quiet", f"{commit}:{path}", check=False).strip()
        hashes[path] = blob or "missing"
    return hashes


def write_settings(campaign: Campaign) -> None:
    import yaml

    header = (
        "# autoresearch-skills campaign: decided at `ars campaign init`; the deadline is absolute.\n"
        "# Edit with care: the ledger and branches of this campaign follow these settings.\n"
    )
    write_text_atomic(
        campaign.folder / "campaign.yaml", header + yaml.safe_dump(asdict(campaign.settings), sort_keys=False)
    )


def status_facts(campaign: Campaign) -> dict:
    """Everything `campaign status` and `memory resume` report, as plain data."""
    from autoresearch_skills import gitflow

    rows = campaign.rows()
    s = campaign.settings
    state = campaign.load_state()
    verdict = campaign.verdict(state=state)
    from autoresearch_skills.campaign.experiment import best_row  # lazy: experiment imports this module

    best = best_row(campaign, rows)
    experiments = list(state["experiments"].values())
    in_flight = [in_flight_facts(e) for e in experiments]
    running = [f for f in in_flight if f["phase"] == "running"]
    queued = [f["key"] for f in in_flight if f["phase"] == "queued"]
    decide = [e for e in experiments if e.get("phase") == "decide"]
    try:
        branch = gitflow.current_branch(s.repo)
    except BadInput:
        branch = "(detached HEAD)"

    def describe(row) -> str | None:
        if row is None:
            return None
        value = f"{row.metric_value:.6f}" if row.status in ("keep", "discard") else "no metric"
        return f"#{row.index} {row.status} {s.metric} {value} on {row.branch} @ {row.commit[:8]}: {row.description}"

    from autoresearch_skills.campaign import noise

    latest = noise.latest_fingerprint(rows)
    estimate = noise.estimate(rows, fingerprint=latest)
    return {
        "name": s.name,
        "folder": str(campaign.folder),
        "noise": estimate.describe(),
        "sigma": estimate.sigma,
        "metric": s.metric,
        "direction": s.direction,
        "stop_rules": s.stop_text or ", ".join(f"{k}={v}" for k, v in s.stop.items()),
        "deadline": s.stop.get("deadline"),
        "verdict": verdict.line,
        "should_continue": verdict.should_continue,
        "paused": campaign.paused,
        "attempted": verdict.attempted,
        "remaining_experiments": verdict.remaining_experiments,
        "remaining_time": format_duration(verdict.remaining_seconds)
        if verdict.remaining_seconds is not None
        else None,
        "best": describe(best) + _pooled(rows, best, s.direction) if best else None,
        "best_row": best.to_dict() if best else None,
        "latest": describe(rows[-1] if rows else None),
        "current_branch": branch,
        "pool": s.pool().describe(),
        "in_flight": in_flight,
        "running": "; ".join(f["line"] for f in running) or None,
        "open": [f["key"] for f in in_flight if f["phase"] in ("opening", "open")],
        "queue": queued,
        "pending_decision": decide[0].get("result") if decide else None,
    }


def _pooled(rows: list, best, direction: str) -> str:
    """` (mean 0.9981 over 3 runs)` when the best commit was run more than once."""
    from autoresearch_skills.campaign import noise

    group = next(
        (g for g in noise.groups(rows, best.fingerprint or None).values() if best.index in g.indexes), None
    )
    return f" (mean {group.mean:.6f} over {group.n} runs)" if group and group.n > 1 else ""


def in_flight_facts(experiment: dict) -> dict:
    """One in-flight experiment as `campaign status` shows it: slot, GPUs, elapsed, session/job."""
    run = experiment.get("run") or {}
    elapsed = None
    if experiment.get("phase") == "running" and experiment.get("started_at"):
        elapsed = format_duration((now() - parse_iso(experiment["started_at"])).total_seconds())
    devices = ",".join(str(d) for d in experiment.get("devices") or ()) or None
    facts = {
        "key": experiment.get("key") or experiment.get("slug"),
        "branch": experiment.get("branch"),
        "phase": experiment.get("phase"),
        "slot": experiment.get("slot"),
        "gpus": devices,
        "elapsed": elapsed,
        "limit": format_duration(experiment["timeout"]) if experiment.get("timeout") else None,
        "run_id": run.get("run_id"),
        "log": run.get("log_path"),
        "workdir": experiment.get("workdir"),
    }
    where = f"slot {facts['slot']}" + (f", GPUs {devices}" if devices else "")
    facts["line"] = f"{facts['key']} [{experiment.get('phase')}]" + (
        f" {where}, {elapsed} of {facts['limit']}, {run.get('launcher', '')} {run.get('run_id')}"
        if run
        else ""
    )
    return facts
