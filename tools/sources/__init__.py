"""Where metric values come from: text logs (read backwards in blocks), JSON lines, TensorBoard.

Each reader hands back `Sample`s; `metrics.py` decides which ones answer the question asked.
"""

from __future__ import annotations

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

    resolved: bool
    """False when the samples of the last `feed` lack context that comes from an earlier line
    (a step header), i.e. the reading began after that line."""

    literal_names: bool
    """True when a sample's name (its last `/` part at least) is printed in its line, so a
    reader looking for one metric may pass other lines to `context` instead of `feed`."""

    def feed(self, line: str) -> list[Sample]: ...

    def context(self, line: str) -> None:
        """Keep the state a line sets (a step header) without reading its values: cheap."""
