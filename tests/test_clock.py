"""Durations and timestamps as people type them and as the ledger stores them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from autoresearch_skills.clock import format_duration, format_iso, now_iso, parse_duration, parse_iso


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("90s", 90),
        ("10m", 600),
        ("10 min", 600),
        ("90 minutes", 5400),
        ("1h", 3600),
        ("1h30m", 5400),
        ("1h 30m", 5400),
        ("1 hour 30 minutes", 5400),
        ("0.5h", 1800),
        ("2 days", 172800),
        ("1w", 604800),
        ("1H30M", 5400),
        (" 45 secs ", 45),
        (600, 600),
        (2.5, 2.5),
    ],
)
def test_durations_parse_as_people_write_them(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "soon", "1h30", "10 mins later", "-5", "-5m", "nan", "inf", -1, float("nan")]
)
def test_unreadable_or_negative_durations_are_refused(text):
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (45, "45s"),
        (59.6, "1m"),
        (90, "1m30s"),
        (600, "10m"),
        (630, "10m"),
        (3600, "1h"),
        (22320, "6h12m"),
        (3660, "1h01m"),
        (86400, "1d"),
        (183600, "2d3h"),
        (-30, "0s"),
    ],
)
def test_durations_print_compactly(seconds, text):
    assert format_duration(seconds) == text


def test_parse_and_format_round_trip_for_whole_hours_and_minutes():
    for text in ["45s", "10m", "6h12m", "2d3h"]:
        assert format_duration(parse_duration(text)) == text


def test_timestamps_carry_a_utc_offset():
    stamp = now_iso()
    moment = datetime.fromisoformat(stamp)
    assert moment.tzinfo is not None
    assert abs((datetime.now(timezone.utc) - moment).total_seconds()) < 60
    assert (
        format_iso(datetime(2026, 3, 1, 22, 0, 5, 123456, tzinfo=timezone.utc)) == "2026-03-01T22:00:05+00:00"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-01T22:00:00+00:00", datetime(2026, 3, 1, 22, tzinfo=timezone.utc)),
        ("2026-03-01T22:00:00Z", datetime(2026, 3, 1, 22, tzinfo=timezone.utc)),
        ("2026-03-01T23:00:00+01:00", datetime(2026, 3, 1, 22, tzinfo=timezone.utc)),
        ("2026-03-01 22:00+00:00", datetime(2026, 3, 1, 22, tzinfo=timezone.utc)),
    ],
)
def test_iso_timestamps_parse_with_their_offset(text, expected):
    assert parse_iso(text) == expected


def test_iso_timestamp_without_offset_is_local_time():
    moment = parse_iso("2026-03-01T22:00:00")
    assert moment.tzinfo is not None
    assert moment.replace(tzinfo=None) == datetime(2026, 3, 1, 22)
    assert moment.utcoffset() == datetime(2026, 3, 1, 22).astimezone().utcoffset()


@pytest.mark.parametrize("text", ["yesterday", "2026-02-30T00:00", "22:00", ""])
def test_unreadable_timestamps_are_refused(text):
    with pytest.raises(ValueError):
        parse_iso(text)


def test_formatted_timestamps_parse_back_to_the_same_moment():
    moment = datetime(2026, 3, 1, 22, 0, 5, tzinfo=timezone(timedelta(hours=-5)))
    assert parse_iso(format_iso(moment)) == moment
