"""Metric extraction: the values a run reported, read from its log, a JSON-lines file or
TensorBoard event files.

A metric is asked for by the name the log prints, spaces and case as written (`val loss`,
`Validation bpb`, `lm loss value`, `eval_loss`, `Acc@1`): the generic reading (the default) splits
each line into names and numbers, a name being the text between the previous number or separator
(`,;|{}[]()`, ` - `, table bars) and its number, without `:`, `=` or quotes. A name matches whole,
never a part of a longer one: `loss` is not `train loss`, `reward` is not `reward_std`. The line's
`step`-like name (`step 200`, `iter 100:`, `iteration 100/1000`) gives the values their step. A value
followed by a bracketed one (`Acc@1: 48.378 ( 52.378)`) reads the bracketed running average, the
result timm and pytorch/examples report. `names()` lists the names a log prints as metrics (on
progress and result lines, not in prose, paths or comments), `nearest()` the one closest to a name
that is missing.

Presets know formats whose names are not printed as they are stored (references/metric-presets.md):
  karpathy  the end-of-run block `val_bpb:          0.997900`, and `step 00042 (..) | loss: ...` lines
  nemo-rl   `• Accuracy: 0.7421` under `Validation Results` (step from `Starting validation at step N`),
            `• Loss:` / `• Avg Reward:` under `Training Results` (step from `==== Step N/M ====`)
  verl      `step:N - key:value - ...`, `## Step N` bullet lists, one Python-dict line per validation
            (alias: agentjet)
  generic   names as printed (above)
A preset that finds no value for the name asked falls back to the name as printed, so a campaign
with the karpathy preset and `metric: val loss` reads nanoGPT's `step 200: ..., val loss 2.40`.
`--pattern REGEX` reads anything else.

`last` reads the end of the file in growing windows and stops at the latest match, so its cost
follows how far from the end the value was printed, not how big the log is. Lines that cannot hold
the name (a case-blind substring test) are skipped before any parsing.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import operator
import re
import sys
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import click

if not __package__:  # run as `python tools/metrics.py` from a checkout with nothing installed
    import _checkout  # noqa: F401

from autoresearch_skills.errors import EXIT_NEGATIVE, BadInput, run_cli
from autoresearch_skills.sources import LineParser, Sample, literal_needle

__all__ = [
    "PRESETS",
    "Sample",
    "extract",
    "format_value",
    "guess_direction",
    "latest",
    "listing",
    "names",
    "nearest",
    "recent",
    "resolve_preset",
    "tail_lines",
]

MODES = ("last", "best", "series")
DIRECTIONS = ("min", "max")
FIRST_WINDOW = 16 * 1024  # `last` starts with the final 16 KiB and widens 4x at a time
CONTEXT_CAP = 16 * 1024 * 1024  # stop widening for a step header this far back; report step unknown
LATEST_WINDOW = 256 * 1024  # `latest` (a live status block) looks at this much of the tail
PROGRESS_MIN_BYTES = 64 * 1024 * 1024  # forward reads of bigger files show progress on a terminal

# A number as Python, numpy and C print it, including nan and inf (a diverged loss is news).
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf(?:inity)?)"
_KEY = r"[A-Za-z_][\w./@-]*"
_UNIT = r"(?:%|ms|us|s|m|h|x|GB|GiB|MB|MiB)?"
_END = r"(?![\w:]|[.,]\d)"  # not the start of 12:30:45, 1.2.3, 1,669,232, 250ms or an identifier
_NP = r"(?:np\.\w+\()?"  # numpy 2 prints np.float64(0.53)


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


# --- presets -----------------------------------------------------------------------------

GENERIC_STEP_KEYS = frozenset({"step", "global_step", "steps", "iter", "iteration", "it", "_step"})
STEP_WORDS = frozenset({"step", "iter", "iteration"})  # `validate step: 100`, `loss at iteration 100`
MAX_NAME_WORDS = 6  # `elapsed time per iteration (ms)` has 5; longer text before a number is prose

# A value as printed: a number with its unit glued on (250ms, 12.3GiB, 30.1it/s, 39.8%), never a
# piece of a name (3fa2, exp_lr_3e-4, gpt-2, Acc@1), a version (1.2.3), a clock (12:00:05), a
# date (2024-05-01) or a digit group (1,669,232).
_VALUE = (
    r"(?<![\w.@])(?<!\d[:,-])(?<![\w.][-+])"
    r"(?P<number>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
    r"|[-+]?(?i:nan|inf(?:inity)?)(?!\s+[A-Za-z]))"  # `loss nan`, not `number of nan iterations`
    r"(?P<unit>%|/?[A-Za-z]+(?:/[A-Za-z]+)*)?"
    r"(?!\w|[.:,-]\d)"
)
# What splits a line into names: a value ends the name before it; so do `,;|{}[]`, table bars,
# ` - ` and brackets. A bracket without digits inside is part of a name: `(ms)`, `(EMA)`.
_TOKEN = re.compile(rf"(?P<aside>\([^()\d]*\))|(?P<value>{_VALUE})|(?P<cut>[(),;|{{}}\[\]│┃║]| - )")
_TABLE_CUTS = frozenset("|│┃║[")  # `│ val_loss │ 0.512 │`: the name is in the cell before
# `Acc@1: 48.378 ( 52.378)`: the batch value and, in brackets, the running average (timm,
# pytorch/examples AverageMeter); the average is what those repositories report.
_AVERAGE = re.compile(rf"\s*\(\s*(?P<number>{NUMBER})(?P<unit>%|/?[A-Za-z]+)?\s*\)")
_WRAPPED = re.compile(rf"\b(?:np\.\w+|tensor)\(\s*({NUMBER})[^()]*\)")  # np.float64(0.53), tensor(0.5)
_LEVEL = re.compile(r"^(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b\W*")
_LEADING = re.compile(r"^(?:[^\w]|\d)+")  # bullets, `*`, `#`, emoji before a name
_NOT_A_NAME = re.compile(r"\.(?:py|c|cc|cpp|cu|h|rs|go|js|ts)$")  # `ppo_trainer.py:547]`: a source line


class GenericParser:
    """Names as the log prints them: each number takes as its name the text before it, back to
    the previous number or a separator (`,;|{}[]()`, ` - `, table bars), without `:`, `=`, quotes
    or a log level. So `step 200: train loss 2.52, val loss 2.40` gives `train loss` and
    `val loss` at step 200; `{'eval_loss': '0.5'}` gives `eval_loss`; `key=value` takes the one
    word before `=`. A `step`-like name gives the line's step (printed_values has the rules)."""

    resolved = True

    def __init__(self) -> None:
        self.wanted: re.Pattern[str] | None = None

    def context(self, line: str) -> None:
        pass

    def needle(self, metric: str) -> re.Pattern[str]:
        """The name's last `/` part, any case, any run of spaces between its words."""
        words = metric.rsplit("/", 1)[-1].split()
        self.wanted = re.compile(r"\s+".join(map(re.escape, words)), re.IGNORECASE)
        return self.wanted

    def feed(self, line: str) -> list[Sample]:
        # Reading one name, the rest of a line after its value matters only for a step.
        ends = [found.end() for found in self.wanted.finditer(line)] if self.wanted else []
        pairs, step = printed_values(line, after=ends[-1] if ends else None)
        return [Sample(name, value, step) for name, value in pairs]


def printed_values(line: str, after: int | None = None) -> tuple[list[tuple[str, float]], int | None]:
    """(name as printed, value) for every named number in `line`, in order, and the line's step:
    the first `step`-like name's whole number. A step written bare (`step 200`) is only the step;
    written `step: 200` or `step=200` it is also a value named `step`. With `after`, the values
    past that position are left out when no step name can follow (a shortcut, same answer for
    every name that ends before `after`)."""
    step = None
    pairs = []
    for name, value, separated, *_ in _named_numbers(line, after):
        if _is_step(name):
            if step is None and value.is_integer():
                step = int(value)
            if not separated:
                continue
        pairs.append((name, value))
    return pairs, step


_STEP_WORD = re.compile(r"step|iter|\bit\b", re.IGNORECASE)  # in every name _is_step accepts


# One named number: (name, value, whether `:` or `=` stood between them, where the text naming it
# begins (-1: a table cell before a cut), where the value ends (its unit and bracketed average
# included), the value as printed with its unit). Positions are in `_unwrapped(line)`.
Named = tuple[str, float, bool, int, int, str]


def _unwrapped(line: str) -> str:
    """The line with `np.float64(0.53)` and `tensor(0.53)` written as the numbers they hold."""
    if "(" in line and ("np." in line or "tensor(" in line):
        return _WRAPPED.sub(r"\1", line)
    return line


def _named_numbers(line: str, after: int | None = None) -> list[Named]:
    """Every named number in `line` (see `Named`); with `after`, stops at the first value past it
    unless a step name may follow."""
    line = _unwrapped(line)
    averages = "(" in line and not line.lstrip().startswith("*")  # timm's ` * Acc@1 79.1 (20.9)`: an error
    found: list[Named] = []
    start = 0  # where the text naming the next value begins
    after_value = False  # whether `start` follows a value (else the line's start or a cut)
    cell = ""  # the text between the last two cuts, for table rows
    cut = ""
    named: int | None = None  # the entry the previous value made, if it made one
    fraction_of: int | None = None  # `HellaSwag: 2345/10042 = 0.2335`: the ratio is HellaSwag's value
    stepped = False  # a step name was read: a later one cannot change the line's step
    skip_to = 0
    for token in _TOKEN.finditer(line):
        begin, end = token.span()
        kind = token.lastgroup
        if kind == "aside" or begin < skip_to:
            continue
        if kind == "cut":
            cell = "" if after_value else line[start:begin]
            cut, start, after_value = token.group(), end, False
            continue
        text_start, text = start, line[start:begin]
        name, separated = _label(text)
        if name is None and not after_value and cell and cut in _TABLE_CUTS and not text.strip():
            name, separated = _label(cell)
            text_start = -1
        start, after_value = end, True
        value, shown = float(token.group("number")), token.group("value")
        if name is None:
            bare = text.strip()
            if bare == "/":
                fraction_of = named
            elif bare == "=" and fraction_of is not None:
                ratio_of = found[fraction_of]
                found[fraction_of] = (ratio_of[0], value, True, ratio_of[3], end, shown)
                fraction_of = None
            named = None
            continue
        average = _AVERAGE.match(line, end) if averages else None
        if average and average.group("unit") == token.group("unit") and not _is_step(name):
            value = float(average.group("number"))
            shown = average.group("number") + (average.group("unit") or "")
            start = skip_to = average.end()
        named, fraction_of = len(found), None
        found.append((name, value, separated, text_start, start, shown))
        stepped = stepped or (_is_step(name) and value.is_integer())
        if after is not None and begin >= after and not _more_to_read(line, start, stepped):
            break
    return found


def _more_to_read(line: str, start: int, stepped: bool) -> bool:
    """Whether the rest of the line may still change what came before: a step name (unless the
    line already gave one: the first step name wins), or the `/10042 = 0.2495` that makes
    `HellaSwag: 2506` a ratio."""
    if line[start : start + 32].lstrip().startswith("/"):
        return True
    return not stepped and _STEP_WORD.search(line, start) is not None


@functools.lru_cache(maxsize=16384)  # a log repeats the same few dozen names millions of times
def _label(text: str) -> tuple[str | None, bool]:
    """The name in the text before a value (None when it holds none), and whether a `:` or `=`
    ends that text."""
    tight = text[-1:] in (":", "=") and not text[-2:-1].isspace()
    text = text.rstrip(" \t'\"")
    separated = text[-1:] in (":", "=")
    if separated:
        text = text[:-1].rstrip(" \t'\"")
    if tight:  # key=value and key:value take one word: `INFO epoch=0` is epoch
        text = text.rsplit(None, 1)[-1] if text.strip() else ""
    for mark in (":", "=", ". "):  # `INFO:root:loss`, `Validation: val loss`, `done. accuracy`
        if mark in text:
            text = text.rsplit(mark, 1)[1]
    words = text.split()
    for i in range(len(words) - 1, -1, -1):  # a date, clock or version before the name
        if words[i].lstrip("+-")[:1].isdigit():
            words = words[i + 1 :]
            break
    name = _LEVEL.sub("", _LEADING.sub("", " ".join(words))).rstrip(" .'\"")  # `lr ......... 3e-4`
    if not name or not (name[0].isalpha() or name[0] == "_") or _NOT_A_NAME.search(name):
        return None, separated
    if name.count(" ") >= MAX_NAME_WORDS:
        return None, separated
    return name, separated


@functools.lru_cache(maxsize=4096)
def _is_step(name: str) -> bool:
    lowered = name.lower()
    return lowered in GENERIC_STEP_KEYS or lowered.rsplit(" ", 1)[-1] in STEP_WORDS


# --- what `--list` shows: names that read as metrics ----------------------------------------
#
# `extract` reads any name a user asks for; `--list` offers names to pick from, so it leaves out
# numbers that sit in prose, paths and code, each rule taken from a log that printed one:
_COMMENT = re.compile(r"(?:^|\s)#+(?:\s|$)")  # a config echo: `block_size = 256 # context of up to 256`
_FILE_NAME = re.compile(
    r"\.(?:py|c|cc|cpp|cu|h|rs|go|js|ts|pkl|pt|pth|bin|npy|npz|json|ya?ml|toml|txt|log|csv|ckpt|safetensors)\b",
    re.IGNORECASE,
)  # `/home/user/nanoGPT/train.py:196: FutureWarning`
# A name that starts like a sentence's middle: `Training starts at step 1, with local batch size 8`.
_PROSE_WORDS = frozenset(
    {"a", "an", "the", "and", "or", "with", "without", "at", "of", "to", "for", "in", "on", "from", "by",
     "after", "before", "into", "over", "under", "than", "using", "is", "are", "was", "were", "will", "be"}
)  # fmt: skip
# An index, not a measurement: `[Rank 0]`, `LOCAL_RANK: 0`, `(cuda:0)`, `Validation DataLoader 0:`.
_INDEX_WORDS = frozenset({"rank", "cuda", "gpu", "device", "devices", "node", "worker", "pid", "dataloader"})
# A unit printed apart from its number: shown with it (`total average iteration time: 179.5 ms`,
# `Trainable params: 100 K`); starting the next name, it makes a misread name (`MiB reserved`).
_UNIT_WORD = re.compile(
    r"(?:%|[mun]?s|µs|secs?|seconds|mins?|minutes|h|hrs?|hours|[kKMGT]|[KMGTP]i?B|B|[A-Za-z]+/s(?:ec)?)(?=\W|$)"
)
# A unit glued to the number: `0.10M`, `81.2ms`, `45%`, `12.3GiB`, `30.1it/s`, `675711GF`. Letters
# that are no unit make it no value: `35C` in an nvidia-smi table, `nanoGPT` in a path.
_GLUED_UNIT = re.compile(
    r"%|[kKMBGT]|[KMGTP]i?B|[mun]?s|µs|sec|m|min|h|x|[KMGTP]?FLOPs?|[GT]F|(?:[A-Za-z]+/)+[A-Za-z]+"
)
_NO_NAME_WORDS = frozenset({"None", "True", "False", "null"})  # a config dump's line, not one key
_CLOSES_VALUE = frozenset(",;|}])([{:│┃║")  # what may follow a value on a metric line
_OF_TOTAL = re.compile(r"/\s*\d")
_BARE_NUMBER = re.compile(NUMBER)
_LOG_LEVELS = frozenset({"DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL"})


# A setting echoed back, not a result: nanoGPT prints its config file (`batch_size = 64 # ...`, a
# Python assignment at the line's start) and each override (`Overriding: n_embd = 64`). HF Trainer's
# metrics block (`  eval_loss    =     0.5`) is indented, so it still lists.
_CONFIG_ECHO = re.compile(r"\s*Overrid(?:e|ing)\b|[A-Za-z_]\w* = \S")


def listed_values(
    line: str, known: Container[str] = ()
) -> tuple[list[tuple[str, float, str, bool]], int | None]:
    """What `--list` makes of `line`: (name, value, value as printed with its unit, whether it reads
    as a metric) for every named number, and the line's step as `printed_values` gives it. A
    number reads as a metric when it ends the line or is followed by a separator or by the next
    name and its value (`iter 10: loss 4.2, time 45.1ms, mfu 12.3%`, `val_bpb: 0.9979`,
    `{'eval_loss': 0.39}`); not when prose follows it (`with 320 parameters`), it is in a
    `# comment`, a path, a file name or an index (`sys.argv[0]`, `cuda:0`, `[Rank 0]`), or its
    name starts mid-sentence. Names in `known` already read as metrics and are not checked again
    (a listing checks a name until it reads as one once)."""
    line = _unwrapped(line)
    found = _named_numbers(line)
    if _CONFIG_ECHO.match(line):  # a setting echoed back, not a result
        return [(name, value, shown, False) for name, value, _, _, _, shown in found], None
    comment = _COMMENT.search(line)
    code = line[: comment.start()] if comment else line
    starts = {entry[3] for entry in found}  # where each name's text begins
    step = None
    listed = []
    for name, value, separated, text_start, end, shown in found:
        if _is_step(name):
            if step is None and value.is_integer():
                step = int(value)
            if not separated:
                continue
        unit = _closing_unit(code, end, starts)
        metric = unit is not None and (
            name in known or _reads_as_metric(line, name, value, text_start, end - len(shown), shown)
        )
        listed.append((name, value, f"{shown} {unit}" if unit else shown, metric))
    return listed, step


def _closing_unit(code: str, end: int, starts: set[int]) -> str | None:
    """What closes the value ending at `end`: "" for the line's end, a separator or the next name
    (whose text begins right there); a unit word followed by one of those; None for more words
    of a sentence (`with 320 parameters`) or a value inside a comment."""
    if end > len(code):
        return None
    rest = code[end:].lstrip(" \t'\"")
    if not rest or rest[0] in _CLOSES_VALUE or rest.startswith("- ") or end in starts:
        return ""
    if _OF_TOTAL.match(rest):  # `step 500/18865`, `Epoch 2/2`: 500 of 18865
        return ""
    unit = _UNIT_WORD.match(rest)
    if unit is None:
        return None
    after = rest[unit.end() :].lstrip(" \t'\"")
    if not after or after[0] in _CLOSES_VALUE or after.startswith("- "):
        return unit.group()
    return None


def _reads_as_metric(line: str, name: str, value: float, text_start: int, begin: int, shown: str) -> bool:
    words = name.lower().replace("_", " ").split()
    if words[0] in _PROSE_WORDS or (" " in name and _UNIT_WORD.fullmatch(name.split()[0])):
        return False
    if words[-1] in _INDEX_WORDS and words[-2:-1] != ["per"] and value.is_integer():
        return False
    if _NO_NAME_WORDS.intersection(name.split()):
        return False
    before = line[:begin].rstrip()
    if before.endswith(("/", "\\")) or (before.endswith("[") and before[:-1][-1:].isalnum()):
        return False  # a piece of a path (`/home/user/nanoGPT`) or a subscript (`sys.argv[0]`)
    if name.endswith("/") or name.startswith(("/", ".", "~")) or _FILE_NAME.search(name):
        return False
    if text_start >= 0 and re.match(r"\.[A-Za-z]", line[text_start : text_start + 2]):
        return False  # the extension of a file name the value before ate: `train.py:196`
    number = _BARE_NUMBER.match(shown)  # `shown` is the value as printed, its number first
    if number is None:
        return False
    unit = shown[number.end() :]
    if unit and not _GLUED_UNIT.fullmatch(unit):
        return False
    return text_start < 0 or not _mid_sentence(line[text_start:begin], name)


def _mid_sentence(text: str, name: str) -> bool:
    """Whether words of a sentence stand before the name in `text` (the text naming it): a
    version or count between them and the name (`Running PyTorch 2.7.0 compiled for CUDA 12.6`).
    A timestamp or a log level before the name is no sentence."""
    heads = list(re.finditer(r"\s+".join(map(re.escape, name.split())), text))
    before = text[: heads[-1].start()].split() if heads else []
    seen_word = False
    for word in before:
        if word.lstrip("[(").upper().rstrip("]):") in _LOG_LEVELS:
            continue
        if word[:1].isalpha():
            seen_word = True
        elif seen_word and word.lstrip("+-")[:1].isdigit():
            return True
    return False


_KARPATHY_SUMMARY = re.compile(rf"^\s*({_KEY}):\s+({NUMBER})\s*$")
_KARPATHY_PROGRESS = re.compile(r"^\s*step[\s:]+(\d+)\b(.*)$", re.IGNORECASE)
# `| tok/sec: 1,669,232 |`: one field between bars; digits may be grouped with commas.
_KARPATHY_FIELD = re.compile(
    rf"\|\s*({_KEY})\s*:\s*([-+]?\d[\d,]*(?:\.\d*)?(?:[eE][-+]?\d+)?|{NUMBER})\s*{_UNIT}\s*(?=\||$)"
)


class KarpathyParser:
    """The end-of-run block (`val_bpb:          0.997900`, one key per line, nothing else on it)
    and the progress lines `step 00042 (4.2%) | loss: 3.456789 | dt: 312ms | tok/sec: 524,288`.
    Summary values carry the step of the last progress line before them."""

    resolved = True
    needle = staticmethod(literal_needle)

    def __init__(self) -> None:
        self.step: int | None = None

    def context(self, line: str) -> None:
        if progress := _KARPATHY_PROGRESS.match(line):
            self.step = int(progress.group(1))

    def feed(self, line: str) -> list[Sample]:
        progress = _KARPATHY_PROGRESS.match(line)
        if progress:
            self.step = int(progress.group(1))
            fields = _KARPATHY_FIELD.findall(progress.group(2))
            return [Sample(key, float(raw.replace(",", "")), self.step) for key, raw in fields]
        summary = _KARPATHY_SUMMARY.match(line)
        if summary:
            return [Sample(summary.group(1), float(summary.group(2)), self.step)]
        return []


_NEMO_STEP = re.compile(r"={3,}\s*Step\s+(\d+)(?:\s*/\s*\d+)?\s*={3,}")
_NEMO_VAL_START = re.compile(r"Starting validation at step\s+(\d+)")
_NEMO_BULLET = re.compile(rf"^\s*[•*-]\s+([^:]+?)\s*:\s*({NUMBER})")
_NEMO_HEADER = re.compile(r"([A-Za-z][A-Za-z ]*?)\s*:\s*$")
NEMO_SECTIONS = {
    "validation results": "validation",
    "training results": "train",
    "validation timing": "timing/validation",
    "timing": "timing/train",
}
# Bullet labels whose TensorBoard tag is not simply the label in snake_case.
NEMO_LABELS = {
    "avg reward": "reward",
    "average response length": "avg_length",
    "generation kl error": "gen_kl_error",
}


class NemoRLParser:
    """NeMo-RL's console summary: bullets (`• Accuracy: 0.7421`) under section headers
    (`📊 Validation Results:`), named like its TensorBoard tags (`validation/accuracy`,
    `train/reward`, `timing/train/total_step_time`). Validation bullets take their step from the
    preceding `Starting validation at step N`, the others from `==== Step N/M ====`."""

    def __init__(self) -> None:
        self.resolved = True
        self.seen_header = False
        self.section: str | None = None
        self.step: int | None = None
        self.val_step: int | None = None

    def feed(self, line: str) -> list[Sample]:
        self.resolved = True
        bullet = _NEMO_BULLET.match(line)
        if bullet is None:
            self.context(line)
            return []
        if not self.seen_header:
            self.resolved = False  # reading began inside a section: which one is unknown
            return []
        if self.section is None:
            return []
        step = self.val_step if self.section.endswith("validation") else self.step
        self.resolved = step is not None
        label = bullet.group(1).strip().lower()
        key = NEMO_LABELS.get(label) or re.sub(r"[^a-z0-9]+", "_", label).strip("_")
        return [Sample(f"{self.section}/{key}", float(bullet.group(2)), step)]

    def needle(self, metric: str) -> re.Pattern[str]:
        """The bullet's label: `total_step_time` is printed `Total step time`, `reward` `Avg Reward`."""
        key = metric.rsplit("/", 1)[-1].lower()
        label = next((label for label, name in NEMO_LABELS.items() if name == key), key)
        return re.compile(r"[ _]".join(map(re.escape, re.split(r"[ _]", label))), re.IGNORECASE)

    def context(self, line: str) -> None:
        if found := _NEMO_STEP.search(line):
            self.step, self.section, self.seen_header = int(found.group(1)), None, True
        elif found := _NEMO_VAL_START.search(line):
            self.val_step, self.section, self.seen_header = int(found.group(1)), None, True
        elif line.rstrip().endswith(":"):
            header = _NEMO_HEADER.search(line)
            self.section = NEMO_SECTIONS.get(header.group(1).lower()) if header else None
            self.seen_header = True


_VERL_CONSOLE = re.compile(r"\bstep:(\d+)\s+-\s+(.*)$")
_VERL_VALUE = re.compile(rf"^\s*{_NP}({NUMBER})\)?\s*$")
_VERL_MD_STEP = re.compile(r"^\s*#+\s*Step\s+(\d+)\s*$", re.IGNORECASE)
_VERL_MD_BULLET = re.compile(rf"^\s*[-*]\s+([^:]+?)\s*:\s*({NUMBER})\s*%?\s*$")
_VERL_DICT = re.compile(r"\{'.*\}\s*$")  # a whole dict on one line, not a piece of a pprint'ed config
_VERL_DICT_PAIR = re.compile(rf"'([^']+)'\s*:\s*{_NP}({NUMBER})\)?(?=\s*[,}}])")
_VERL_EVAL = re.compile(r"\[EVAL @ step (\d+)\]")
_VERL_EQ_PAIR = re.compile(rf"(?<!\S)([^\s=]+)=({NUMBER})%?(?!\S)")
VERL_STEP_KEYS = ("global_steps", "global_step", "training/global_step", "step")


class VerlParser:
    """verl's console lines `step:12 - actor/kl_loss:0.0015 - critic/score/mean:0.53` (Ray's
    `(TaskRunner pid=..)` prefix allowed), AgentJet's validation markdown (`## Step 20` then
    `- task_pass_rate@1: 96.49%` bullets, percentages kept as printed), a Python-dict line per
    validation (`{'global_steps': 20, 'mean_reward': np.float64(0.53)}`) and AgentJet's
    `[EVAL @ step 20] ... mean_reward=0.5378 task_pass_rate@1=96.49%` summary."""

    needle = staticmethod(literal_needle)

    def __init__(self) -> None:
        self.resolved = True
        self.md_step: int | None = None

    def context(self, line: str) -> None:
        if heading := _VERL_MD_STEP.match(line):
            self.md_step = int(heading.group(1))

    def feed(self, line: str) -> list[Sample]:
        self.resolved = True
        if console := _VERL_CONSOLE.search(line):
            step = int(console.group(1))
            samples = []
            for field in console.group(2).split(" - "):
                key, _, raw = field.rpartition(":")
                value = _VERL_VALUE.match(raw)
                if key.strip() and value:
                    samples.append(Sample(key.strip(), float(value.group(1)), step))
            return samples
        if heading := _VERL_MD_STEP.match(line):
            self.md_step = int(heading.group(1))
            return []
        if bullet := _VERL_MD_BULLET.match(line):
            if self.md_step is None:
                self.resolved = False  # a bullet list whose `## Step` heading lies before the reading
                return []
            return [Sample(bullet.group(1).strip(), float(bullet.group(2)), self.md_step)]
        whole = _VERL_DICT.search(line)
        if whole and whole.group().count("{") == whole.group().count("}"):
            pairs = {key: float(value) for key, value in _VERL_DICT_PAIR.findall(whole.group())}
            logged = next(
                (int(pairs[k]) for k in VERL_STEP_KEYS if k in pairs and pairs[k].is_integer()), None
            )
            return [Sample(key, value, logged) for key, value in pairs.items()]
        if evaluation := _VERL_EVAL.search(line):
            step = int(evaluation.group(1))
            return [Sample(k, float(v), step) for k, v in _VERL_EQ_PAIR.findall(line[evaluation.end() :])]
        return []


class PatternParser:
    """`--pattern`: the value from the only capture group or the one named `value`; the step
    from a group named `step` when there is one."""

    resolved = True

    def __init__(self, regex: re.Pattern[str], name: str) -> None:
        self.regex, self.name = regex, name
        self.group: int | str = "value" if "value" in regex.groupindex else 1
        self.has_step = "step" in regex.groupindex

    def context(self, line: str) -> None:
        pass

    def needle(self, metric: str) -> None:
        return None  # the name comes from --metric, not from the line

    def feed(self, line: str) -> list[Sample]:
        samples = []
        for found in self.regex.finditer(line):
            value = _number(found.group(self.group) or "")
            if value is None:
                continue
            step_text = found.group("step") if self.has_step else None
            step = int(step_text) if step_text and step_text.isdigit() else None
            samples.append(Sample(self.name, value, step))
        return samples


@dataclass(frozen=True)
class Preset:
    name: str
    parser: Callable[[], LineParser]
    default_metric: str | None
    reads: str  # one line for help and errors


PRESETS: dict[str, Preset] = {
    "karpathy": Preset(
        "karpathy",
        KarpathyParser,
        "val_bpb",
        "end-of-run block `val_bpb:   0.997900`; `step N | loss: ..` lines",
    ),
    "nemo-rl": Preset(
        "nemo-rl",
        NemoRLParser,
        "validation/accuracy",
        "`• Accuracy:` under `Validation Results`; `• Loss:`, `• Avg Reward:` under `Training Results`",
    ),
    "verl": Preset(
        "verl", VerlParser, None, "`step:N - key:value - ..`; `## Step N` + `- key: value`; dict lines"
    ),
    "generic": Preset(
        "generic",
        GenericParser,
        None,
        "names as printed: `val loss 2.40`, `key: value`, `key=value`, `{'key': value}`",
    ),
}
PRESET_ALIASES = {"agentjet": "verl", "ajet": "verl", "nemorl": "nemo-rl"}


def resolve_preset(name: str) -> Preset:
    """The preset called `name` (case and `_`/`-` ignored; `agentjet` is `verl`). BadInput if unknown."""
    key = name.strip().lower().replace("_", "-")
    key = PRESET_ALIASES.get(key, key)
    if key not in PRESETS:
        known = ", ".join(["karpathy", "nemo-rl", "verl (agentjet)", "generic"])
        raise BadInput(f"unknown preset {name!r}: use one of {known}, or --pattern REGEX for other formats")
    return PRESETS[key]


def guess_direction(name: str) -> str:
    """Which way is better, judged from the metric's name: "min" for losses, bits per byte,
    errors and times; "max" for accuracy, reward, score, pass rates and throughput; else "min"."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    if any(w in _LOWER_IS_BETTER for w in words):
        return "min"
    if any(w in _HIGHER_IS_BETTER or w.startswith(("acc", "pass")) for w in words):
        return "max"
    return "min"


_LOWER_IS_BETTER = frozenset(
    {"loss", "bpb", "bpc", "ppl", "perplexity", "error", "err", "wer", "cer", "nll", "mse", "mae", "rmse", "kl",
     "time", "latency", "dt", "seconds", "vram", "mb", "gb"}
)  # fmt: skip
_HIGHER_IS_BETTER = frozenset(
    {"reward", "rewards", "score", "f1", "precision", "recall", "auc", "bleu", "rouge", "success", "win", "mfu",
     "throughput", "tok", "tokens", "map", "iou"}
)  # fmt: skip


def format_value(value: float) -> str:
    """As the ledger writes it: six decimals (`0.997900`), whole numbers bare (`953`), very small or
    large ones in short scientific form (`1.5e-07`), and `nan` / `inf` as such."""
    if not math.isfinite(value):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if 1e-4 <= abs(value) < 1e9:
        return f"{value:.6f}"
    return f"{value:.6g}"


# --- sources -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Source:
    path: Path
    kind: str  # "log", "jsonl", "tensorboard", "wandb" or "mlflow"
    make_parser: Callable[[], LineParser] | None
    gzip: bool
    metric: str | None = None  # the one wanted, if any: lines that cannot hold it are skimmed


def _open_source(path: str | Path, preset: Preset, pattern: str | None, name: str | None) -> _Source:
    from autoresearch_skills.sources import jsonl, tensorboard

    path = Path(path)
    if not path.exists():
        raise BadInput(f"{path}: no such file or directory: check the run's log path")
    stored = _stored_run_kind(path)
    if stored is not None:
        if pattern is not None:
            raise BadInput(f"{path}: --pattern reads text logs, and this is {stored} data")
        return _Source(path, stored, None, False)
    if path.is_dir() or tensorboard.is_event_file(path):
        if pattern is not None:
            raise BadInput(f"{path}: --pattern reads text logs, and this is TensorBoard event data")
        if path.is_dir() and not tensorboard.event_files(path):
            raise BadInput(f"{path} is a directory without TensorBoard event files (events.out.tfevents.*)")
        return _Source(path, "tensorboard", None, False)
    if pattern is not None:
        regex = compile_pattern(pattern)
        return _Source(path, "log", lambda: PatternParser(regex, name or "value"), _is_gzip(path))
    if jsonl.is_jsonl(path):
        return _Source(path, "jsonl", jsonl.JsonlParser, _is_gzip(path), name)
    return _Source(path, "log", preset.parser, _is_gzip(path), name)


def _is_gzip(path: Path) -> bool:
    from autoresearch_skills.sources import logs

    try:
        return logs.is_gzip(path)
    except OSError as err:
        raise BadInput(f"{path}: cannot read it ({err.strerror}): check its permissions") from None


def compile_pattern(pattern: str, what: str = "--pattern") -> re.Pattern[str]:
    """A value pattern: one capture group, or a named `value` group (and optionally `step`).
    BadInput names `what` (the flag or setting it came from)."""
    try:
        regex = re.compile(pattern)
    except re.error as err:
        raise BadInput(f"{what} {pattern!r} is not a valid regular expression: {err}") from None
    if "value" in regex.groupindex or regex.groups == 1:
        return regex
    if regex.groups == 0:
        raise BadInput(
            f"{what} {pattern!r} has no capture group: put one around the value, e.g. 'loss=([0-9.]+)'"
        )
    raise BadInput(
        f"{what} {pattern!r} has {regex.groups} capture groups: name the value's (?P<value>...) "
        "or make the others non-capturing (?:...)"
    )


Record = tuple[list[Sample], bool]  # the samples of one line, and whether their context was known


def _scan_tail(source: _Source, size: int) -> tuple[list[Record], bool]:
    """Records of the last `size` bytes and whether that reached the start of the file.
    gzip and TensorBoard cannot be read backwards: they are read whole."""
    from autoresearch_skills.sources import logs

    if source.kind in WHOLE_KINDS:
        return [([sample], True) for sample in _whole(source)], True
    lines: Iterable[str]
    if source.gzip:
        lines, at_start = logs.iter_lines(source.path), True
    else:
        lines, at_start = logs.tail_window(source.path, size)
    return _parse(source, lines), at_start


def _scan_all(
    source: _Source, on_progress: Callable[[int, int], None] | None = None
) -> Iterator[list[Sample]]:
    from autoresearch_skills.sources import logs

    if source.kind in WHOLE_KINDS:
        for sample in _whole(source):
            yield [sample]
        return
    for samples, _ in _parse_iter(source, logs.iter_lines(source.path, on_progress)):
        yield samples


def _parse(source: _Source, lines: Iterable[str]) -> list[Record]:
    return list(_parse_iter(source, lines))


def _parse_iter(source: _Source, lines: Iterable[str]) -> Iterator[Record]:
    assert source.make_parser is not None
    parser = source.make_parser()
    needle = parser.needle(source.metric) if source.metric else None
    for line in lines:
        if needle is not None and not needle.search(line):
            parser.context(line)
            continue
        samples = parser.feed(line)
        if samples:
            yield samples, parser.resolved


WHOLE_KINDS = ("tensorboard", "wandb", "mlflow")  # read whole: binary records, or one file per metric


def _stored_run_kind(path: Path) -> str | None:
    """ "wandb" for a W&B run folder, its `wandb/` parent or a `.wandb` file; "mlflow" for an MLflow
    file store; None otherwise."""
    from autoresearch_skills.sources import mlflow, wandb

    if path.suffix == ".wandb" and path.is_file():
        return "wandb"
    if not path.is_dir():
        return None
    if wandb.run_dirs(path):
        return "wandb"
    if mlflow.runs(path):
        return "mlflow"
    return None


def _whole(source: _Source) -> list[Sample]:
    if source.kind == "tensorboard":
        return _tensorboard(source.path)
    from autoresearch_skills.sources import mlflow, wandb

    if source.kind == "wandb":
        # The newest run; its history, then summary-only keys as step-less values.
        file = source.path if source.path.is_file() else wandb.log_file(wandb.run_dirs(source.path)[-1])
        if file is None:
            return []
        reader = wandb.LogReader(file)
        try:
            samples = reader.read()
        except ValueError as err:
            raise BadInput(str(err)) from None
        seen = {s.name for s in samples}
        summary = dict(reader.summary)
        extra = wandb.summary_file(file.parent)
        if extra is not None:
            summary.update(wandb.read_summary_json(extra))
        return samples + [s for name, s in summary.items() if name not in seen]
    run = mlflow.runs(source.path)[-1]  # the newest run of any experiment
    samples = []
    for name in mlflow.metric_names(run):
        samples += mlflow.MetricReader(run.path / "metrics" / name, name).read()
    return samples


def _tensorboard(path: Path) -> list[Sample]:
    from autoresearch_skills.sources import tensorboard

    return tensorboard.read_scalars(path)


def name_matcher(metric: str) -> Callable[[str], bool]:
    """`accuracy` finds `validation/accuracy`: a name matches whole, ignoring case and how many
    spaces stand between its words, or as its last `/`-separated part(s). `loss` is not
    `train loss`, `reward` is not `reward_std`."""
    wanted = " ".join(metric.split()).lower()
    suffix = "/" + wanted
    known: dict[str, bool] = {}  # a log repeats a few dozen names millions of times

    def matches(name: str) -> bool:
        hit = known.get(name)
        if hit is None:
            hit = known[name] = name.lower() == wanted or name.lower().endswith(suffix)
        return hit

    return matches


# --- the API -----------------------------------------------------------------------------


def extract(
    path: str | Path,
    preset: str = "generic",
    metric: str | None = None,
    pattern: str | None = None,
    mode: str = "last",
    direction: str | None = None,
    *,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[Sample]:
    """Values of `metric` in the log, JSON-lines file or TensorBoard file/directory at `path`.

    `metric` defaults to the preset's own (karpathy: val_bpb, nemo-rl: validation/accuracy).
    mode `last`: the latest value, one Sample (without any metric: every value of the latest
    record, i.e. the latest step, or the latest line when steps are unknown); `best`: the best
    finite value by `direction` (None: guessed from the name), one Sample; `series`: every
    value in file order. An empty list means no match. Raises BadInput for a missing file,
    unknown preset, mode or direction, and a bad pattern.
    """
    chosen = resolve_preset(preset)
    if mode not in MODES:
        raise BadInput(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if direction is not None and direction not in DIRECTIONS:
        raise BadInput(f"unknown direction {direction!r}: use min or max")
    name = _metric_name(chosen, metric, pattern)
    if mode == "best" and name is None:
        raise BadInput(f"--mode best needs --metric: preset {chosen.name} has no default metric")
    source = _open_source(path, chosen, pattern, name)
    found = _read(source, name, mode, direction, on_progress)
    if (
        not found
        and name
        and pattern is None
        and source.kind == "log"
        and source.make_parser is not GenericParser
    ):
        # A preset that does not print this name (karpathy with `metric: val loss`): read the
        # name as the log prints it.
        found = _read(replace(source, make_parser=GenericParser), name, mode, direction, on_progress)
    return found


def _read(
    source: _Source,
    name: str | None,
    mode: str,
    direction: str | None,
    on_progress: Callable[[int, int], None] | None,
) -> list[Sample]:
    wanted = name_matcher(name) if name else None
    if mode == "last":
        return _last_match(source, wanted) if wanted else _last_record(source)
    if mode == "series":
        return [
            s
            for samples in _scan_all(source, on_progress)
            for s in samples
            if wanted is None or wanted(s.name)
        ]
    assert wanted is not None  # extract refuses `best` without a name
    better = operator.lt if (direction or guess_direction(name or "")) == "min" else operator.gt
    candidates = (s for samples in _scan_all(source, on_progress) for s in samples if wanted(s.name))
    best: Sample | None = None
    for sample in candidates:
        # Strictly better only: on a tie the earlier step stays best. NaN and inf never win.
        if math.isfinite(sample.value) and (best is None or better(sample.value, best.value)):
            best = sample
    return [best] if best else []


def _metric_name(preset: Preset, metric: str | None, pattern: str | None) -> str | None:
    """The metric asked for: --metric, else the preset's own; a --pattern's values need a name."""
    return metric or preset.default_metric or ("value" if pattern is not None else None)


def _last_match(source: _Source, wanted: Callable[[str], bool]) -> list[Sample]:
    size = FIRST_WINDOW
    while True:
        records, at_start = _scan_tail(source, size)
        hits = [(s, resolved) for samples, resolved in records for s in samples if wanted(s.name)]
        if hits:
            sample, resolved = hits[-1]
            if resolved or at_start or size >= CONTEXT_CAP:
                return [sample]
        elif at_start:
            return []
        size *= 4


def _last_record(source: _Source) -> list[Sample]:
    size = FIRST_WINDOW
    while True:
        records, at_start = _scan_tail(source, size)
        if records:
            final, resolved = records[-1]
            step = final[-1].step
            settled = at_start or size >= CONTEXT_CAP
            if step is None and (resolved or settled):
                return final
            # The record may have begun before the window unless an earlier step shows in it.
            if step is not None and (settled or (resolved and records[0][0][0].step != step)):
                same: dict[str, Sample] = {}
                for samples, _ in records:
                    for sample in samples:
                        if sample.step == step:
                            same[sample.name] = sample
                return list(same.values())
        elif at_start:
            return []
        size *= 4


def latest(path: str | Path, preset: str = "generic") -> dict[str, Sample]:
    """The latest value of every name the preset finds near the end of the log (its last
    256 KiB; gzip and TensorBoard whole), for a live status block. Cheap on any log size."""
    source = _open_source(path, resolve_preset(preset), None, None)
    records, _ = _scan_tail(source, LATEST_WINDOW)
    found: dict[str, Sample] = {}
    for samples, _ in records:
        for sample in samples:
            found[sample.name] = sample
    return found


def recent(path: str | Path, preset: str, metric: str, tail_bytes: int = LATEST_WINDOW) -> list[Sample]:
    """Every value of `metric` in the last `tail_bytes` of a text log, in file order (gzip'd logs
    and stored runs: all of them), falling back to the name as printed like `extract`: the
    recent values of a log of any size, cheaply."""
    chosen = resolve_preset(preset)
    source = _open_source(path, chosen, None, metric)
    wanted = name_matcher(metric)
    found = [s for samples, _ in _scan_tail(source, tail_bytes)[0] for s in samples if wanted(s.name)]
    if not found and source.kind == "log" and source.make_parser is not GenericParser:
        fallback = replace(source, make_parser=GenericParser)
        found = [s for samples, _ in _scan_tail(fallback, tail_bytes)[0] for s in samples if wanted(s.name)]
    return found


@dataclass(frozen=True)
class Listed:
    """A name `--list` shows: its last Sample and that value as printed (`0.10M`, `81.2ms`, `45%`,
    `179.5 ms`; empty where a preset or a stored source gave it)."""

    sample: Sample
    printed: str = ""

    @property
    def unit(self) -> str:
        """The unit printed with the value (`M`, `ms`, `%`, `GiB`), or ""."""
        number = _BARE_NUMBER.match(self.printed)
        return self.printed[number.end() :].strip() if number else ""

    def shown(self) -> str:
        """The value with its unit as printed; a bare number as the ledger writes it."""
        return self.printed if self.unit else format_value(self.sample.value)


def names(path: str | Path, preset: str = "generic", tail_bytes: int | None = None) -> dict[str, Sample]:
    """Every metric-like name `extract` can read in the log, with its last Sample, in the order the
    names first appear (`listing` says which names read as metrics). `tail_bytes` reads only the
    end of a plain text log (cheap after a crash); None reads the whole file."""
    return {name: listed.sample for name, listed in listing(path, preset, tail_bytes).items()}


def listing(path: str | Path, preset: str = "generic", tail_bytes: int | None = None) -> dict[str, Listed]:
    """What `--list` shows: the names as printed that read as metrics somewhere in the log
    (`listed_values`: progress lines, `key: value` result lines, end-of-run blocks; not prose,
    paths, file names or comments), each with its last value, which is what `extract` reads for
    it. A preset other than generic shows its own names too."""
    chosen = resolve_preset(preset)
    source = _open_source(path, chosen, None, None)
    if source.kind != "log":
        stored = _last_per_name(sample for samples in _scan_all(source) for sample in samples)
        return {name: Listed(sample) for name, sample in stored.items()}
    parser = source.make_parser() if source.make_parser not in (None, GenericParser) else None
    own: dict[str, Listed] = {}
    last: dict[str, Listed] = {}
    metric_like: dict[str, None] = {}  # in the order they first read as metrics
    for line in _text_lines(source, tail_bytes):
        values, step = listed_values(line, metric_like)
        for name, value, printed, metric in values:
            last[name] = Listed(Sample(name, value, step), printed)
            if metric:
                metric_like.setdefault(name)
        if parser is not None:
            for sample in parser.feed(line):
                printed = next((v[2] for v in values if v[0] == sample.name and v[1] == sample.value), "")
                own[sample.name] = Listed(sample, printed)
    preset_names = list(own)
    for name in metric_like:
        if not any(name_matcher(name)(known) for known in preset_names):  # the preset answers to it
            own.setdefault(name, last[name])
    return own


def _text_lines(source: _Source, tail_bytes: int | None) -> Iterable[str]:
    from autoresearch_skills.sources import logs

    if tail_bytes is None or source.gzip:
        return logs.iter_lines(source.path)
    return logs.tail_window(source.path, tail_bytes)[0]


def _last_per_name(samples: Iterable[Sample]) -> dict[str, Sample]:
    found: dict[str, Sample] = {}
    for sample in samples:
        found[sample.name] = sample
    return found


NEAREST_MIN = 0.5  # below this likeness no name is offered: `loss` for `reward` helps nobody


def nearest(metric: str, names: Iterable[str]) -> str | None:
    """The readable name closest to `metric`, or None: `val_loss` for `val loss`, `val loss` for
    `validation loss`. Scored by shared words (`val` counts for `validation`) and by spelling."""
    wanted = _words(metric)
    best, best_score = None, NEAREST_MIN
    for name in names:
        words = _words(name)
        if words == wanted:
            return name
        shared = sum(any(_same_word(w, v) for v in words) for w in wanted)
        overlap = shared / max(len(wanted), 1)  # how much of the asked name the candidate holds
        spelling = difflib.SequenceMatcher(None, " ".join(wanted), " ".join(words)).ratio()
        score = 0.6 * overlap + 0.4 * spelling
        if score > best_score:
            best, best_score = name, score
    return best


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[\s_/.:-]+", name.lower()) if w]


def _same_word(a: str, b: str) -> bool:
    """`val` and `validation`, `acc` and `accuracy`: one starts the other (three letters at least)."""
    return a == b or (min(len(a), len(b)) >= 3 and (a.startswith(b) or b.startswith(a)))


def tail_lines(path: str | Path, n: int = 20) -> list[str]:
    """The last `n` lines of a text log as a terminal shows them (see sources/logs.py); reads
    backwards, so it is cheap on any log size. TensorBoard data has no lines: []."""
    from autoresearch_skills.sources import logs, tensorboard

    path = Path(path)
    if not path.exists():
        raise BadInput(f"{path}: no such file or directory: check the run's log path")
    if path.is_dir() or tensorboard.is_event_file(path) or path.suffix == ".wandb":
        return []
    return logs.tail_lines(path, n)


# --- the command -------------------------------------------------------------------------


@click.group("metric", context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Read metric values from training logs, JSON-lines files and TensorBoard event files.

    \b
    Examples:
      ars metric extract train.log --metric "val loss"
      ars metric extract train.log --list
      ars metric extract run.log --preset karpathy
      ars metric extract run.log --preset nemo-rl --mode best
      ars metric extract val_results.md --preset agentjet --metric task_pass_rate@1
    """


@cli.command("extract")
@click.argument("log", type=click.Path(path_type=Path))
@click.option(
    "-p",
    "--preset",
    default="generic",
    show_default=True,
    help="karpathy, nemo-rl, verl (agentjet) or generic",
)
@click.option(
    "-m", "--metric", default=None, help="the name as the log prints it [default: the preset's, e.g. val_bpb]"
)
@click.option(
    "--pattern",
    default=None,
    help="a regex for other formats: one capture group, or (?P<value>..) and (?P<step>..)",
)
@click.option("--mode", default="last", show_default=True, help="last, best (by --direction) or series")
@click.option(
    "-d", "--direction", default=None, help="min or max, for --mode best [default: guessed from the name]"
)
@click.option("--json", "as_json", is_flag=True, help="one JSON object")
@click.option("--csv", "as_csv", is_flag=True, help="CSV rows: name,step,value")
@click.option(
    "-l", "--list", "as_list", is_flag=True, help="the metric names LOG holds, with last value, unit and step"
)
def extract_cmd(log: Path, preset, metric, pattern, mode, direction, as_json, as_csv, as_list) -> None:
    """Print a metric from LOG: a text log (plain or .gz), a .jsonl file, a TensorBoard event
    file or a directory holding them, a W&B run folder (or `wandb/`, the newest run) or an MLflow
    file store (`mlruns/`, the newest run).

    --metric is the name as the log prints it, spaces and case as written (`val loss`,
    `Validation bpb`, `eval_loss`, `Acc@1`); a part of a longer name never matches (`loss` is
    not `train loss`). --list prints the metric names the log holds (not numbers in prose,
    paths or comments), each with its last value, its unit as printed and its step.

    `last` reads backwards from the end and stops at the latest value; `best`, `series` and
    --list read the whole file. Exit 0: found; 1: not found (stderr names the closest name
    and shows the log's last 20 lines, to show why: a crash, an OOM, the wrong name); 2: bad
    input. The lines each preset and popular repository print are in
    references/metric-presets.md.

    \b
    Examples:
      ars metric extract train.log --metric "val loss"
      ars metric extract train.log --list
      ars metric extract train.log --list --json
      ars metric extract megatron.log --metric "lm loss value" --mode series
      ars metric extract run.log --preset karpathy
      ars metric extract run.log --preset karpathy --metric peak_vram_mb
      ars metric extract nemo.log --preset nemo-rl --mode series --csv
      ars metric extract logs/tb/ --metric train/reward --mode best --direction max
      ars metric extract train.log --metric loss --mode series --json
      ars metric extract out.log --pattern 'eval acc (\\d+\\.\\d+)' --metric acc
      ars metric extract metrics.jsonl --metric val_bpb --mode best
      ars metric extract wandb/ --metric val/loss --mode series
      ars metric extract mlruns/ --metric val_loss --mode best
    """
    if as_json and as_csv:
        raise BadInput("choose one of --json and --csv")
    if as_list:
        _list_names(log, preset, pattern, as_json, as_csv)
        return
    progress = _terminal_progress(log) if mode != "last" else None
    samples = extract(log, preset, metric, pattern, mode, direction, on_progress=progress)
    if progress is not None:
        click.echo("\r\033[K", nl=False, err=True)
    chosen = resolve_preset(preset)
    name = _metric_name(chosen, metric, pattern)
    if not samples:
        _explain_no_match(log, chosen, name, mode)
        sys.exit(EXIT_NEGATIVE)
    guessed = direction or (guess_direction(name) if name else None)
    if as_json:
        click.echo(json.dumps(_as_json(log, chosen, name, mode, guessed, samples), indent=2))
    elif as_csv:
        click.echo("name,step,value")
        for s in samples:
            click.echo(f"{_csv_field(s.name)},{'' if s.step is None else s.step},{s.value!r}")
    elif mode == "series":
        _print_series(samples)
    else:
        for s in samples:
            click.echo(f"{s.name}: {format_value(s.value)}")
        step = samples[-1].step
        click.echo(f"step: {'unknown' if step is None else step}")
        if mode == "best":
            click.echo(
                f"direction: {guessed}{'' if direction else ' (guessed from the name; set --direction)'}"
            )


def _list_names(log: Path, preset: str, pattern: str | None, as_json: bool, as_csv: bool) -> None:
    if pattern is not None or as_csv:
        raise BadInput("--list prints names and values: leave out --pattern and --csv")
    found = listing(log, preset)
    if as_json:
        listed = [_listed_json(entry) for entry in found.values()]
        click.echo(
            json.dumps({"path": str(log), "preset": resolve_preset(preset).name, "names": listed}, indent=2)
        )
    else:
        for entry in found.values():
            s = entry.sample
            click.echo(f"{s.name}: {entry.shown()}{'' if s.step is None else f'  (step {s.step})'}")
    if not found:
        click.echo(f"metric: no names with values in {log} (preset {resolve_preset(preset).name})", err=True)
        sys.exit(EXIT_NEGATIVE)


def _listed_json(entry: Listed) -> dict:
    s = entry.sample
    out = {"name": s.name, "value": _json_number(s.value), "step": s.step}
    if entry.unit:
        out["unit"] = entry.unit
    return out


def _as_json(log: Path, preset: Preset, name, mode, direction, samples: list[Sample]) -> dict:
    out = {"path": str(log), "preset": preset.name, "metric": name, "mode": mode}
    if mode == "best":
        out["direction"] = direction
    out["samples"] = [{"name": s.name, "value": _json_number(s.value), "step": s.step} for s in samples]
    return out


def _json_number(value: float) -> float | str:
    """JSON has no NaN or Infinity: a diverged loss is reported as the string "nan"."""
    return value if math.isfinite(value) else str(value)


def _csv_field(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n') else text


def _print_series(samples: list[Sample]) -> None:
    rows = [("step", "name", "value")]
    rows += [("-" if s.step is None else str(s.step), s.name, format_value(s.value)) for s in samples]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    for step, name, value in rows:
        click.echo(f"{step.ljust(widths[0])}  {name.ljust(widths[1])}  {value}")


def _explain_no_match(log: Path, preset: Preset, name: str | None, mode: str) -> None:
    what = name or "any metric"
    click.echo(f"metric: no {what} in {log} (preset {preset.name}, mode {mode})", err=True)
    click.echo(f"preset {preset.name} reads: {preset.reads}", err=True)
    from autoresearch_skills.sources import tensorboard

    if log.is_dir() or tensorboard.is_event_file(log) or log.suffix == ".wandb":
        tags = sorted({s.name for s in _whole(_open_source(log, preset, None, None))})
        click.echo(f"tags present: {_listing(tags)}", err=True)
        return
    near_end = list(latest(log, preset.name))
    if near_end:
        click.echo(f"names near the end ({preset.name}): {_listing(near_end)}", err=True)
    closest = nearest(name, names(log, preset.name, tail_bytes=LATEST_WINDOW)) if name else None
    if closest is not None:
        click.echo(f"closest name: {closest} (to read it: --metric {_quoted(closest)})", err=True)
    lines = tail_lines(log, 20)
    click.echo(f"last {len(lines)} lines of {log}:", err=True)
    for line in lines:
        click.echo(f"  {line}", err=True)


def _listing(found: list[str], limit: int = 20) -> str:
    if not found:
        return "none"
    more = f" ... ({len(found) - limit} more)" if len(found) > limit else ""
    return ", ".join(found[:limit]) + more


def _quoted(name: str) -> str:
    return f"'{name}'" if any(c in name for c in " ()@'|&;<>$") else name


def _terminal_progress(log: Path) -> Callable[[int, int], None] | None:
    """A percentage on stderr while a big file is read forwards, when a person is watching."""
    try:
        big = log.is_file() and log.stat().st_size >= PROGRESS_MIN_BYTES
    except OSError:
        return None
    if not big or not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        click.echo(f"\rreading {log.name}: {100 * done // max(total, 1)}%", nl=False, err=True)

    return show


def main() -> None:
    run_cli(cli, prog_name="metrics.py")


if __name__ == "__main__":
    main()
