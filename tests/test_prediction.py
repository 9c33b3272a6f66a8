"""`--predict`: one parser for a signed change of the metric, with or without its name, absolute or
relative; what it stores reads back, as do the predictions older releases wrote; anything else is
refused with one line whose examples are accepted."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from repo_helpers import ars, git, make_repo

from autoresearch_skills import ledger
from autoresearch_skills.campaign import prediction
from autoresearch_skills.errors import EXIT_BAD_INPUT, BadInput


@pytest.mark.parametrize(
    ("given", "metric", "stored", "change", "relative"),
    [
        ("val loss -0.15", "val loss", "val loss -0.15", -0.15, False),  # a name with a space
        ("-0.15", "val loss", "val loss -0.15", -0.15, False),
        ("-2%", "val loss", "val loss -2%", -2.0, True),
        ("val_loss -0.15", "val loss", "val loss -0.15", -0.15, False),  # underscore for a space
        ("val loss: +2 %", "val loss", "val loss +2%", 2.0, True),
        ("val_bpb -1e-3", "val_bpb", "val_bpb -1e-3", -0.001, False),
        ("validation/accuracy +.5", "validation/accuracy", "validation/accuracy +.5", 0.5, False),
        ("top-1 acc +1%", "top-1 acc", "top-1 acc +1%", 1.0, True),
    ],
)
def test_a_signed_change_is_stored_as_its_own_reader_reads_it(given, metric, stored, change, relative):
    parsed = prediction.parse(given, metric)
    assert parsed.text == stored
    again = prediction.read(parsed.text)
    assert again is not None and (again.change, again.relative) == (pytest.approx(change), relative)
    assert prediction.parse(stored, metric).text == stored  # the stored form is itself accepted


@pytest.mark.parametrize(
    ("given", "metric"),
    [
        ("better", "val_bpb"),
        ("0.1", "val_bpb"),  # no sign: no direction to judge
        ("-0", "val_bpb"),
        ("loss -0.1", "val loss"),  # another metric's name
        ("val_bpb -0.1 nats", "val_bpb"),
        ("val_bpb-0.1", "val_bpb"),
    ],
)
def test_anything_else_is_refused_in_one_line_whose_examples_are_accepted(given, metric):
    with pytest.raises(BadInput) as refused:
        prediction.parse(given, metric)
    message = refused.value.message
    assert refused.value.exit_code == EXIT_BAD_INPUT and "\n" not in message
    assert message.startswith(f"--predict {given!r}")
    examples = re.findall(r'"([^"]+)"', message)
    assert len(examples) == 3
    for example in examples:
        assert prediction.parse(example, metric).text.startswith(metric)


@pytest.mark.parametrize(
    ("text", "change", "relative"),
    [("val_bpb -0.01", -0.01, False), ("-1%", -1.0, True), ("val loss +0.05", 0.05, False)],
)
def test_predictions_older_releases_wrote_still_read(text, change, relative):
    found = prediction.read(text)
    assert found is not None and (found.change, found.relative, found.text) == (
        pytest.approx(change),
        relative,
        text,
    )


def test_a_sentence_is_not_a_prediction_the_report_can_judge():
    assert prediction.read("+2 points of task_pass_rate@1 by step 200") is None
    assert prediction.read("") is None


# A target that prints its metric under a name with a space, each run's value from a queue file.
TRAIN = """\
import fcntl, os
with open(os.environ["VALUES"], "r+") as queue:
    fcntl.flock(queue, fcntl.LOCK_EX)
    values = queue.read().split()
    queue.seek(0); queue.truncate(); queue.write("\\n".join(values[1:]))
print(f"val loss: {float(values[0]):.6f}")
"""


def test_ars_exp_start_predict_with_a_spaced_metric_is_stored_and_judged(tmp_path: Path):
    repo = make_repo(tmp_path / "project", {"train.py": TRAIN})
    dice = tmp_path / "values.txt"
    dice.write_text("1.00 0.80 0.70")
    env = {"VALUES": str(dice)}
    ars(repo, "campaign", "init", "sp", "--metric", "val loss", "--direction", "min", "--baseline-repeats", "1",
        "--command", f"{sys.executable} train.py", "--stop", "10 experiments, 1m each", env=env)  # fmt: skip
    ars(repo, "exp", "baseline", env=env)
    refused = ars(repo, "exp", "start", "x", "-m", "m", "--predict", "val loss lower", env=env, code=2)
    assert len(refused.stderr.strip().splitlines()) == 1
    assert (
        'give the expected change of val loss with its sign: "val loss -0.01", "-0.01" or "-2%"'
        in refused.stderr
    )
    assert git(repo, "branch", "--list", "*/x") == ""  # refused before anything was opened
    for slug, predict in (("named", "val loss -0.15"), ("bare", "-2%")):
        started = ars(repo, "exp", "start", slug, "-m", f"idea {slug}", "--predict", predict, env=env).stdout
        workdir = Path(started.split("workdir: ", 1)[1].splitlines()[0])
        (workdir / "train.py").write_text(TRAIN + f"# {slug}\n")
        ars(repo, "exp", "run", env=env)
    results = repo / "reports/auto_research/sp/results.tsv"
    assert [r.prediction for r in ledger.read(results)] == ["", "val loss -0.15", "val loss -2%"]
    ars(repo, "report", env=env)
    predicted = (repo / "reports/auto_research/sp/report.md").read_text().split("## Predictions\n", 1)[1]
    assert "The predicted sign was right 2 of 2 times (100%)." in predicted
    assert "not a signed number" not in predicted
    assert "| 1 | `named` | val loss -0.15 | -0.200000 vs #0 | right |" in predicted
