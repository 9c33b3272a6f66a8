"""A campaign: its folder, its settings (`campaign.yaml`), its in-flight state (`state.json`).

    reports/auto_research/<campaign>/
        campaign.yaml   what was decided at `ars campaign init` (metric, stop rules, deadline ...)
        results.tsv     the ledger: one row per finished attempt
        state.json      what is in flight: the current experiment and its run (atomic replace)
        runs/<index>-<slug>/run.log
        worktrees/<slug>/   only when the user's tree had uncommitted changes

The deadline is fixed here, once, when the campaign is created. `reports/auto_research/.current`
names the campaign that `ars exp ...` commands act on when none is given.
"""

from __future__ import annotations

import contextlib
import fcntl
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

    def stop_rules(self):
        from autoresearch_skills.stoprule import from_mapping

        return from_mapping(self.stop, source="campaign.yaml stop")


@dataclass
class Campaign:
    folder: Path
    settings: Settings
    _lock_depth: int = field(default=0, repr=False, compare=False)

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
        try:
            return json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return {"current": None}
        except json.JSONDecodeError as err:
            raise BadInput(
                f"{self.state_path} is not valid JSON ({err}); restore it from {self.state_path}.bak"
            ) from None

    def save_state(self, state: dict) -> None:
        """Atomic replace, keeping the previous version as .bak."""
        state["updated_at"] = format_iso(now())
        write_text_atomic(self.state_path, json.dumps(state, indent=2) + "\n", backup=True)

    @contextlib.contextmanager
    def lock(self):
        """Exclusive across processes (reentrant within one): recording an attempt is a
        read-check-append-clear sequence that two commands must never interleave."""
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        with open(self.folder / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            self._lock_depth = 1
            try:
                yield
            finally:
                self._lock_depth = 0

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

    def verdict(self, at: datetime | None = None):
        from autoresearch_skills.stoprule import evaluate

        return evaluate(
            self.settings.stop_rules(), self.rows(), at=at, started_at=parse_iso(self.settings.created_at)
        )


def _campaigns_root(repo: Path) -> Path:
    return repo / CAMPAIGNS_DIR


def load(folder: Path) -> Campaign:
    from autoresearch_skills.yamlfile import read_yaml

    config = folder / "campaign.yaml"
    data = read_yaml(config, missing_hint="not a campaign folder; see `ars campaign init --help`")
    if not isinstance(data, dict):
        raise BadInput(f"{config} is not a campaign settings file (expected a mapping)")
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
    gitflow.ignore_folder(_campaigns_root(repo))
    (folder / "runs").mkdir(parents=True, exist_ok=True)
    campaign = Campaign(folder, settings)
    write_settings(campaign)
    ledger.init(campaign.ledger)
    campaign.save_state(
        {
            "current": None,
            "home_branch": gitflow.current_branch(repo),
            "start_tree": gitflow.tree_state(repo).summary(),
        }
    )
    if folder.parent == _campaigns_root(repo):
        (folder.parent / ".current").write_text(slug + "\n")
    return campaign


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
    from autoresearch_skills import gitflow, ledger

    rows = campaign.rows()
    s = campaign.settings
    verdict = campaign.verdict()
    best = ledger.best(rows, s.direction)
    state = campaign.load_state()
    current = state.get("current")
    running = None
    if current and current.get("run"):
        running = (
            f"{current['branch']} (run {current['run'].get('run_id')}, log {current['run'].get('log_path')})"
        )
    try:
        branch = gitflow.current_branch(s.repo)
    except BadInput:
        branch = "(detached HEAD)"

    def describe(row) -> str | None:
        if row is None:
            return None
        value = f"{row.metric_value:.6f}" if row.status in ("keep", "discard") else "no metric"
        return f"#{row.index} {row.status} {s.metric} {value} on {row.branch} @ {row.commit[:8]}: {row.description}"

    return {
        "name": s.name,
        "folder": str(campaign.folder),
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
        "best": describe(best),
        "best_row": best.to_dict() if best else None,
        "latest": describe(rows[-1] if rows else None),
        "current_branch": branch,
        "current_experiment": current,
        "running": running,
        "pending_decision": (current or {}).get("result")
        if current and current.get("phase") == "decide"
        else None,
    }


