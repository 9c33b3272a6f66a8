"""`ars hook stop|session-start|pre-compact`: lifecycle hooks that keep a coding agent (Claude Code,
Codex) on its research campaign across stops, restarts and compactions.

Contract, as the agent's harness sees it:

    stdin   the hook's JSON: session_id, transcript_path, cwd, hook_event_name; Stop adds
            stop_hook_active, SessionStart adds source (startup|resume|clear|compact), PreCompact
            adds trigger (manual|auto). Empty or broken input reads as {} in the process's cwd.
    stdout  stop           {"decision": "block", "reason": ...} while a campaign here should go
                           on; nothing when the agent may stop (once, after giving up on a stuck
                           agent, {"systemMessage": ...} tells the user why)
            session-start  {"hookSpecificOutput": {"hookEventName": "SessionStart",
                           "additionalContext": ...}}: the `ars memory resume` restatement and the
                           next command; nothing when this repository has no record and no campaign
            pre-compact    nothing; a timeline entry goes into the newest session record
    exit    always 0, even on bad options or an internal error (one line on stderr then): for a
            Stop hook, Claude Code reads exit 2 as "block", and a hook must never trap the agent.

Which campaigns: those under `reports/auto_research/` of the repository around `cwd` (found by
walking up, which also covers the campaigns' own worktrees inside their folders, or through git's
common dir from a linked worktree elsewhere). When `cwd` is inside a campaign's folder, that one
alone; otherwise the current one (`.current`) and any other with an experiment in flight.
`$ARS_CAMPAIGN` (a folder or a name) names one explicitly.

When the Stop hook lets the agent stop: the stop condition is met, the campaign is paused
(`ars campaign pause`), the unattended loop drives it (a `policy:`), no campaign is here, or the
agent already stopped `--max-blocks` times in a row (default 3) with no progress: no new ledger row
and no change in what is in flight. The count lives in `<campaign>/stop_hook.json`, keyed by that
progress; a stop that follows a user turn (`stop_hook_active` false) starts a new count, so a stuck
agent is sent back at most `--max-blocks` times per turn and never looped forever.

Speed (bench/bench_hooks.py; goal: under 150 ms with an active campaign): with no campaign around,
a hook reads its input, looks for the folders and exits; the campaign modules load only when there
is one, and then only the campaign's facts and its rules (settings, state, ledger, stop and keep
rules), not the engine: the launchers load only to restate an experiment in flight, and PyYAML
only when campaign.yaml changed since its parse was remembered (`.campaign.yaml.json`). Each file is
read once per campaign (campaign.yaml, state.json, results.tsv), and its rows and verdict are
handed to whatever asks again (the rerun owed, the next step). The stop hook starts no process;
session-start starts one git process, for the branch it prints.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click

if not __package__:  # run as `python tools/hooks.py` from a checkout with nothing installed
    import _checkout  # noqa: F401

from autoresearch_skills.campaign.paths import CAMPAIGNS_DIR

SESSION_DIR = "session"  # as session_record.DEFAULT_ROOT (not imported: the fast path stays light)
COUNTER_FILE = "stop_hook.json"
DEFAULT_MAX_BLOCKS = 3
HOOK_TIMEOUT = 30  # seconds the harness gives each hook; ours answer in a fraction of one


@dataclass(frozen=True)
class HookSpec:
    """One hook as the harness registers it: event name, our sub-command, matcher."""

    event: str
    command: str
    matcher: str | None = None


HOOKS = (
    HookSpec("Stop", "stop"),
    HookSpec("SessionStart", "session-start", "startup|resume|clear|compact"),
    HookSpec("PreCompact", "pre-compact"),
)
# Our entries in a settings file, whatever path the ars command is called by.
OURS = re.compile(r"(?:^|[\s/\"'])ars[\"']? hook (?:stop|session-start|pre-compact)\b")
PLUGIN_LAUNCHER = 'sh "${CLAUDE_PLUGIN_ROOT}/hooks/ars-hook"'


def hook_table(command_prefix: str = "ars hook") -> dict:
    """The `hooks` mapping in Claude Code's (and Codex's) format, commands `<prefix> <name>`."""
    table: dict = {}
    for spec in HOOKS:
        group: dict = {"matcher": spec.matcher} if spec.matcher else {}
        group["hooks"] = [
            {"type": "command", "command": f"{command_prefix} {spec.command}", "timeout": HOOK_TIMEOUT}
        ]
        table[spec.event] = [group]
    return table


# ---------------------------------------------------------------- settings files


def merge_settings(data: dict, remove: bool = False) -> dict:
    """`data` (a settings.json or hooks.json object) with our hooks in it once, at the end of each
    event's list, or (`remove`) with every one of ours taken out. Other hooks, their order and every
    other setting stay as they are; a group that held only ours goes with them."""
    from autoresearch_skills.errors import BadInput

    if not isinstance(data, dict):
        raise BadInput("the settings file must hold a JSON object")
    data = json.loads(json.dumps(data))  # a deep copy
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict):
        raise BadInput('the settings file\'s "hooks" must be an object of event names')
    emptied = set()
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            raise BadInput(f'the settings file\'s "hooks.{event}" must be a list')
        kept = []
        for group in groups:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            if isinstance(handlers, list):
                others = [
                    h
                    for h in handlers
                    if not (isinstance(h, dict) and OURS.search(str(h.get("command", ""))))
                ]
                if len(others) < len(handlers):
                    if not others:
                        continue
                    group = {**group, "hooks": others}
            kept.append(group)
        if groups and not kept:
            emptied.add(event)
        hooks[event] = kept
    if not remove:
        for event, groups in hook_table().items():
            hooks.setdefault(event, []).extend(groups)
    for event in emptied:
        if not hooks[event]:
            del hooks[event]
    if hooks:
        data["hooks"] = hooks
    else:
        data.pop("hooks", None)
    return data


def has_ours(data: dict) -> bool:
    groups = (data.get("hooks") or {}).values() if isinstance(data, dict) else []
    return any(
        OURS.search(str(h.get("command", "")))
        for group in groups
        if isinstance(group, list)
        for g in group
        if isinstance(g, dict)
        for h in g.get("hooks") or []
        if isinstance(h, dict)
    )


def install_settings(path: Path, remove: bool = False) -> str:
    """Merge our hooks into the settings file at `path` (or take them out); returns what happened:
    added, updated, unchanged, removed or absent. Written whole by atomic replace, indented, only
    when something changed; a symlinked file (dotfiles) is updated where it points."""
    from autoresearch_skills.atomicfile import write_text_atomic
    from autoresearch_skills.errors import BadInput

    target = path.resolve() if path.is_symlink() else path
    try:
        text = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = None
    try:
        data = json.loads(text) if text and text.strip() else {}
    except json.JSONDecodeError as err:
        raise BadInput(
            f"{path} line {err.lineno}: not valid JSON ({err.msg}); fix it first, nothing was changed"
        ) from None
    if not isinstance(data, dict):
        raise BadInput(f"{path} must hold a JSON object; nothing was changed")
    try:
        merged = merge_settings(data, remove)
    except BadInput as err:
        raise BadInput(f"{path}: {err.message}; nothing was changed") from None
    if merged == data and text is not None:
        return "unchanged" if has_ours(data) or not remove else "absent"
    if remove and text is None:
        return "absent"
    mode = target.stat().st_mode & 0o777 if target.exists() else None
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(target, json.dumps(merged, indent=2, ensure_ascii=False) + "\n")
    if mode is not None:
        target.chmod(mode)
    if remove:
        return "removed"
    return "updated" if has_ours(data) else "added"


# ---------------------------------------------------------------- where the campaigns are


def read_event(stream=None) -> dict:
    """The hook's JSON input; {} when there is none (a person running the hook by hand)."""
    stream = stream or sys.stdin
    try:
        if stream.isatty():
            return {}
        text = stream.read()
    except (OSError, ValueError):
        return {}
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def event_cwd(event: dict) -> Path:
    cwd = event.get("cwd") or os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd()
    return Path(cwd).expanduser().resolve()


@functools.lru_cache(maxsize=8)
def _git_common_root(cwd: Path) -> Path | None:
    """The main work tree when `cwd` is inside a linked worktree, read from the files git keeps
    (`.git` names the worktree's git dir, whose `commondir` names the shared one): no git process,
    so the hooks stay fast. None inside a main work tree or outside any repository."""
    for folder in (cwd, *cwd.parents):
        marker = folder / ".git"
        if marker.is_dir():
            return None  # a main work tree: the walk up has already looked at its top
        if marker.is_file():
            try:
                gitdir = Path(marker.read_text().split("gitdir:", 1)[1].strip())
                gitdir = gitdir if gitdir.is_absolute() else (folder / gitdir)
                common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
            except (OSError, IndexError):
                return None
            return common.parent if common.name == ".git" else None
    return None


def find_up(cwd: Path, name: str | Path) -> Path | None:
    """The nearest folder at or above `cwd` that holds `name`, else the main work tree of its
    git repository when that one holds it (a linked worktree outside the repository)."""
    for folder in (cwd, *cwd.parents):
        if (folder / name).is_dir():
            return folder
    root = _git_common_root(cwd)
    return root if root and (root / name).is_dir() else None


def _in_flight(folder: Path) -> list:
    """The experiments in flight in a campaign folder, read through state.json's owner (loaded
    only once a campaign is around: the hooks' fast path stays light)."""
    from autoresearch_skills.campaign.state import StateFile
    from autoresearch_skills.errors import BadInput

    try:
        return list(StateFile(folder).read().experiments.values())
    except (BadInput, OSError):
        return []


def candidate_folders(root: Path, cwd: Path) -> list[Path]:
    """Campaign folders the hooks act on, most specific first (see the module docstring)."""
    base = root / CAMPAIGNS_DIR
    named = os.environ.get("ARS_CAMPAIGN")
    if named:
        for folder in (Path(named).expanduser(), base / named):
            if (folder / "campaign.yaml").is_file():
                return [folder.resolve()]
    with contextlib.suppress(ValueError):
        inside = cwd.relative_to(base.resolve()).parts
        if inside and (base / inside[0] / "campaign.yaml").is_file():
            return [(base / inside[0]).resolve()]
    found: list[Path] = []
    with contextlib.suppress(OSError):
        current = (base / ".current").read_text().strip()
        if current and (base / current / "campaign.yaml").is_file():
            found.append((base / current).resolve())
    with contextlib.suppress(OSError):
        for folder in sorted(p.resolve() for p in base.iterdir() if (p / "campaign.yaml").is_file()):
            if folder not in found and _in_flight(folder):
                found.append(folder)
    return found


def campaign_ref(folder: Path, root: Path, cwd: Path) -> str:
    """How the next command names the campaign: by name from the repository itself (not from a
    worktree, whose checkout has no reports/ folder), else by its folder."""
    inside_repo = cwd == root or root in cwd.parents
    inside_campaign = cwd == folder or folder in cwd.parents
    if inside_repo and not inside_campaign and folder.parent == (root / CAMPAIGNS_DIR).resolve():
        return folder.name
    import shlex

    return shlex.quote(str(folder))


# ---------------------------------------------------------------- what to do next


def next_step(campaign, rows: list, experiments: list, ref: str, state=None, verdict=None) -> str:
    """The command(s) that move the campaign on, from its ledger and what is in flight (`state`
    and `verdict`: state.json and the stop verdict as the caller has them, else read again)."""
    flag = f" --campaign {ref}"
    many = len(experiments) > 1
    steps = []
    waiting = [e for e in experiments if e.phase.value in ("running", "queued")]
    if waiting:
        names = ", ".join(e.key for e in waiting)
        steps.append(f"`ars exp wait{flag}` ({names} in flight: it reports each row as its run ends)")
    for item in experiments:
        slug = f" {item.key}" if many else ""
        if item.phase.is_finished:
            value = item.result.metric_value if item.result else None
            shown = f"{campaign.settings.metric} {value}" if value is not None else "its result"
            steps.append(
                f'`ars exp mark keep|discard{slug} --reason "..."{flag}` (decide {item.key}: {shown})'
            )
        elif item.phase.is_open and item.key == "baseline":
            steps.append(f"`ars exp run{slug}{flag}` (runs the baseline: the code as it is)")
        elif item.phase.is_open:
            where = f" in {item.workdir}" if item.workdir else ""
            steps.append(f"edit the files of {item.key}{where}, then `ars exp run{slug}{flag}`")
    owed = _owed_rerun(campaign, state, rows, verdict) if not experiments and rows else None
    if owed is not None:
        steps.append(f"`ars exp rerun '#{owed.rerun_of}'{flag}` ({owed.reason})")
    elif not experiments:
        if not rows:
            steps.append(f"`ars exp baseline{flag}` (the baseline comes first)")
        else:
            steps.append(
                "choose the next hypothesis from the ledger and the last log, then "
                f'`ars exp start SLUG -m "HYPOTHESIS: REASON"{flag}`, edit, `ars exp run{flag}`'
            )
    return "; ".join(steps)


def _owed_rerun(campaign, state=None, rows: list | None = None, verdict=None):
    """The rerun the keep rule owes (`campaign/owed.py`: the rules and the campaign's facts, never
    the run machinery), asked only where the answer needs it: not while an experiment is in flight
    or before the first row. `state`, `rows` and `verdict` as the hook has them: the ledger is
    parsed once."""
    from autoresearch_skills.campaign.owed import owed_rerun

    return owed_rerun(campaign, state, rows, verdict)


def progress_key(rows: list, experiments: list) -> str:
    """Changes whenever the agent moves the campaign: a new row, an experiment opened, launched,
    finished or decided."""
    phases = sorted(f"{e.key}:{e.phase.value}" for e in experiments)
    return f"rows={len(rows)} " + ",".join(phases)


# ---------------------------------------------------------------- stop


@dataclass
class StopDecision:
    """The Stop hook's answer: block, with the reason the agent reads, or let the agent stop."""

    block: bool
    reason: str  # to the agent when blocking; why the stop is allowed otherwise
    campaign: str | None = None
    notice: str | None = None  # shown to the user once (systemMessage)
    notes: list[str] = field(default_factory=list)

    def output(self) -> str:
        if self.block:
            return json.dumps({"decision": "block", "reason": self.reason})
        if self.notice:
            return json.dumps({"systemMessage": self.notice})
        return ""


def _read_counter(folder: Path) -> dict:
    try:
        data = json.loads((folder / COUNTER_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_counter(folder: Path, record: dict) -> None:
    """Replaced whole (a reader sees the old count or the new one), without fsync: a count lost to
    a power cut only starts the count again, and the agent waits for this hook at every stop."""
    from autoresearch_skills.atomicfile import write_text_atomic
    from autoresearch_skills.clock import now_iso

    text = json.dumps({**record, "updated_at": now_iso()}, indent=2) + "\n"
    write_text_atomic(folder / COUNTER_FILE, text, durable=False)


def decide_stop(event: dict, max_blocks: int = DEFAULT_MAX_BLOCKS) -> StopDecision:
    if max_blocks <= 0:
        return StopDecision(False, "blocking is off (--max-blocks 0)")
    cwd = event_cwd(event)
    root = find_up(cwd, CAMPAIGNS_DIR)
    if root is None:
        return StopDecision(False, f"no campaign under {cwd}")
    folders = candidate_folders(root, cwd)
    if not folders:
        return StopDecision(False, f"no active campaign in {root / CAMPAIGNS_DIR}")
    from autoresearch_skills.campaign import store

    chained = event.get("stop_hook_active") is True
    notes: list[str] = []
    notice = None
    for folder in folders:
        campaign = store.load(folder)
        name = campaign.settings.name
        if campaign.paused:
            notes.append(f"{name}: paused ({campaign.paused})")
            continue
        if campaign.settings.policy:
            notes.append(f"{name}: the unattended loop drives it (`ars campaign status` to check on it)")
            continue
        state = campaign.state.read()
        experiments = list(state.experiments.values())
        rows = campaign.rows()
        verdict = campaign.verdict(state=state, rows=rows)
        # A count met leaves the reruns the keep rule owes (screening's finish, the noise rule's
        # confirmations), while time remains: the best must not rest on one draw when reported.
        owed = (
            _owed_rerun(campaign, state, rows, verdict)
            if not verdict.should_continue and not experiments
            else None
        )
        if not verdict.should_continue and owed is None:
            notes.append(f"{name}: {verdict.line}")
            continue
        key = progress_key(rows, experiments)
        counter = _read_counter(folder)
        # a stop right after a user turn starts a new chain; a stop the hook itself caused continues it
        blocks = counter.get("blocks", 0) if chained and counter.get("progress") == key else 0
        if blocks >= max_blocks:
            notes.append(f"{name}: {blocks} blocks without progress, letting the agent stop")
            if not counter.get("gave_up"):
                notice = (
                    f"autoresearch: campaign {name} is not finished ({verdict.line}), but the agent stopped "
                    f"{blocks} times in a row without a new ledger row; it may stop now. "
                    f"`ars campaign status` shows where it is; `ars campaign pause` silences the stop hook."
                )
                _write_counter(folder, {**counter, "gave_up": True})
            continue
        _write_counter(folder, {"progress": key, "blocks": blocks + 1, "gave_up": False})
        ref = campaign_ref(folder, root, cwd)
        if owed is not None:
            reason = (
                f"Campaign {name}: {verdict.line}, but the keep rule still owes a rerun before the end: "
                f"`ars exp rerun '#{owed.rerun_of}' --campaign {ref}` ({owed.reason}). Run it, then report "
                f"the best with its verdict (`ars campaign status`: claim) and the runs it rests on. "
                f"(autoresearch stop hook: block {blocks + 1} of {max_blocks} without progress)"
            )
            return StopDecision(True, reason, name, notes=notes)
        reason = (
            f"Campaign {name} is not finished: {verdict.line}. "
            f"Next: {next_step(campaign, rows, experiments, ref, state, verdict)}. "
            "Keep going until the verdict says `stop condition met`, and report each result with its verdict "
            "line. If the user asked you to stop, run "
            f'`ars campaign pause --campaign {ref} --reason "..."` and then stop. '
            f"(autoresearch stop hook: block {blocks + 1} of {max_blocks} without progress)"
        )
        return StopDecision(True, reason, name, notes=notes)
    return StopDecision(False, "; ".join(notes) or "nothing to continue", notice=notice, notes=notes)


# ---------------------------------------------------------------- session start and compaction


def _sessions_root(cwd: Path, root: Path | None) -> Path | None:
    """Where the session records are: $ARS_SESSION_ROOT, or a `session/` folder with a record at
    or above `cwd` (or in the main work tree)."""
    from autoresearch_skills import session_record

    env = os.environ.get(session_record.ROOT_ENV)
    candidates = [Path(env)] if env else []
    if not env:
        found = find_up(cwd, SESSION_DIR)
        candidates += [found / SESSION_DIR] if found else []
        candidates += [root / SESSION_DIR] if root else []
    for folder in candidates:
        if session_record.newest(folder) is not None:
            return folder
    return None


def _nothing_here(cwd: Path) -> bool:
    """The fast check: no campaigns folder and no session record folder anywhere around."""
    if os.environ.get("ARS_SESSION_ROOT") or os.environ.get("ARS_CAMPAIGN"):
        return False
    return find_up(cwd, CAMPAIGNS_DIR) is None and find_up(cwd, SESSION_DIR) is None


def session_context(event: dict) -> str | None:
    """The restatement a fresh or compacted session starts from, or None when there is nothing."""
    cwd = event_cwd(event)
    if _nothing_here(cwd):
        return None
    from autoresearch_skills.campaign import store

    root = find_up(cwd, CAMPAIGNS_DIR)
    folders = candidate_folders(root, cwd) if root else []
    sessions = _sessions_root(cwd, root)
    if not folders:
        return _restated(event, _memory_resume(cwd, sessions).rstrip()) if sessions else None
    campaign = store.load(folders[0])
    state = campaign.state.read()
    rows = campaign.rows()
    verdict = campaign.verdict(state=state, rows=rows)
    active = bool(state.experiments) or verdict.should_continue
    if sessions is None and not active:
        return None
    lines = [_resume_text(cwd, sessions, campaign, state, rows, verdict).rstrip()]
    if campaign.paused:
        lines.append(
            f"paused: {campaign.paused}. Do not start new experiments until the user asks; "
            f"`ars campaign resume {campaign.settings.name}` clears the pause."
        )
    elif campaign.settings.policy:
        lines.append(
            "next: the unattended loop drives this campaign: check it with `ars campaign status`; "
            "if its process died, `ars campaign resume` continues it."
        )
    elif active and root is not None:  # root is where the campaign was found: never None here
        ref = campaign_ref(campaign.folder, root, cwd)
        experiments = list(state.experiments.values())
        lines.append(f"next: {next_step(campaign, rows, experiments, ref, state, verdict)}")
    return _restated(event, "\n".join(lines))


def _restated(event: dict, text: str) -> str:
    """`text` under the line that says what it is and why the session got it (its `source`)."""
    source = event.get("source") or "startup"
    header = f"autoresearch-skills ({source}): this repository has a research campaign or session record."
    return f"{header}\n\n{text}"


def _memory_resume(cwd: Path, sessions: Path) -> str:
    """`ars memory resume --root SESSIONS` as printed in `cwd`: a session record and no campaign."""
    from autoresearch_skills import memory

    restated = io.StringIO()
    with contextlib.redirect_stdout(restated), _chdir(cwd):
        memory.cli.main(["resume", "--root", str(sessions)], prog_name="ars memory", standalone_mode=False)
    return restated.getvalue()


def _resume_text(cwd: Path, sessions: Path | None, campaign, state, rows: list, verdict) -> str:
    """What `ars memory resume --root SESSIONS --campaign FOLDER` prints in `cwd` (the same
    `memory.render_resume`, the same side effect: a timeline entry in the record), from the files
    the hook has read already: only the facts it shows are gathered, so neither the launchers, the
    slot pool nor the outputs are loaded, and one git call asks for the branch it prints.
    tests/test_hooks.py holds the two texts equal."""
    from autoresearch_skills import memory
    from autoresearch_skills.session_record import newest

    session = newest(sessions) if sessions else None
    facts: dict = {"branch": _resume_branch(cwd)}
    if session:
        facts.update(memory.session_facts(session))
    facts["campaign"] = _campaign_facts(campaign, state, rows, verdict)
    if session:
        session.log("resume: context restored from the record")
    return memory.render_resume(facts)


def _campaign_facts(campaign, state, rows: list, verdict) -> dict:
    """The campaign's lines of the restatement, as `campaign/status.status_facts` gives them; the
    status module (and the launchers it reads a run's end with) loads only for an experiment in flight."""
    from autoresearch_skills.campaign import noise

    s = campaign.settings
    experiments = list(state.experiments.values())
    in_flight = []
    if experiments:
        from autoresearch_skills.campaign.status import in_flight_facts

        in_flight = [in_flight_facts(e) for e in experiments]
    best = noise.best(rows, s.direction)
    latest = rows[-1] if rows else None
    return {
        "name": s.name,
        "folder": str(campaign.folder),
        "metric": s.metric,
        "direction": s.direction,
        "stop_rules": s.stop_text or ", ".join(f"{k}={v}" for k, v in s.stop.items()),
        "verdict": verdict.line,
        "best": best.describe(s.metric) if best else None,
        "latest": _latest_line(latest, s.metric) if latest else None,
        "in_flight": in_flight,
        "running": "; ".join(f["line"] for f in in_flight if f["phase"] == "running") or None,
    }


def _latest_line(row, metric: str) -> str:
    """The latest row as it was written (status.py's `latest`)."""
    value = f"{row.metric_value:.6f}" if row.status.is_finished() else "no metric"
    return f"#{row.index} {row.status} {metric} {value} on {row.branch} @ {row.commit[:8]}: {row.text()}"


def _resume_branch(cwd: Path) -> str:
    """The branch `ars memory resume` names: checked out in `cwd`, `(detached)` on a detached HEAD,
    `(not a git repository)` outside one; one git process (exit 1: detached, 128: no repository)."""
    import subprocess

    done = subprocess.run(
        ["git", "symbolic-ref", "--quiet", "--short", "HEAD"], cwd=cwd, capture_output=True, text=True
    )
    if done.returncode == 0:
        return done.stdout.rstrip("\n") or "(detached)"
    return "(detached)" if done.returncode == 1 else "(not a git repository)"


@contextlib.contextmanager
def _chdir(folder: Path):
    """`ars memory resume` reads the branch from the working folder: the hook's cwd."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def checkpoint_before_compaction(event: dict) -> str | None:
    """Refresh the newest session record (branch, Updated) and add a timeline entry with the
    campaign's verdict; returns the entry, or None when there is no record."""
    cwd = event_cwd(event)
    if _nothing_here(cwd):
        return None
    from autoresearch_skills import memory
    from autoresearch_skills.campaign import store

    root = find_up(cwd, CAMPAIGNS_DIR)
    sessions = _sessions_root(cwd, root)
    session = memory.newest(sessions) if sessions else None
    if session is None:
        return None
    state = session.state()
    branch = _branch(cwd)
    state.branch = branch or state.branch
    session.save(state)
    entry = f"checkpoint before compaction ({event.get('trigger') or 'auto'})"
    folders = candidate_folders(root, cwd) if root else []
    if folders:
        campaign = store.load(folders[0])
        entry += f": campaign {campaign.settings.name}: {campaign.verdict().line}"
        running = [e.key for e in _in_flight(campaign.folder)]
        entry += f"; in flight: {', '.join(running) if running else 'nothing'}"
    session.log(entry)
    return entry


def _branch(cwd: Path) -> str:
    import subprocess

    try:
        done = subprocess.run(
            ["git", "symbolic-ref", "--quiet", "--short", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ("(detached)" if (cwd / ".git").exists() else "")


# ---------------------------------------------------------------- command line


def _guarded(name: str, action) -> None:
    """Run a hook so that nothing escapes: any error is one line on stderr and exit 0."""
    try:
        out = action()
    except Exception as err:  # a hook must never break or trap the agent's session
        message = getattr(err, "message", None) or str(err) or type(err).__name__
        click.echo(f"ars hook {name}: skipped ({type(err).__name__}: {' '.join(message.split())})", err=True)
        raise SystemExit(0) from None
    if out:
        click.echo(out)
    raise SystemExit(0)


class HookGroup(click.Group):
    """Usage mistakes exit 0 too (with one line on stderr): see the module docstring."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.ClickException as err:
            click.echo(f"ars hook: ignored: {' '.join(err.format_message().split())}", err=True)
            raise SystemExit(0) from None


@click.group("hook", cls=HookGroup)
def cli() -> None:
    """Agent hooks (Claude Code, Codex): keep going until the stop rule says stop, and restate
    the campaign after a restart or a compaction. They read the hook's JSON on stdin.

    Install them with `ars skills install --agent claude --hooks` (or use the plugin).
    Every hook exits 0; an internal error lets the agent go on and prints one line on stderr.

    \b
    Examples:
      echo '{"cwd": ".", "stop_hook_active": false}' | ars hook stop --explain
      echo '{"cwd": ".", "source": "compact"}' | ars hook session-start
      echo '{"cwd": ".", "trigger": "auto"}' | ars hook pre-compact
    """


@cli.command("stop")
@click.option(
    "--max-blocks",
    type=int,
    default=DEFAULT_MAX_BLOCKS,
    show_default=True,
    help="blocks in a row without progress before the agent may stop anyway",
)
@click.option("--explain", is_flag=True, help="say on stderr why the stop is blocked or allowed")
def stop_cmd(max_blocks: int, explain: bool) -> None:
    """Stop hook: block the agent's stop while a campaign here should go on.

    Prints {"decision": "block", "reason": ...} with the verdict line and the next command;
    nothing when the agent may stop (stop condition met, paused, no campaign, or it stopped
    --max-blocks times in a row without a new ledger row).

    \b
    Examples:
      echo '{"cwd": "/path/to/repo", "stop_hook_active": false}' | ars hook stop
      echo '{"cwd": "."}' | ars hook stop --max-blocks 5 --explain
    """

    def action() -> str:
        decision = decide_stop(read_event(), max(0, max_blocks))
        if explain:
            said = f"block ({decision.campaign})" if decision.block else f"allow: {decision.reason}"
            click.echo(f"ars hook stop: {said}", err=True)
        return decision.output()

    _guarded("stop", action)


@cli.command("session-start")
def session_start_cmd() -> None:
    """SessionStart hook: add the campaign and session record, restated, to the new context.

    Prints {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": ...}}
    with what `ars memory resume` says (objective, stop rules, verdict, branch, latest result,
    what is in flight) and the next command; nothing when there is neither record nor campaign.

    \b
    Examples:
      echo '{"cwd": "/path/to/repo", "source": "compact"}' | ars hook session-start
    """

    def action() -> str:
        text = session_context(read_event())
        if not text:
            return ""
        return json.dumps(
            {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}
        )

    _guarded("session-start", action)


@cli.command("pre-compact")
def pre_compact_cmd() -> None:
    """PreCompact hook: checkpoint the session record before the context is compacted.

    Adds a timeline entry (the campaign's verdict, what is in flight) to the newest record and
    refreshes its branch; prints nothing. Without a record it does nothing.

    \b
    Examples:
      echo '{"cwd": "/path/to/repo", "trigger": "auto"}' | ars hook pre-compact
    """

    def action() -> str:
        checkpoint_before_compaction(read_event())
        return ""

    _guarded("pre-compact", action)


def main() -> None:
    from autoresearch_skills.errors import run_cli

    run_cli(cli, prog_name="ars hook")


if __name__ == "__main__":
    main()
