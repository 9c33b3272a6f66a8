"""Stop rules: plain-text and YAML parsing, every trigger, the one-line verdict and exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from autoresearch_skills import ledger, stoprule
from autoresearch_skills.errors import BadInput

TOOLS = Path(__file__).resolve().parents[1] / "tools"
T0 = datetime.fromisoformat("2026-03-01T22:00:00+00:00")
VERDICT = re.compile(r"^stop condition (met|not yet met): \S.*$")


def ars(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.cli", *args], capture_output=True, text=True
    )


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def make_ledger(path: Path, statuses: list[str], values: list[float] | None = None) -> Path:
    """One row per status, ten minutes apart from T0; metric 1.0 unless given."""
    ledger.init(path)
    for i, status in enumerate(statuses):
        value = values[i] if values else 1.0
        ledger.append(
            path,
            {
                "status": status,
                "metric_name": "val_bpb",
                "metric_value": value if status in ("keep", "discard") else 0.0,
                "started_at": at(10 * i),
                "ended_at": at(10 * i + 9),
            },
        )
    return path


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
}


@pytest.mark.parametrize("text", PARSED)
def test_plain_text_rules_parse_to_explicit_values(text):
    values = stoprule.parse_text(text).to_json()
    assert values["default"] is False
    for key, expected in PARSED[text].items():
        assert values[key] == expected, key
    rule_keys = {"max_experiments", "budget_seconds", "per_run_timeout_seconds", "target", "patience"}
    rule_keys |= {"max_failure_rate", "deadline"}
    assert {k for k in values if k in rule_keys} == {k for k in PARSED[text] if k in rule_keys}


def test_parse_json_gives_machine_values():
    done = ars("stop", "parse", "50 experiments or 10h total, 1h each, until val_bpb<=0.9", "--json")
    assert done.returncode == 0
    assert json.loads(done.stdout) == {
        "max_experiments": 50,
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
    assert done.stdout.splitlines() == ["max_experiments: 50", "budget: 10h total", "per_run_timeout: 1h"]


@pytest.mark.parametrize(
    ("text", "unreadable"),
    [
        ("50 experiments or banana", "'banana'"),
        ("overnight", "'overnight'"),
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
    assert code == 1
    assert line.startswith("stop condition met: deadline 2026-03-02T04:00:00+00:00 reached")


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
    assert (code, line) == (1, "stop condition met: target reached: val_bpb 0.949 < 0.95")


def test_crashed_rows_metric_of_zero_never_reaches_a_target(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "crash", "timeout"], [0.99, 0, 0])
    code, _, _ = check(path, "--stop", "until val_bpb <= 0.95", "--now", at(60))
    assert code == 0


def test_higher_is_better_target(tmp_path):
    path = make_ledger(tmp_path / "results.tsv", ["keep", "keep"], [0.70, 0.81])
    code, line, _ = check(path, "--stop", "until val_bpb >= 0.8", "--now", at(60))
    assert (code, line) == (1, "stop condition met: target reached: val_bpb 0.81 >= 0.8")


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
    assert (code, line) == (1, "stop condition met: 3/5 of the last runs failed (60% > 50%)")


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


def test_missing_ledger_means_nothing_attempted_yet(tmp_path):
    code, line, _ = check(tmp_path / "results.tsv", "--stop", "24 experiments", "--now", at(0))
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
