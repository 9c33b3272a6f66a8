"""`ars skills`: install the skill pack into coding agents' discovery folders, and check it.

Source layout (a checkout, or the package data of a wheel):

    skills/<name>/SKILL.md               links such as ../../references/git-workflow.md
                  evals/evals.json       behaviour evals in Anthropic skill-creator's format
                  evals/trigger-evals.json  trigger cases: skill-creator's description eval set
    references/*.md, templates/*         long-form material shared by the skills

In the repository (and in the Claude Code plugin, which is the repository) those links resolve
as they are. An installed skill must stand alone, so `install` writes a self-contained folder:

    <dest>/<name>/SKILL.md               links rewritten: references/git-workflow.md
                  evals/                 as in the source
                  references/*.md        every file the skill links to, and what those link to
                  templates/*
                  .ars-skill             marker: this folder is ours to update

A folder without the marker is never touched. `--link` symlinks every file whose text needs no
rewriting to the checkout, so edits to references show at once (SKILL.md itself is rewritten,
so re-run `install` after editing it).

The evals are the two files skill-creator (anthropics/skills) runs: `evals/evals.json`,
{"skill_name", "evals": [{"id", "prompt", "expected_output", "files", "expectations"}]}, for
its with-skill/without-skill runs and grader, and `evals/trigger-evals.json`, a list of
{"query", "should_trigger"}, for its description loop (`scripts.run_loop --eval-set`). Trigger
cases get their own file because that loop reads exactly that list. A query that appears in
several skills' trigger files says which one skill answers it: `check` refuses two owners.

`install --hooks` also merges the agent hooks (`ars hook ...`, see hooks.py) into the agent's
settings: Claude Code's .claude/settings.json, Codex's .codex/hooks.json. `install --permissions`
merges the allow-rules an unattended campaign needs (see permissions.py): Claude Code's
settings.json, Codex's .codex/rules/ars.rules.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import unquote

import click

from autoresearch_skills import __version__, permissions
from autoresearch_skills.errors import EXIT_NEGATIVE, EXIT_OK, BadInput, run_cli

MARKER = ".ars-skill"
AGENT_FOLDERS = {"claude": Path(".claude") / "skills", "codex": Path(".agents") / "skills"}
AGENT_NOTES = {"claude": "CLAUDE.md", "codex": "AGENTS.md"}
NOTE_BEGIN = "<!-- autoresearch-skills:begin -->"
NOTE_END = "<!-- autoresearch-skills:end -->"
SHARED = ("references", "templates")  # shipped folders a skill may link into
MAX_BODY_LINES = 500
MIN_SHOULD_TRIGGER, MIN_SHOULD_NOT_TRIGGER = 5, 3
MIN_EVALS = 3
EVALS_FILE = "evals/evals.json"  # skill-creator's evals (schemas.md: evals.json)
TRIGGERS_FILE = "evals/trigger-evals.json"  # skill-creator's trigger eval set (run_loop --eval-set)
EVAL_REQUIRED = ("id", "prompt", "expected_output", "expectations")
EVAL_KEYS = (*EVAL_REQUIRED, "files")
TRIGGER_KEYS = ("query", "should_trigger")
HOOK_SETTINGS = {"claude": Path(".claude") / "settings.json", "codex": Path(".codex") / "hooks.json"}

# [text](target) and ![alt](target "title"); [label]: target (reference definitions)
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*[\"'])?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+[\"'(].*)?$")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
SHELL_PREFIXES = {"then", "do", "else", "if", "while", "until", "!", "time", "exec", "nohup"}


@dataclass
class Problem:
    skill: str
    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.message}"


@dataclass
class Installed:
    skill: str
    path: str
    action: str  # created | updated
    mode: str  # copy | link
    files: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- sources


def source_root() -> Path:
    """The shipped skills/ folder (a checkout or the installed package's data)."""
    from autoresearch_skills.resources import resource_dir

    return resource_dir("skills")


def shared_roots(skills_root: Path) -> dict[str, Path]:
    """references/ and templates/ beside a skills/ folder (a checkout, a wheel's package data, a
    clone of the plugin): what its skills' links may point into. An installed skills folder has none."""
    return {name: skills_root.parent / name for name in SHARED if (skills_root.parent / name).is_dir()}


def find_skills(folder: Path) -> list[Path]:
    """Skill folders in `folder` (each holding a SKILL.md), or `folder` itself when it is one."""
    if (folder / "SKILL.md").is_file():
        return [folder]
    return sorted(p for p in folder.iterdir() if p.is_dir() and (p / "SKILL.md").is_file())


# ---------------------------------------------------------------- markdown links


@dataclass
class Link:
    target: str  # as written
    line: int
    span: tuple[int, int]  # character offsets of `target` in the text

    @property
    def local(self) -> bool:
        t = self.target
        return not (t.startswith("#") or "://" in t or t.startswith(("mailto:", "tel:", "data:")))

    @property
    def path_part(self) -> str:
        return unquote(self.target.split("#", 1)[0].split("?", 1)[0])

    @property
    def fragment(self) -> str:
        return "#" + self.target.split("#", 1)[1] if "#" in self.target else ""


def find_links(text: str) -> list[Link]:
    """Links outside code: inline links, images and reference definitions, with their positions."""
    links: list[Link] = []
    offset = 0
    fenced = False
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            masked = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)  # links inside `code` are text
            for match in INLINE_LINK.finditer(masked):
                links.append(Link(match.group(1), number, (offset + match.start(1), offset + match.end(1))))
            ref = REFERENCE_LINK.match(masked)
            if ref and not INLINE_LINK.search(masked):
                links.append(Link(ref.group(1), number, (offset + ref.start(1), offset + ref.end(1))))
        offset += len(line)
    return links


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------- install plan


@dataclass
class Plan:
    """What a skill's installed folder holds: relative path -> source file, or rewritten text."""

    skill: str
    source: Path
    copies: dict[str, Path] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def files(self) -> list[str]:
        return sorted({*self.copies, *self.texts})


def plan_skill(skill_dir: Path, shared: dict[str, Path] | None = None) -> Plan:
    """Follow the skill's links (transitively through Markdown files) and map every file it needs
    into one self-contained folder, rewriting links whose relative path changes."""
    skill_dir = skill_dir.resolve()
    skills_root = skill_dir.parent
    shared = {
        name: root.resolve()
        for name, root in (shared_roots(skills_root) if shared is None else shared).items()
    }
    plan = Plan(skill_dir.name, skill_dir)

    def installed_path(source: Path) -> str | None:
        """Path relative to the skill's installed folder; `../<other>/...` for sibling skills."""
        if _inside(source, skill_dir):
            return source.relative_to(skill_dir).as_posix()
        for name, root in shared.items():
            if _inside(source, root):
                return f"{name}/{source.relative_to(root).as_posix()}"
        if _inside(source, skills_root):  # another skill: installed beside this one
            return "../" + source.relative_to(skills_root).as_posix()
        return None

    for path in sorted(skill_dir.rglob("*")):
        inside = path.relative_to(skill_dir)
        if path.is_file() and not any(part.startswith(".") or part == "__pycache__" for part in inside.parts):
            plan.copies[inside.as_posix()] = path

    queue = [rel for rel in plan.copies if rel.endswith(".md")]
    seen: set[str] = set()
    while queue:
        rel = queue.pop()
        if rel in seen:
            continue
        seen.add(rel)
        source = plan.copies[rel]
        text = source.read_text(encoding="utf-8")
        shown = _shown(skill_dir, source)
        edits: list[tuple[tuple[int, int], str]] = []
        for link in find_links(text):
            if not link.local or not link.path_part:
                continue
            target = Path(os.path.normpath(source.parent / link.path_part))
            if not target.exists():
                plan.problems.append(
                    Problem(plan.skill, shown, link.line, f"link {link.target} does not resolve")
                )
                continue
            mapped = installed_path(target)
            if mapped is None:
                plan.problems.append(
                    Problem(
                        plan.skill,
                        shown,
                        link.line,
                        f"link {link.target} points outside skills/ and {'/, '.join(shared)}/, "
                        "so it cannot resolve in an installed skill",
                    )
                )
                continue
            if not mapped.startswith("../"):
                _add(plan, mapped, target, queue)
            new = os.path.relpath(mapped, os.path.dirname(rel) or ".").replace(os.sep, "/")
            if target.is_dir():
                new += "/"
            if new + link.fragment != link.target and os.path.normpath(new) != os.path.normpath(
                link.path_part
            ):
                edits.append((link.span, new + link.fragment))
        if edits:
            for (start, end), new in sorted(edits, reverse=True):
                text = text[:start] + new + text[end:]
            plan.texts[rel] = text
    return plan


def _add(plan: Plan, rel: str, target: Path, queue: list[str]) -> None:
    files = [target] if target.is_file() else [p for p in sorted(target.rglob("*")) if p.is_file()]
    for file in files:
        name = rel if file == target else f"{rel.rstrip('/')}/{file.relative_to(target).as_posix()}"
        if name not in plan.copies:
            plan.copies[name] = file
            if name.endswith(".md"):
                queue.append(name)


def _shown(skill_dir: Path, path: Path) -> str:
    """A file's name as problems show it: relative to the folder above skills/ when possible."""
    base = skill_dir.parent.parent
    return path.relative_to(base).as_posix() if _inside(path, base) else str(path)


# ---------------------------------------------------------------- install


def destinations(agent: str, scope: str, dest: Path | None) -> list[Path]:
    if dest is not None:
        return [dest]
    base = Path.home() if scope == "user" else project_root()
    agents = list(AGENT_FOLDERS) if agent == "all" else [agent]
    return [base / AGENT_FOLDERS[name] for name in agents]


def project_root(cwd: Path | None = None) -> Path:
    """The git work tree containing `cwd` (where agents look for project skills), else `cwd`."""
    cwd = Path(cwd or Path.cwd())
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return cwd
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else cwd


def is_ours(folder: Path) -> bool:
    return folder.is_dir() and not folder.is_symlink() and (folder / MARKER).is_file()


def install(
    dest_dirs: list[Path],
    link: bool = False,
    skills_dir: Path | None = None,
    shared: dict[str, Path] | None = None,
    progress=None,
) -> list[Installed]:
    """Install every skill of `skills_dir` (default: the shipped ones) into each folder of
    `dest_dirs`. Checks everything first: a problem in a skill or a foreign folder in the way
    raises BadInput and nothing is written."""
    sources = find_skills(skills_dir or source_root())
    if not sources:
        raise BadInput(f"no skills found in {skills_dir or source_root()}; reinstall autoresearch-skills")
    plans = [plan_skill(src, shared) for src in sources]
    for plan in plans:
        if plan.problems:
            raise BadInput(f"{plan.problems[0]}; fix it first (`ars skills check` lists every problem)")
    for dest in dest_dirs:
        for plan in plans:
            target = dest / plan.skill
            if (target.exists() or target.is_symlink()) and not is_ours(target):
                raise BadInput(
                    f"{target} exists and was not installed by ars (no {MARKER} marker); "
                    "move it away, or install elsewhere with --dest DIR"
                )
    done = []
    for dest in dest_dirs:
        dest.mkdir(parents=True, exist_ok=True)
        for plan in plans:
            item = _write(plan, dest, link)
            done.append(item)
            if progress:
                progress(item)
    return done


def _write(plan: Plan, dest: Path, link: bool) -> Installed:
    """Build the folder beside its final place, then swap it in (an update never leaves half a skill)."""
    target = dest / plan.skill
    building = dest / f".{plan.skill}.ars-new-{os.getpid()}"
    old = dest / f".{plan.skill}.ars-old-{os.getpid()}"
    for leftover in (building, old):
        if leftover.exists():
            shutil.rmtree(leftover)
    for rel in plan.files():
        path = building / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if rel in plan.texts:
            path.write_text(plan.texts[rel], encoding="utf-8")
        elif link:
            path.symlink_to(plan.copies[rel])
        else:
            shutil.copy2(plan.copies[rel], path)
    marker = {
        "installed_by": "autoresearch-skills",
        "version": __version__,
        "source": str(plan.source),
        "mode": "link" if link else "copy",
    }
    (building / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    action = "updated" if target.exists() else "created"
    if action == "updated":
        os.replace(target, old)
    os.replace(building, target)
    if old.exists():
        shutil.rmtree(old)
    return Installed(plan.skill, str(target), action, marker["mode"], plan.files())


def write_agent_note(
    project: Path, agents: list[str], dest_dirs: list[Path], skills: list[str]
) -> list[Path]:
    """Add (or refresh) the pointer block in the project's CLAUDE.md / AGENTS.md. Idempotent."""
    written = []
    for agent, dest in zip(agents, dest_dirs):
        note = project / AGENT_NOTES[agent]
        where = _display(dest, project)
        block = "\n".join(
            [
                NOTE_BEGIN,
                "## ML research campaigns (autoresearch-skills)",
                "",
                f"Skills installed in `{where}`: "
                + ", ".join(f"`{name}`" for name in skills)
                + ". Before running, monitoring or",
                "comparing training experiments, read the matching skill's SKILL.md and follow it step",
                "by step; `auto-research` drives a whole campaign. The `ars` command does the work",
                "(`ars --help`; every sub-command has `--help` with examples).",
                NOTE_END,
            ]
        )
        text = note.read_text(encoding="utf-8") if note.exists() else ""
        start, end = text.find(NOTE_BEGIN), text.find(NOTE_END)
        if start != -1 and end > start:
            new = text[:start] + block + text[end + len(NOTE_END) :]
        else:
            new = (
                text
                + ("\n" if text and not text.endswith("\n") else "")
                + ("\n" if text else "")
                + block
                + "\n"
            )
        if new != text:
            note.write_text(new, encoding="utf-8")
        written.append(note)
    return written


def _display(path: Path, project: Path) -> str:
    """How a folder is named to an agent: project-relative, or with ~ for the home folder."""
    path = path.resolve()
    for base, prefix in ((project.resolve(), ""), (Path.home().resolve(), "~/")):
        if _inside(path, base):
            return prefix + path.relative_to(base).as_posix() + "/"
    return str(path) + "/"


# ---------------------------------------------------------------- check


def check(folder: Path) -> tuple[list[str], list[Problem]]:
    """Validate every skill in `folder`: the Agent Skills spec (skills-ref), body length, links,
    the evals (skill-creator's formats, one owner per shared trigger query), and every `ars ...`
    command its SKILL.md shows."""
    try:
        from skills_ref import validate
    except ImportError:
        raise BadInput(
            "the Agent Skills validator is not installed: `pip install skills-ref` "
            "(it comes with `pip install autoresearch-skills[dev]`)"
        ) from None
    skills = find_skills(folder)
    if not skills:
        raise BadInput(f"{folder} holds no skill (no SKILL.md in it or in its sub-folders)")
    problems: list[Problem] = []
    for skill_dir in skills:
        name = skill_dir.name
        shown = _shown(skill_dir.resolve(), skill_dir.resolve() / "SKILL.md")
        problems += [Problem(name, shown, None, message) for message in validate(skill_dir)]
        text = (skill_dir / "SKILL.md").read_text(encoding="utf-8")
        problems += _check_body(name, shown, text)
        problems += plan_skill(skill_dir).problems
        problems += check_evals(skill_dir)
        if (skill_dir / "evals.json").is_file():
            old = _shown(skill_dir.resolve(), (skill_dir / "evals.json").resolve())
            problems.append(
                Problem(name, old, None, f"old trigger format: move the cases to {TRIGGERS_FILE}")
            )
        problems += [Problem(name, shown, line, message) for line, message in check_commands(text)]
    problems += check_owners(skills)
    return [s.name for s in skills], problems


def _check_body(name: str, shown: str, text: str) -> list[Problem]:
    problems = []
    parts = text.split("---", 2)
    body = parts[2] if len(parts) == 3 else text
    lines = body.strip("\n").count("\n") + 1
    if lines > MAX_BODY_LINES:
        problems.append(
            Problem(
                name,
                shown,
                None,
                f"body has {lines} lines (at most {MAX_BODY_LINES}): move detail to references/",
            )
        )
    frontmatter = parts[1] if len(parts) == 3 else ""
    if "Do NOT use for" not in " ".join(frontmatter.split()):  # folded over lines in YAML
        problems.append(Problem(name, shown, None, "description does not say 'Do NOT use for: ...'"))
    return problems


def check_evals(skill_dir: Path) -> list[Problem]:
    """evals/evals.json and evals/trigger-evals.json in skill-creator's formats (module docstring)."""
    return _check_eval_set(skill_dir) + _check_triggers(skill_dir)


def _load_json(skill_dir: Path, rel: str, what: str) -> tuple[object, list[Problem], str]:
    name, path = skill_dir.name, skill_dir / rel
    shown = _shown(skill_dir.resolve(), path.resolve())
    if not path.is_file():
        return None, [Problem(name, shown, None, f"missing: add {what} (see another skill's {rel})")], shown
    try:
        return json.loads(path.read_text(encoding="utf-8")), [], shown
    except json.JSONDecodeError as err:
        return None, [Problem(name, shown, err.lineno, f"not valid JSON: {err.msg}")], shown


def _text(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _check_eval_set(skill_dir: Path) -> list[Problem]:
    name = skill_dir.name
    data, problems, shown = _load_json(skill_dir, EVALS_FILE, "behaviour evals in skill-creator's format")
    if problems:
        return problems

    def problem(message: str) -> None:
        problems.append(Problem(name, shown, None, message))

    if not isinstance(data, dict) or not isinstance(data.get("evals"), list):
        problem('must be an object {"skill_name": ..., "evals": [...]}')
        return problems
    if data.get("skill_name") != name:
        problem(f"skill_name is {data.get('skill_name')!r}, expected {name!r}")
    extra = sorted(set(data) - {"skill_name", "evals"})
    if extra:
        problem(f"unknown key {', '.join(extra)} (skill_name and evals only)")
    ids: set = set()
    for number, case in enumerate(data["evals"], start=1):
        label = f"eval {number}"
        if not isinstance(case, dict):
            problem(f"{label} is not an object")
            continue
        if isinstance(case.get("id"), int) and not isinstance(case["id"], bool):
            label = f"eval id {case['id']}"
            if case["id"] in ids:
                problem(f"{label} appears twice")
            ids.add(case["id"])
        elif "id" in case:
            problem(f"{label}: id must be an integer")
        missing = [key for key in EVAL_REQUIRED if key not in case]
        if missing:
            problem(f"{label} lacks {', '.join(missing)}")
        extra = sorted(set(case) - set(EVAL_KEYS))
        if extra:
            problem(f"{label}: unknown key {', '.join(extra)} (allowed: {', '.join(EVAL_KEYS)})")
        for key in ("prompt", "expected_output"):
            if key in case and not _text(case[key]):
                problem(f"{label}: {key} must be a non-empty string")
        expectations = case.get("expectations")
        if "expectations" in case and (
            not isinstance(expectations, list) or not expectations or not all(_text(e) for e in expectations)
        ):
            problem(f"{label}: expectations must be a non-empty list of statements")
        files = case.get("files", [])
        if not isinstance(files, list) or not all(_text(f) for f in files):
            problem(f"{label}: files must be a list of paths relative to the skill folder")
        else:
            for rel in files:
                if not (skill_dir / rel).is_file():
                    problem(f"{label}: file {rel} does not exist in the skill folder")
    if len(data["evals"]) < MIN_EVALS:
        problem(f"{len(data['evals'])} evals (at least {MIN_EVALS})")
    return problems


def _check_triggers(skill_dir: Path) -> list[Problem]:
    name = skill_dir.name
    cases, problems, shown = _load_json(skill_dir, TRIGGERS_FILE, "trigger cases")
    if problems:
        return problems

    def problem(message: str) -> None:
        problems.append(Problem(name, shown, None, message))

    if not isinstance(cases, list):
        problem('must be a JSON list of {"query": ..., "should_trigger": true|false}')
        return problems
    seen: set[str] = set()
    for number, case in enumerate(cases, start=1):
        if not isinstance(case, dict) or set(case) != set(TRIGGER_KEYS):
            keys = ", ".join(sorted(case)) if isinstance(case, dict) else type(case).__name__
            problem(f"case {number} has {keys or 'no keys'}: exactly query and should_trigger")
            continue
        if not _text(case["query"]):
            problem(f"case {number}: query must be a non-empty string")
        elif _normal(case["query"]) in seen:
            problem(f"case {number}: query {case['query'][:50]!r} appears twice")
        else:
            seen.add(_normal(case["query"]))
        if not isinstance(case["should_trigger"], bool):
            problem(f"case {number}: should_trigger must be true or false")
    positive = sum(1 for c in cases if isinstance(c, dict) and c.get("should_trigger") is True)
    negative = sum(1 for c in cases if isinstance(c, dict) and c.get("should_trigger") is False)
    if positive < MIN_SHOULD_TRIGGER or negative < MIN_SHOULD_NOT_TRIGGER:
        problem(
            f"{positive} should-trigger and {negative} should-not-trigger cases "
            f"(at least {MIN_SHOULD_TRIGGER} and {MIN_SHOULD_NOT_TRIGGER})"
        )
    return problems


def _normal(query: str) -> str:
    return " ".join(query.lower().split())


def check_owners(skill_dirs: list[Path]) -> list[Problem]:
    """A query in several skills' trigger files must have one owner: at most one says true."""
    owners: dict[str, list[tuple[str, str]]] = {}
    for skill_dir in skill_dirs:
        try:
            cases = json.loads((skill_dir / TRIGGERS_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # reported by check_evals
        shown = _shown(skill_dir.resolve(), (skill_dir / TRIGGERS_FILE).resolve())
        for case in cases if isinstance(cases, list) else []:
            if isinstance(case, dict) and case.get("should_trigger") is True and _text(case.get("query")):
                owners.setdefault(_normal(case["query"]), []).append((skill_dir.name, shown))
    problems = []
    for query, found in owners.items():
        if len(found) > 1:
            names = " and ".join(n for n, _ in found)
            problems += [
                Problem(
                    n, shown, None, f"query {query[:50]!r} should trigger both {names}: give it one owner"
                )
                for n, shown in found
            ]
    return problems


# ---------------------------------------------------------------- commands shown in a document


def shown_commands(text: str) -> list[tuple[int, list[str]]]:
    """Every `ars ...` and `python tools/x.py ...` invocation in fenced code blocks and inline code,
    as (line number, words)."""
    found: list[tuple[int, list[str]]] = []
    fenced = False
    pending, pending_line = "", 0
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            if not pending:
                pending_line = number
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            found += [(pending_line, words) for words in _invocations(pending + line)]
            pending = ""
        else:
            for match in CODE_SPAN.finditer(line):
                found += [(number, words) for words in _invocations(match.group(2))]
    return found


def _invocations(line: str) -> list[list[str]]:
    line = re.sub(r"^\s*[$>]\s+", "", line)
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote in an example: judge the plain words
        tokens = line.split()
    calls, at_start = [], True
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if re.fullmatch(r"[<>&|;()`]+", token):  # operators and redirections end a command
            at_start = token not in (">", ">>", "<", "2>", "&>")
        elif at_start and (token in SHELL_PREFIXES or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", token)):
            pass
        elif at_start and token in ("ars", "python", "python3") or at_start and token.endswith("/ars"):
            end = i + 1
            while end < len(tokens) and not re.fullmatch(r"[<>&|;()`]+", tokens[end]):
                end += 1
            words = tokens[i:end]
            if words[0] in ("python", "python3"):
                if len(words) > 1 and re.match(r"^(\./)?tools/[\w/]+\.py$", words[1]):
                    calls.append(words)
            else:
                calls.append(["ars", *words[1:]])
            i = end
            continue
        else:
            at_start = False
        i += 1
    return calls


def check_commands(text: str) -> list[tuple[int, str]]:
    """(line, problem) for each shown command that does not exist or uses an unknown option."""
    problems = []
    for line, words in shown_commands(text):
        message = check_invocation(words)
        if message:
            problems.append((line, message))
    return problems


def check_invocation(words: list[str]) -> str | None:
    """Resolve an invocation through the `ars` click group in-process; None when it would run."""
    from autoresearch_skills.cli import COMMANDS, cli

    shown = " ".join(words)
    if words[0] != "ars":  # python tools/x.py ...: the module must exist and be a registered tool
        script = Path(words[1]).name
        module = Path(words[1]).with_suffix("").name
        if not (Path(__file__).resolve().parent / script).is_file():
            return f"`{shown}`: tools/{script} does not exist"
        targets = {name: entry[0] if isinstance(entry, tuple) else entry for name, entry in COMMANDS.items()}
        names = [n for n, target in targets.items() if target.split(":")[0].endswith("." + module)]
        if not names:
            return None  # a tool with its own CLI (tmux_wait.py): existence is what we can check
        words = ["ars", names[0], *words[2:]]
    command: click.Command = cli
    ctx = click.Context(cli, info_name="ars")
    path = ["ars"]
    i = 1
    while i < len(words):
        word = words[i]
        if word == "--":
            break
        if word.startswith("-") and word != "-":
            option, _, inline_value = word.partition("=")
            param = _find_option(command, ctx, option)
            if param is None:
                return f"`{shown}`: `{' '.join(path)}` has no option {option}"
            takes_value = not (param.is_flag or param.count) if isinstance(param, click.Option) else True
            if takes_value and not inline_value:
                value = words[i + 1] if i + 1 < len(words) else ""
                bad = _bad_choice(param, value)
                if bad:
                    return f"`{shown}`: {option} {bad}"
                i += 1
            i += 1
            continue
        if isinstance(command, click.Group):
            if word in ("...", "\u2026"):  # "ars exp ...": any sub-command
                break
            sub = command.get_command(ctx, word)
            if sub is None:
                return f"`{shown}`: `{' '.join(path)}` has no command {word!r}"
            command, path = sub, [*path, word]
            ctx = click.Context(sub, info_name=word, parent=ctx)
        i += 1
    key = tuple(path)
    if key not in _HELP_ERRORS:  # rendering a group's help loads every sub-command: once per path
        try:
            command.get_help(ctx)
            _HELP_ERRORS[key] = None
        except Exception as err:  # a broken help text is exactly what this check is for
            _HELP_ERRORS[key] = f"`{' '.join(path)} --help` fails: {err}"
    return _HELP_ERRORS[key]


_HELP_ERRORS: dict[tuple[str, ...], str | None] = {}


def _find_option(command: click.Command, ctx: click.Context, option: str):
    if option in ctx.help_option_names or option in ("-h", "--help"):
        return click.Option(["--help"], is_flag=True)
    for param in command.get_params(ctx):
        if option in (*param.opts, *getattr(param, "secondary_opts", [])):
            return param
    return None


def _bad_choice(param, value: str) -> str | None:
    """A literal value outside a Choice (placeholders such as NAME, <x> or $X are not judged)."""
    if not isinstance(param.type, click.Choice) or not value or re.search(r"[A-Z<>{}$]", value):
        return None
    if value not in param.type.choices:
        return f"{value!r} is not one of {', '.join(param.type.choices)}"
    return None


# ---------------------------------------------------------------- command line


@click.group("skills", context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """The skill pack: install it into coding agents; check it against the Agent Skills spec.

    \b
    Examples:
      ars skills install --agent all
      ars skills install --agent claude --scope project --agents-md
      ars skills check
    """


@cli.command("install")
@click.option(
    "--agent",
    type=click.Choice(["claude", "codex", "all"]),
    default="all",
    show_default=True,
    help="claude: .claude/skills; codex (and other Agent Skills clients): .agents/skills",
)
@click.option(
    "--scope",
    type=click.Choice(["user", "project"]),
    default="user",
    show_default=True,
    help="user: under your home folder; project: under this git repository",
)
@click.option(
    "--dest",
    type=click.Path(file_okay=False, path_type=Path),
    help="install into DIR/<skill> instead (--agent and --scope then only pick the --agents-md file)",
)
@click.option("--link", is_flag=True, help="symlink files to this checkout instead of copying them")
@click.option(
    "--agents-md", is_flag=True, help="add a pointer to the skills in the project's CLAUDE.md / AGENTS.md"
)
@click.option(
    "--hooks",
    is_flag=True,
    help="also add the agent hooks (`ars hook ...`) to Claude Code's settings.json / Codex's hooks.json",
)
@click.option(
    "--permissions",
    "allow_unattended",
    is_flag=True,
    help="also allow the commands an unattended campaign runs (ars, git reads, tmux reads, the campaign's "
    "command) in Claude Code's settings.json / Codex's rules/ars.rules",
)
@click.option(
    "--remove",
    is_flag=True,
    help="with --hooks / --permissions: take out again what ars added (the skills stay)",
)
@click.option("--json", "as_json", is_flag=True, help="one JSON object")
def install_cmd(
    agent: str,
    scope: str,
    dest: Path | None,
    link: bool,
    agents_md: bool,
    hooks: bool,
    allow_unattended: bool,
    remove: bool,
    as_json: bool,
) -> None:
    """Install the skills where agents find them; re-running updates them in place.

    Each skill becomes a self-contained folder: SKILL.md (links rewritten), its evals/ and the
    references and templates it links to. A folder of the same name that ars did not create is
    never touched: the install stops with an error and writes nothing.

    --hooks merges the stop, session-start and pre-compact hooks into .claude/settings.json
    (Claude Code) or .codex/hooks.json (Codex), under --scope: other hooks and settings stay,
    re-running changes nothing, --remove takes out only ours (commands `ars hook ...`).

    --permissions allows, without a prompt, what an unattended campaign runs: `ars`, git's reads
    (status, log, diff, show ...), tmux's reads (ls, capture-pane, has-session) and the current
    campaign's command up to its script (`python train.py`); never a rule that allows every command.
    Claude Code: permissions.allow of .claude/settings.json, beside it ars-permissions.json records
    the rules ars added, and --remove takes out exactly those. Codex: .codex/rules/ars.rules.

    \b
    Examples:
      ars skills install --agent all                    # ~/.claude/skills and ~/.agents/skills
      ars skills install --agent codex --scope project  # .agents/skills in this repository
      ars skills install --link                         # a checkout: references stay live
      ars skills install --dest /tmp/skills --json
      ars skills install --scope project --agents-md    # and point CLAUDE.md / AGENTS.md at them
      ars skills install --agent claude --scope project --hooks   # and .claude/settings.json hooks
      ars skills install --agent claude --hooks --remove          # take the hooks out again
      ars skills install --agent claude --scope project --hooks --permissions  # and run unattended
      ars skills install --agent claude --scope project --permissions --remove
    """
    agents = list(AGENT_FOLDERS) if agent == "all" else [agent]
    if remove and not (hooks or allow_unattended):
        raise BadInput(
            "--remove takes out the hooks or the permission rules: pass --hooks or --permissions with it "
            "(installed skills stay either way)"
        )
    if remove:
        changed = install_hooks(agents, scope, remove=True) if hooks else []
        allowed = install_permissions(agents, scope, remove=True) if allow_unattended else None
        _report_hooks(changed, as_json, {}, allowed)
        return
    dest_dirs = destinations(agent, scope, dest)

    def progress(item: Installed) -> None:
        if not as_json:
            click.echo(f"installed: {item.skill} -> {item.path} ({item.action}, {item.mode})")

    done = install(dest_dirs, link=link, progress=progress)
    changed = install_hooks(agents, scope) if hooks else []
    allowed = install_permissions(agents, scope) if allow_unattended else None
    notes: list[Path] = []
    if agents_md:
        shown_dirs = dest_dirs * len(agents) if dest is not None else dest_dirs
        skills = sorted({item.skill for item in done})
        notes = write_agent_note(project_root(), agents, shown_dirs, skills)
    report = {"installed": [asdict(item) for item in done], "notes": [str(n) for n in notes]}
    if not as_json:
        for note in notes:
            click.echo(f"note: {note}")
        click.echo(
            f"skills: {len({i.skill for i in done})} installed in {', '.join(str(d) for d in dest_dirs)}"
        )
    _report_hooks(changed, as_json, report if as_json else None, allowed)


def install_hooks(agents: list[str], scope: str, remove: bool = False) -> list[dict]:
    """Merge our hooks into each agent's settings file (or take them out): what happened where."""
    from autoresearch_skills.hooks import install_settings

    base = Path.home() if scope == "user" else project_root()
    done = []
    for agent in agents:
        path = base / HOOK_SETTINGS[agent]
        done.append({"agent": agent, "path": str(path), "action": install_settings(path, remove=remove)})
    return done


def install_permissions(agents: list[str], scope: str, remove: bool = False) -> dict:
    """Merge the allow-rules into each agent's settings (or take ours out): the campaign command's
    rules (or why there are none) and what happened where."""
    base = Path.home() if scope == "user" else project_root()
    command = None if remove else _campaign_command_rules()
    rules = permissions.wanted(command)
    files = permissions.PERMISSION_FILES
    done = [permissions.install(agent, base / files[agent], rules, remove=remove) for agent in agents]
    return {"command": command.to_dict() if command else None, "changes": [c.to_dict() for c in done]}


def _campaign_command_rules() -> permissions.CommandRules:
    """The rules for the current campaign's command, found as every `ars` command finds it."""
    from autoresearch_skills.campaign.store import find  # the campaign engine: only when asked for

    try:
        campaign = find(None, cwd=Path.cwd())
    except BadInput as err:
        why = "no rule for a campaign's command (run this again once `ars campaign status` finds one)"
        return permissions.CommandRules(None, skipped=f"{why}: {err.message}")
    return permissions.command_rules(campaign.settings.command, campaign.settings.tmux_socket)


def _report_hooks(
    changed: list[dict], as_json: bool, report: dict | None, allowed: dict | None = None
) -> None:
    if as_json:
        extra = {"permissions": allowed} if allowed is not None else {}
        click.echo(json.dumps({**(report or {}), "hooks": changed, **extra}, indent=2))
        return
    if allowed is not None:
        _report_permissions(allowed)
    for item in changed:
        click.echo(f"hooks: {item['action']} -> {item['path']}")
        if item["agent"] == "codex" and item["action"] in ("added", "updated"):
            click.echo(
                "note: Codex runs new hooks once you trust them (/hooks); versions from before hooks were "
                "on by default also need `[features] codex_hooks = true` in config.toml"
            )


def _report_permissions(allowed: dict) -> None:
    for change in allowed["changes"]:
        where = f"{change['action']} -> {change['path']}"
        if change["action"] == "unchanged":
            where += " (every rule already there)"
        elif change["action"] == "absent":
            where += " (no rule that ars added)"
        click.echo(f"permissions: {where}")
        for rule in change["added"]:
            click.echo(f"allow: {rule}")
        for rule in change["kept"]:
            click.echo(f"kept: {rule} (there before ars added it: yours, never removed)")
        for rule in change["removed"]:
            click.echo(f"removed: {rule}")
        if change["agent"] == "codex" and change["action"] in ("added", "updated"):
            click.echo(
                "note: Codex loads a project's rules once you trust the project; an allowed command runs "
                "without asking and outside the sandbox (approval_policy and sandbox_mode stay as they are)"
            )
    campaign = allowed["command"] or {"rules": [], "skipped": None}
    if campaign["rules"]:
        click.echo(f"campaign: `{campaign['command']}` -> " + ", ".join(f"`{r}`" for r in campaign["rules"]))
    if campaign["skipped"]:
        click.echo(f"campaign: {campaign['skipped']}")


@cli.command("check")
@click.option(
    "--dir",
    "folder",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="a folder of skills, or one skill [default: the shipped skills/]",
)
@click.option("--json", "as_json", is_flag=True, help="one JSON object")
def check_cmd(folder: Path | None, as_json: bool) -> None:
    """Check skills: Agent Skills spec, links, evals.json, and every `ars` command they show.

    The spec is checked with the skills-ref validator; links must resolve (also once installed);
    each `ars ...` in a code block must exist with the options shown. Exit 0: no problem;
    1: one line per problem; 2: bad input.

    \b
    Examples:
      ars skills check
      ars skills check --dir ~/.claude/skills
      ars skills check --dir skills/auto-research --json
    """
    names, problems = check(folder or source_root())
    if as_json:
        click.echo(
            json.dumps(
                {"skills": names, "problems": [asdict(p) for p in problems], "ok": not problems}, indent=2
            )
        )
    else:
        for problem in problems:
            click.echo(str(problem))
        click.echo(f"checked: {len(names)} skills, {len(problems)} problems")
    raise SystemExit(EXIT_NEGATIVE if problems else EXIT_OK)


def main() -> None:
    run_cli(cli, prog_name="skills.py")


if __name__ == "__main__":
    main()
