"""A prediction: the change of the metric an experiment is expected to make against its parent,
registered before the run (`ars exp start --predict`) and judged by its sign in the report.

Contract. What a person gives is `[METRIC[:]] SIGN NUMBER[%]`: a signed change, absolute (`-0.15`,
`+1e-3`) or relative (`-2%`), with or without the campaign metric's name before it (a name may
hold spaces or underscores, and either stands for the other: `val loss` and `val_loss` are one
name). `parse` accepts that and nothing else, and gives the text the ledger keeps, always the
metric's own name, one space and the change as written (`val loss -0.15`, `val loss -2%`); `read`
reads that text back, and the texts older releases wrote (`val_bpb -0.01`, `-1%`). A refusal is
one line whose examples `parse` accepts (tests/test_prediction.py holds it to that).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autoresearch_skills.errors import BadInput

# A signed number, then `%` for a relative change; no sign is no direction, so it is not a change.
_CHANGE = r"(?P<number>[+-](?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<percent>%?)"
# The metric's name before it, if any: up to a colon or a space; the shortest name that leaves a change.
_FORM = re.compile(rf"\s*(?:(?P<name>\S.*?)(?:\s*:\s*|\s+))?{_CHANGE}\s*")


@dataclass(frozen=True)
class Prediction:
    """A predicted change: `change` in the metric's unit, or in percent of the parent's value when
    `relative`; `text` is how the ledger keeps it."""

    change: float
    relative: bool
    text: str

    @property
    def sign(self) -> int:
        return (self.change > 0) - (self.change < 0)


def read(text: str) -> Prediction | None:
    """The prediction a ledger row holds, whichever release wrote it; None when the text is not a
    signed change (a row written by hand, a blueprint's sentence)."""
    found = _FORM.fullmatch(text)
    if not found:
        return None
    return Prediction(float(found["number"]), bool(found["percent"]), text)


def parse(text: str, metric: str) -> Prediction:
    """What `--predict` was given, as the ledger keeps it; BadInput (one line, exit 2) for anything
    but a signed change of `metric`."""
    found = _FORM.fullmatch(text)
    name = (found["name"] if found else None) or ""
    if not found or (name and _same_name(name) != _same_name(metric)):
        what = f"names {name!r}, not the campaign's metric {metric!r}" if found else "is not a signed change"
        raise BadInput(f"--predict {text!r} {what}; {how(metric)}")
    change = f"{found['number']}{found['percent']}"
    if float(found["number"]) == 0:
        raise BadInput(f"--predict {text!r}: a change of 0 has no sign to judge; {how(metric)}")
    return Prediction(float(found["number"]), bool(found["percent"]), f"{metric} {change}")


def how(metric: str) -> str:
    """The forms `parse` accepts, for a refusal and for `--help`."""
    return f'give the expected change of {metric} with its sign: "{metric} -0.01", "-0.01" or "-2%"'


def _same_name(name: str) -> str:
    """A metric's name as a person may type it: case, spaces and underscores do not matter."""
    return re.sub(r"[\s_]+", " ", name.strip()).casefold()
