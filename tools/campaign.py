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

import click

from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.clock import format_duration, format_iso, now, parse_iso
from autoresearch_skills.errors import BadInput, run_cli

CAMPAIGNS_DIR = Path("reports") / "auto_research"
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


# ---------------------------------------------------------------- command line


@click.group("campaign")
def cli() -> None:
    """Campaigns: settings, ledger and state for one research objective.

    \b
    Examples:
      ars campaign init lr-sweep --metric val_bpb --direction min \\
          --stop "24 experiments or 6h total, 10m each" --command "python train.py"
      ars campaign status
    """


@cli.command("init")
@click.argument("name")
@click.option("--metric", required=True, help="the metric the ledger ranks by, e.g. val_bpb")
@click.option(
    "--direction", type=click.Choice(["min", "max"]), required=True, help="lower or higher is better"
)
@click.option("--command", "command", required=True, help='the training command, e.g. "uv run train.py"')
@click.option("--stop", "stop_text", help='stop rule in words: "24 experiments or 6h total, 10m each"')
@click.option("--prefix", help="branch prefix (default autoresearch/<YYYYmmdd>-<name>)")
@click.option("--launcher", type=click.Choice(LAUNCHERS), default="local", show_default=True)
@click.option(
    "--preset",
    type=click.Choice(PRESETS),
    default="karpathy",
    show_default=True,
    help="how to read the metric from the log",
)
@click.option(
    "--strategy",
    type=click.Choice(["branches", "ratchet"]),
    default="branches",
    show_default=True,
    help="ratchet: one branch, reset on discard (only when asked for)",
)
@click.option(
    "--worktrees",
    type=click.Choice(["auto", "always", "off"]),
    default="auto",
    show_default=True,
    help="run in a git worktree when the tree has uncommitted changes",
)
@click.option(
    "--decide",
    type=click.Choice(["auto", "manual"]),
    default="auto",
    show_default=True,
    help="manual: `ars exp mark` writes the row",
)
@click.option("--keep-ties", is_flag=True, help="a result equal to the best counts as kept")
@click.option("--socket", "tmux_socket", help="private tmux server (-L) for the tmux launcher")
@click.option(
    "--keep-sessions",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="tmux sessions of the latest finished runs left open; older ones are closed (logs stay)",
)
@click.option(
    "--dir",
    "folder",
    type=click.Path(file_okay=False, path_type=Path),
    help="campaign folder (default reports/auto_research/<name>)",
)
@click.option("--json", "as_json", is_flag=True)
def init_cmd(
    name,
    metric,
    direction,
    command,
    stop_text,
    prefix,
    launcher,
    preset,
    strategy,
    worktrees,
    decide,
    keep_ties,
    tmux_socket,
    keep_sessions,
    folder,
    as_json,
) -> None:
    """Create a campaign: folder, settings, empty ledger, absolute deadline.

    Refuses to overwrite an existing campaign. Reports the working tree: uncommitted
    work is never stashed, reset or committed; experiments then run in worktrees.

    \b
    Examples:
      ars campaign init lr-sweep --metric val_bpb --direction min \\
          --stop "24 experiments or 6h total, 10m each" --command "uv run train.py" --launcher tmux
      ars campaign init rl-reward --metric validation/accuracy --direction max \\
          --preset nemo-rl --command "bash run_grpo.sh" --stop "10 experiments"
    """
    from autoresearch_skills import gitflow

    campaign = create(
        name, metric, direction, command, stop_text=stop_text, prefix=prefix, launcher=launcher, preset=preset,
        folder=folder, strategy=strategy, worktrees=worktrees, decide=decide, keep_ties=keep_ties, tmux_socket=tmux_socket,
        keep_sessions=keep_sessions,
    )  # fmt: skip
    s = campaign.settings
    tree = gitflow.tree_state(s.repo)
    facts = {
        "campaign": s.name,
        "folder": str(campaign.folder),
        "ledger": str(campaign.ledger),
        "metric": f"{s.metric} ({s.direction})",
        "command": s.command,
        "launcher": s.launcher,
        "prefix": s.prefix,
        "stop_rules": campaign.settings.stop_rules().describe(),
        "deadline": s.stop.get("deadline", "none"),
        "working_tree": tree.summary(),
        "isolation": _isolation(s.worktrees, tree),
        "next": "ars exp baseline",
    }
    if as_json:
        click.echo(json.dumps(facts, indent=2))
        return
    for key, value in facts.items():
        for line in value if isinstance(value, list) else [value]:
            click.echo(f"{key}: {line}")


def _isolation(worktrees: str, tree) -> str:
    if worktrees == "always" or (worktrees == "auto" and tree.dirty_tracked):
        return "experiments run in git worktrees (your uncommitted changes stay untouched)"
    if tree.dirty_tracked:
        return "worktrees are off and the tree has uncommitted changes: experiments will refuse to start"
    return "experiments run in place (tree clean)"


@cli.command("status")
@click.option("--campaign", "ref", help="campaign name or folder (default: the current one)")
@click.option("--json", "as_json", is_flag=True)
def status_cmd(ref: str | None, as_json: bool) -> None:
    """Attempted and remaining, best so far, current branch, running experiment, verdict.

    Exit 0 while the campaign should go on, 1 once a stop condition is met.

    \b
    Examples:
      ars campaign status
      ars campaign status --campaign lr-sweep --json
    """
    facts = status_facts(find(ref))
    if as_json:
        click.echo(json.dumps(facts, indent=2, default=str))
    else:
        for key in ("name", "folder", "metric", "direction", "stop_rules", "deadline", "attempted",
                    "remaining_experiments", "remaining_time", "best", "latest", "current_branch", "running"):  # fmt: skip
            value = facts[key]
            click.echo(f"{key}: {value if value is not None else '-'}")
        if facts["pending_decision"]:
            click.echo(
                f"pending_decision: {facts['pending_decision']} (decide with `ars exp mark keep|discard|crash`)"
            )
        click.echo(facts["verdict"])
    raise SystemExit(0 if facts["should_continue"] else 1)


interrupt_option = click.option(
    "--on-interrupt",
    type=click.Choice(["wait", "cancel"]),
    default="wait",
    show_default=True,
    help="on Ctrl-C/SIGTERM: let the current run finish, or cancel it; its row is written either way",
)


@cli.command("run")
@click.argument("campaign_file", type=click.Path(dir_okay=False, path_type=Path))
@interrupt_option
@click.option("--json", "as_json", is_flag=True, help="one JSON object per event")
def run_cmd(campaign_file: Path, on_interrupt: str, as_json: bool) -> None:
    """Run a campaign unattended: baseline, then proposals until a stop rule is met.

    Creates the campaign on first use (from the file); a second call continues it.
    Proposals come from the file's `policy:` (queue, grid, random or command).

    \b
    Examples:
      ars campaign run campaign.yaml
      ars campaign run campaign.yaml --on-interrupt cancel --json
    """
    from autoresearch_skills import loop

    raise SystemExit(loop.run_campaign(loop.open_campaign(campaign_file), on_interrupt, as_json))


@cli.command("resume")
@click.argument("ref", required=False)
@interrupt_option
@click.option("--json", "as_json", is_flag=True, help="one JSON object per event")
def resume_cmd(ref: str | None, on_interrupt: str, as_json: bool) -> None:
    """Continue an interrupted or crashed campaign loop (adopts a run still going).

    \b
    Examples:
      ars campaign resume
      ars campaign resume tiny-lm-demo
    """
    from autoresearch_skills import loop

    raise SystemExit(loop.resume(ref, on_interrupt, as_json))


def main() -> None:
    run_cli(cli, prog_name="campaign.py")


if __name__ == "__main__":
    main()
