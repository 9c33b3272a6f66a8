"""What users meet at the edges says what the tools do: a deterministic target's reruns, `ars ledger
best` inside a campaign, the templates' defaults, a rerun that ties the best, the tmux sessions a
campaign leaves behind. Real git repositories, real runs, a real tmux server on a private socket."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from launch_helpers import TmuxServer, wait_until
from repo_helpers import ars, make_repo

from autoresearch_skills import ledger, report
from autoresearch_skills.anomalies import WATCH_DEFAULTS
from autoresearch_skills.campaign import finish, noise, screening, store
from autoresearch_skills.campaign.paths import CAMPAIGNS_DIR
from autoresearch_skills.campaign.pool import Pool
from autoresearch_skills.campaign.settings import POLICY, SETTINGS, key_problems
from autoresearch_skills.clock import format_duration
from autoresearch_skills.launch import get_launcher
from autoresearch_skills.launch.base import RunSpec
from autoresearch_skills.targets import FILE_TEMPLATES

ROOT = Path(__file__).resolve().parents[1]

# A deterministic target: the same code prints the same number, every time.
FIXED = """\
LR = 0.01               # changed by each hypothesis
print("---")
print(f"val_bpb:          {abs(LR - 0.03) * 10 + 1:.6f}")
"""


def lr(value: float) -> str:
    return FIXED.replace("LR = 0.01", f"LR = {value}")


# ---------------------------------------------------------------- a deterministic target


def test_a_deterministic_target_says_why_new_bests_are_not_rerun(tmp_path: Path):
    repo = make_repo(tmp_path / "project", {"train.py": FIXED})
    ars(repo, "campaign", "init", "det", "--keep-rule", "noise", "--metric", "val_bpb", "--direction", "min", "--baseline-repeats", "3",
        "--command", f"{sys.executable} train.py", "--stop", "10 experiments, 1m each")  # fmt: skip
    baseline = ars(repo, "exp", "baseline").stdout
    # two runs agree at the script's fixed seed: a third would print 1.2 again
    assert noise.DETERMINISTIC in baseline and "next:" not in baseline
    for slug, value in (("a", 0.015), ("b", 0.02), ("c", 0.025)):
        started = ars(repo, "exp", "start", slug, "-m", f"LR {value}").stdout
        workdir = Path(started.split("workdir: ")[1].splitlines()[0])  # where its files are edited
        (workdir / "train.py").write_text(lr(value))
        out = ars(repo, "exp", "run").stdout
        assert "status: keep" in out and "not shown to exceed seed-to-seed noise" in out
        assert "next:" not in out  # a new best is not run again: it would repeat its number
    table = ledger.read(repo / CAMPAIGNS_DIR / "det" / "results.tsv")
    assert [(r.status, r.rerun_of, r.metric_value, r.margin_sigma) for r in table] == [
        ("keep", "", 1.2, ""), ("keep", "0", 1.2, ""), ("keep", "", 1.15, ""), ("keep", "", 1.1, ""),
        ("keep", "", 1.05, ""),
    ]  # fmt: skip
    status = ars(repo, "campaign", "status").stdout
    assert f"noise: {noise.DETERMINISTIC} (2 runs of 1 commit)\n" in status
    assert json.loads(ars(repo, "campaign", "status", "--json").stdout)["deterministic"] is True
    closing = ars(repo, "campaign", "finish").stdout
    assert f"(one run: {noise.DETERMINISTIC})" in closing and "no rerun confirmed it" not in closing


def test_the_unattended_loop_on_a_deterministic_target_ends_saying_so(tmp_path: Path):
    repo = make_repo(tmp_path / "project", {"train.py": FIXED})
    queue = [
        {"slug": f"lr-{n}", "description": f"LR {v}", "set": {"LR": v}} for n, v in enumerate((0.015, 0.02))
    ]
    config = {
        "name": "det", "metric": "val_bpb", "direction": "min", "preset": "karpathy",
        "command": f"{sys.executable} train.py", "launcher": "local", "keep_rule": "noise", "stop": "3 experiments, 1m each",
        "prefix": "autoresearch/t-det", "policy": {"mutable": ["train.py"], "kind": "queue", "queue": queue},
    }  # fmt: skip
    (repo / "campaign.yaml").write_text(yaml.safe_dump(config))
    out = ars(repo, "campaign", "run", "campaign.yaml").stdout
    assert "rerun of #0: the best (#0) has 1 of 4 runs" in out  # the baseline: 4 runs by default ...
    assert "2 of 4 runs" not in out and "rerun of #2" not in out  # ... stopped at 2: a fixed seed
    assert "best: #3 keep val_bpb 1.100000 on autoresearch/t-det/lr-1 @ " in out
    assert f"(one run: {noise.DETERMINISTIC})" in out


def test_equal_values_tie_exactly_whatever_the_float_sum_gives():
    """Three runs of 0.7 sum to 2.0999999999999996: the mean must still be 0.7, so an equal
    result on a `max` target is a tie with the best, not a win by one ulp."""
    rows = [
        ledger.Row(index=i, commit="base", metric_name="m", metric_value=0.7, status="keep",
                   rerun_of="" if i == 0 else "0")
        for i in range(3)
    ]  # fmt: skip
    rows.append(ledger.Row(index=3, commit="same", metric_name="m", metric_value=0.7, status="discard"))
    assert noise.best(rows, "max").mean == 0.7
    decision = noise.assess(rows, 0.7, "max", rerun_of=3)
    assert decision.status == "discard" and "ties the best 0.7" in decision.reason
    assert noise.DETERMINISTIC in decision.reason  # two commits' repeats agree exactly


# ---------------------------------------------------------------- `ars ledger best` in a campaign


@pytest.fixture
def max_campaign(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "project", {"train.py": "print('acc: 1')\n"})
    ars(
        repo,
        "campaign",
        "init",
        "acc",
        "--keep-rule",
        "noise",
        "--metric",
        "acc",
        "--direction",
        "max",
        "--command",
        "true",
    )
    path = repo / CAMPAIGNS_DIR / "acc" / "results.tsv"
    for n, value in enumerate((0.50, 0.70, 0.60)):
        ledger.append(path, ledger.Row(branch=f"b/{n}", commit=f"c{n}", metric_name="acc", metric_value=value,
                                       status="keep", description=f"idea {n}"))  # fmt: skip
    return repo


def test_ledger_best_inside_a_campaign_needs_no_arguments(max_campaign: Path):
    done = ars(max_campaign, "ledger", "best")
    assert done.stdout.startswith("best: acc 0.700000\nindex: 1\n") and done.stderr == ""
    status = ars(max_campaign, "campaign", "status", code=None).stdout
    assert "best: #1 keep acc 0.700000 on b/1 @ c1: idea 1\n" in status  # the same best
    assert json.loads(ars(max_campaign, "ledger", "best", "--campaign", "acc", "--json").stdout)["index"] == 1
    ledger_file = str(max_campaign / CAMPAIGNS_DIR / "acc" / "results.tsv")
    elsewhere = max_campaign.parent
    assert ars(elsewhere, "ledger", "best", ledger_file).stdout.startswith("best: acc 0.700000\n")


def test_ledger_best_warns_when_d_contradicts_the_campaign_and_still_answers(max_campaign: Path):
    done = ars(max_campaign, "ledger", "best", "-d", "min")
    assert done.stdout.startswith("best: acc 0.500000\nindex: 0\n")
    assert done.stderr.startswith("warning: -d min contradicts campaign acc's direction (max)")
    assert len(done.stderr.splitlines()) == 1
    agreeing = ars(max_campaign, "ledger", "best", "-d", "max")
    assert agreeing.stderr == "" and agreeing.stdout.startswith("best: acc 0.700000\n")


def test_ledger_best_keeps_the_explicit_form_and_names_what_is_missing_outside_a_campaign(tmp_path: Path):
    path = tmp_path / "results.tsv"
    for value in (0.5, 0.7):
        ledger.append(path, ledger.Row(metric_name="acc", metric_value=value, status="keep"))
    assert ars(tmp_path, "ledger", "best", str(path), "-d", "min").stdout.startswith("best: acc 0.500000\n")
    missing = ars(tmp_path, "ledger", "best", str(path), code=2)
    assert missing.stderr.startswith(
        f"Error: {path} is no campaign's ledger: give its direction, -d min or -d max"
    )
    nothing = ars(tmp_path, "ledger", "best", code=2)
    assert len(nothing.stderr.splitlines()) == 1
    assert (
        "outside a campaign give the ledger and its direction: ars ledger best results.tsv -d min"
        in nothing.stderr
    )


# ---------------------------------------------------------------- templates against the declaration

KEY_LINE = re.compile(r"^(?P<lead> *)(?P<hash>#\s+)?(?P<key>[a-z][a-z_]*):(?:[ \t]+(?P<value>[^#\s].*?))?"
                      r"(?:\s+#(?:\s(?P<comment>.*))?)?\s*$")  # fmt: skip
MORE_COMMENT = re.compile(r"^ *#\s{2,}#\s?(?P<comment>.*)$")  # a comment carried on to the next line
CLAIM = re.compile(r"\((?:this is )?the default\)|\(default\)|\bdefaults? (?:to )?(?P<value>[^\s,;)]+)")


def template_files(tmp_path: Path) -> list[Path]:
    """Every campaign template shipped, and every file `ars init campaign-*` writes."""
    shipped = sorted((ROOT / "templates").glob("campaign*.yaml"))
    written = []
    for name in FILE_TEMPLATES:
        if name.startswith("campaign"):
            ars(tmp_path, "init", name, str(tmp_path / f"{name}.yaml"))
            written.append(tmp_path / f"{name}.yaml")
    assert len(shipped) == len(written) >= 4
    return shipped + written


def keys_with_comments(text: str) -> list[tuple[str, str, str]]:
    """(`key` or `policy.key`, its value as written, its comment) for every key, set or shown in
    a comment: a comment at the margin shows a top-level key, an indented one a key of `policy:`."""
    found, section = [], ""
    for line in text.splitlines():
        more = MORE_COMMENT.match(line)
        if more and found:
            key, value, comment = found[-1]
            found[-1] = (key, value, f"{comment} {more['comment']}")
            continue
        match = KEY_LINE.match(line)
        if not match or (not match["hash"] and len(match["lead"]) > 2):
            continue  # a line of prose, or a field of a queue item
        if not match["lead"] and not match["hash"]:
            section = match["key"]
        nested = bool(match["lead"])
        if nested and section != "policy":
            continue
        name = f"policy.{match['key']}" if nested else match["key"]
        found.append((name, (match["value"] or "").strip(), match["comment"] or ""))
    return found


def declared(name: str):
    return POLICY[name.removeprefix("policy.")] if name.startswith("policy.") else SETTINGS[name]


def documented_default(name: str) -> str:
    """The default the one declaration gives: its value, or for a default computed at run time
    the one its help states ("(default 1, or as many as fit in `gpus`)", "unset: RAY_ADDRESS")."""
    key = declared(name)
    if key.default is not None:
        return str(key.default).lower() if isinstance(key.default, bool) else str(key.default)
    stated = re.search(r"(?:\bdefault|unset:) ([^\s,;)]+)", key.help)
    assert stated, f"{name}: a template states a default its declaration does not"
    return stated[1]


def test_every_key_in_the_templates_is_declared_and_every_stated_default_is_the_declared_one(tmp_path: Path):
    checked = set()
    for path in template_files(tmp_path):
        text = path.read_text()
        data = yaml.safe_load(text)
        assert key_problems(data, path.name) == []
        entries = keys_with_comments(text)
        assert {name for name, _, _ in entries} >= {*data, *(f"policy.{k}" for k in data["policy"])}
        for name, value, comment in entries:
            assert name.removeprefix("policy.") in (POLICY if name.startswith("policy.") else SETTINGS), (
                f"{path.name}: `{name}` is not a declared key"
            )
            for claim in CLAIM.finditer(comment):
                default = documented_default(name)
                if not claim["value"]:  # "(default)": the value shown is the default for this campaign
                    default = default.replace("<name>", data["name"])
                assert (claim["value"] or value) == default, f"{path.name}: `{name}`: {comment}"
                checked.add(name)
    assert checked >= {
        "baseline_repeats",
        "noise_margin",
        "first_step_timeout",
        "parallel",
        "strategy",
        "folder",
    }


def test_computed_defaults_in_the_help_are_the_ones_the_code_applies():
    assert "(default 1, or as many as fit in `gpus`)" in SETTINGS["parallel"].help
    assert Pool.from_settings(None, None, None).parallel == 1
    assert "(default 1)" in SETTINGS["gpus_per_run"].help
    assert Pool.from_settings(None, "0-3", None).gpus_per_run == 1
    assert (
        f"(default {format_duration(WATCH_DEFAULTS['first_step_timeout'])})"
        in SETTINGS["first_step_timeout"].help
    )
    assert noise.baseline_repeats_default(60) == noise.DEFAULT_POLICY.best_runs
    said = SETTINGS["baseline_repeats"].help
    assert f"(default {screening.BASELINE_RUNS} when runs are under" in said
    assert f"under keep_rule noise {noise.DEFAULT_POLICY.best_runs}, else 1" in said


def test_the_template_check_catches_a_wrong_default_and_an_unknown_key():
    wrong = "baseline_repeats: 2   # noise (default 3 under 30-min runs, else 1)\n"
    ((name, value, comment),) = keys_with_comments(wrong)
    assert CLAIM.search(comment)["value"] == "3" != documented_default(name)
    shown = "# keep_sesions: 5    # a typo in a commented key\npolicy:\n  #   kind: grid\n"
    assert [n for n, _, _ in keys_with_comments(shown)] == ["keep_sesions", "policy", "policy.kind"]
    assert "keep_sesions" not in SETTINGS


# ---------------------------------------------------------------- a rerun that ties the best


def chain_lines(rows: list[ledger.Row], direction: str = "min") -> list[str]:
    st = report.standing(rows, direction)
    return [f"#{r.index}: {why}" for r, why in report.left_out(st, direction)]


def noisy_rows(*runs: tuple[str, float, str, str]) -> list[ledger.Row]:
    """(commit, value, status, rerun_of) per row; the first rows (commit `b`) are the baseline."""
    return [
        ledger.Row(index=i, branch=f"x/{c}", commit=c, metric_name="val_bpb", metric_value=v, status=s,
                   rerun_of=rerun_of, flags="candidate" if s == "discard" and not rerun_of else "")
        for i, (c, v, s, rerun_of) in enumerate(runs)
    ]  # fmt: skip


BASELINE = (("b", 1.00, "keep", ""), ("b", 1.02, "keep", "0"))


def test_a_rerun_that_ties_the_best_is_called_a_tie_not_a_refutation():
    tied = noisy_rows(*BASELINE, ("t", 0.99, "discard", ""), ("t", 1.03, "discard", "2"))
    assert chain_lines(tied) == ["#2: candidate tied with the best #0 (1.010000) by its rerun, so not kept: "
                                 "1.010000 (mean of 2 runs: #2, #3)"]  # fmt: skip
    behind = noisy_rows(*BASELINE, ("r", 0.99, "discard", ""), ("r", 1.05, "discard", "2"))
    assert chain_lines(behind) == ["#2: candidate refuted by its rerun: 1.020000 (mean of 2 runs: #2, #3)"]
    short = noisy_rows(*BASELINE, ("s", 0.99, "discard", ""), ("s", 1.01, "discard", "2"))
    assert chain_lines(short) == [
        "#2: candidate not confirmed by its rerun: ahead of the best #0 (1.010000) by less than the noise "
        "rule asks: 1.000000 (mean of 2 runs: #2, #3)"
    ]


def test_the_noise_rule_and_the_report_agree_on_a_tie(tmp_path: Path):
    rows = noisy_rows(*BASELINE, ("t", 0.99, "discard", ""))
    decision = noise.assess(rows, 1.03, "min", rerun_of=2)
    assert decision.status == "discard" and "ties the best 1.01" in decision.reason
    path = tmp_path / "results.tsv"
    for row in [*rows, ledger.Row(branch="x/t", commit="t", metric_name="val_bpb", metric_value=1.03,
                                  rerun_of="2", **decision.ledger_fields())]:  # fmt: skip
        ledger.append(path, row)
    assert chain_lines(ledger.read(path)) == [
        "#2: candidate tied with the best #0 (1.010000) by its rerun, so not kept: 1.010000 (mean of 2 runs: #2, #3)"
    ]


# ---------------------------------------------------------------- tmux sessions at a campaign's end

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def tmux_campaign(repo: Path, socket: str, **extra) -> Path:
    queue = [
        {"slug": f"lr-{n}", "description": f"LR {v}", "set": {"LR": v}} for n, v in enumerate((0.015, 0.02))
    ]
    config = {
        "name": "tm", "metric": "val_bpb", "direction": "min", "preset": "karpathy",
        "command": f"{sys.executable} train.py", "launcher": "tmux", "tmux_socket": socket,
        "keep_rule": "noise", "stop": "3 experiments, 1m each", "prefix": "autoresearch/t-tm", "baseline_repeats": 1,
        "policy": {"mutable": ["train.py"], "kind": "queue", "queue": queue}, **extra,
    }  # fmt: skip
    (repo / "campaign.yaml").write_text(yaml.safe_dump(config))
    return repo / "campaign.yaml"


@needs_tmux
def test_a_finished_campaign_closes_its_finished_tmux_sessions_and_keeps_the_logs(
    server: TmuxServer, tmp_path: Path
):
    repo = make_repo(tmp_path / "project", {"train.py": FIXED})
    server("new-session", "-d", "-s", "users-own", "sleep 600")  # never ars's to close
    out = ars(repo, "campaign", "run", str(tmux_campaign(repo, server.name))).stdout
    assert "tmux: closed 3 session(s) of finished runs; their logs stay" in out
    assert server.sessions() == ["users-own"]
    table = ledger.read(repo / CAMPAIGNS_DIR / "tm" / "results.tsv")
    assert [r.launcher for r in table] == ["tmux"] * 3
    for row in table:
        assert "val_bpb:" in Path(row.log_path).read_text()


@needs_tmux
def test_keep_sessions_at_end_leaves_the_latest_sessions_open(server: TmuxServer, tmp_path: Path):
    repo = make_repo(tmp_path / "project", {"train.py": FIXED})
    config = tmux_campaign(repo, server.name, keep_sessions=2, keep_sessions_at_end=True)
    out = ars(repo, "campaign", "run", str(config)).stdout
    assert "tmux: closed" not in out
    table = ledger.read(repo / CAMPAIGNS_DIR / "tm" / "results.tsv")
    assert sorted(server.sessions()) == sorted(r.job_id for r in table[1:])


@needs_tmux
def test_the_end_never_closes_a_running_session(server: TmuxServer, tmp_path: Path):
    repo = make_repo(tmp_path / "project", {"train.py": FIXED})
    ars(repo, "campaign", "init", "tm", "--keep-rule", "noise", "--metric", "val_bpb", "--direction", "min", "--command", "true",
        "--launcher", "tmux", "--tmux-socket", server.name)  # fmt: skip
    campaign = store.find("tm", cwd=repo)
    launcher = get_launcher("tmux", socket=server.name)
    run = launcher.start(
        RunSpec(command="sleep 60", log_path=tmp_path / "long.log", timeout=120, name="long")
    )
    ledger.append(campaign.ledger, ledger.Row(branch="x/long", metric_name="val_bpb", status="cancelled",
                                              launcher="tmux", job_id=run.run_id, log_path=run.log_path))  # fmt: skip
    try:
        assert finish.close_sessions(campaign) == 0
        assert server.sessions() == ["long"]
    finally:
        launcher.cancel(run)
    wait_until(lambda: launcher.status(run).finished, what="the run to end")
    assert finish.close_sessions(campaign) == 1 and server.sessions() == []
