"""Where metric values come from: text logs (read backwards in blocks), JSON lines, TensorBoard,
W&B run folders and MLflow file stores.

Each reader hands back `Sample`s; `metrics.py` decides which ones answer the question asked.
A campaign's `metric_source:` is read through `reading.read_metric` and checked by
`reading.validate_source`: that module sits a layer above the readers, since it takes presets
and patterns from `metrics.py` and curves from `prune.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Sample:
    """One value of one metric, at a training step when the source says which."""

    name: str
    value: float
    step: int | None = None


class LineParser(Protocol):
    """Reads logical lines in file order and keeps whatever state a format needs
    (the current section, the last step header) between them."""

    @property
    def resolved(self) -> bool:
        """False when the samples of the last `feed` lack context that comes from an earlier line
        (a step header), i.e. the reading began after that line."""

    def feed(self, line: str) -> list[Sample]: ...

    def needle(self, metric: str) -> re.Pattern[str] | None:
        """A quick regex that every line holding `metric` matches, or None. A reader after one
        metric passes the other lines to `context` only, which is many times cheaper."""

    def context(self, line: str) -> None:
        """Keep the state a line sets (a step header) without reading its values: cheap."""


def literal_needle(metric: str) -> re.Pattern[str]:
    """For formats that print a metric's name as is: its last `/` part, in any case
    (`accuracy` finds `validation/accuracy` too)."""
    return re.compile(re.escape(metric.rsplit("/", 1)[-1]), re.IGNORECASE)
