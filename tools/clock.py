"""Durations, clock times and timestamps: parse "1h30m" / "90 minutes", print "6h12m"; read
"8am" / "23:30" and find the next such local time; ISO 8601 with offset."""

from __future__ import annotations

import math
import re
from datetime import datetime, time, timedelta, timezone

UNIT_SECONDS = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}  # fmt: skip

_UNITS = "|".join(sorted(UNIT_SECONDS, key=len, reverse=True))
DURATION_PART = rf"(\d+(?:\.\d+)?)\s*({_UNITS})(?![a-z])"
# The patterns here are compiled on first use (by `re`'s own cache), not when the module loads: the
# hooks import it at every stop, and most of their calls parse no duration and no clock time.
_DURATION = rf"^\s*(?:{DURATION_PART}\s*)+$"


def parse_duration(text: str | int | float) -> float:
    """Seconds in "90", "1h", "1h30m", "90 minutes", "2 days", "0.5h". Raises ValueError."""
    if isinstance(text, (int, float)):
        seconds = float(text)
    elif re.fullmatch(r"\s*\d+(?:\.\d+)?\s*", text):
        seconds = float(text)  # a bare number means seconds
    elif re.match(_DURATION, text, re.IGNORECASE):
        seconds = sum(
            float(n) * UNIT_SECONDS[u.lower()] for n, u in re.findall(DURATION_PART, text, re.IGNORECASE)
        )
    else:
        raise ValueError(f"not a duration: {text!r} (try 90s, 10m, 1h30m, 2 days)")
    if not 0 <= seconds < math.inf:  # also refuses NaN: a negative or endless budget is a typo
        raise ValueError(f"not a duration: {text!r} (must be zero or more, e.g. 90s, 10m, 1h30m)")
    return seconds


def duration_given(value: str | int | float, what: str, *, zero_ok: bool = False) -> float:
    """Seconds in a duration a person gave for `what` (a flag, a campaign.yaml key): above zero,
    or zero too with `zero_ok`. Refused with BadInput, one line naming `what`."""
    # errors loads click: the supervisor and the hooks read clock and must start in well under 150 ms
    from autoresearch_skills.errors import BadInput

    try:
        seconds = parse_duration(value)
    except ValueError:
        raise BadInput(f"{what} {value!r} is not a duration: try 90s, 15m or 1h30m") from None
    if seconds <= 0 and not zero_ok:
        raise BadInput(f"{what} must be longer than zero, got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """Compact and readable: 45s, 12m, 6h12m, 2d3h. Never negative."""
    seconds = max(0, int(round(seconds)))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs:02d}s" if secs and minutes < 10 else f"{minutes}m"
    return f"{secs}s"


# A time of day as people write it: "8am", "8 a.m.", "7:30pm", "08:00", "23:30", "noon", "midnight".
# A bare number ("until 8") is not one: 8 in the morning or the evening is the user's to say.
CLOCK_TIME = r"(?:\d{1,2}(?::\d\d)?\s*[ap]\.?\s?m\.?|\d{1,2}:\d\d|noon|midday|midnight)"
_CLOCK = r"(\d{1,2})(?::(\d\d))?\s*(?:([ap])\.?\s?m\.?)?"


def parse_clock(text: str) -> str:
    """A time of day as "HH:MM" (24 h): "8am" -> "08:00", "7 pm" -> "19:00". Raises ValueError."""
    word = text.strip().lower()
    if word in ("noon", "midday"):
        return "12:00"
    if word == "midnight":
        return "00:00"
    match = re.fullmatch(_CLOCK, word, re.IGNORECASE)
    if not match or (match[2] is None and match[3] is None):
        raise ValueError(f"not a time of day: {text!r} (try 8am, 7:30pm, 08:00, 23:30)")
    hour, minute = int(match[1]), int(match[2] or 0)
    if match[3]:
        if not 1 <= hour <= 12:
            raise ValueError(f"not a time of day: {text!r} (with am/pm the hour is 1 to 12)")
        hour = hour % 12 + (12 if match[3] == "p" else 0)
    if hour > 23 or minute > 59:
        raise ValueError(f"not a time of day: {text!r} (00:00 to 23:59)")
    return f"{hour:02d}:{minute:02d}"


def next_clock(clock: str, after: datetime) -> datetime:
    """The first moment strictly after `after` when the local clock shows `clock` ("HH:MM").

    Local means this machine's time zone (TZ), with the UTC offset of that day, so a deadline
    across a daylight-saving change still falls on the wall-clock time the user named."""
    hour, minute = (int(part) for part in parse_clock(clock).split(":"))
    day = after.astimezone().date()
    for offset in range(3):  # today, tomorrow; a third day only if a DST jump skipped the time
        candidate = datetime.combine(day + timedelta(days=offset), time(hour, minute)).astimezone()
        if candidate > after:
            return candidate
    raise ValueError(f"no local time {clock} after {after}")  # unreachable with a sane time zone


def now() -> datetime:
    return datetime.now(timezone.utc).astimezone()


def now_iso() -> str:
    return format_iso(now())


def format_iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return moment.isoformat(timespec="seconds")


def parse_iso(text: str) -> datetime:
    """ISO 8601; a value without offset is taken as local time. Raises ValueError."""
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.astimezone()
