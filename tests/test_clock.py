"""Durations, clock times and timestamps as people type them and as the ledger stores them."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from autoresearch_skills.clock import (
    duration_given,
    format_duration,
    format_iso,
    next_clock,
    now_iso,
    parse_clock,
    parse_duration,
    parse_iso,
)
from autoresearch_skills.errors import BadInput

CET = "CET-1CEST,M3.5.0,M10.5.0/3"  # central Europe as a POSIX TZ rule: no tz database needed


@pytest.fixture
def local_zone(monkeypatch):
    def use(zone: str) -> None:
        monkeypatch.setenv("TZ", zone)
        time.tzset()

    yield use
    monkeypatch.undo()
    time.tzset()


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


def test_a_duration_a_person_gave_is_refused_in_one_line_naming_where_it_was_given():
    assert duration_given("1h30m", "--for") == duration_given(5400, "watch stall_after") == 5400
    with pytest.raises(BadInput, match=r"^--stall 'soon' is not a duration: try 90s, 15m or 1h30m$"):
        duration_given("soon", "--stall")
    with pytest.raises(BadInput, match=r"^watch traceback_grace must be longer than zero, got '0s'$"):
        duration_given("0s", "watch traceback_grace")
    assert duration_given("0", "--timeout", zero_ok=True) == 0


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


@pytest.mark.parametrize(
    ("text", "clock"),
    [
        ("8am", "08:00"),
        ("8 am", "08:00"),
        ("8 a.m.", "08:00"),
        ("8 AM", "08:00"),
        ("7:30pm", "19:30"),
        ("7 pm", "19:00"),
        ("12am", "00:00"),
        ("12pm", "12:00"),
        ("08:00", "08:00"),
        ("8:05", "08:05"),
        ("23:30", "23:30"),
        ("noon", "12:00"),
        ("midnight", "00:00"),
    ],
)
def test_clock_times_parse_as_people_write_them(text, clock):
    assert parse_clock(text) == clock


@pytest.mark.parametrize("text", ["8", "20", "13pm", "0am", "24:00", "8:60", "soon", "", "8h"])
def test_ambiguous_or_impossible_clock_times_are_refused(text):
    with pytest.raises(ValueError, match="not a time of day"):
        parse_clock(text)


def test_next_clock_is_the_next_such_local_time(local_zone):
    local_zone(CET)
    afternoon = datetime.fromisoformat("2026-11-22T14:00:00+01:00")
    assert format_iso(next_clock("08:00", afternoon)) == "2026-11-23T08:00:00+01:00"
    assert format_iso(next_clock("23:30", afternoon)) == "2026-11-22T23:30:00+01:00"
    assert format_iso(next_clock("14:00", afternoon)) == "2026-11-23T14:00:00+01:00", "strictly after"
    in_utc = datetime.fromisoformat("2026-11-22T06:30:00+00:00")  # 07:30 local
    assert format_iso(next_clock("08:00", in_utc)) == "2026-11-22T08:00:00+01:00"


def test_next_clock_across_daylight_saving_keeps_the_wall_clock_time(local_zone):
    local_zone(CET)
    assert format_iso(next_clock("08:00", datetime.fromisoformat("2026-03-28T12:00:00+01:00"))) == (
        "2026-03-29T08:00:00+02:00"
    )
    assert format_iso(next_clock("08:00", datetime.fromisoformat("2026-10-24T12:00:00+02:00"))) == (
        "2026-10-25T08:00:00+01:00"
    )
