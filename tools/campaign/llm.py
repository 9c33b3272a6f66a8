"""The llm policies: a model behind an OpenAI-compatible endpoint proposes the loop's next
experiments, so the unattended loop can think overnight without a coding agent attached.

Contract (the `policy:` block of a campaign file; every policy answers with campaign/hypothesis's
`Proposal`, the command policy's format, so the loop validates and applies them like any other):
    llm       knob values: `set:` for the knobs of `space:` (every knob of the mutable files when no
              space is given: knobs.knob_names), `args:` for the command-line arguments of `args:`.
              With K slots free (`parallel: K`), one call asks for K different proposals; the ones
              not handed out at once wait for the next `next()`, until a new ledger row or another
              parent commit makes them stale (then the model is asked again, with the new result).
    llm_diff  one unified diff of the mutable files per call, checked before anything is created:
              it applies to the parent commit, touches only mutable files and no frozen one, every
              Python file it leaves compiles (YAML, JSON and TOML files parse), every call named in
              `required_calls:` that a touched file made before is still made after, and it changes at
              most `max_diff_lines` lines.
    hybrid    knob values first; diffs once `stall_threshold` rows have passed since the best (the
              ledger's rows after the best commit's last run); knob values again after
              `max_rejected_diffs` diffs in a row were rejected. The first proposal after a switch
              carries the mode it turned to, which its ledger row holds in `mode`; its description
              says why for people ("[hybrid: diffs after 4 runs without improvement] ..."), and the
              switch is noted in the session record.

What the model reads: the research program (`program:`, default program.md), the mutable files as
the parent commit holds them, the frozen files' names, the whole ledger (each row's value, verdict,
noise columns, flags and crash reason), the best so far, the runs in flight, and for knob values the
current value and allowed range of each knob. A rejected answer (not JSON, a knob outside the space,
a value out of range, a combination already tried, a diff that fails a check) raises Rejected with
the reason; the loop sends it back (`feedback`) and the next request carries the rejected answer and
the reason, up to the loop's retry limit, before a crash row records the last reason. A model that
has nothing more to propose answers `{"proposals": []}`: the policy is exhausted.

The endpoint, its key, retries and the call log (`<campaign folder>/llm_calls.jsonl`) are
campaign/llm_endpoint.py's.

After `ars campaign resume`, hybrid takes up the mode the ledger shows: the last row with a `mode`
names it (a stall is counted from the row that turned back to knob values; a row an older release
wrote has its mode read from its description by the ledger's reader). Diffs rejected in a row
before a kill make no row, so that count starts again at 0. Prompts hold whole files and the whole ledger: a campaign of hundreds of rows needs a model
with a long context. Answers reach the loop only after these checks, but what a diff does when it
runs is judged by the run, as for any proposal.
"""

from __future__ import annotations

import ast
import difflib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path

from autoresearch_skills import knobs, ledger, session_record
from autoresearch_skills.campaign import noise
from autoresearch_skills.campaign.hypothesis import (
    Policy,
    Proposal,
    Rejected,
    check_patch,
    committed_text,
    knob_files,
    patched_texts,
    validate,
)
from autoresearch_skills.campaign.llm_endpoint import LOG_NAME, Call, Chat, Endpoint, endpoint_problems
from autoresearch_skills.campaign.paths import CAMPAIGNS_DIR
from autoresearch_skills.campaign.policy_settings import PolicySettings
from autoresearch_skills.errors import BadInput
from autoresearch_skills.gitflow import slugify
from autoresearch_skills.outcome import Mode

KINDS = ("llm", "llm_diff", "hybrid")
MAX_KNOBS_SHOWN = 200  # knobs listed when no space is given (a config file can hold thousands)
SHOWN_CHARS = 300  # of a description or an answer, in a prompt or a reason

PARAMETERS, DIFF = Mode.PARAMETERS, Mode.DIFF
ROW_FIELDS = {f.name for f in fields(ledger.Row)}
THINKING = re.compile(r"<think>.*?</think>", re.S)  # reasoning models' preamble: never the answer
FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$")


def make(settings: PolicySettings, attempted_slugs: set[str]) -> LlmPolicy:
    """The policy for `settings` (kind llm, llm_diff or hybrid); BadInput naming every problem."""
    problems = policy_problems(settings)
    if problems:
        raise BadInput("; ".join(problems))
    return LlmPolicy(settings, attempted_slugs)


def policy_problems(settings: PolicySettings, environ: Mapping[str, str] | None = None) -> list[str]:
    """What stops these settings from working, one sentence each, found without calling the model."""
    problems = endpoint_problems(settings, environ)
    if not settings.mutable:
        problems.append(
            "`policy.mutable` must list the files the model may change (e.g. [train.py]): "
            "the llm policies never change a file it does not name"
        )
    for section, specs in (("space", settings.space), ("args", settings.args)):
        for name, spec in specs.items():
            problem = _spec_problem(spec)
            if problem:
                problems.append(f"`policy.{section}.{name}`: {problem}")
    return problems


def campaign_folder(context: Mapping) -> Path:
    """Where the call log goes: the loop's campaign folder, or the default one for its name."""
    if context.get("folder"):
        return Path(context["folder"])
    return Path(context["workdir"]) / CAMPAIGNS_DIR / slugify(str(context["campaign"]))


class LlmPolicy(Policy):
    """kind llm, llm_diff or hybrid: one model, asked for knob values or diffs."""

    def __init__(self, settings: PolicySettings, attempted_slugs: set[str]):
        super().__init__(settings, attempted_slugs)
        self.kind = settings.kind
        self.endpoint = Endpoint.from_policy(settings)
        self.space: dict = dict(settings.space)
        self.args_space: dict = dict(settings.args)
        self.required_calls = list(settings.required_calls)
        self.max_diff_lines = settings.max_diff_lines
        self.stall_threshold = settings.stall_threshold
        self.max_rejected_diffs = settings.max_rejected_diffs
        self.mode = DIFF if self.kind == "llm_diff" else PARAMETERS
        self.chat: Chat | None = None
        self.exchange: list[dict] = []  # the answers rejected since the last fresh request, and why
        self.cache: list[tuple[Proposal, tuple]] = []  # proposals not handed out yet, and when made
        self.refused: list[str] = []  # proposals dropped from the last answer: said in the next request
        self.rejected_diffs = 0  # in a row
        self.parameters_since = 0  # hybrid: ledger rows when knob values resumed; the stall counts after
        self.switch_note = ""  # hybrid: said in the next proposal's description
        self.resumed = False  # hybrid: the mode was read from the ledger

    # ------------------------------------------------------------ the loop's interface

    def next(self, context: dict, feedback: str | None = None) -> Proposal | None:
        if self.kind == "hybrid" and not self.resumed:
            self.mode, self.parameters_since = hybrid_mode(context.get("ledger") or [])
            self.resumed = True
        if self.kind == "hybrid" and self._switch(context):
            feedback = None  # the reason was about the other kind of proposal
        if feedback is None:
            self.exchange = []
        if self.mode == PARAMETERS:
            proposal = self._parameters(context, feedback)
        else:
            proposal = self._diff(context, feedback)
        if proposal is not None and self.switch_note:
            proposal.mode = str(self.mode)  # what the row's `mode` holds and a resume reads back
            proposal.description = f"[hybrid: {self.switch_note}] {proposal.description}"
            self.switch_note = ""
        return proposal

    # ------------------------------------------------------------ hybrid

    def _switch(self, context: dict) -> bool:
        """Turn to diffs on a stall, back to knob values after rejected diffs; True on a switch."""
        rows = context.get("ledger") or []
        if self.mode == PARAMETERS:
            stalled = runs_without_improvement(rows, context["direction"], after=self.parameters_since)
            if stalled < self.stall_threshold:
                return False
            self.mode, self.rejected_diffs = DIFF, 0
            self.switch_note = f"diffs after {stalled} runs without improvement"
        else:
            if self.rejected_diffs < self.max_rejected_diffs:
                return False
            self.mode, self.parameters_since = PARAMETERS, len(rows)
            self.switch_note = f"parameters again after {self.rejected_diffs} rejected diffs"
            self.rejected_diffs = 0
        self.cache, self.exchange, self.refused = [], [], []
        session_record.note_event(
            f"campaign {context.get('campaign')}: hybrid policy turns to {self.switch_note}",
            context.get("workdir"),
        )
        return True

    # ------------------------------------------------------------ knob values

    def _parameters(self, context: dict, feedback: str | None) -> Proposal | None:
        made = (len(context.get("ledger") or []), context.get("parent_commit"))
        if feedback is None:
            while self.cache:
                proposal, when = self.cache.pop(0)
                if when == made:
                    return proposal
            self.cache = []  # a new result or another parent: ask again, with what is known now
        wanted = 1 if feedback is not None else max(1, int(context.get("free_slots") or 1))
        system = parameter_instructions(context, wanted)
        user = self._request(
            context, parameter_request(context, self.space, self.args_space, wanted), feedback
        )
        call = self._ask(context, system, user, feedback, PARAMETERS, wanted)
        try:
            items = proposal_items(call.text)
        except Rejected as err:
            self._record(call, "rejected", str(err))
            raise
        if not items:
            self._record(call, "none")
            return None
        accepted: list[Proposal] = []
        refused = []
        for n, item in enumerate(items, start=1):
            try:
                proposal = self._parameter_proposal(item, context, accepted, f"proposal {n}")
            except Rejected as err:
                refused.append(str(err))
            else:
                accepted.append(proposal)
        if not accepted:
            reason = "; ".join(refused[:4])
            self._record(call, "rejected", reason)
            raise Rejected(reason)
        self.refused = refused
        self._record(call, "accepted", "; ".join(refused) or None, [p.slug for p in accepted])
        self.cache = [(p, made) for p in accepted[1:]]
        return accepted[0]

    def _parameter_proposal(self, item: object, context: dict, taken: list[Proposal], where: str) -> Proposal:
        if not isinstance(item, dict):
            raise Rejected(f"{where}: must be an object with slug, description and set (or args)")
        values, args = item.get("set") or {}, item.get("args") or {}
        if not isinstance(values, dict) or not isinstance(args, dict):
            raise Rejected(f"{where}: `set` and `args` must map names to values")
        if not (values or args):
            raise Rejected(f"{where}: give `set` (knob values) or `args` (command-line arguments)")
        _check_in_space(values, self.space, "set", "knob", where)
        _check_in_space(args, self.args_space, "args", "command-line argument", where)
        if args and not self.args_space:
            raise Rejected(f"{where}: no command-line arguments may be set here (`policy.args` is empty)")
        values = _ordered(values, self.space)
        args = _ordered(args, self.args_space)
        said = knobs.describe({**values, **args})
        why = " ".join(str(item.get("description") or "").split())
        files = knob_files(list(context["mutable_files"]), lambda path: context["mutable_files"].get(path))
        _check_changes(values, files, where)
        earlier = _tried({**values, **args}, context, taken)
        if earlier:
            raise Rejected(f"{where}: {said} was already tried ({earlier}): propose something new")
        proposal = Proposal.from_mapping(
            {
                "slug": slugify(str(item.get("slug") or said.removeprefix("set "))),
                "description": f"{said}: {why}" if why else said,
                "set": values,
                "args": args,
            },
            where,
        )
        try:
            validate(proposal, Path(context["workdir"]), context["parent_commit"], list(context["mutable_files"]), list(context["frozen_files"]))  # fmt: skip
        except Rejected as err:
            raise Rejected(f"{where}: {err}") from None
        return proposal

    # ------------------------------------------------------------ diffs

    def _diff(self, context: dict, feedback: str | None) -> Proposal:
        system = diff_instructions(context, self.required_calls, self.max_diff_lines)
        user = self._request(context, diff_request(context), feedback)
        call = self._ask(context, system, user, feedback, DIFF, 1)
        try:
            proposal = self._diff_proposal(call.text, context)
        except Rejected as err:
            self.rejected_diffs += 1
            self._record(call, "rejected", str(err))
            raise
        self.rejected_diffs = 0
        self._record(call, "accepted", proposals=[proposal.slug])
        return proposal

    def _diff_proposal(self, text: str, context: dict) -> Proposal:
        answer = diff_answer(text)
        repo, parent = Path(context["workdir"]), context["parent_commit"]
        patch = rebuild_patch(
            normalize_patch(answer["patch"]), lambda path: committed_text(repo, parent, path)
        )
        changed = changed_lines(patch)
        if changed > self.max_diff_lines:
            raise Rejected(
                f"the diff changes {changed} lines, more than `max_diff_lines` ({self.max_diff_lines}): "
                "propose a smaller change"
            )
        mutable, frozen = list(context["mutable_files"]), list(context["frozen_files"])
        paths = check_patch(repo, parent, patch, mutable, frozen)
        after = patched_texts(repo, parent, patch, paths)
        for path, text_after in after.items():
            if text_after is not None:
                _check_parses(path, text_after)
        before = {path: committed_text(repo, parent, path) or "" for path in paths}
        for name in self.required_calls:
            had = [p for p in paths if calls_to(name, before[p], p)]
            if had and not any(calls_to(name, after[p] or "", p) for p in paths):
                raise Rejected(
                    f"the diff removes every call to {name}() from {', '.join(had)}: keep it "
                    f"(`required_calls`: {', '.join(self.required_calls)} must still be called)"
                )
        description = " ".join(str(answer.get("description") or "").split())
        if not description:
            raise Rejected(
                "the answer gives no description: say in one sentence what the diff changes and why"
            )
        slug = slugify(str(answer.get("slug") or description))
        return Proposal.from_mapping({"slug": slug, "description": description, "patch": patch}, "the answer")

    # ------------------------------------------------------------ asking

    def _request(self, context: dict, body: str, feedback: str | None) -> str:
        """The user message: the request, and what the last answer lacked when it is not resent."""
        notes = []
        if self.refused:
            notes.append("Refused from your previous answer:\n" + "\n".join(f"- {r}" for r in self.refused))
            self.refused = []
        if feedback is not None and not self.exchange:
            notes.append(f"The previous proposal was rejected: {feedback}")
        return body + ("\n\n# Notes\n" + "\n\n".join(notes) if notes else "")

    def _ask(
        self, context: dict, system: str, user: str, feedback: str | None, mode: str, wanted: int
    ) -> Call:
        if self.chat is None:
            self.chat = Chat(self.endpoint, campaign_folder(context) / LOG_NAME, self.kind)
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        if feedback is not None and self.exchange:
            messages += [*self.exchange, {"role": "user", "content": correction(feedback, mode)}]
        self.exchange = []  # a failed call leaves nothing to correct
        call = self.chat.ask(messages, mode=mode, asked=wanted, correction=feedback is not None)
        self.exchange = [*messages[2:], {"role": "assistant", "content": call.text}]
        return call

    def _record(
        self, call: Call, verdict: str, reason: str | None = None, proposals: Sequence[str] = ()
    ) -> None:
        assert self.chat is not None
        self.chat.record(call, verdict, reason, proposals)


# ---------------------------------------------------------------- the ledger


def rows_of(context_rows: list[dict]) -> list[ledger.Row]:
    return [ledger.Row(**{k: v for k, v in r.items() if k in ROW_FIELDS}) for r in context_rows]


def hybrid_mode(context_rows: list[dict]) -> tuple[Mode, int]:
    """(mode, parameters_since) a hybrid policy left off in: the `mode` its last switch wrote in a
    row, and for knob values the row it turned back at."""
    mode, since = PARAMETERS, 0
    for n, row in enumerate(context_rows):
        if row.get("mode"):
            mode = Mode(row["mode"])
            since = n if mode is PARAMETERS else since
    return mode, since


def runs_without_improvement(context_rows: list[dict], direction: str, after: int = 0) -> int:
    """Rows since the best commit's last run, leaving out the first `after` rows: the stall."""
    rows = rows_of(context_rows)
    best = noise.best(rows, direction)
    since = max(best.group.indexes) if best else -1
    return sum(1 for n, r in enumerate(rows) if r.index > since and n >= after)


def _tried(change: dict, context: dict, taken: list[Proposal]) -> str:
    """Where these knob values (`change`) were tried or are running: `#3 lr-0-02 (keep)`, "" when
    new. Rows are compared by their `knobs` column, proposals running or just made by their values."""
    for row in rows_of(context.get("ledger") or []):
        if row.knob_values() == change:
            return f"#{row.index} {Path(row.branch).name} ({row.status})"
    for running in context.get("in_flight") or []:
        proposal = running.get("proposal") or {}
        values = {**(proposal.get("set") or {}), **(proposal.get("args") or {})}
        if values and values == change:
            return f"{running.get('slug')}, running now"
    for proposal in taken:
        if {**proposal.set, **proposal.args} == change:
            return f"{proposal.slug}, earlier in this answer"
    return ""


# ---------------------------------------------------------------- knob values


def _spec_problem(spec: object) -> str | None:
    if isinstance(spec, list):
        return None if spec else "an empty list allows nothing"
    if isinstance(spec, dict) and len(spec) == 1:
        ((form, bounds),) = spec.items()
        if form in ("uniform", "log_uniform", "int") and _is_pair(bounds):
            if form == "log_uniform" and min(bounds) <= 0:
                return "log_uniform needs bounds above 0"
            return None
    return f"use a list of values, {{uniform: [a, b]}}, {{log_uniform: [a, b]}} or {{int: [a, b]}} (got {spec!r})"


def _is_pair(bounds: object) -> bool:
    return (
        isinstance(bounds, list)
        and len(bounds) == 2
        and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)
        and bounds[0] <= bounds[1]
    )


def allowed(spec: list | dict) -> str:
    """A space entry in words, for the prompt and for a rejection."""
    if isinstance(spec, list):
        return "one of " + ", ".join(json.dumps(v) for v in spec)
    ((form, (low, high)),) = spec.items()
    return {
        "uniform": f"a number from {low:g} to {high:g}",
        "log_uniform": f"a number from {low:g} to {high:g} (log scale)",
        "int": f"an integer from {low} to {high}",
    }[form]


def _fits(value: object, spec: list | dict) -> bool:
    if isinstance(spec, list):
        return any(_same(value, v) for v in spec)
    ((form, (low, high)),) = spec.items()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if form == "int" and not (isinstance(value, int) or float(value).is_integer()):
        return False
    return low <= value <= high


def _same(a: object, b: object) -> bool:
    numbers = (int, float)
    if (
        isinstance(a, numbers)
        and isinstance(b, numbers)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    ):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _check_in_space(values: dict, space: dict, section: str, what: str, where: str) -> None:
    for name, value in values.items():
        if not space:
            continue  # no space: any knob of the mutable files (validate finds it, or names the nearest)
        if name not in space:
            raise Rejected(
                f"{where}: {name} is not a {what} you may set; `{section}` takes {', '.join(space)}"
            )
        if not _fits(value, space[name]):
            raise Rejected(
                f"{where}: {name}={json.dumps(value)} is outside its range: {allowed(space[name])}"
            )


def _ordered(values: dict, space: dict) -> dict:
    """The space's order, then by name: one change is always described in the same words."""
    order = {name: n for n, name in enumerate(space)}
    return dict(sorted(values.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


def _check_changes(values: dict, files: dict[str, str], where: str) -> None:
    """A proposal that sets every knob to the value it has already is no experiment."""
    if not values:
        return
    for name, value in values.items():
        if not _same(_current(name, files), value):
            return
    raise Rejected(f"{where}: {knobs.describe(values)} changes nothing: the parent has these values already")


def _current(name: str, files: dict[str, str]) -> object:
    try:
        path = knobs.locate(name, files)
        bare = name.split(":", 1)[1] if name.startswith(f"{path}:") else name
        return knobs.read_knob(files[path], knobs.file_format(path), bare, filename=path)
    except knobs.KnobError:
        return None


def knob_lines(files: dict[str, str], space: dict) -> list[str]:
    """`NAME = current  # allowed`, one line per knob the model may set."""
    if space:
        return [f"{name} = {json.dumps(_current(name, files), default=str)}  # {allowed(spec)}" for name, spec in space.items()]  # fmt: skip
    lines = []
    for path, text in files.items():
        try:
            names = knobs.knob_names(text, knobs.file_format(path), filename=path)
        except knobs.KnobError:
            continue
        qualify = len(files) > 1
        for name in names:
            shown = f"{path}:{name}" if qualify else name
            value = _current(shown, files)
            lines.append(f"{shown} = {json.dumps(value, default=str)}")
    if len(lines) > MAX_KNOBS_SHOWN:
        lines = [*lines[:MAX_KNOBS_SHOWN], f"... and {len(lines) - MAX_KNOBS_SHOWN} more (see the files)"]
    return lines


# ---------------------------------------------------------------- answers


def _answer_text(text: str) -> str:
    text = THINKING.sub("", text).strip()
    if not text:
        raise Rejected("the model answered nothing")
    return text


def _json_value(text: str) -> object:
    """The first JSON value in an answer: the whole text, a fenced block, or from the first brace."""
    text = _answer_text(text)
    candidates = [text, *FENCE.findall(text)]
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            pass
    decoder = json.JSONDecoder()
    for start in (m.start() for m in re.finditer(r"[\[{]", text)):
        try:
            return decoder.raw_decode(text[start:])[0]
        except json.JSONDecodeError:
            continue
    raise Rejected(
        f"the answer is not JSON ({_shown(text)!r}): answer with one JSON object "
        '{"proposals": [{"slug": ..., "description": ..., "set": {...}}]}'
    )


def proposal_items(text: str) -> list:
    """The proposals of a knob-values answer: {"proposals": [...]}, a list, or one proposal."""
    data = _json_value(text)
    if isinstance(data, dict) and "proposals" in data:
        data = data["proposals"]
        if not isinstance(data, list):
            raise Rejected('`proposals` must be a list: {"proposals": [{...}, ...]}')
        return data
    if isinstance(data, list):
        return data
    if isinstance(data, dict) and ("set" in data or "args" in data):
        return [data]
    raise Rejected(
        f"the answer holds no proposals ({_shown(json.dumps(data))}): answer "
        '{"proposals": [{"slug": ..., "description": ..., "set": {...}}]}'
    )


def diff_answer(text: str) -> dict:
    """{slug, description, patch} from an answer: `slug:` and `description:` lines and a fenced
    diff, or one JSON object with those keys."""
    text = _answer_text(text)
    if text.lstrip().startswith("{"):
        try:
            data = _json_value(text)
        except Rejected:
            data = None
        if isinstance(data, dict) and isinstance(data.get("patch"), str):
            return data
    fields_said = {
        key: (found.group(1).strip().strip("`*\"'") if found else "")
        for key in ("slug", "description")
        for found in [re.search(rf"^[ \t*#-]*{key}[*]*[ \t]*:[ \t]*(.+)$", text, re.M | re.I)]
    }
    patch = next((block for block in FENCE.findall(text) if re.search(r"^(---|\+\+\+|@@) ", block, re.M)), "")
    if not patch and "\n--- " in f"\n{text}":
        patch = text[text.find("--- ") if text.startswith("--- ") else text.find("\n--- ") + 1 :]
    if not patch.strip():
        raise Rejected(
            "the answer holds no diff: give one ```diff block with --- a/PATH, +++ b/PATH and @@ hunks"
        )
    return {**fields_said, "patch": patch}


def normalize_patch(patch: str) -> str:
    """A model's diff as git applies it: a/ and b/ prefixes on the file headers, a blank context
    line given its leading space, and each hunk's line counts recounted (models miscount them)."""
    lines = patch.replace("\r\n", "\n").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    out, n = [], 0
    while n < len(lines):
        line = lines[n]
        header = re.match(r"^(---|\+\+\+) (\S+)(.*)$", line)
        if header and header[2] != "/dev/null":
            side = "a/" if header[1] == "---" else "b/"
            path = header[2] if header[2].startswith(("a/", "b/")) else side + header[2]
            out.append(f"{header[1]} {path}")
            n += 1
            continue
        hunk = HUNK.match(line)
        if not hunk:
            out.append(line)
            n += 1
            continue
        body, n = [], n + 1
        while n < len(lines) and not HUNK.match(lines[n]) and not _file_header(lines, n):
            body.append(" " if lines[n] == "" else lines[n])
            n += 1
        old = sum(1 for b in body if b[:1] in (" ", "-"))
        new = sum(1 for b in body if b[:1] in (" ", "+"))
        out += [f"@@ -{hunk[1]},{old} +{hunk[2]},{new} @@{hunk[3]}", *body]
    return "\n".join(out) + "\n"


def rebuild_patch(patch: str, read: Callable[[str], str | None]) -> str:
    """The diff made again from the parent's text: each hunk's old lines are found where they
    match (nearest the line its header names), replaced by its new lines, and the files compared
    anew with three lines of context. This takes the hunks a model writes with wrong line numbers
    or no context at all, which git refuses. Anything it cannot place for certain (an old block
    not found, a pure insertion without context, a new, deleted or renamed file, a last line
    without a newline) leaves the patch as it was, for `check_patch` to judge."""
    files = _hunks_by_file(patch)
    if not files:
        return patch
    out: list[str] = []
    for path, hunks in files:
        text = read(path)
        if text is None or (text and not text.endswith("\n")):
            return patch
        original = text.splitlines(keepends=True)
        lines, shift = list(original), 0
        for hint, body in hunks:
            old = [b[1:] + "\n" for b in body if b[:1] in (" ", "-")]
            new = [b[1:] + "\n" for b in body if b[:1] in (" ", "+")]
            places = [n for n in range(len(lines) - len(old) + 1) if lines[n : n + len(old)] == old]
            if not old or not places:
                return patch
            at = min(places, key=lambda n: abs(n - (hint - 1 + shift)))
            lines[at : at + len(old)] = new
            shift += len(new) - len(old)
        out += difflib.unified_diff(original, lines, f"a/{path}", f"b/{path}")
    return "".join(out) or patch


def _hunks_by_file(patch: str) -> list[tuple[str, list[tuple[int, list[str]]]]]:
    """[(path, [(old start, body lines)])] of a normalized patch; [] for a form not rebuilt."""
    files: list[tuple[str, list[tuple[int, list[str]]]]] = []
    lines = patch.splitlines()
    for n, line in enumerate(lines):
        if _file_header(lines, n) and line.startswith("--- "):
            old, new = line[4:].strip(), lines[n + 1][4:].strip()
            if "/dev/null" in (old, new) or old[2:] != new[2:]:
                return []
            files.append((new[2:], []))
        elif (hunk := HUNK.match(line)) and files:
            files[-1][1].append((int(hunk[1]), []))
        elif files and files[-1][1] and line[:1] in (" ", "-", "+"):
            files[-1][1][-1][1].append(line)
    return files


def _file_header(lines: list[str], n: int) -> bool:
    """A `--- ` line followed by `+++ `, or `diff --git`: the next file's diff starts here."""
    line = lines[n]
    if line.startswith("diff --git"):
        return True
    return line.startswith("--- ") and n + 1 < len(lines) and lines[n + 1].startswith("+++ ")


def changed_lines(patch: str) -> int:
    return sum(
        1 for line in patch.splitlines() if line[:1] in ("+", "-") and not line.startswith(("+++ ", "--- "))
    )


def _check_parses(path: str, text: str) -> None:
    """Rejected when the file, as the diff leaves it, would not load."""
    try:
        fmt = knobs.file_format(path)
    except knobs.KnobError:
        return  # a shell script or a notebook: the run will say
    if fmt == "python":
        try:
            compile(text, path, "exec")
        except SyntaxError as err:
            raise Rejected(
                f"{path} does not compile after the diff: {err.msg} at line {err.lineno}"
                + (f": {err.text.strip()!r}" if err.text else "")
            ) from None
        return
    try:
        knobs.knob_names(text, fmt, filename=path)
    except knobs.KnobError as err:
        raise Rejected(f"{path} does not parse after the diff: {err}") from None


def calls_to(name: str, text: str, path: str) -> bool:
    """Whether `text` calls `name` (`print`, `evaluate_bpb`, `torch.save`): a Python call by its
    dotted name or its last part; in other files, `name(` as written."""
    if path.endswith(".py"):
        try:
            tree = ast.parse(text)
        except SyntaxError:
            tree = None
        if tree is not None:
            return any(isinstance(node, ast.Call) and _called(node.func, name) for node in ast.walk(tree))
    return re.search(rf"(?<![\w.]){re.escape(name)}\s*\(", text) is not None


def _called(func: ast.expr, name: str) -> bool:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    dotted = ".".join(reversed(parts))
    return dotted == name or dotted.endswith("." + name) or (bool(parts) and parts[0] == name)


# ---------------------------------------------------------------- prompts


def _goal(context: dict) -> str:
    better = "lower" if context["direction"] == "min" else "higher"
    return f"{better} {context['metric']} is better"


def parameter_instructions(context: dict, wanted: int) -> str:
    return (
        "You design the next experiments of an automated machine-learning research campaign. "
        f"Each experiment sets knob values of the training code; a loop runs it and records "
        f"{context['metric']} ({_goal(context)}). Learn from the history: what helped, what hurt, what "
        "crashed and why, and how large the run-to-run noise is.\n\n"
        f"Answer with JSON only, exactly {wanted} proposal(s), each a different idea:\n"
        '{"proposals": [{"slug": "short-kebab-name", "description": "one sentence: why this may '
        'improve the metric", "set": {"KNOB": value}}]}\n'
        'Add "args": {"NAME": value} for command-line arguments when any are listed. Values are JSON '
        "numbers, strings or booleans within each knob's allowed range. Never repeat a change the history "
        'or the running experiments already hold. With nothing worth trying, answer {"proposals": []}.'
    )


def diff_instructions(context: dict, required_calls: list[str], max_lines: int) -> str:
    mutable = ", ".join(context["mutable_files"])
    frozen = ", ".join(context.get("frozen_files") or []) or "none"
    keep = f" Keep every call to {', '.join(required_calls)}." if required_calls else ""
    return (
        "You improve the training code of an automated machine-learning research campaign by "
        f"proposing one change as a unified diff; a loop runs it and records {context['metric']} "
        f"({_goal(context)}). Learn from the history: what helped, what hurt, what crashed and why.\n\n"
        "Answer in exactly this form:\n"
        "slug: short-kebab-name\n"
        "description: one sentence: what the diff changes and why it may improve the metric\n"
        "```diff\n--- a/PATH\n+++ b/PATH\n@@ -START,COUNT +START,COUNT @@\n context line\n-old line\n+new line\n```\n"
        f"Rules: change only {mutable}; never {frozen}. Copy context lines exactly as the file has them. "
        f"At most {max_lines} changed lines. The code must still run and print the metric.{keep} "
        "Never repeat a change the history already holds."
    )


def parameter_request(context: dict, space: dict, args_space: dict, wanted: int) -> str:
    files = knob_files(list(context["mutable_files"]), lambda path: context["mutable_files"].get(path))
    parts = [
        _program(context),
        "# Knobs you may set (name = value now  # allowed)",
        *knob_lines(files, space),
    ]
    if args_space:
        parts += ["# Command-line arguments you may set (`args`)", *[f"{n}  # {allowed(s)}" for n, s in args_space.items()]]  # fmt: skip
    parts += [_files(context), _history(context), _running(context)]
    parts.append(f"# Now\nPropose {wanted} new experiment(s) as JSON.")
    return "\n\n".join(p for p in parts if p)


def diff_request(context: dict) -> str:
    parts = [_program(context), _files(context), _history(context), _running(context)]
    parts.append("# Now\nPropose one new change as a diff, in the form asked for.")
    return "\n\n".join(p for p in parts if p)


def correction(feedback: str, mode: str) -> str:
    what = "a corrected diff, in the same form" if mode == DIFF else "corrected JSON, in the same form"
    return f"That answer was rejected: {feedback}\nAnswer again with {what}."


def _program(context: dict) -> str:
    program = (context.get("program") or "").strip()
    head = f"# Goal\n{_goal(context)}."
    return f"# Research program\n{program}\n\n{head}" if program else head


def _files(context: dict) -> str:
    parts = ["# Files (as the next experiment starts from them)"]
    for path, text in context["mutable_files"].items():
        parts.append(f"## {path}\n```\n{text}\n```")
    frozen = context.get("frozen_files") or []
    if frozen:
        parts.append(f"Frozen (never changed): {', '.join(frozen)}")
    return "\n\n".join(parts)


def _history(context: dict) -> str:
    """The whole ledger, one line a row: value, verdict, noise columns, flags, crash reasons."""
    rows = context.get("ledger") or []
    if not rows:
        return "# History\nNothing has run yet."
    metric = context["metric"]
    by_commit = {r.get("commit"): r.get("index") for r in rows if r.get("commit")}
    lines = [f"# History (the ledger, oldest first; {_goal(context)})"]
    for r in rows:
        status = str(r.get("status"))
        value = f"{float(r.get('metric_value') or 0):.6f}" if status in noise.FINISHED else "none"
        notes = [f"{float(r.get('elapsed_min') or 0):.1f} min"]
        parent = by_commit.get(r.get("parent_commit"))
        if parent is not None and parent != r.get("index"):
            notes.append(f"from #{parent}")
        for key in ("rerun_of", "runs", "sigma", "margin_sigma", "steps", "flags", "cause"):
            if r.get(key):
                notes.append(f"{key} {r[key]}")
        description = _shown(rows_of([r])[0].with_reason())
        lines.append(
            f"#{r.get('index')} {Path(str(r.get('branch'))).name}: {status} {metric}={value} "
            f"({', '.join(notes)}) {description}"
        )
    best = noise.best(rows_of(rows), context["direction"])
    if best is not None:
        lines.append(
            f"Best so far: #{best.index} {Path(best.row.branch).name}, {metric} {best.metric_value:.6f} "
            f"(mean of {best.group.n} run(s)): {best.description}"
        )
    sigmas = [r.get("sigma") for r in rows if r.get("sigma")]
    if sigmas:
        lines.append(
            f"Run-to-run noise (sigma of one run): {sigmas[-1]}; a change smaller than that is luck."
        )
    return "\n".join(lines)


def _running(context: dict) -> str:
    running = context.get("in_flight") or []
    if not running:
        return ""
    return "# Running now (do not propose these again)\n" + "\n".join(
        f"- {e.get('slug')}: {e.get('description')}" for e in running
    )


def _shown(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."
