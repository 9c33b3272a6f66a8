"""A run's pace as its log prints it: the last step it reached and how fast it went. A campaign
compares both with the parent run's (campaign/judge.py): under a wall-clock budget, a run that got
half the machine does half the steps and looks worse for reasons that have nothing to do with its
idea. The lines (references/metric-presets.md has the table for users):

  steps        `step 200: train loss ..`, `iter 190: loss ..`, `step 500/18865 | ..`,
               `step:1750/1750 ..`, `Step 40 | ..`, `iteration 1000/ 1000 | ..`
  it/s         1 / the time per step of a line with a step: nanoGPT's `time 81.2ms`, `dt: 314ms`,
               `step_avg:101.9ms`, Megatron's `elapsed time per iteration (ms): 1240.5`;
               a tqdm or rich bar's `2.80it/s` (`3.01s/it` inverted)
  tokens       `tok/sec: 1,669,232`, `2936001 tok/s`, `tokens/s=..`, `tokens_per_second_per_gpu:..`,
               `tps: 40,013`; the key as printed
  samples      `1204.7 samples/s`, `samples/sec: ..`, HF Trainer's `train_samples_per_second`;
               Stable-Baselines3's table row `|    fps    | 1234 |` (environment frames per second)

Stable-Baselines3's `|    total_timesteps    | 20480 |` row gives its steps (environment steps).

The step is the first `step`, `iter` or `iteration` number of the last line that has one (never
`steps`, `num_steps` or `step_avg`). When a log prints several kinds, tokens per second win over
samples, samples over iterations (a token is the unit of work that depends least on how the code
batches it). The throughput is the median of the values read, so a compile step or an evaluation
that slows one step does not move it.

Cheap on any log size: it reads the last 256 KiB, widening 4x at a time up to 4 MiB while the
window holds no progress line (a gzip'd log streams through, its last 50,000 lines kept); the median is that of the
window read, the run's recent pace.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from autoresearch_skills.sources import logs

FIRST_WINDOW = 256 * 1024
WINDOW_CAP = 4 * 1024 * 1024
GZIP_LINES = 50_000  # a gzip'd log's last lines kept while it streams through

# A number as progress lines print it: digit groups (`1,669,232`) and an exponent allowed.
_NUM = r"(?P<number>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_STEP = re.compile(r"(?<![\w.-])(?:step|iter|iteration)(?![\w-])['\"]?\s*[:=]?\s*(\d+)\b", re.IGNORECASE)
_TIME_PER_STEP = re.compile(rf"(?<![\w-])(?:time|dt|step_avg)\s*[:=]?\s*{_NUM}\s*(?P<unit>ms|s)\b")
_MEGATRON_TIME = re.compile(rf"elapsed time per iteration \((?P<unit>ms|s)\):\s*{_NUM}")
_BAR_RATE = re.compile(rf"(?<![\w.]){_NUM}\s*(?P<unit>it/s|s/it)(?!\w)")
_TOKEN_KEYS = r"tok/s|tok/sec|tokens/s|tokens/sec|tokens_per_sec(?:ond)?(?:_per_gpu)?|tps"
_TOKENS_NAMED = re.compile(rf"(?<![\w/])(?P<key>{_TOKEN_KEYS})(?![\w/])['\"]?\s*[:=]?\s*['\"]?{_NUM}", re.I)
_TOKENS_AFTER = re.compile(
    rf"(?<![\w.]){_NUM}\s*(?P<scale>[kM])?\s*(?P<key>tok/s|tok/sec|tokens/s|tokens/sec)(?![\w/])", re.I
)
_SAMPLE_KEYS = r"train_samples_per_second|samples/s|samples/sec|samples_per_sec(?:ond)?"
_SAMPLES_NAMED = re.compile(rf"(?<![\w/])(?P<key>{_SAMPLE_KEYS})(?![\w/])['\"]?\s*[:=]\s*['\"]?{_NUM}", re.I)
_SAMPLES_AFTER = re.compile(rf"(?<![\w.]){_NUM}\s*(?P<key>samples/s|samples/sec)(?![\w/])", re.I)
_TABLE_FPS = re.compile(rf"^\|\s*(?P<key>fps)\s*\|\s*{_NUM}\s*\|")  # Stable-Baselines3's logger table
_TABLE_STEPS = re.compile(r"^\|\s*total_timesteps\s*\|\s*(\d+)\s*\|")
_SCALE = {"k": 1e3, "K": 1e3, "M": 1e6}
ITERATIONS = "it/s"  # the key of a throughput in steps per second (a bar's rate, 1 / time per step)
_KINDS = ("tokens", "samples", "iterations")  # the order a log's kinds are preferred in


@dataclass(frozen=True)
class Pace:
    """The last step a log printed, and its throughput with the key it was read under (`tok/sec`,
    `train_samples_per_second`, `it/s` ...); None where the log prints none."""

    steps: int | None = None
    throughput: float | None = None
    key: str | None = None


def read_pace(path: str | Path) -> Pace:
    """The pace a run's log prints (the lines are in the module's docstring), reading only the end
    of the file. Raises OSError when the log cannot be read."""
    path = Path(path)
    if logs.is_gzip(path):  # no reading backwards: stream through, keeping the end
        return pace_of(deque(logs.iter_lines(path), maxlen=GZIP_LINES))
    size = FIRST_WINDOW
    while True:
        lines, at_start = logs.tail_window(path, size)
        found = pace_of(lines)
        if found != Pace() or at_start or size >= WINDOW_CAP:  # a window with progress lines holds their pace
            return found
        size *= 4


def pace_of(lines: Iterable[str]) -> Pace:
    """The pace these lines print, oldest first: the last step, the median throughput of the
    preferred kind."""
    steps = None
    rates: dict[str, list[tuple[str, float]]] = {kind: [] for kind in _KINDS}
    for line in _candidates(lines):
        step = _STEP.search(line) or _TABLE_STEPS.search(line)
        if step:
            steps = int(step.group(1))
        for kind, key, value in _rates(line, stepped=step is not None):
            rates[kind].append((key, value))
    for kind in _KINDS:
        if rates[kind]:
            key = rates[kind][-1][0]  # as the log prints it now
            return Pace(steps, median(value for _, value in rates[kind]), key)
    return Pace(steps)


def _candidates(lines: Iterable[str]) -> list[str]:
    """The lines that hold one of the words every pattern above holds, found with `str.find` on
    the window's lowercased text: a log of other lines costs a few milliseconds per MiB."""
    text = "\n".join(lines)
    low = text.lower()
    starts: set[int] = set()
    for word in _WORDS:
        at = low.find(word)
        while at != -1:
            starts.add(low.rfind("\n", 0, at) + 1)
            end = low.find("\n", at)
            at = -1 if end == -1 else low.find(word, end)
    found = []
    for start in sorted(starts):
        end = text.find("\n", start)
        found.append(text[start:] if end == -1 else text[start:end])
    return found


_WORDS = ("step", "iter", "tok", "tps", "samples", "it/s", "s/it", "time", "dt", "fps")


def _rates(line: str, stepped: bool) -> list[tuple[str, str, float]]:
    """(kind, key, value) for each throughput the line prints."""
    found = []
    lowered = line.lower()
    if "tok" in lowered or "tps" in lowered:
        named = _TOKENS_NAMED.search(line)
        if named:
            found.append(("tokens", named.group("key"), _number(named)))
        elif after := _TOKENS_AFTER.search(line):
            scale = _SCALE.get(after.group("scale") or "", 1.0)
            found.append(("tokens", after.group("key"), _number(after) * scale))
    if "samples" in lowered:
        samples = _SAMPLES_NAMED.search(line) or _SAMPLES_AFTER.search(line)
        if samples:
            found.append(("samples", samples.group("key"), _number(samples)))
    if "fps" in lowered and (frames := _TABLE_FPS.search(line)):
        found.append(("samples", frames.group("key"), _number(frames)))
    if "it/s" in lowered or "s/it" in lowered:
        for bar in _BAR_RATE.finditer(line):
            value = _number(bar)
            if bar.group("unit") == "s/it":
                value = 1 / value if value else 0.0
            if value:
                found.append(("iterations", ITERATIONS, value))
    if stepped and (per_step := _TIME_PER_STEP.search(line) or _MEGATRON_TIME.search(line)):
        seconds = _number(per_step) / (1000 if per_step.group("unit") == "ms" else 1)
        if seconds > 0:
            found.append(("iterations", ITERATIONS, 1 / seconds))
    return found


def _number(found: re.Match[str]) -> float:
    return float(found.group("number").replace(",", ""))
