"""`ars blueprint new`: filled blueprints, from flags or from a plan of several. What is written
parses back to the same values (`reading.parse(render(spec))`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from autoresearch_skills.atomicfile import write_text_atomic
from autoresearch_skills.blueprints.reading import (
    _NA,
    DEFAULT_FIRST_STEP_PATTERN,
    DEFAULT_GPUS,
    DEFAULT_RESULT_ROOT,
    parse_gpus,
    session_name,
    slugify,
)
from autoresearch_skills.clock import parse_duration
from autoresearch_skills.errors import BadInput

# ---------------------------------------------------------------- writing blueprints


@dataclass
class Spec:
    """What `new` needs to write one blueprint."""

    purpose: str
    codebase: Path
    command: str
    name: str = ""
    python: Path | None = None
    yaml: str = ""  # "" or NA: none
    result_dir: Path | None = None
    max_time: str = "24h"
    gpus: int | str = DEFAULT_GPUS
    first_step_pattern: str = DEFAULT_FIRST_STEP_PATTERN
    first_step_timeout: str = "20m"
    prediction: str = ""
    differs_from: str = ""
    title: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def slug(self) -> str:
        return slugify(self.name) or slugify(" ".join(self.purpose.split()[:6])) or "blueprint"


def _complete(spec: Spec) -> Spec:
    """Absolute paths and parsed limits; BadInput naming the flag for what cannot work."""
    if not spec.purpose.strip():
        raise BadInput("the purpose is empty: say what the experiment tests (--purpose)")
    if not spec.command.strip():
        raise BadInput("the launch command is empty (--command)")
    for what, value in (("max time", spec.max_time), ("first-step timeout", spec.first_step_timeout)):
        try:
            if parse_duration(value) <= 0:
                raise ValueError
        except ValueError:
            raise BadInput(f"{what} {value!r} is not a duration: write it as 24h, 12 hours or 20m") from None
    gpus = parse_gpus(str(spec.gpus))
    codebase = spec.codebase.expanduser().resolve()
    python = spec.python
    if python is None:
        python = next(
            (c for c in (codebase / ".venv/bin/python", codebase / "venv/bin/python") if c.exists()),
            codebase / ".venv/bin/python",
        )
    elif not python.expanduser().is_absolute():
        python = codebase / python
    result_dir = spec.result_dir or Path(DEFAULT_RESULT_ROOT) / spec.slug
    if not result_dir.expanduser().is_absolute():
        result_dir = codebase / result_dir
    return Spec(
        **{
            **asdict(spec),
            "codebase": codebase,
            "gpus": str(gpus),  # the spelling that reads back the same: 4, 4,5,6,7 or 4,
            "python": Path(os.path.normpath(python.expanduser())),
            "result_dir": Path(os.path.normpath(result_dir.expanduser())),
        }
    )


def render(spec: Spec, file_name: str = "") -> str:
    """The blueprint's Markdown, in the template's shape (parse(render(spec)) gives the spec back)."""
    slug = spec.slug
    shown_file = file_name or f"{slug}.md"
    yaml_text = spec.yaml if spec.yaml and spec.yaml.strip().lower() not in _NA else "NA"
    if "`" in spec.command or "\n" in spec.command:
        command = "- command:\n\n  ```bash\n" + "\n".join(f"  {line}" for line in spec.command.splitlines())
        command += "\n  ```"
    else:
        command = f"- command: `{spec.command}`"
    purpose = [f"- name: {slug}", f"- purpose: {spec.purpose}"]
    if spec.differs_from:
        purpose.append(f"- differs from: {spec.differs_from}")
    if spec.prediction:
        purpose.append(f"- prediction: {spec.prediction}")
    purpose.append("- hint: one blueprint tests one thing; two changes at once cannot say which mattered")
    todo = [f"`ars blueprint check {shown_file}` passes"]
    if not spec.prediction:
        todo.append("write the prediction into [exp_purpose] before the run")
    todo += [
        f"launch; the first `{spec.first_step_pattern}` line within {spec.first_step_timeout}",
        "record every failed start and its fix in trial_log.md",
        "write results.md from the run's own validation file",
        "write finish.flag last",
    ]
    notes = [f"- gpus: {spec.gpus}", f"- tmux session: {session_name(slug)} (contains `ajet` and the name)"]
    notes += [f"- {note}" for note in spec.notes]
    notes += ["- todo:", *(f"  - [ ] {item}" for item in todo)]
    title = spec.title or slug
    return "\n".join(
        [
            f"# Experiment blueprint: {title}",
            "",
            "<!-- Written by `ars blueprint new`; format: references/blueprint-format.md -->",
            "",
            "## [exp_purpose]",
            *purpose,
            "",
            "## [exp_codebase_dir]",
            f"- path: {spec.codebase}",
            "- hint: `cd` here before launching; relative paths below are relative to this folder",
            "",
            "## [exp_venv_exe]",
            f"- path: {spec.python}",
            "- hint: the launch runs with this environment's bin/ first on PATH",
            "",
            "## [exp_yaml_path]",
            f"- path: {yaml_text}",
            "- hint: copy the reference config and change only what [exp_purpose] names",
            "",
            "## [exp_launch_command]",
            command,
            "- hint: run from [exp_codebase_dir]; the GPUs are pinned with CUDA_VISIBLE_DEVICES at launch",
            "",
            "## [exp_result_dir]",
            f"- path: {spec.result_dir}",
            "- holds: attempt-<n>.log, trial_log.md, results.md and, last, finish.flag",
            "",
            "## [exp_max_time]",
            f"- max time: {spec.max_time}",
            f"- first step timeout: {spec.first_step_timeout}",
            f"- first step pattern: `{spec.first_step_pattern}`",
            "- warning: the run is stopped at the max time whatever its state",
            "",
            "## Other Notes",
            *notes,
            "",
        ]
    )


def write_new(specs: Sequence[tuple[Spec, Path]], force: bool = False) -> list[Path]:
    """Write each spec to its file. Refuses, before writing anything, when a file exists (unless
    `force`) or two specs share a file or a name."""
    seen: dict[Path, Spec] = {}
    names: dict[str, Spec] = {}
    for spec, out in specs:
        key = out.resolve()
        if key in seen:
            raise BadInput(f"two blueprints would be written to {out}: give them different names")
        if spec.slug in names:
            raise BadInput(
                f"two blueprints are named {spec.slug!r}: names must differ (tmux sessions use them)"
            )
        seen[key], names[spec.slug] = spec, spec
        if out.exists() and not force:
            raise BadInput(f"{out} exists; edit it, choose another file, or pass --force to replace it")
        if out.exists() and out.is_dir():
            raise BadInput(f"{out} is a folder; give a file name ending in .md")
    written = []
    for spec, out in specs:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, render(_complete(spec), str(out)))
        written.append(out)
    return written


_PLAN_KEYS = {
    "name", "purpose", "prediction", "differs_from", "title", "codebase", "python", "yaml", "command",
    "result_dir", "result_root", "max_time", "gpus", "first_step_pattern", "first_step_timeout", "notes",
}  # fmt: skip


def read_plan(path: Path) -> list[Spec]:
    """Blueprint specs from a YAML or JSON plan: `defaults:` (any key) and `blueprints:` (a list, each
    entry overriding the defaults; `{name}` in a value becomes the entry's name). Relative codebase
    paths are relative to the plan's folder."""
    from autoresearch_skills.yamlfile import read_yaml

    doc = read_yaml(path, "write one from templates/blueprint-plan.yaml (`ars init blueprint-plan`)")
    if isinstance(doc, list):
        doc = {"blueprints": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("blueprints"), list) or not doc["blueprints"]:
        raise BadInput(f"{path}: needs a `blueprints:` list (see templates/blueprint-plan.yaml)")
    unknown_top = set(doc) - {"defaults", "blueprints"}
    if unknown_top:
        raise BadInput(
            f"{path}: unknown top-level key {sorted(unknown_top)[0]!r}; use defaults and blueprints"
        )
    defaults = _plan_entry(path, "defaults", doc.get("defaults") or {})
    specs = []
    for number, raw in enumerate(doc["blueprints"], start=1):
        entry = {**defaults, **_plan_entry(path, f"blueprint {number}", raw)}
        where = f"{path}: blueprint {number}" + (f" ({entry['name']})" if entry.get("name") else "")
        for required in ("purpose", "codebase", "command"):
            if not str(entry.get(required) or "").strip():
                raise BadInput(f"{where} has no {required} (set it there or under defaults)")
        name = slugify(str(entry.get("name") or "")) or slugify(" ".join(str(entry["purpose"]).split()[:6]))
        entry = {k: _named(v, name) for k, v in entry.items()}
        codebase = Path(str(entry["codebase"])).expanduser()
        if not codebase.is_absolute():
            codebase = path.parent.resolve() / codebase
        result_dir = entry.get("result_dir")
        if not result_dir and entry.get("result_root"):
            result_dir = Path(str(entry["result_root"])) / name
        notes = entry.get("notes") or []
        gpus = entry.get("gpus")  # as the plan writes it: 4, "4,5,6,7", [4, 5]
        specs.append(
            Spec(
                purpose=str(entry["purpose"]).strip(),
                codebase=codebase,
                command=str(entry["command"]).strip(),
                name=name,
                python=Path(str(entry["python"])) if entry.get("python") else None,
                yaml=str(entry.get("yaml") or ""),
                result_dir=Path(str(result_dir)) if result_dir else None,
                max_time=str(entry.get("max_time") or "24h"),
                gpus=DEFAULT_GPUS if gpus is None else gpus if isinstance(gpus, int) else str(gpus),
                first_step_pattern=str(entry.get("first_step_pattern") or DEFAULT_FIRST_STEP_PATTERN),
                first_step_timeout=str(entry.get("first_step_timeout") or "20m"),
                prediction=str(entry.get("prediction") or "").strip(),
                differs_from=str(entry.get("differs_from") or "").strip(),
                title=str(entry.get("title") or "").strip(),
                notes=[str(n) for n in notes] if isinstance(notes, list) else [str(notes)],
            )
        )
    return specs


def _named(value, name: str):
    """`{name}` in a plan value (or a list of them) becomes the entry's name."""
    if isinstance(value, str):
        return value.replace("{name}", name)
    if isinstance(value, list):
        return [_named(item, name) for item in value]
    return value


def _plan_entry(path: Path, where: str, raw) -> dict:
    if not isinstance(raw, dict):
        raise BadInput(f"{path}: {where} must be a mapping of keys (name, purpose, command ...)")
    entry = {str(k).replace("-", "_"): v for k, v in raw.items()}
    unknown = sorted(set(entry) - _PLAN_KEYS)
    if unknown:
        raise BadInput(
            f"{path}: {where} has unknown key {unknown[0]!r}; known: {', '.join(sorted(_PLAN_KEYS))}"
        )
    return entry
