"""JSON-lines metric files: one object per line, e.g. `{"step": 10, "val_bpb": 0.99}`.

Every numeric field is a sample (nested objects flatten to `train/loss`); the step comes from
the first step-like field present. Lines that are not JSON objects (a torn write, a stray
print) are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

from autoresearch_skills.sources import Sample, literal_needle

SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")
STEP_KEYS = ("step", "global_step", "_step", "iteration", "iter", "trainer/global_step")


def is_jsonl(path: Path) -> bool:
    return path.name.lower().endswith(SUFFIXES)


class JsonlParser:
    resolved = True  # each line stands alone
    needle = staticmethod(literal_needle)

    def context(self, line: str) -> None:
        pass

    def feed(self, line: str) -> list[Sample]:
        line = line.strip()
        if not line.startswith("{"):
            return []
        try:
            record = json.loads(line)
        except ValueError:
            return []
        if not isinstance(record, dict):
            return []
        values = _flatten(record)
        step = next((int(values[key]) for key in STEP_KEYS if _is_whole(values.get(key))), None)
        return [Sample(name, float(value), step) for name, value in values.items()]


def _flatten(record: dict, prefix: str = "") -> dict[str, float | int]:
    out: dict[str, float | int] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    return out


def _is_whole(value: object) -> bool:
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
