"""The TSV ledger: schema, locked appends from many processes, escaping, torn lines, bad input."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import warm_ars

from autoresearch_skills import ledger
from autoresearch_skills.ledger import BASE_COLUMNS, COLUMNS, Row
from autoresearch_skills.outcome import CrashCause, Status

NEMO_RL_HEADER = [
    "index", "branch", "parent_commit", "commit", "recipe", "metric_name", "metric_value", "memory_gb",
    "elapsed_min", "launcher", "job_id", "command", "log_path", "status", "description",
]  # fmt: skip
T0 = "2026-03-01T22:00:00+00:00"
T1 = "2026-03-01T22:10:00+00:00"


def ars(*args: str) -> subprocess.CompletedProcess:
    return warm_ars.run(*args)


def row(status: str = "keep", value: float = 1.0, **extra) -> dict:
    return {
        "status": status,
        "metric_name": "val_bpb",
        "metric_value": value,
        "started_at": T0,
        "ended_at": T1,
        **extra,
    }


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A ledger with a baseline, a kept improvement and a discarded attempt."""
    path = tmp_path / "results.tsv"
    ledger.init(path)
    ledger.append(path, row("keep", 1.0, description="baseline", commit="a" * 40, memory_gb=44.0))
    ledger.append(path, row("keep", 0.98, description="higher lr", commit="b" * 40, memory_gb=44.2))
    ledger.append(path, row("discard", 0.99, description="wider mlp", commit="c" * 40, memory_gb=52.5))
    return path


# ---------------------------------------------------------------- schema


def test_header_has_the_17_base_columns_with_nemo_rl_schema_first_then_the_extras(tmp_path):
    path = tmp_path / "results.tsv"
    ledger.init(path)
    header = path.read_text().split("\n")[0].split("\t")
    assert header[:15] == NEMO_RL_HEADER
    assert header[15:17] == ["started_at", "ended_at"]
    assert tuple(header[17:]) == ledger.EXTRA_COLUMNS
    assert ledger.STATUSES == ("keep", "discard", "crash", "timeout", "cancelled")


def test_init_leaves_an_existing_ledger_untouched(results):
    before = results.read_bytes()
    done = ars("ledger", "init", str(results))
    assert done.returncode == 0
    assert "already exists" in done.stdout
    assert results.read_bytes() == before


def test_append_numbers_rows_from_zero_and_fills_nemo_rl_defaults(tmp_path):
    path = tmp_path / "results.tsv"  # append creates the ledger when it is missing
    first = ledger.append(path, {"status": "keep", "metric_value": 0.9979, "metric_name": "val_bpb"})
    crash = ledger.append(path, {"status": "crash", "description": "OOM at step 3"})
    assert (first.index, crash.index) == (0, 1)
    line = path.read_text().split("\n")[2].split("\t")
    fields = dict(zip(COLUMNS, line))
    assert fields["metric_value"] == "0.000000"
    assert fields["memory_gb"] == "0.0"
    assert fields["job_id"] == "none"
    assert fields["started_at"][-6] in "+-"  # ISO 8601 with a UTC offset
    assert [r.index for r in ledger.read(path)] == [0, 1]


def test_every_status_is_accepted(tmp_path):
    path = tmp_path / "results.tsv"
    for status in ledger.STATUSES:
        ledger.append(path, row(status))
    assert [r.status for r in ledger.read(path)] == list(ledger.STATUSES)


def test_a_crash_row_carries_its_cause_and_reason_in_columns_of_their_own(tmp_path):
    path = tmp_path / "results.tsv"
    written = ledger.append(
        path,
        row("crash", 0.0, description="LR 0.02", cause="exit_code", reason="exit code 1; WIDTH must be even"),
    )
    back = ledger.read(path)[0]
    assert (back.status, back.cause, back.reason) == (Status.CRASH, CrashCause.EXIT_CODE, written.reason)
    assert back.description == "LR 0.02" and back.text() == "LR 0.02 [crash: exit code 1; WIDTH must be even]"
    fields = dict(zip(COLUMNS, path.read_text().split("\n")[1].split("\t")))
    assert (fields["cause"], fields["mode"]) == ("exit_code", "")
    assert ars("ledger", "show", str(path)).stdout.splitlines()[1].endswith(back.text())
    refused = ars("ledger", "append", str(path), "--status", "crash", "--cause", "gremlins")
    assert refused.returncode == 2 and "'gremlins' is not one of" in refused.stderr


# What the release before the `cause`, `reason` and `mode` columns wrote: 29 columns, the reason, the
# rerun and a hybrid switch said in the description.
OLDER_ROWS = [
    ("keep", 1.0, "", "baseline"),
    ("crash", 0.0, "", "LR 0.02 [crash: exit code 1; ValueError: WIDTH [64] must be even]"),
    ("cancelled", 0.0, "", "LR 0.05 [cancelled: no first step in 20m (waited for 'step')]"),
    ("crash", 0.0, "", "deep [crash: NaN loss at step 410]"),
    ("timeout", 0.0, "", "wide [timeout: killed at the 10m limit]"),
    ("crash", 0.0, "", "big [crash: runner died (the supervisor died before the command ended)]"),
    ("cancelled", 0.0, "", "odd [cancelled: stop (median): best so far 1.3 at step 40 is worse]"),
    ("discard", 1.1, "", "[hybrid: diffs after 4 runs without improvement] a wider model"),
    ("keep", 1.0, "0", "rerun of #0: baseline"),
    ("keep", 0.9, "", "warmup [keep: flat result, simpler code]"),
    ("cancelled", 0.0, "", "slow [cancelled: superseded by deeper]"),
]


def older_ledger(path: Path) -> Path:
    lines = ["\t".join(ledger.BEFORE_CAUSE)]
    for n, (status, value, rerun_of, description) in enumerate(OLDER_ROWS):
        values = {**dict.fromkeys(ledger.BEFORE_CAUSE, ""), "index": str(n), "metric_value": f"{value:.6f}",
                  "memory_gb": "0.0", "elapsed_min": "1.00", "job_id": "none", "status": status,
                  "description": description, "rerun_of": rerun_of, "started_at": T0, "ended_at": T1}  # fmt: skip
        lines.append("\t".join(values[c] for c in ledger.BEFORE_CAUSE))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_rows_of_the_previous_release_are_read_with_their_causes_reasons_and_modes(tmp_path):
    rows = ledger.read(older_ledger(tmp_path / "results.tsv"))
    assert [r.cause for r in rows] == [
        None, CrashCause.EXIT_CODE, CrashCause.FIRST_STEP_TIMEOUT, CrashCause.NAN, CrashCause.TIMEOUT,
        CrashCause.RUNNER_DIED, CrashCause.PRUNED, None, None, None, CrashCause.CANCELLED,
    ]  # fmt: skip
    assert [r.description for r in rows] == [
        "baseline", "LR 0.02", "LR 0.05", "deep", "wide", "big", "odd",
        "[hybrid: diffs after 4 runs without improvement] a wider model", "baseline", "warmup", "slow",
    ]  # fmt: skip
    assert rows[1].reason == "exit code 1; ValueError: WIDTH [64] must be even"  # brackets of its own kept
    assert rows[9].reason == "flat result, simpler code"
    assert [r.mode for r in rows] == ["", "", "", "", "", "", "", "diff", "", "", ""]
    assert [r.text() for r in rows] == [d for *_, d in OLDER_ROWS]  # as people always read them


def test_a_row_appended_to_a_ledger_of_the_previous_release_says_its_reason_as_that_release_did(tmp_path):
    path = older_ledger(tmp_path / "results.tsv")
    ledger.append(
        path, row("crash", 0.0, description="tiny", cause="oom", reason="CUDA out of memory: x", rerun_of="3")
    )
    last = path.read_text().splitlines()[-1].split("\t")
    assert len(last) == len(ledger.BEFORE_CAUSE)  # the ledger keeps its own columns
    assert (
        last[ledger.BEFORE_CAUSE.index("description")] == "rerun of #3: tiny [crash: CUDA out of memory: x]"
    )
    back = ledger.read(path)[-1]
    assert (back.description, back.reason, back.cause) == ("tiny", "CUDA out of memory: x", CrashCause.OOM)


# ---------------------------------------------------------------- concurrency

_WORKER = """
import sys
from autoresearch_skills import ledger
path, worker, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(count):
    ledger.append(path, {
        "status": "keep", "metric_name": "val_bpb", "metric_value": worker + i / 1000,
        "description": f"w{worker}-r{i}\\tpadding " + "x" * (i * 37 % 500),
        "command": "python train.py\\n--lr 0.04", "started_at": "2026-03-01T22:00:00+00:00",
        "ended_at": "2026-03-01T22:10:00+00:00",
    })
"""


def test_eight_processes_appending_at_once_lose_and_interleave_no_row(tmp_path):
    path = tmp_path / "results.tsv"
    ledger.init(path)
    per_worker = 40
    workers = [
        subprocess.Popen([sys.executable, "-c", _WORKER, str(path), str(w), str(per_worker)])
        for w in range(8)
    ]
    assert [w.wait(timeout=100) for w in workers] == [0] * 8

    rows = ledger.read(path)  # raises on any interleaved or partial line
    assert len(rows) == 8 * per_worker
    assert sorted(r.index for r in rows) == list(range(8 * per_worker))
    assert [r.index for r in rows] == list(range(8 * per_worker))  # written in index order
    seen = [r.description.split("\t")[0] for r in rows]
    assert sorted(seen) == sorted(f"w{w}-r{i}" for w in range(8) for i in range(per_worker))
    for w in range(8):  # each writer's rows keep their order
        assert [s for s in seen if s.startswith(f"w{w}-")] == [f"w{w}-r{i}" for i in range(per_worker)]
    assert all(line.count("\t") == len(COLUMNS) - 1 for line in path.read_text().splitlines())
    assert not Path(str(path) + ".torn").exists()


# ---------------------------------------------------------------- escaping

TRICKY = [
    "tab\there",
    "two\nlines",
    "windows\r\nline end",
    "back\\slash",
    "literal backslash-t \\t and backslash-n \\n",
    "ends with a backslash \\",
    "\\\\ double",
    '"quoted" and, commas',
    "ünïcødé → ok",
    "",
]


@pytest.mark.parametrize("text", TRICKY)
def test_fields_with_tabs_newlines_backslashes_round_trip_exactly(tmp_path, text):
    path = tmp_path / "results.tsv"
    ledger.append(path, row(description=text, command=text, branch=text))
    assert len(path.read_text().splitlines()) == 2  # one physical line per row
    back = ledger.read(path)[0]
    assert (back.description, back.command, back.branch) == (text, text, text)


def test_escaped_fields_round_trip_through_the_command_line(tmp_path):
    path = tmp_path / "results.tsv"
    text = "a\tb\nc\\d\re \\n"
    done = ars("ledger", "append", str(path), "--status", "keep", "--description", text)
    assert done.returncode == 0, done.stderr
    via_json = ars("ledger", "append", str(path), "--json", json.dumps({"status": "keep", "command": text}))
    assert via_json.returncode == 0, via_json.stderr
    shown = json.loads(ars("ledger", "show", str(path), "--json").stdout)
    assert shown[0]["description"] == text
    assert shown[1]["command"] == text
    table = ars("ledger", "show", str(path)).stdout
    assert len(table.splitlines()) == 3  # header + two rows, whatever the fields hold


# ---------------------------------------------------------------- torn lines


@pytest.mark.parametrize("keep_chars", [1, 40, -80])
def test_torn_last_line_is_ignored_then_moved_aside_by_the_next_append(results, keep_chars):
    complete = results.read_bytes()
    ledger.append(results, row("keep", 0.5, description="this run's row gets torn " + "z" * 60))
    full = results.read_bytes()
    torn_line = full[len(complete) :]
    cut = keep_chars if keep_chars > 0 else len(torn_line) + keep_chars
    results.write_bytes(complete + torn_line[:cut])  # a writer crashed mid-line

    assert [r.description for r in ledger.read(results)] == ["baseline", "higher lr", "wider mlp"]
    shown = ars("ledger", "show", str(results))
    assert shown.returncode == 0 and len(shown.stdout.splitlines()) == 4

    after = ledger.append(results, row("discard", 1.1, description="next"))
    data = results.read_bytes()
    assert data.startswith(complete)  # no valid row rewritten
    assert after.index == 3
    assert [r.description for r in ledger.read(results)][-1] == "next"
    assert Path(str(results) + ".torn").read_bytes() == torn_line[:cut] + b"\n"


def test_complete_last_row_without_newline_is_kept(results):
    results.write_bytes(results.read_bytes().rstrip(b"\n"))  # e.g. saved by an editor
    assert [r.description for r in ledger.read(results)][-1] == "wider mlp"
    before = results.read_bytes()
    added = ledger.append(results, row("keep", 0.97, description="after"))
    assert added.index == 3
    assert results.read_bytes().startswith(before + b"\n")
    assert [r.description for r in ledger.read(results)] == ["baseline", "higher lr", "wider mlp", "after"]
    assert not Path(str(results) + ".torn").exists()


def test_header_without_newline_gets_its_newline_not_moved_aside(tmp_path):
    path = tmp_path / "results.tsv"
    path.write_text("\t".join(COLUMNS))
    assert ledger.read(path) == []
    ledger.append(path, row(description="first"))
    assert path.read_text().split("\n")[0] == "\t".join(COLUMNS)
    assert [(r.index, r.description) for r in ledger.read(path)] == [(0, "first")]
    assert not Path(str(path) + ".torn").exists()


def test_blank_lines_are_skipped_and_not_counted(results):
    with results.open("a") as handle:
        handle.write("\n\n  \n")
    added = ledger.append(results, row(description="after blanks"))
    assert added.index == 3
    assert [r.index for r in ledger.read(results)] == [0, 1, 2, 3]


# ---------------------------------------------------------------- bad input

GOOD = "\t".join(["0", "b", "p", "c", "r", "val_bpb", "0.990000", "1.0", "2.00", "local", "none"])
GOOD += "\t" + "\t".join(["cmd", "log", "keep", "desc", T0, T1])


def _broken(field: str, value: str) -> str:
    parts = GOOD.split("\t")
    parts[BASE_COLUMNS.index(field)] = value
    return "\t".join(parts)


BROKEN_ROWS = {
    "wrong column count": "0\tb\tc",
    "unknown status": _broken("status", "success"),
    "non-numeric metric": _broken("metric_value", "0.9x"),
    "NaN metric": _broken("metric_value", "nan"),
    "bad timestamp": _broken("started_at", "yesterday evening"),
    "non-integer index": _broken("index", "first"),
}


@pytest.mark.parametrize("problem", BROKEN_ROWS)
def test_broken_row_is_one_error_line_naming_file_and_line(tmp_path, problem):
    path = tmp_path / "results.tsv"
    path.write_text("\t".join(BASE_COLUMNS) + "\n" + GOOD + "\n" + BROKEN_ROWS[problem] + "\n" + GOOD + "\n")
    before = path.read_bytes()
    for args in (["show"], ["best", "-d", "min"], ["export", "-f", "csv"], ["append"]):
        extra = ["--status", "keep"] if args == ["append"] else []
        done = ars("ledger", args[0], str(path), *args[1:], *extra)
        assert done.returncode == 2, (args, done.stdout)
        assert len(done.stderr.splitlines()) == 1, done.stderr
        assert done.stderr.startswith("Error: ")
        assert f"{path} line 3" in done.stderr
        assert "Traceback" not in done.stderr
    assert path.read_bytes() == before


def test_a_file_that_is_not_a_ledger_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "notes.tsv"
    path.write_text("name\tscore\nalice\t3\n")
    before = path.read_bytes()
    for args in (["show"], ["append", "--status", "keep"], ["init"], ["export", "-f", "karpathy"]):
        done = ars("ledger", args[0], str(path), *args[1:])
        assert done.returncode == 2
        assert len(done.stderr.splitlines()) == 1
        assert f"{path} line 1 is not a ledger header" in done.stderr
    assert path.read_bytes() == before


BAD_APPENDS = {
    "unknown status": ["--json", '{"status": "success"}'],
    "non-numeric metric": ["--status", "keep", "--metric-value", "good"],
    "NaN metric": ["--status", "keep", "--metric-value", "nan"],
    "infinite memory": ["--status", "keep", "--memory-gb", "inf"],
    "bad timestamp": ["--status", "keep", "--started-at", "last tuesday"],
    "unknown --json key": ["--json", '{"status": "keep", "val_bpb": 0.9}'],
    "invalid --json": ["--json", '{"status": keep}'],
    "--json not an object": ["--json", '["keep"]'],
}


@pytest.mark.parametrize("problem", BAD_APPENDS)
def test_bad_append_is_one_error_line_and_writes_nothing(results, problem):
    before = results.read_bytes()
    done = ars("ledger", "append", str(results), *BAD_APPENDS[problem])
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(f"Error: {results}: ")
    assert results.read_bytes() == before
    assert done.stdout == ""


def test_status_flag_outside_the_five_statuses_is_a_usage_error(results):
    before = results.read_bytes()
    done = ars("ledger", "append", str(results), "--status", "success")
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert "keep" in done.stderr and "cancelled" in done.stderr
    assert results.read_bytes() == before


def test_bad_row_through_the_api_leaves_the_file_unchanged(results):
    before = results.read_bytes()
    with pytest.raises(ledger.LedgerError, match="metric_value"):
        ledger.append(results, row(value=float("nan")))
    with pytest.raises(ledger.LedgerError, match="status"):
        ledger.append(results, Row(status="won"))
    assert results.read_bytes() == before


# ---------------------------------------------------------------- NeMo-RL ledgers


def test_nemo_rl_15_column_ledger_is_readable_and_appendable(tmp_path):
    path = tmp_path / "results.tsv"
    baseline = "0\tautoresearch/x/baseline\tabc\tdef\tgrpo-1b\taccuracy\t0.700000\t10.0\t5.00\tslurm\t123"
    baseline += "\tuv run train.py\tlogs/0.log\tkeep\tbaseline"
    path.write_text("\t".join(NEMO_RL_HEADER) + "\n" + baseline + "\n")
    rows = ledger.read(path)
    assert (rows[0].job_id, rows[0].metric_value, rows[0].started_at) == ("123", 0.7, "")

    done = ars(
        "ledger", "append", str(path), "--status", "keep", "--metric-name", "accuracy",
        "--metric-value", "0.74", "--description", "more rollouts",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = path.read_text().splitlines()
    assert lines[0].split("\t") == NEMO_RL_HEADER  # its own readers keep working
    assert [len(line.split("\t")) for line in lines] == [15, 15, 15]
    assert lines[2].split("\t")[0] == "1"
    best = json.loads(ars("ledger", "best", str(path), "-d", "max", "--json").stdout)
    assert (best["index"], best["metric_value"]) == (1, 0.74)


# ---------------------------------------------------------------- show, best, export


def test_show_filters_by_status(results):
    ledger.append(results, row("crash", 0.0, description="oom"))
    done = ars("ledger", "show", str(results), "--status", "discard", "--status", "crash", "--json")
    assert [r["description"] for r in json.loads(done.stdout)] == ["wider mlp", "oom"]
    table = ars("ledger", "show", str(results), "--status", "keep").stdout.splitlines()
    assert table[0].split()[:3] == ["index", "status", "metric"]
    assert [line.split()[1] for line in table[1:]] == ["keep", "keep"]


def test_show_marks_a_warning_but_not_the_rule_that_decided(results):
    ledger.append(results, row("keep", 0.97, description="screened keep", flags="screened"))
    ledger.append(
        results, row("discard", 1.2, description="slow", flags="screened; not comparable: steps 4 vs 8")
    )
    lines = ars("ledger", "show", str(results)).stdout.splitlines()
    assert lines[-2].endswith("screened keep  (screened)")
    assert lines[-1].endswith("slow  (screened)  (! not comparable: steps 4 vs 8)")


def test_best_picks_the_best_kept_row_by_direction(results):
    ledger.append(results, row("crash", 0.0, description="crash rows write 0.000000"))
    lowest = ars("ledger", "best", str(results), "--direction", "min")
    assert lowest.returncode == 0
    assert "best: val_bpb 0.980000" in lowest.stdout
    assert "description: higher lr" in lowest.stdout
    highest = json.loads(ars("ledger", "best", str(results), "-d", "max", "--json").stdout)
    assert (highest["index"], highest["description"]) == (0, "baseline")


def test_best_exits_1_when_nothing_is_kept_yet(tmp_path):
    path = tmp_path / "results.tsv"
    ledger.append(path, row("crash", 0.0))
    done = ars("ledger", "best", str(path), "-d", "min")
    assert done.returncode == 1
    assert "no kept row" in done.stderr


def test_karpathy_export_has_its_five_columns(results):
    ledger.append(results, row("timeout", 0.0, commit="d" * 40, description="slow\tone"))
    done = ars("ledger", "export", str(results), "--format", "karpathy")
    lines = done.stdout.splitlines()
    assert lines[0].split("\t") == ["commit", "val_bpb", "memory_gb", "status", "description"]
    assert all(len(line.split("\t")) == 5 for line in lines)
    assert lines[1].split("\t") == ["aaaaaaa", "1.000000", "44.0", "keep", "baseline"]
    assert lines[3].split("\t") == ["ccccccc", "0.990000", "52.5", "discard", "wider mlp"]
    assert lines[4].split("\t") == ["ddddddd", "0.000000", "0.0", "crash", "slow\\tone"]


def test_csv_and_json_exports_carry_every_column(results, tmp_path):
    out = tmp_path / "results.csv"
    assert ars("ledger", "export", str(results), "-f", "csv", "-o", str(out)).returncode == 0
    table = list(csv.reader(io.StringIO(out.read_text())))
    assert tuple(table[0]) == COLUMNS
    assert [line[COLUMNS.index("description")] for line in table[1:]] == [
        "baseline",
        "higher lr",
        "wider mlp",
    ]
    rows = json.loads(ars("ledger", "export", str(results), "-f", "json").stdout)
    assert list(rows[0]) == list(COLUMNS)
    assert rows[2]["memory_gb"] == 52.5


def test_documented_pandas_recipes_read_a_tricky_ledger(tmp_path):
    pd = pytest.importorskip("pandas")
    path = tmp_path / "results.tsv"
    ledger.append(path, row(description='"quoted" start', commit="1234567", job_id="007"))
    ledger.append(path, row(description="NA", commit="1e45678"))
    ledger.append(path, row(description="tab\there"))

    # references/ledger-format.md, "Reading it from Python": the read_csv recipe
    frame = pd.read_csv(path, sep="\t", quoting=csv.QUOTE_NONE, dtype=str, keep_default_na=False)
    for column in ("metric_value", "memory_gb", "elapsed_min"):
        frame[column] = frame[column].astype(float)
    frame["index"] = frame["index"].astype(int)
    assert list(frame.columns) == list(COLUMNS)
    assert list(frame["description"]) == ['"quoted" start', "NA", "tab\\there"]  # still escaped
    assert list(frame["commit"]) == ["1234567", "1e45678", ""]
    assert frame["job_id"][0] == "007"
    assert list(frame["index"]) == [0, 1, 2]

    with path.open("a") as handle:
        handle.write("3\tautoresearch/torn")  # a crashed writer's last line
    # the documented caveat: read_csv keeps the torn line as a short row
    assert len(pd.read_csv(path, sep="\t", quoting=csv.QUOTE_NONE, dtype=str, keep_default_na=False)) == 4
    # the recommended route ignores it
    frame = pd.DataFrame([r.to_dict() for r in ledger.read(path)])
    assert list(frame["description"]) == ['"quoted" start', "NA", "tab\there"]
    assert list(frame["commit"]) == ["1234567", "1e45678", ""]
    assert frame["metric_value"].dtype == float


def test_a_ledger_with_the_17_base_columns_reads_and_appends_in_its_own_columns(tmp_path):
    path = tmp_path / "results.tsv"
    path.write_text("\t".join(BASE_COLUMNS) + "\n" + GOOD + "\n")
    row = ledger.append(path, {"status": "keep", "metric_value": 0.5, "gpus": "2", "rerun_of": "0"})
    assert row.index == 1
    lines = path.read_text().splitlines()
    assert lines[0] == "\t".join(BASE_COLUMNS)
    assert all(line.count("\t") == 16 for line in lines)
    assert [r.metric_value for r in ledger.read(path)] == [0.99, 0.5]


def test_extra_columns_round_trip_and_read_as_numbers(tmp_path):
    path = tmp_path / "results.tsv"
    ledger.append(
        path, {"status": "keep", "metric_value": 0.9, "sigma": "0.008", "runs": "2", "flags": "a,b"}
    )
    (read,) = ledger.read(path)
    assert (read.sigma, read.runs, read.flags) == ("0.008", "2", "a,b")
    assert read.number("sigma") == 0.008
    assert read.number("margin_sigma") is None
