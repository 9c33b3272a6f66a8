"""`rollout_infos` entries kept compact: a million of them fit in a few tens of MB.

An entry is kept as its values as orjson writes them, each after a code standing for its key:
a control byte (JSON text never holds one raw) for the first 28 keys met, else an escape byte
and two letters or digits. The keys are written back at the end, a chunk of entries at a time,
by one `bytes.replace` per key (`expand`), instead of being kept for every rollout (they are
two thirds of an entry) or put back one entry at a time (2 us each).

Two processes read two halves of a file and number the keys they meet each their own way;
`recode` rewrites the second half's entries in the first's codes.
"""

from __future__ import annotations

import re
import string

import numpy as np
import orjson

from autoresearch_skills.errors import BadInput

SINGLE = 28  # keys coded in one byte: 0x01 to 0x1C
ESCAPE = 0x1D  # then two of DIGITS: 62 * 62 more keys
ROW = b"\x1e"  # between the entries of one task, as `expand` reads them
DIGITS = (string.digits + string.ascii_letters).encode()  # no comma, quote or percent sign
FIRST = "rollout_id"  # every entry starts with it (NeMo Gym builds it first)


def code_of(index: int) -> bytes:
    if index < SINGLE:
        return bytes((index + 1,))
    high, low = divmod(index - SINGLE, len(DIGITS))
    if high >= len(DIGITS):
        raise BadInput(
            f"the results have more than {SINGLE + len(DIGITS) ** 2} different numeric fields: "
            "profile a collection whose rollouts share their fields"
        )
    return bytes((ESCAPE, DIGITS[high], DIGITS[low]))


class KeyCodes:
    """The code of each key, in the order the keys were met."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self._codes: dict[str, bytes] = {}

    def code(self, key: str) -> bytes:
        found = self._codes.get(key)
        if found is None:
            found = self._codes[key] = code_of(len(self.keys))
            self.keys.append(key)
        return found


def recode(
    blob: np.ndarray, keys: list[str], target: KeyCodes, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Entries coded by `keys` (in order), at start:end of `blob`, in `target`'s codes (which learns
    the keys it lacks): the new blob and where each entry now is (a code may change length)."""
    changed = {
        old: new for old, new in ((code_of(i), target.code(key)) for i, key in enumerate(keys)) if old != new
    }
    if not changed:
        return blob, start, end
    text = blob.tobytes()
    if all(len(old) == 1 and len(new) == 1 for old, new in changed.items()):
        table = bytes.maketrans(b"".join(changed), b"".join(changed.values()))
        return np.frombuffer(text.translate(table), np.uint8), start, end
    pattern = re.compile(b"|".join(re.escape(old) for old in changed))
    found = [(m.start(), len(changed[m.group()]) - len(m.group())) for m in pattern.finditer(text)]
    at = np.array([position for position, _ in found], np.int64)
    moved = np.concatenate([[0], np.cumsum([delta for _, delta in found], dtype=np.int64)])

    def shifted(offsets: np.ndarray) -> np.ndarray:  # by the change in length of the codes before each
        return offsets + moved[np.searchsorted(at, offsets)]

    recoded = pattern.sub(lambda match: changed[match.group()], text)
    return np.frombuffer(recoded, np.uint8), shifted(start), shifted(end)


def expand(entries: bytes, keys: list[str]) -> bytes:
    """Entries (of one or more tasks) with their keys written: each entry's opening brace and
    `"key":` in place of each code, `},` in place of each ROW; the last entry's `}` is left out."""
    for index, key in enumerate(keys):
        entries = entries.replace(code_of(index), (b"{" if key == FIRST else b",") + orjson.dumps(key) + b":")
    return entries.replace(ROW, b"},")
