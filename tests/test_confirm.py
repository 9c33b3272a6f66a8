"""Confirmation at a larger scale (`confirm:`): real campaigns in a temporary git repository with a
tiny deterministic train.py whose `SCALE` knob stands for the full run (a bigger model, a longer
budget), and what a user reads afterwards: the closing lines, `ars campaign status`, the report, the
ledger, the branches. Plus the rows themselves: a confirmation run never becomes the best nor moves a
keep decision, whichever rule decides.

At scale every value is lower than on the proxy (a bigger model learns more), so a confirmation row
that entered the best would take it at once; and `WIDE` gains more at scale than `LR` does, so the
order of the two changes at scale.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, git, make_repo

from autoresearch_skills import ledger, stoprule
from autoresearch_skills.campaign import confirmation, keeprule, noise, screening
from autoresearch_skills.campaign.settings import Settings
from autoresearch_skills.yamlfile import read_yaml

TRAIN = """\
LR = 0.01
WIDE = False
HUGE = False
SCALE = 1
if HUGE and SCALE > 1:
    raise SystemExit("out of memory at scale")
lr_term = 10 * abs(LR - 0.03)
if SCALE == 1:
    value = 1.0 + lr_term - (0.05 if WIDE else 0.0) - (0.2 if HUGE else 0.0)
else:
    value = 0.5 + lr_term / 4 - (0.1 if WIDE else 0.0)
print(f"val_bpb: {value:.6f}")
"""
PREFIX = "autoresearch/t-cf"
QUEUE = [
    {"slug": "wide", "description": "wider MLP", "set": {"WIDE": True}},
    {"slug": "lr-2", "description": "LR 0.01 -> 0.02", "set": {"LR": 0.02}},
]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project", {"train.py": TRAIN, "program.md": "Lower val_bpb.\n"})


def folder(repo: Path) -> Path:
    return repo / "reports" / "auto_research" / "cf"


def write_campaign(repo: Path, **extra) -> None:
    config = {
        "name": "cf", "metric": "val_bpb", "direction": "min", "command": f"{sys.executable} train.py",
        "launcher": "local", "stop": "3 experiments", "prefix": PREFIX, "keep_rule": "noise",
        "baseline_repeats": 1, "confirm": {"set": {"SCALE": 4}, "top": 2},
        "policy": {"kind": "queue", "parent": "baseline", "mutable": ["train.py"], "queue": QUEUE},
        **extra,
    }  # fmt: skip
    (repo / "campaign.yaml").write_text(yaml.safe_dump(config))


def by_name(rows: list[ledger.Row]) -> dict[str, ledger.Row]:
    return {Path(r.branch).name: r for r in rows}


SIDE_BY_SIDE = [
    "confirmed at scale: baseline proxy 1.2, at scale 0.55",
    "confirmed at scale: lr-2 proxy -8.3% (1.1 vs 1.2), at scale -4.5% (0.525 vs 0.55)",
    "confirmed at scale: wide proxy -4.2% (1.15 vs 1.2), at scale -18.2% (0.45 vs 0.55)",
    "order changed at scale: wide beats lr-2",
]


def test_a_confirm_campaign_shows_proxy_and_confirmed_gains_side_by_side(repo: Path):
    write_campaign(repo, parallel=2)  # two at once: each confirmation takes a free slot
    done = ars(repo, "campaign", "run", "campaign.yaml")
    out = done.stdout.splitlines()
    # the closing lines: the proxy's gain beside the gain at scale, each against its own baseline
    assert out[out.index(SIDE_BY_SIDE[0]) : out.index(SIDE_BY_SIDE[0]) + 4] == SIDE_BY_SIDE
    assert out[-1] == "stop condition met: 3/3 attempted (+3 at scale)"  # runs, not experiments
    started = [line for line in out if line.startswith("confirm: ") and " at scale: started " in line]
    assert [line.split()[1] for line in started] == ["baseline", "lr-2", "wide"]  # the best first

    rows = ledger.read(folder(repo) / "results.tsv")
    named = by_name(rows)
    confirming = [r for r in rows if r.is_confirmation]
    assert [(Path(r.branch).name, r.confirms, r.status, r.metric_value) for r in confirming] == [
        ("confirm-baseline", "0", "discard", 0.55),
        ("confirm-lr-2", str(named["lr-2"].index), "discard", 0.525),
        ("confirm-wide", str(named["wide"].index), "discard", 0.45),
    ]
    # far better than every proxy value, and still not the best
    assert noise.best(rows, "min").branch == f"{PREFIX}/lr-2"
    # each one a commit of its own on its own branch, grown from the result it confirms, with the knob set
    wide = named["confirm-wide"]
    assert wide.parent_commit == named["wide"].commit != wide.commit
    assert "SCALE = 4\n" in git(repo, "show", f"{PREFIX}/confirm-wide:train.py") + "\n"
    assert "WIDE = True" in git(repo, "show", f"{PREFIX}/confirm-wide:train.py")
    assert wide.knob_values() == {"SCALE": 4}
    # the user's checkout is untouched
    assert (repo / "train.py").read_text() == TRAIN and git(
        repo, "status", "--porcelain"
    ) == "?? campaign.yaml"

    status = ars(repo, "campaign", "status", code=1).stdout.splitlines()
    assert status[status.index(SIDE_BY_SIDE[0]) : status.index(SIDE_BY_SIDE[0]) + 4] == SIDE_BY_SIDE
    facts = json.loads(ars(repo, "campaign", "status", "--json", code=1).stdout)
    assert facts["confirmed"]["lines"] == SIDE_BY_SIDE
    assert facts["confirmed"]["order_changes"] == [["wide", "lr-2"]]
    assert facts["best"].startswith(f"#{named['lr-2'].index} keep val_bpb 1.100000")

    ars(repo, "report")
    report = (folder(repo) / "report.md").read_text()
    section = report.split("## Confirmed at a larger scale\n")[1].split("\n## ")[0]
    assert [line[2:] for line in section.splitlines() if line.startswith("- ")] == SIDE_BY_SIDE
    assert "| confirms #0 at scale |" in report
    assert "order changed at scale: wide beats lr-2" in (folder(repo) / "report.html").read_text()

    # the branch handed to the user says what the larger scale showed
    ars(repo, "campaign", "finish", "--branch", "scale-result")
    message = git(repo, "log", "-1", "--format=%B", "scale-result").splitlines()
    assert [
        line for line in message if line.startswith(("confirmed at scale:", "order changed"))
    ] == SIDE_BY_SIDE


def test_a_confirmation_that_crashes_is_shown_as_a_crash_on_the_agent_path(repo: Path):
    ars(repo, "campaign", "init", "cf", "--metric", "val_bpb", "--direction", "min", "--command",
        f"{sys.executable} train.py", "--stop", "4 experiments", "--prefix", PREFIX, "--baseline-repeats", "1",
        "--keep-rule", "noise")  # fmt: skip
    ars(repo, "exp", "baseline")
    out = ars(repo, "exp", "start", "huge", "-m", "a huge model").stdout
    workdir = Path(out.split("workdir: ")[1].splitlines()[0])
    (workdir / "train.py").write_text(TRAIN.replace("HUGE = False", "HUGE = True"))
    ars(repo, "exp", "run", "huge")
    refused = ars(repo, "campaign", "confirm", code=2)  # as a person reads it: what to add, and where
    assert (
        refused.stderr.startswith("Error: campaign cf has no `confirm:` in ")
        and refused.stderr.count("\n") == 1
    )
    settings = folder(repo) / "campaign.yaml"  # as a person edits it
    data = read_yaml(settings)
    settings.write_text(yaml.safe_dump({**data, "confirm": {"set": {"SCALE": 4}}, "mutable": ["train.py"]}))

    done = ars(repo, "campaign", "confirm", "--top", "1", "--json")
    facts = json.loads(done.stdout)
    assert facts["lines"][:2] == [
        "confirmed at scale: baseline proxy 1.2, at scale 0.55",
        "confirmed at scale: huge proxy -16.7% (1 vs 1.2), at scale: crash (#3, exit code 1; out of memory at scale)",
    ]
    assert facts["exit_code"] == 0 and len(facts["rows"]) == 2
    assert "confirm: #3 confirm-huge: crash (exit code 1; out of memory at scale)" in done.stderr
    rows = ledger.read(folder(repo) / "results.tsv")
    assert [(Path(r.branch).name, r.status) for r in rows[2:]] == [
        ("confirm-baseline", "discard"),
        ("confirm-huge", "crash"),
    ]
    assert noise.best(rows, "min").branch == f"{PREFIX}/huge"

    again = ars(repo, "campaign", "confirm", "--top", "1").stdout  # the baseline is not run again
    assert "confirm: already confirmed at scale: baseline (#2)" in again
    assert "confirm: huge at scale: started confirm-huge-2" in again
    ars(repo, "exp", "rerun", "confirm-baseline")  # a rerun of a run at scale is one too
    rerun = ledger.read(folder(repo) / "results.tsv")[-1]
    assert (rerun.rerun_of, rerun.confirms, rerun.status) == ("2", "0", "discard")
    assert noise.best(ledger.read(folder(repo) / "results.tsv"), "min").branch == f"{PREFIX}/huge"


def test_with_no_time_left_before_the_deadline_nothing_starts_and_the_campaign_says_so(repo: Path):
    write_campaign(repo, stop="3 experiments or 1h total", confirm={"set": {"SCALE": 4}, "timeout": "2h"})
    out = ars(repo, "campaign", "run", "campaign.yaml").stdout
    said = next(line for line in out.splitlines() if line.startswith("confirm: not started: "))
    assert said.startswith("confirm: not started: baseline: no time left (59m")
    assert "left before the deadline, a run at scale may take 2h); lr-2: no time left (" in said
    assert said.endswith(", a run at scale may take 2h)") and "; wide: no time left (" in said
    assert not any(r.is_confirmation for r in ledger.read(folder(repo) / "results.tsv"))
    assert not git(repo, "branch", "--list", f"{PREFIX}/confirm-*")
    again = ars(repo, "campaign", "confirm", code=1)
    assert "confirm: not started: baseline: no time left (" in again.stdout


@pytest.mark.parametrize(
    ("confirm", "said"),
    [
        ({"set": {"SCALE": 4}, "top": 0}, "`confirm.top` must be an integer >= 1: how many results besides the baseline (got 0)"),
        ({"sets": {"SCALE": 4}}, "`confirm` has unknown key(s) sets; it takes set, args, top, command, timeout"),
        ({"top": 2}, "`confirm` needs `set:`, `args:` or `command:`: what makes a run bigger than the proxy's"),
        ({"set": {"SCALE": 4}, "timeout": "soon"}, "`confirm.timeout` must be a duration above zero such as 30m or 2h (got 'soon')"),
    ],
)  # fmt: skip
def test_validate_refuses_a_bad_confirm_entry_in_one_line(repo: Path, confirm: dict, said: str):
    write_campaign(repo, confirm=confirm)
    done = ars(repo, "campaign", "validate", "campaign.yaml", code=2)
    assert done.stderr == f"campaign.yaml: {said}\n"


def test_a_knob_at_scale_the_files_do_not_hold_is_refused_before_anything_opens(repo: Path):
    write_campaign(repo, confirm={"set": {"DEPTH": 24}})
    out = ars(repo, "campaign", "run", "campaign.yaml").stdout
    assert "confirm: not run: `confirm.set` at baseline (" in out and "DEPTH" in out
    assert not any(r.is_confirmation for r in ledger.read(folder(repo) / "results.tsv"))
    refused = ars(repo, "campaign", "confirm", code=2)
    assert refused.stderr.count("\n") == 1 and "`confirm.set` at baseline" in refused.stderr


# ---------------------------------------------------------------- the rows themselves

FP = "f" * 12


def row(index: int, commit: str, value: float, status: str = "keep", **extra: str) -> ledger.Row:
    branch = "baseline" if commit == "base" else commit
    return ledger.Row(
        index=index, branch=f"{PREFIX}/{branch}", commit=commit * 3, parent_commit="base" * 3 if commit != "base" else "",
        metric_name="val_bpb", metric_value=value, status=status, fingerprint=FP, **extra,
    )  # fmt: skip


def test_confirmation_rows_never_become_the_best_nor_change_the_noise_rule(tmp_path: Path):
    proxy = [
        row(0, "base", 1.2),
        row(1, "base", 1.21, rerun_of="0"),
        row(2, "lr", 1.1),
        row(3, "wide", 1.15, "discard"),
    ]
    # a run at scale of the discarded commit, far better, even written as a keep, with the same fingerprint
    at_scale = [row(4, "conf", 0.4, confirms="3"), row(5, "conf2", 0.45, "crash", confirms="2")]
    rows = proxy + at_scale
    assert noise.best(rows, "min").key == noise.best(proxy, "min").key == 2
    assert noise.estimate(rows).sigma == noise.estimate(proxy).sigma
    assert noise.ranking(rows, "min") == noise.ranking(proxy, "min")
    for value in (1.0, 1.15, 1.3):
        assert noise.assess(rows, value, "min", fingerprint=FP) == noise.assess(
            proxy, value, "min", fingerprint=FP
        )
    assert noise.next_action(rows, "min") == noise.next_action(proxy, "min")
    settings = Settings(
        "cf", "val_bpb", "min", "python train.py", str(tmp_path), PREFIX, "2025-01-01T00:00:00+00:00"
    )
    assert keeprule.rule(settings, rows) == keeprule.rule(settings, proxy) == keeprule.NOISE
    rules = stoprule.from_mapping({"max_experiments": 4, "patience": 2})
    verdict = stoprule.evaluate(rules, rows)
    assert (verdict.attempted, verdict.runs_since_improvement) == (3, 1)  # neither a count nor a stall
    assert verdict.line.startswith("stop condition not yet met: 3/4 attempted (+1 rerun, +2 at scale)")


def test_confirmation_rows_never_change_what_screening_decides_or_claims(tmp_path: Path):
    flags = {"flags": screening.SCREENED_FLAG}
    proxy = [row(0, "base", 1.2, **flags), row(1, "base", 1.22, rerun_of="0", **flags), row(2, "lr", 1.1, **flags),
             row(3, "wide", 1.25, "discard", **flags)]  # fmt: skip
    rows = [*proxy, row(4, "conf", 0.4, confirms="3"), row(5, "conf2", 0.3, confirms="2")]
    settings = Settings("cf", "val_bpb", "min", "python train.py", str(tmp_path), PREFIX, "2025-01-01T00:00:00+00:00",
                        keep_rule="screening", baseline_repeats=2)  # fmt: skip
    assert keeprule.rule(dataclasses.replace(settings, keep_rule=None), rows) == keeprule.SCREENING
    for value in (1.0, 1.15, 1.3):
        decided = [keeprule.decide(settings, given, value, index=6, commit="new" * 3, parent_commit="lr" * 3,
                                   rerun_of=None, fingerprint=FP) for given in (rows, proxy)]  # fmt: skip
        assert decided[0] == decided[1]
    assert noise.best(rows, "min") == noise.best(proxy, "min")
    assert keeprule.claim(rows, "min", "val_bpb", seeded=True) == keeprule.claim(
        proxy, "min", "val_bpb", seeded=True
    )
    assert keeprule.owed(settings, rows, ideas_open=False, ideas_in_flight=0) == keeprule.owed(
        settings, proxy, ideas_open=False, ideas_in_flight=0
    )


def test_a_confirmation_row_in_a_ledger_without_the_column_reads_back_as_one(tmp_path: Path):
    path = tmp_path / "results.tsv"
    path.write_text("\t".join(ledger.BEFORE_CONFIRMS) + "\n")
    ledger.append(path, row(-1, "base", 1.2))
    ledger.append(path, row(-1, "conf", 0.4, confirms="0", description="baseline"))
    back = ledger.read(path)
    assert (back[1].confirms, back[1].description) == ("0", "baseline")
    assert path.read_text().splitlines()[0].split("\t") == list(ledger.BEFORE_CONFIRMS)  # its own columns
    assert noise.best(back, "min").key == 0


def test_the_targets_are_the_baseline_and_the_best_distinct_commits_in_the_campaigns_order():
    rows = [row(0, "base", 1.2), row(1, "wide", 1.15), row(2, "lr", 1.1), row(3, "lr", 1.12, rerun_of="2"),
            row(4, "deep", 1.3, "discard")]  # fmt: skip
    found = confirmation.targets(rows, "min", 2)
    assert [(t.name, t.key, round(t.proxy, 6), t.runs) for t in found] == [
        ("baseline", 0, 1.2, 1), ("lr", 2, 1.11, 2), ("wide", 1, 1.15, 1),
    ]  # fmt: skip
    assert confirmation.targets(rows, "min", 1)[1].name == "lr"
    assert confirmation.targets([row(0, "base", 1.2)], "min", 2) == []  # nothing but the baseline
