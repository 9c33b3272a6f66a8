"""The allow-rules an unattended campaign needs, merged into a coding agent's settings, and nothing
broader: `ars skills install --permissions` (an agent left overnight must not stop at a prompt).

The rules (`RULES`, and `command_rules` for the campaign's own command), each a command prefix:

    ars                       every ars command: the campaign's writes (commits, worktrees, rows) go
                              through it. ars starts runs, and `ars run -- CMD` any command: this
                              rule trusts the agent with what a campaign may run, as the user does
                              when they leave it the night
    git status|log|diff|show|rev-parse, git branch --list|--show-current, git worktree list
                              reads only: no push, reset, checkout or commit
    tmux ls|list-sessions|capture-pane|has-session
                              reads of the runs' sessions (and the same on the campaign's private
                              server, `tmux -L NAME ...`, when `tmux_socket:` names one); no attach,
                              no kill
    tail                      reading a run's log (`tail -n 40 LOG`, as the skills say): reads only
    python tools/tmux_wait.py the waiter the skills show in a checkout
    the campaign's command    its program up to the script or module it runs (`python train.py`,
                              `uv run train.py`, `torchrun --nproc_per_node 8 train.py`), one rule
                              per command of a line (`cd`, `export` and the like need none)

A prefix that would run whatever it is given (`bash -c ...`, `python -c ...`, `sudo ...`,
`env ...`, a bare interpreter) is never written: a rule for it would allow every command
(`refusal`). Neither is a rule Claude Code would read as a wildcard (`*`) or could not hold (`(`,
`)`).

Where they go:

    Claude Code  `permissions.allow` of .claude/settings.json (project) or ~/.claude/settings.json
                 (user), as `Bash(PREFIX:*)`: Claude Code's prefix form, which matches PREFIX alone or
                 followed by a space and anything, one command of a compound line at a time.
                 Beside it, `ars-permissions.json` records the rules ars added: a rule that was in
                 the list before ars added it is never recorded, so `--remove` (which takes out
                 exactly the recorded rules, then the record) never touches the user's own rules,
                 even identical ones. The settings file is written before the record, so a crash
                 between the two leaves a rule unrecorded (kept for good), never a user's rule
                 recorded. A rule ars added stays ours (each install keeps in the record only the
                 rules still in the list): to keep one after `--remove`, add it again afterwards.
    Codex        .codex/rules/ars.rules (project; Codex loads it once the project is trusted) or
                 ~/.codex/rules/ars.rules (user): one `prefix_rule(pattern = [...], decision =
                 "allow")` per rule, Codex's own per-command allow list (leading `NAME=VALUE` words
                 are left out: Codex matches the words a command runs). The whole file is ours: it
                 starts with `HEADER`, a file without it is never touched, `--remove` deletes it.
                 Codex runs an allowed command without asking and outside its sandbox;
                 `approval_policy` and `sandbox_mode` in config.toml are left as they are.

Installing only adds: re-running with nothing new changes nothing, and a rule for a campaign's
earlier command stays until `--remove`. Every write is atomic (`atomicfile`); a settings file that
is not valid JSON, or holds `permissions.allow` in another shape, is refused with one line and never
overwritten.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autoresearch_skills import commandline
from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.errors import BadInput
from autoresearch_skills.launch.tmuxcmd import socket_args

PERMISSION_FILES = {
    "claude": Path(".claude") / "settings.json",
    "codex": Path(".codex") / "rules" / "ars.rules",
}
RECORD_FILE = "ars-permissions.json"  # beside Claude Code's settings.json: the rules ars added
RECORD_ABOUT = (
    "rules `ars skills install --permissions` added; `--permissions --remove` takes out exactly these"
)
HEADER = (
    "# Written by `ars skills install --permissions`; `ars skills install --permissions --remove` deletes it.\n"
    "# Rewritten by ars: put your own rules in another .rules file of this folder.\n"
)


@dataclass(frozen=True)
class Allow:
    """One allow-rule: a command prefix, as the shell splits it."""

    words: tuple[str, ...]

    @property
    def prefix(self) -> str:
        return shlex.join(self.words)

    @property
    def claude(self) -> str:
        return f"Bash({self.prefix}:*)"

    @property
    def codex(self) -> str:
        """Codex matches the words a command runs, never leading `NAME=VALUE` ones: they are left out."""
        words = list(self.words)
        while len(words) > 1 and commandline.ASSIGNMENT.fullmatch(words[0]):
            words.pop(0)
        return f'prefix_rule(pattern = {json.dumps(words, ensure_ascii=False)}, decision = "allow")'


def _rules(*prefixes: str) -> tuple[Allow, ...]:
    return tuple(Allow(tuple(p.split())) for p in prefixes)


GIT_READS = ("git status", "git log", "git diff", "git show", "git rev-parse", "git branch --list", "git branch --show-current", "git worktree list")  # fmt: skip
TMUX_READS = ("ls", "list-sessions", "capture-pane", "has-session")  # tmux sub-commands that change nothing
RULES = _rules("ars", *GIT_READS, *(f"tmux {sub}" for sub in TMUX_READS), "tail", "python tools/tmux_wait.py")

# Programs that run whatever their arguments say: a prefix that ends with one of them (no script or
# module after it) would allow every command.
RUNS_ANYTHING = {
    "bash", "sh", "zsh", "dash", "ksh", "fish", "csh", "tcsh", "pwsh", "powershell",          # shells
    "python", "pypy", "pypy3", "node", "perl", "ruby", "php", "lua", "Rscript", "julia", "deno", "bun", "osascript",  # interpreters
    "sudo", "doas", "su", "runuser", "env", "xargs", "eval", "exec", "command", "builtin", "nohup", "nice", "time",
    "timeout", "setsid", "stdbuf", "taskset", "numactl", "chrt", "ionice", "flock", "watch", "parallel", "ssh",
    "srun", "sbatch", "salloc", "xvfb-run", "uv", "uvx", "npx", "pipx", "poetry", "conda", "pixi",
    "torchrun", "deepspeed", "accelerate", "docker", "podman", "kubectl", "apptainer", "singularity",
}  # fmt: skip
# Interpreters commandline.py does not read: their first plain word is the script they run.
SCRIPT_FIRST = {"node", "perl", "ruby", "php", "lua", "Rscript", "julia", "deno", "bun"}


def _base(program: str) -> str:
    return re.sub(r"(?<=python)[\d.]+$", "", posixpath.basename(program))  # python3.11 -> python


def refusal(words: tuple[str, ...]) -> str | None:
    """Why no rule may allow this prefix (None: it may): it would allow every command, or Claude
    Code would read it as something else."""
    if not words:
        return "an empty prefix matches every command"
    if _base(words[-1]) in RUNS_ANYTHING:
        return f"`{shlex.join(words)}` runs whatever it is given, so a rule for it would allow every command"
    if words[-1] in ("-c", "-lc", "-e", "--eval", "-Command"):
        return f"`{shlex.join(words)}` runs the code it is given, so a rule for it would allow every command"
    text = shlex.join(words)
    if "*" in text:
        return f"`{text}` holds `*`, which an allow-rule reads as a wildcard"
    if "(" in text or ")" in text:
        return f"`{text}` holds a parenthesis, which a Claude Code rule cannot hold"
    return None


@dataclass
class CommandRules:
    """The rules for a campaign's command (and its private tmux server), or why there are none."""

    command: str | None
    rules: list[Allow] = field(default_factory=list)
    skipped: str | None = None  # one line: no campaign here, or a prefix that would allow everything

    def to_dict(self) -> dict:
        return {"command": self.command, "rules": [r.prefix for r in self.rules], "skipped": self.skipped}


def command_rules(command: str, tmux_socket: str | None = None) -> CommandRules:
    """A rule for each program `command` runs, its prefix up to the script or module it runs, and
    for the reads of the campaign's private tmux server; none for the command when one of its
    prefixes would allow every command (`skipped` says why)."""
    tmux = [Allow(("tmux", *socket_args(tmux_socket), sub)) for sub in TMUX_READS] if tmux_socket else []
    try:
        pieces = commandline._simple_commands(command)  # the split the launch check reads
    except ValueError as err:
        return CommandRules(command, tmux, f"no rule for `{command}`: the shell cannot split it ({err})")
    rules: list[Allow] = []
    for words in pieces:
        ran = commandline.commands(words)[0]
        if ran.program in commandline.BUILTINS or not (ran.program or ran.wrappers):
            continue  # `cd DIR`, `export X=1`: the shell's own, nothing to allow
        prefix = tuple(words[: len(words) - len(ran.args)])
        if _base(ran.program) in SCRIPT_FIRST and ran.args and not ran.args[0].startswith("-"):
            prefix = (*prefix, ran.args[0])  # `node train.js`: its first plain word is the script
        elif not (ran.script or ran.module) and _base(ran.program) in RUNS_ANYTHING:
            runner = f"`{ran.program}` without a script runs whatever it is given, so a rule would allow every command"
            return CommandRules(command, tmux, f"no rule for `{command}`: {runner}")
        why = refusal(prefix)
        if why:
            return CommandRules(command, tmux, f"no rule for `{command}`: {why}")
        if Allow(prefix) not in rules:
            rules.append(Allow(prefix))
    return CommandRules(command, rules + tmux, None if rules else f"`{command}` runs no program to allow")


def wanted(command: CommandRules | None) -> list[Allow]:
    """Every rule to write: `RULES`, then the campaign's, each once."""
    found: list[Allow] = []
    for rule in (*RULES, *(command.rules if command else ())):
        if rule not in found:
            found.append(rule)
    return found


@dataclass
class Change:
    """What one install (or removal) did to one agent's file."""

    agent: str
    path: str
    action: str  # added | updated | unchanged | removed | absent
    added: list[str] = field(default_factory=list)  # rules written now
    removed: list[str] = field(default_factory=list)  # rules taken out now
    kept: list[str] = field(default_factory=list)  # rules the file held before ars added them: the user's

    def to_dict(self) -> dict:
        return asdict(self)


def install(agent: str, path: Path, rules: list[Allow], remove: bool = False) -> Change:
    """Merge `rules` into `agent`'s file at `path` (or, `remove`, take out the rules ars added)."""
    if agent == "claude":
        return _claude(path, rules, remove)
    return _codex(path, rules, remove)


# ---------------------------------------------------------------- Claude Code: settings.json


def _read_json(path: Path, what: str) -> dict | None:
    """A JSON object from `path`; None when the file does not exist or is empty."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text) if text.strip() else None
    except json.JSONDecodeError as err:
        raise BadInput(
            f"{path} line {err.lineno}: not valid JSON ({err.msg}); fix it first, nothing was changed"
        ) from None
    if data is not None and not isinstance(data, dict):
        raise BadInput(f"{path} must hold a JSON object ({what}); nothing was changed")
    return data


def _allow_list(settings: dict, path: Path) -> list[str]:
    permissions = settings.get("permissions", {})
    allow = permissions.get("allow", []) if isinstance(permissions, dict) else None
    if not isinstance(allow, list) or not all(isinstance(rule, str) for rule in allow):
        raise BadInput(f'{path}: "permissions.allow" must be a list of rules (strings); nothing was changed')
    return allow


def _read_record(record: Path) -> list[str]:
    data = _read_json(record, "the rules ars added")
    added = (data or {}).get("added", [])
    if not isinstance(added, list) or not all(isinstance(rule, str) for rule in added):
        raise BadInput(f'{record}: "added" must be a list of rules; fix or delete it, nothing was changed')
    return added


def _write_json(path: Path, data: dict) -> None:
    target = path.resolve() if path.is_symlink() else path  # a dotfiles link stays a link
    mode = target.stat().st_mode & 0o777 if target.exists() else None
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(target, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    if mode is not None:
        target.chmod(mode)


def _claude(path: Path, rules: list[Allow], remove: bool) -> Change:
    record = path.parent / RECORD_FILE
    settings = _read_json(path, "Claude Code's settings")
    allow = _allow_list(settings or {}, path)
    ours = _read_record(record)
    change = Change("claude", str(path), "unchanged")
    if remove:
        change.removed = [rule for rule in allow if rule in ours]
        change.action = "removed" if change.removed else "absent"
        if change.removed and settings is not None:
            left = [rule for rule in allow if rule not in ours]
            permissions = dict(settings["permissions"])
            if left:
                permissions["allow"] = left
            else:
                del permissions["allow"]
            settings = {**settings, "permissions": permissions}
            if not permissions:
                del settings["permissions"]
            _write_json(path, settings)
        record.unlink(missing_ok=True)
        return change
    texts = [rule.claude for rule in rules]
    change.added = [rule for rule in texts if rule not in allow]
    change.kept = [rule for rule in texts if rule in allow and rule not in ours]
    if change.added:
        settings = dict(settings or {})
        permissions = settings.get("permissions", {})
        settings["permissions"] = {**permissions, "allow": allow + change.added}
        _write_json(path, settings)  # first: a crash before the record leaves ours unrecorded, never theirs
        change.action = "updated" if any(rule in allow for rule in ours) else "added"
    still_ours = [rule for rule in ours if rule in allow] + change.added
    if still_ours != ours:
        _write_json(record, {"about": RECORD_ABOUT, "settings": path.name, "added": still_ours})
    return change


# ---------------------------------------------------------------- Codex: a rules file of our own


RULE_LINE = re.compile(r'prefix_rule\(pattern = (\[.*\]), decision = "allow"\)')


def _read_codex(path: Path) -> list[str] | None:
    """The rule lines of our file at `path`; None when there is none. A file ars did not write, or a
    line it did not write, is refused."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    if not text.startswith(HEADER):
        raise BadInput(f"{path} was not written by ars; move it aside or rename it, nothing was changed")
    lines = []
    for number, line in enumerate(text[len(HEADER) :].splitlines(), start=HEADER.count("\n") + 1):
        if not line.strip():
            continue
        match = RULE_LINE.fullmatch(line.strip())
        try:
            words = json.loads(match.group(1)) if match else None
        except json.JSONDecodeError:
            words = None
        if not (isinstance(words, list) and words and all(isinstance(w, str) for w in words)):
            raise BadInput(
                f"{path} line {number} is not a rule ars wrote; move your own rules to another .rules file, "
                "nothing was changed"
            )
        lines.append(line.strip())
    return lines


def _codex(path: Path, rules: list[Allow], remove: bool) -> Change:
    present = _read_codex(path)
    change = Change("codex", str(path), "unchanged")
    if remove:
        if present is not None:
            path.unlink()
        change.action, change.removed = ("removed", present) if present is not None else ("absent", [])
        return change
    for line in (rule.codex for rule in rules):
        if line not in (present or []) and line not in change.added:
            change.added.append(line)
    if change.added:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, HEADER + "\n".join([*(present or []), *change.added]) + "\n")
        change.action = "updated" if present else "added"
    return change
