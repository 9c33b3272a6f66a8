"""Stop rules: plain-text and YAML parsing, every trigger, the one-line verdict and exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import warm_ars
import yaml

from autoresearch_skills import ledger, stoprule
from autoresearch_skills.errors import BadInput

TOOLS = Path(__file__).resolve().parents[1] / "tools"
T0 = datetime.fromisoformat("2026-03-01T22:00:00+00:00")
VERDICT = re.compile(r"^stop condition (met|not yet met): \S.*$")
# A zone with a UTC offset and daylight saving (central Europe), written as a POSIX TZ rule so it
# needs no tz database: clock-time rules are tested in local time that is not UTC.
CET = "CET-1CEST,M3.5.0,M10.5.0/3"


def ars(*args: str) -> subprocess.CompletedProcess:
    return warm_ars.run(*args)


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def make_ledger(
    path: Path,
    statuses: list[str],
    values: list[float] | None = None,
    gpus: list[str] | None = None,
    start: datetime = T0,
) -> Path:
    """One row per status, ten minutes apart from `start`, each 9 minutes long; metric 1.0 unless
    given; the GPUs each run held when given."""
    ledger.init(path)
    for i, status in enumerate(statuses):
        value = values[i] if values else 1.0
        ledger.append(
            path,
            {
                "status": status,
                "metric_name": "val_bpb",
                "metric_value": value if status in ("keep", "discard") else 0.0,
                "elapsed_min": 9.0,
                "gpus": gpus[i] if gpus else "",
                "started_at": (start + timedelta(minutes=10 * i)).isoformat(),
                "ended_at": (start + timedelta(minutes=10 * i + 9)).isoformat(),
            },
        )
    return path


@pytest.fixture
def local_zone(monkeypatch):
    """Run the test (and the commands it starts) in the given local time zone."""

    def use(zone: str) -> None:
        monkeypatch.setenv("TZ", zone)
        time.tzset()

    yield use
    monkeypatch.undo()
    time.tzset()


def check(path: Path, *args: str) -> tuple[int, str, str]:
    """`ars stop check` on the ledger; asserts the output is exactly one verdict line."""
    done = ars("stop", "check", "--ledger", str(path), *args)
    assert done.returncode in (0, 1), done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and VERDICT.match(lines[0]), done.stdout
    assert (done.returncode == 0) == lines[0].startswith("stop condition not yet met: ")
    return done.returncode, lines[0], done.stderr


# ---------------------------------------------------------------- parsing plain text

PARSED = {
    "50 experiments": {"max_experiments": 50},
    "10h total, 1h each": {"budget_seconds": 36000, "per_run_timeout_seconds": 3600},
    "50 experiments or 10h total, 1h each": {
        "max_experiments": 50,
        "budget_seconds": 36000,
        "per_run_timeout_seconds": 3600,
    },
    "until val_bpb < 0.95": {"target": "val_bpb<0.95"},
    "until val_bpb <= 0.95": {"target": "val_bpb<=0.95"},
    "until accuracy >= 0.8": {"target": "accuracy>=0.8"},
    "stop when val_bpb below 0.9": {"target": "val_bpb<0.9"},
    "stop once reward is at least 0.5": {"target": "reward>=0.5"},
    "stop after 8 runs without improvement": {"patience": 8},
    "patience 5": {"patience": 5},
    "90 minutes": {"budget_seconds": 5400},
    "2 days": {"budget_seconds": 172800},
    "1.5h": {"budget_seconds": 5400},
    "1h30m total and 10 minutes per run": {"budget_seconds": 5400, "per_run_timeout_seconds": 600},
    "24 experiments or 6h total, 10m each": {
        "max_experiments": 24,
        "budget_seconds": 21600,
        "per_run_timeout_seconds": 600,
    },
    "at most 20 runs; timeout 15m": {"max_experiments": 20, "per_run_timeout_seconds": 900},
    "failure rate above 50%": {"max_failure_rate": 0.5, "failure_window": 10},
    "more than 30% failures": {"max_failure_rate": 0.3},
    "by 2026-12-01T08:00+01:00": {"deadline": "2026-12-01T08:00:00+01:00"},
    "deadline 2026-12-01T08:00:00Z": {"deadline": "2026-12-01T08:00:00+00:00"},
    "max 30 trials, patience 5, until loss < 1.2": {
        "max_experiments": 30,
        "patience": 5,
        "target": "loss<1.2",
    },
    "until 8am": {"until": "08:00"},
    "by 08:00": {"until": "08:00"},
    "until 23:30": {"until": "23:30"},
    "till 7 pm": {"until": "19:00"},
    "stop at 8:30 a.m.": {"until": "08:30"},
    "until 8am, 10m each": {"until": "08:00", "per_run_timeout_seconds": 600},
    "until 23:30 or 6h total": {"until": "23:30", "budget_seconds": 21600},
    "overnight": {"until": "08:00", "overnight": True},
    "run overnight, 10m each": {"until": "08:00", "overnight": True, "per_run_timeout_seconds": 600},
    "overnight until 7am": {"until": "07:00", "overnight": True},
    "forever": {"no_limit": True},
    "forever, 10m each": {"no_limit": True, "per_run_timeout_seconds": 600},
    "keep going until I say so": {"no_limit": True},
    "no limit": {"no_limit": True},
    "40 GPU-hours": {"gpu_hours": 40},
    "40 gpu hours": {"gpu_hours": 40},
    "40 GPU-hours or 24 experiments": {"gpu_hours": 40, "max_experiments": 24},
    "a budget of 12.5 GPU-hours, 1h each": {"gpu_hours": 12.5, "per_run_timeout_seconds": 3600},
}
RULE_KEYS = {"max_experiments", "budget_seconds", "per_run_timeout_seconds", "target", "patience"}
RULE_KEYS |= {"max_failure_rate", "deadline", "until", "overnight", "gpu_hours", "no_limit"}


@pytest.mark.parametrize("text", PARSED)
def test_plain_text_rules_parse_to_explicit_values(text):
    values = stoprule.parse_text(text).to_json()
    assert values["default"] is False
    for key, expected in PARSED[text].items():
        assert values[key] == expected, key
    expected_keys = set(PARSED[text]) | ({"deadline"} if "until" in PARSED[text] else set())
    assert {k for k in values if k in RULE_KEYS} == {k for k in expected_keys if k in RULE_KEYS}


@pytest.mark.parametrize("text", PARSED)
def test_every_phrase_round_trips_through_the_mapping_form(text):
    rules = stoprule.parse_text(text)
    for mapping in (rules.to_dict(), yaml.safe_load(yaml.safe_dump({"stop": rules.to_dict()}))):
        again = stoprule.from_mapping(mapping)
        assert again == rules, mapping
        assert again.describe(at=T0) == rules.describe(at=T0)
    campaign_start = rules.with_defaults().fixed_at(T0)  # what `ars campaign init` stores
    assert stoprule.from_mapping(campaign_start.to_dict()) == campaign_start


def test_parse_json_gives_machine_values():
    done = ars("stop", "parse", "50 experiments or 10h total, 1h each, until val_bpb<=0.9", "--json")
    assert done.returncode == 0
    assert json.loads(done.stdout) == {
        "max_experiments": 50,
        "max_experiments_includes_baseline": True,
        "max_hypotheses": 49,
        "budget": "10h",
        "budget_seconds": 36000.0,
        "per_run_timeout": "1h",
        "per_run_timeout_seconds": 3600.0,
        "target": "val_bpb<=0.9",
        "default": False,
    }


def test_tool_script_parses_the_seed_example():
    done = subprocess.run(
        [sys.executable, str(TOOLS / "stoprule.py"), "parse", "50 experiments or 10h total, 1h each"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "max_experiments: 50 (the baseline included: 49 hypotheses)",
        "budget: 10h total",
        "per_run_timeout: 1h",
    ]


@pytest.mark.parametrize(
    ("text", "unreadable"),
    [
        ("50 experiments or banana", "'banana'"),
        ("until 8", "is 8 in the morning or the evening? say 8am, 8pm or 08:00"),
        ("stop at 20", "e.g. 20:00"),
        ("until 25:00", "cannot read the time"),
        ("until 13pm", "cannot read the time"),
        ("until 8am, by 9am", "deadline given twice"),
        ("overnight, by 2026-12-01", "deadline given twice"),
        ("forever or 24 experiments", "yet max_experiments would end it"),
        ("until I say so, until val_bpb < 0.9", "yet target would end it"),
        ("overnight or no limit", "yet until would end it"),
        ("until val_bpb is good", "'until val_bpb is good'"),
        ("10h total, 2h each, 3h each", "per_run_timeout given twice"),
        ("by 2026-13-45", "cannot read the date"),
        ("failure rate above 150%", "above 100%"),
        ("", "empty stop rule"),
    ],
)
def test_unreadable_rule_exits_2_naming_the_part(text, unreadable):
    done = ars("stop", "parse", text)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1
    assert unreadable in done.stderr


def test_examples_in_the_reference_parse():
    text = (TOOLS.parent / "references" / "stop-rules.md").read_text()
    block = text.split("More examples:", 1)[1].split("```")[1]
    examples = [line.strip() for line in block.splitlines() if line.strip()]
    table = text.split("| form | examples | sets |", 1)[1].split("\n\n", 1)[0]
    examples += [e for row in table.splitlines()[2:] for e in re.findall(r"`([^`]+)`", row.split("|")[2])]
    assert len(examples) > 20
    for example in examples:
        assert stoprule.parse_text(example).to_dict(), example  # parses, and sets something


# ---------------------------------------------------------------- the verdict


def test_verdict_line_reads_like_the_design(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep"] * 17)
    code, line, _ = check(
        path, "--stop", "24 experiments or 10h total, 10m each", "--started-at", at(0), "--now", at(228)
    )
    assert (code, line) == (0, "stop condition not yet met: 17/24 attempted, 6h12m remaining")


def test_count_includes_rows_of_every_status(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "discard", "crash", "timeout", "cancelled"])
    code, line, _ = check(path, "--stop", "5 experiments", "--now", at(60))
    assert (code, line) == (1, "stop condition met: 5/5 attempted")
    code, line, _ = check(path, "--stop", "6 experiments", "--now", at(60))
    assert (code, line) == (0, "stop condition not yet met: 5/6 attempted")


def test_deadline_from_budget_stops_at_the_deadline(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "discard"])
    code, line, _ = check(path, "--stop", "6h total", "--started-at", at(0), "--now", at(300))
    assert (code, line) == (0, "stop condition not yet met: 2 attempted, 1h remaining")
    code, line, _ = check(path, "--stop", "6h total", "--started-at", at(0), "--now", at(360))
    assert (code, line) == (1, "stop condition met: deadline 2026-03-02T04:00:00+00:00 passed, 2 attempted")


def test_budget_starts_at_the_first_ledger_row_by_default(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "discard"])  # first row started at T0
    _, line, _ = check(path, "--stop", "2h total", "--now", at(30))
    assert line == "stop condition not yet met: 2 attempted, 1h30m remaining"


def test_absolute_deadline_in_text(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep"])
    code, line, _ = check(path, "--stop", "by 2026-03-02T06:00:00+00:00", "--now", at(59))
    assert (code, line) == (0, "stop condition not yet met: 1 attempted, 7h01m remaining")
    code, _, _ = check(path, "--stop", "by 2026-03-02T06:00:00+00:00", "--now", at(481))
    assert code == 1


def test_no_time_left_for_another_run_stops(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "discard"])
    rule = ["--stop", "6h total, 1h each", "--started-at", at(0)]
    code, _, _ = check(path, *rule, "--now", at(300))  # exactly one hour left: one more fits
    assert code == 0
    code, line, _ = check(path, *rule, "--now", at(301))
    assert code == 1
    assert line.startswith("stop condition met: not enough time for another run: 59m remaining")
    verdict = json.loads(
        ars("stop", "check", "--ledger", str(path), *rule, "--now", at(301), "--json").stdout
    )
    assert verdict["trigger"] == "no_time_for_run"


def test_target_reached_by_a_measured_row_stops(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "discard", "keep"], [0.99, 0.97, 0.96])
    code, line, _ = check(path, "--stop", "until val_bpb < 0.95", "--now", at(60))
    assert (code, line) == (0, "stop condition not yet met: 3 attempted, target val_bpb<0.95 (best 0.96)")
    ledger.append(path, {"status": "keep", "metric_name": "val_bpb", "metric_value": 0.949})
    code, line, _ = check(path, "--stop", "until val_bpb < 0.95", "--now", at(60))
    assert (code, line) == (1, "stop condition met: target reached: val_bpb 0.949 < 0.95, 4 attempted")


def test_crashed_rows_metric_of_zero_never_reaches_a_target(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "crash", "timeout"], [0.99, 0, 0])
    code, _, _ = check(path, "--stop", "until val_bpb <= 0.95", "--now", at(60))
    assert code == 0


def test_higher_is_better_target(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "keep"], [0.70, 0.81])
    code, line, _ = check(path, "--stop", "until val_bpb >= 0.8", "--now", at(60))
    assert (code, line) == (1, "stop condition met: target reached: val_bpb 0.81 >= 0.8, 2 attempted")


def test_patience_counts_runs_since_the_last_kept_row(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "keep", "discard", "crash"])
    rule = ["--stop", "stop after 3 runs without improvement", "--now", at(60)]
    code, line, _ = check(path, *rule)
    assert (code, line) == (0, "stop condition not yet met: 4 attempted, 2/3 runs without improvement")
    ledger.append(path, {"status": "discard", "metric_value": 1.1})
    code, line, _ = check(path, *rule)
    assert (code, line) == (1, "stop condition met: 3 runs without improvement (patience 3), 5 attempted")


def test_failure_rate_over_the_window_stops(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "discard", "crash"])
    rule = ["--stop", "failure rate above 50%", "--now", at(60)]
    assert check(path, *rule)[0] == 0  # 1 of 3 failed
    ledger.append(path, {"status": "timeout"})
    assert check(path, *rule)[0] == 0  # 2 of 4 is not above 50%
    ledger.append(path, {"status": "crash"})
    code, line, _ = check(path, *rule)
    assert (code, line) == (1, "stop condition met: 3/5 of the last runs failed (60% > 50%), 5 attempted")


def test_default_rule_is_baseline_plus_three_then_ask(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "discard", "discard"])
    code, line, _ = check(path, "--now", at(60))
    assert (code, line) == (0, "stop condition not yet met: 3/4 attempted")
    ledger.append(path, {"status": "keep", "metric_value": 0.9})
    code, line, _ = check(path, "--now", at(60))
    assert code == 1
    assert line.startswith("stop condition met: 4/4 attempted (default: baseline + 3 experiments;")
    assert "ask the user" in line


def test_per_run_timeout_alone_keeps_the_default_count(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "discard", "discard", "keep"])
    code, line, _ = check(path, "--stop", "10m each", "--now", at(60))
    assert code == 1
    assert line.startswith("stop condition met: 4/4 attempted (default: baseline + 3 experiments;")


def test_missing_ledger_is_bad_input_not_zero_attempts(tmp_path):
    done = ars("stop", "check", "--ledger", str(tmp_path / "results.tsv"), "--stop", "24 experiments")
    assert (done.returncode, done.stdout) == (2, "")
    assert len(done.stderr.splitlines()) == 1
    assert f"ledger {tmp_path / 'results.tsv'} does not exist" in done.stderr
    assert "ars ledger init" in done.stderr


def test_empty_ledger_means_nothing_attempted_yet(tmp_path):
    code, line, _ = check(make_ledger(tmp_path / "results.tsv", []), "--stop", "24 experiments")
    assert (code, line) == (0, "stop condition not yet met: 0/24 attempted")


def test_first_trigger_met_is_named_when_several_are_set(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "discard", "discard"], [0.9, 1, 1])
    for rule, trigger in [
        ("3 experiments or 1h total, until val_bpb < 0.95", "target"),
        ("3 experiments or 1h total", "max_experiments"),
        ("4 experiments or 1h total", "deadline"),
    ]:
        done = ars("stop", "check", "--ledger", str(path), "--stop", rule, "--now", at(120), "--json")
        assert json.loads(done.stdout)["trigger"] == trigger, rule


def test_json_verdict_keys(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "discard", "crash"])
    args = ["--stop", "24 experiments or 6h total, 10m each", "--started-at", at(0), "--now", at(90)]
    done = ars("stop", "check", "--ledger", str(path), *args, "--json")
    assert done.returncode == 0
    verdict = json.loads(done.stdout)
    assert verdict == {
        "should_continue": True,
        "line": "stop condition not yet met: 3/24 attempted, 4h30m remaining",
        "trigger": None,
        "attempted": 3,
        "max_experiments": 24,
        "remaining_experiments": 21,
        "remaining_seconds": 16200.0,
        "remaining_time": "4h30m",
        "deadline": "2026-03-02T04:00:00+00:00",
        "best_value": None,
        "runs_since_improvement": 2,
        "running": 0,
        "per_run_timeout": 600.0,
        "gpu_hours_used": None,
        "max_gpu_hours": None,
        "no_limit": False,
        "may_start": True,
    }
    stopped = ars("stop", "check", "--ledger", str(path), "--stop", "3 runs", "--now", at(90), "--json")
    assert stopped.returncode == 1
    assert json.loads(stopped.stdout)["should_continue"] is False
    assert json.loads(stopped.stdout)["remaining_experiments"] == 0


# ---------------------------------------------------------------- YAML rules


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "yaml_text",
    [
        "max_experiments: 3\n",
        "stop:\n  max_experiments: 3\n",
        "stop:\n  text: 3 experiments or 10h total\n",
        "stop: 3 experiments\n",
        "name: lr-sweep\nstop:\n  max_experiments: 3\n  per_run_timeout: 10m\n",
    ],
)
def test_yaml_rules_in_every_form_stop_at_the_count(tmp_path, yaml_text):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "discard", "crash"])
    rules = write(tmp_path / "rules.yaml", yaml_text)
    code, line, _ = check(path, "--rules", str(rules), "--now", at(60))
    assert code == 1
    assert line.startswith("stop condition met: 3/3 attempted")


def test_yaml_accepts_every_key(tmp_path):
    rules = stoprule.load_file(
        write(
            tmp_path / "rules.yaml",
            "stop:\n"
            "  max_experiments: 40\n"
            "  budget: 8h\n"
            "  deadline: 2026-03-02T06:00:00+00:00\n"
            "  per_run_timeout: 900\n"
            "  target: val_bpb<=0.95\n"
            "  patience: 6\n"
            "  max_failure_rate: 40%\n"
            "  failure_window: 5\n",
        )
    )
    assert rules == stoprule.StopRules(
        max_experiments=40,
        budget=8 * 3600,
        deadline="2026-03-02T06:00:00+00:00",
        per_run_timeout=900,
        target=stoprule.Target("val_bpb", "<=", 0.95),
        patience=6,
        max_failure_rate=0.4,
        failure_window=5,
    )
    as_mapping = stoprule.from_mapping({"target": {"metric": "accuracy", "op": ">=", "value": 0.8}})
    assert as_mapping.target == stoprule.Target("accuracy", ">=", 0.8)
    assert stoprule.from_mapping({"max_failure_rate": 0.25}).max_failure_rate == 0.25


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("max_experimentz: 3\n", "unknown stop rule key(s) max_experimentz"),
        ("stop:\n  timeout: 1h\n", "unknown stop rule key(s) timeout"),
        ("max_experiments: [3\n", "is not valid YAML"),
        ("max_experiments: many\n", "max_experiments:"),
        ("max_experiments: -3\n", "max_experiments:"),
        ("budget: forever\n", "budget:"),
        ("deadline: tomorrow\n", "deadline:"),
        ("max_failure_rate: 1.5\n", "max_failure_rate:"),
        ("target: {metric: val_bpb, op: '~', value: 0.9}\n", "target:"),
        ("target: {metric: val_bpb}\n", "target:"),
        ("- 3 experiments\n", "must be a mapping or a text"),
        ("stop:\n  text: 3 bananas\n", "cannot read '3 bananas'"),
    ],
)
def test_bad_yaml_rules_exit_2_with_one_line_naming_the_file(tmp_path, yaml_text, message):
    path = make_ledger(tmp_path / "results.tsv", ["keep"])
    rules = write(tmp_path / "rules.yaml", yaml_text)
    done = ars("stop", "check", "--ledger", str(path), "--rules", str(rules), "--now", at(0))
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert message in done.stderr
    if "cannot read" not in message:
        assert str(rules) in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--stop", "10 experiments", "--rules", "rules.yaml"],
        ["--stop", "10 experiments", "--now", "tomorrow morning"],
        ["--stop", "10 experiments", "--started-at", "2026-02-30T00:00"],
        ["--rules", "no-such-file.yaml"],
        ["--stop", "ten experiments"],
    ],
)
def test_bad_check_arguments_exit_2_with_one_line(tmp_path, args):
    path = make_ledger(tmp_path / "results.tsv", ["keep"])
    done = ars("stop", "check", "--ledger", str(path), *args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr


def test_broken_ledger_is_bad_input_not_a_verdict(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep"])
    with path.open("a") as handle:
        handle.write("1\tonly\tthree\n")
    done = ars("stop", "check", "--ledger", str(path), "--stop", "10 experiments")
    assert done.returncode == 2
    assert f"{path} line 3" in done.stderr


# ---------------------------------------------------------------- evaluation without the CLI


def test_evaluate_fixes_a_relative_budget_once(tmp_path):
    rules = stoprule.parse_text("10h total")
    fixed = rules.fixed_at(T0)
    assert fixed.deadline == "2026-03-02T08:00:00+00:00"
    assert fixed.fixed_at(T0 + timedelta(hours=3)).deadline == fixed.deadline  # never moves
    verdict = stoprule.evaluate(fixed, [], at=T0 + timedelta(hours=4))
    assert verdict.remaining_seconds == 6 * 3600


def test_parse_text_raises_bad_input_for_the_api():
    with pytest.raises(BadInput, match="banana"):
        stoprule.parse_text("banana")


# ---------------------------------------------------------------- clock times, overnight, no limit


@pytest.mark.parametrize(
    ("text", "deadline"),
    [
        ("until 8am", "2026-11-23T08:00:00+01:00"),
        ("by 08:00", "2026-11-23T08:00:00+01:00"),
        ("until 23:30", "2026-11-22T23:30:00+01:00"),
        ("till 7 pm", "2026-11-22T19:00:00+01:00"),
        ("stop at noon", "2026-11-23T12:00:00+01:00"),
        ("until 2pm", "2026-11-23T14:00:00+01:00"),  # 14:00 now: the next 14:00 is tomorrow's
    ],
)
def test_a_clock_time_means_the_next_such_local_time(local_zone, text, deadline):
    local_zone(CET)
    start = datetime.fromisoformat("2026-11-22T14:00:00+01:00")
    assert stoprule.parse_text(text).fixed_at(start).deadline == deadline


def test_parse_shows_the_absolute_deadline_with_its_offset(local_zone):
    local_zone(CET)
    done = ars("stop", "parse", "until 8am, 10m each", "--now", "2026-11-22T13:00:00Z")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "deadline: 2026-11-23T08:00:00+01:00 (until 08:00 local)",
        "per_run_timeout: 10m",
    ]
    as_json = json.loads(ars("stop", "parse", "until 8am", "--now", "2026-11-22T13:00:00Z", "--json").stdout)
    assert (as_json["until"], as_json["deadline"]) == ("08:00", "2026-11-23T08:00:00+01:00")


def test_a_clock_deadline_across_a_daylight_saving_change_keeps_the_wall_clock_time(local_zone):
    local_zone(CET)  # summer time starts on 2026-03-29 at 02:00
    start = datetime.fromisoformat("2026-03-28T12:00:00+01:00")
    assert stoprule.parse_text("until 8am").fixed_at(start).deadline == "2026-03-29T08:00:00+02:00"


def test_overnight_means_until_8am_local_unless_a_time_is_given(local_zone):
    local_zone(CET)
    now_args = ("--now", "2026-11-22T21:00:00+01:00")
    done = ars("stop", "parse", "overnight", *now_args)
    assert done.stdout == "deadline: 2026-11-23T08:00:00+01:00 (overnight: until 08:00 local)\n"
    done = ars("stop", "parse", "overnight until 7am, 10m each", *now_args)
    assert done.stdout.splitlines()[0] == "deadline: 2026-11-23T07:00:00+01:00 (overnight: until 07:00 local)"
    assert stoprule.from_mapping({"overnight": True}).until == "08:00"


def test_a_clock_deadline_is_fixed_at_the_start_and_then_passes(tmp_path, local_zone):
    """Checked again in the morning, "until 8am" must not move on to the next day's 08:00."""
    local_zone(CET)
    evening = datetime.fromisoformat("2026-11-22T22:00:00+01:00")
    path = make_ledger(tmp_path / "results.tsv", ["keep", "discard"], start=evening)
    code, line, _ = check(path, "--stop", "until 8am", "--now", "2026-11-23T07:00:00+01:00")
    assert (code, line) == (0, "stop condition not yet met: 2 attempted, 1h remaining")
    code, line, _ = check(path, "--stop", "until 8am", "--now", "2026-11-23T08:01:00+01:00")
    assert (code, line) == (1, "stop condition met: deadline 2026-11-23T08:00:00+01:00 passed, 2 attempted")


def test_a_clock_time_and_a_budget_end_at_whichever_comes_first(local_zone):
    local_zone(CET)
    start = datetime.fromisoformat("2026-11-22T20:00:00+01:00")
    assert stoprule.parse_text("until 23:30 or 6h total").fixed_at(start).deadline == (
        "2026-11-22T23:30:00+01:00"
    )
    assert (
        stoprule.parse_text("until 8am or 2h total").fixed_at(start).deadline == "2026-11-22T22:00:00+01:00"
    )


def test_yaml_until_accepts_an_unquoted_time(tmp_path):
    # YAML 1.1 reads an unquoted 23:30 as the base-60 number 1410.
    rules = stoprule.load_file(
        write(tmp_path / "rules.yaml", "stop:\n  until: 23:30\n  per_run_timeout: 10m\n")
    )
    assert rules.until == "23:30"
    assert stoprule.from_mapping({"until": "7 pm"}).until == "19:00"
    for bad in ("until: 8\n", "until: soon\n", "overnight: sometimes\n", "no_limit: 1\n"):
        with pytest.raises(BadInput):
            stoprule.load_file(write(tmp_path / "bad.yaml", bad))


def test_forever_means_nothing_ends_the_campaign_but_the_user(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep"] + ["crash"] * 49)
    code, line, _ = check(path, "--stop", "forever, 10m each", "--now", at(60 * 24 * 30))
    assert code == 0
    assert (
        line == "stop condition not yet met: 50 attempted, no limit: nothing ends this campaign but the user"
    )
    rules = stoprule.parse_text("until I say so, 10m each")
    assert rules.with_defaults() == rules, "no limit is not the default of 4 experiments"
    assert rules.per_run_timeout == 600, "the per-run limit still applies"
    assert ars("stop", "parse", "no limit").stdout.startswith(
        "no_limit: nothing ends the campaign but the user"
    )


# ---------------------------------------------------------------- GPU-hours


def test_gpu_hours_count_each_rows_elapsed_time_times_its_gpus(tmp_path):
    # 9 minutes each: 8 GPUs -> 1.2 GPU-hours, 4 GPUs -> 0.6, none/0/"" -> 0.
    path = make_ledger(
        tmp_path / "results.tsv", ["keep", "discard", "crash", "keep"], gpus=["8", "4", "", "0"]
    )
    assert stoprule.gpu_hours_used(ledger.read(path)) == pytest.approx(1.8)
    code, line, _ = check(path, "--stop", "2 GPU-hours or 24 experiments", "--now", at(60))
    assert (code, line) == (0, "stop condition not yet met: 4/24 attempted, 1.8/2 GPU-hours used")
    code, line, _ = check(path, "--stop", "1.5 GPU-hours", "--now", at(60))
    assert (code, line) == (1, "stop condition met: GPU-hour budget used: 1.8/1.5 GPU-hours, 4 attempted")
    verdict = json.loads(
        ars("stop", "check", "--ledger", str(path), "--stop", "1.5 gpu hours", "--json").stdout
    )
    assert (verdict["trigger"], verdict["gpu_hours_used"], verdict["max_gpu_hours"]) == (
        "gpu_hours",
        1.8,
        1.5,
    )


def test_gpu_hours_of_runs_in_flight_count_too(tmp_path):
    rows = ledger.read(make_ledger(tmp_path / "results.tsv", ["keep"], gpus=["8"]))
    rules = stoprule.from_mapping({"gpu_hours": 2})
    assert stoprule.evaluate(rules, rows, at=T0, in_flight=1, in_flight_gpu_hours=0.7).should_continue
    verdict = stoprule.evaluate(rules, rows, at=T0, in_flight=1, in_flight_gpu_hours=0.8)
    assert (
        verdict.line
        == "stop condition met: GPU-hour budget used: 2.0/2 GPU-hours, 2 attempted (1 still running)"
    )
    code, _, _ = check(
        tmp_path / "results.tsv", "--stop", "2 GPU-hours", "--in-flight", "1", "--in-flight-gpu-hours", "0.8"
    )
    assert code == 1


# ---------------------------------------------------------------- the count, what is left, runs in flight


def test_parse_says_the_baseline_is_one_of_the_experiments():
    assert (
        ars("stop", "parse", "4 experiments").stdout
        == "max_experiments: 4 (the baseline included: 3 hypotheses)\n"
    )
    assert (
        ars("stop", "parse", "2 runs").stdout == "max_experiments: 2 (the baseline included: 1 hypothesis)\n"
    )
    assert ars("stop", "parse", "1 run").stdout == "max_experiments: 1 (the baseline only)\n"
    values = json.loads(ars("stop", "parse", "4 experiments", "--json").stdout)
    assert (values["max_experiments_includes_baseline"], values["max_hypotheses"]) == (True, 3)
    default = stoprule.StopRules().with_defaults().describe()
    assert default == ["max_experiments: 4 (default; the baseline included: 3 hypotheses; then stop and ask)"]


def test_the_line_after_a_stop_keeps_the_time_and_count_left(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "discard", "crash", "keep"])
    code, line, _ = check(path, "--stop", "4 experiments or 1h total", "--started-at", at(0), "--now", at(43))
    assert (code, line) == (1, "stop condition met: 4/4 attempted, 17m remaining")
    code, line, _ = check(
        path, "--stop", "24 experiments or 1h total", "--started-at", at(0), "--now", at(61)
    )
    assert (code, line) == (
        1,
        "stop condition met: deadline 2026-03-01T23:00:00+00:00 passed, 4/24 attempted",
    )
    code, line, _ = check(
        path, "--stop", "24 experiments or 1h total, patience 2", "--started-at", at(0), "--now", at(43)
    )
    assert (code, line) == (
        0,
        "stop condition not yet met: 4/24 attempted, 17m remaining, 0/2 runs without improvement",
    )


def test_runs_in_flight_count_as_attempted(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep"] * 14)
    args = ["--stop", "24 experiments or 10h total, 10m each", "--started-at", at(0), "--now", at(228)]
    code, line, _ = check(path, *args, "--in-flight", "3")
    assert (code, line) == (0, "stop condition not yet met: 17/24 attempted (3 running), 6h12m remaining")
    verdict = json.loads(
        ars("stop", "check", "--ledger", str(path), *args, "--in-flight", "3", "--json").stdout
    )
    assert (verdict["attempted"], verdict["running"], verdict["remaining_experiments"]) == (17, 3, 7)
    rows = ledger.read(make_ledger(tmp_path / "full.tsv", ["keep"] * 22))
    stopped = stoprule.evaluate(stoprule.parse_text("24 experiments"), rows, at=at(300), in_flight=2)
    assert stopped.line == "stop condition met: 24/24 attempted (2 still running)"
    assert (stopped.should_continue, stopped.running, stopped.attempted) == (False, 2, 24)
    waiting = stoprule.evaluate(
        stoprule.parse_text("30 experiments"), rows, at=at(300), in_flight=3, queued=1
    )
    assert waiting.line == "stop condition not yet met: 25/30 attempted (2 running, 1 queued)"


def test_results_come_from_finished_rows_only(tmp_path):
    rows = ledger.read(make_ledger(tmp_path / "results.tsv", ["keep", "discard"]))
    rules = stoprule.parse_text("stop after 2 runs without improvement")
    verdict = stoprule.evaluate(rules, rows, at=at(60), in_flight=5)
    assert verdict.should_continue and verdict.runs_since_improvement == 1


def test_may_start_only_when_another_whole_run_fits():
    rules = stoprule.parse_text("24 experiments or 6h total, 1h each").fixed_at(T0)
    assert stoprule.evaluate(rules, [], at=T0 + timedelta(hours=5)).may_start()  # exactly one hour left
    late = stoprule.evaluate(rules, [], at=T0 + timedelta(hours=5, minutes=1))
    assert not late.may_start() and late.trigger == "no_time_for_run"
    assert stoprule.evaluate(stoprule.parse_text("24 experiments, 1h each"), [], at=T0).may_start()
    assert not stoprule.evaluate(stoprule.parse_text("2 runs"), [], at=T0, in_flight=2).may_start()
    with pytest.raises(ValueError):
        stoprule.evaluate(rules, [], at=T0, in_flight=-1)


def test_reruns_in_flight_show_among_the_running_but_are_never_attempts():
    rules = stoprule.StopRules(max_experiments=8)
    line = stoprule.evaluate(rules, [], in_flight=1, repeats_running=1).line
    assert line == "stop condition not yet met: 1/8 attempted (2 running)"


# Clauses of every kind, read and unread, and the filler words a person puts around them.
CLAUSE_CORES = [
    "forever", "no time limits", "until I tell you to stop", "overnight until 8am", "till 8:30pm",
    "by 08:00", "at 7", "40 GPU-hours", "patience of 8", "8 runs without improvement",
    "failure rate above 50%", "more than 40% failures", "1h each", "5m per run", "timeout of 3m",
    "each run 10m", "6h total", "1 h 30 m", "10 experiments", "7 iterations", "by 2026-12-01T08:00",
    "val_bpb<=0.9", "loss>=1e-3", "score is above 3", "loss at most 0.1", "banana", "3 bananas", "10", "h",
]  # fmt: skip
CLAUSE_FILLERS = ["stop", "after", "run", "runs", "for", "at most", "at  most", "up to", "max", "a", "an",
                  "the", "budget", "total", "wall clock", "wall-clock", "until", "keep going", "go",
                  "no more than", "than", "TOTAL"]  # fmt: skip


def test_a_clause_is_read_as_one_regex_per_kind_with_its_fillers_would_read_it():
    """The filler words are matched apart from the clauses' patterns (compiling them into each
    pattern cost every command ~25 ms); what is read, and every group's text and place, stays what
    `(?:FILLER\\s+)*PATTERN(?:\\s+FILLER)*` finds."""
    whole = [
        (kind, re.compile(rf"(?:{stoprule._FILLER}\s+)*{pattern}(?:\s+{stoprule._FILLER})*", re.IGNORECASE))
        for kind, pattern in stoprule._CLAUSES
    ]

    def seen(read):
        if read is None:
            return None
        kind, match = read
        return kind, {name: (text, match.span(name)) for name, text in match.groupdict().items()}

    clauses = [*CLAUSE_CORES]
    for core in CLAUSE_CORES:
        clauses += [f"{filler} {core}" for filler in CLAUSE_FILLERS]
        clauses += [f"{core}  {filler}" for filler in CLAUSE_FILLERS]
    clauses += [f"{a} {b}\t{core} {c}" for a, b, c in zip(CLAUSE_FILLERS, reversed(CLAUSE_FILLERS), CLAUSE_FILLERS[3:]) for core in CLAUSE_CORES]  # fmt: skip
    for clause in clauses:
        expected = next(((kind, m) for kind, regex in whole if (m := regex.fullmatch(clause))), None)
        assert seen(stoprule._read_clause(clause)) == seen(expected), clause
