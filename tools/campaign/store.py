"""A campaign: its folder, its settings (`campaign.yaml`), its in-flight state (`state.json`).

    reports/auto_research/<campaign>/
        campaign.yaml   what was decided at `ars campaign init` (metric, stop rules, deadline ...)
        .campaign.yaml.json  its text and parse, read instead while the text is the same (the hooks)
        results.tsv     the ledger: one row per finished attempt
        state.json      what is in flight: every open, queued or running experiment (atomic replace)
        runs/<launch>-<slug>/run.log
        worktrees/wt-<n>/   one git worktree per experiment in flight beside another one (or when
                            the user's tree has uncommitted changes); reused, removed at the end

The deadline is fixed here, once, when the campaign is created. `reports/auto_research/.current`
names the campaign that `ars exp ...` commands act on when none is given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from autoresearch_skills import ledger
from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.campaign import keeprule
from autoresearch_skills.campaign.paths import CAMPAIGNS_DIR
from autoresearch_skills.campaign.record import Experiment, Phase
from autoresearch_skills.campaign.settings import Settings, check_keys
from autoresearch_skills.campaign.state import CampaignState, StateFile
from autoresearch_skills.clock import format_iso, now, parse_iso
from autoresearch_skills.errors import BadInput
from autoresearch_skills.stoprule import Verdict, evaluate

PARSED_SETTINGS = ".campaign.yaml.json"  # campaign.yaml's text and parse: read_yaml_remembered
PAUSE_FILE = "paused"  # JSON {reason, at}: written by `ars campaign pause`, removed by `ars campaign resume`


@dataclass
class Campaign:
    """One campaign: its folder and its settings; its state.json and ledger are read through it."""

    folder: Path
    settings: Settings

    @property
    def ledger(self) -> Path:
        return self.folder / "results.tsv"

    @property
    def state(self) -> StateFile:
        """state.json's owner: every read and write of the in-flight state goes through it."""
        return StateFile(self.folder)

    @property
    def repo(self) -> Path:
        return Path(self.settings.repo)

    def lock(self) -> contextlib.AbstractContextManager[None]:
        """Exclusive across processes (reentrant within one): recording an attempt is a
        read-check-append-clear sequence that two commands must never interleave."""
        return self.state.lock()

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
        return ledger.read(self.ledger) if self.ledger.exists() else []

    def verdict(
        self,
        at: datetime | None = None,
        state: CampaignState | None = None,
        exclude: str | None = None,
        rows: list | None = None,
    ) -> Verdict:
        """The stop verdict; attempts still in flight (launched, not yet recorded) count as attempted.
        `exclude`: an experiment not to count (the one about to be launched). `state` and `rows`:
        as the caller read them (read here when not given), so the ledger is parsed once."""
        state = self.state.read() if state is None else state
        launched = [e for e in state.launched if e.key != exclude]
        rows = self.rows() if rows is None else rows
        return evaluate(
            self.settings.stop_rules(),
            rows,
            at=at,
            started_at=parse_iso(self.settings.created_at),
            # a rerun or a confirmation run at scale is no new experiment: it counts in time only
            in_flight=sum(1 for e in launched if not e.is_rerun and e.confirms is None),
            queued=sum(
                1 for e in launched if not e.is_rerun and e.confirms is None and e.phase is Phase.QUEUED
            ),
            repeats_running=sum(
                1 for e in launched if (e.is_rerun or e.confirms is not None) and e.phase is not Phase.QUEUED
            ),
            in_flight_gpu_hours=sum(_gpu_hours_so_far(e) for e in launched),
            reserve_seconds=self._finish_reserve(rows),
        )

    def _finish_reserve(self, rows: list) -> float:
        """The time kept for the keep rule's finish when a deadline ends the campaign."""
        rules = self.settings.stop_rules()
        if rules.deadline is None and rules.budget is None and rules.until is None:
            return 0.0
        return keeprule.finish_reserve(self.settings, rows)


def _gpu_hours_so_far(experiment: Experiment) -> float:
    devices = len(experiment.devices) or (experiment.gpus or 0)
    if not devices or not experiment.started_at:
        return 0.0
    return devices * max(0.0, (now() - parse_iso(experiment.started_at)).total_seconds()) / 3600


def _campaigns_root(repo: Path) -> Path:
    return repo / CAMPAIGNS_DIR


def load(folder: Path) -> Campaign:
    from autoresearch_skills.yamlfile import read_yaml_remembered

    config = folder / "campaign.yaml"
    hint = "not a campaign folder; see `ars campaign init --help`"
    data = read_yaml_remembered(config, folder / PARSED_SETTINGS, missing_hint=hint)
    if not isinstance(data, dict):
        raise BadInput(f"{config} is not a campaign settings file (expected a mapping)")
    check_keys(data, str(config))  # a hand edit with a typo must not be silently ignored
    known = {f.name for f in fields(Settings)}
    try:
        settings = Settings.from_mapping({k: v for k, v in data.items() if k in known})
    except TypeError as err:
        raise BadInput(f"{config}: {err}") from None
    except BadInput as err:
        raise BadInput(f"{config}: {err.message}") from None
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
    cwd: str | Path = ".",
    folder: Path | None = None,
    **options: Any,
) -> Campaign:
    """A new campaign folder: settings (`options`: any other key of settings.SETTINGS, its default
    when left out), empty ledger, state, and the deadline fixed from now."""
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
    settings = Settings.from_mapping(
        {
            "name": slug,
            "metric": metric,
            "direction": direction,
            "command": command,
            "repo": str(repo),
            "prefix": prefix.rstrip("/"),
            "created_at": format_iso(started),
            "stop_text": stop_text or "",
            "stop": {
                **rules.to_dict(),
                **({"max_experiments": rules.max_experiments} if rules.is_default else {}),
            },
            **options,
        }
    )
    if settings.keep_rule is None:  # a new campaign screens; unset, an older one keeps its ledger's rule
        settings = dataclasses.replace(settings, keep_rule=keeprule.SCREENING)
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
    with campaign.state.edit() as state:
        state.frozen = frozen_hashes(repo, "HEAD", settings.frozen_paths())
        state.home_branch = gitflow.current_branch(repo)
        state.start_tree = gitflow.tree_state(repo).summary()
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
    from autoresearch_skills.yamlfile import dump_yaml

    header = (
        "# autoresearch-skills campaign: decided at `ars campaign init`; the deadline is absolute.\n"
        "# Edit with care: the ledger and branches of this campaign follow these settings.\n"
    )
    write_text_atomic(campaign.folder / "campaign.yaml", header + dump_yaml(campaign.settings.to_mapping()))
