"""What a campaign keeps of its runs: the files a run writes beside its code (checkpoints) moved into
its run folder, `keep_outputs:` and `outputs_max_gb:`, the held-out check, seeds for repeats, and
the user's own files left as they were. Real git repositories, real `ars` commands, real runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, git, make_repo

from autoresearch_skills import ledger, runoutputs

FOLDER = "reports/auto_research/night"
PREFIX = "autoresearch/t-out"

TRAIN = """\
import os
LR = 0.01               # learning rate
SEED = 0                # seed of the run
CKPT_BYTES = 1000       # size of the checkpoint the run writes
os.makedirs("out", exist_ok=True)
with open("out/ckpt.pt", "wb") as f:
    f.write(f"lr={LR} seed={SEED}\\n".encode().ljust(CKPT_BYTES, b"."))
print(f"seed: {SEED} ARS_SEED={os.environ.get('ARS_SEED', '')}")
print(f"val_loss: {abs(LR - 0.03) * 10 + 1 + SEED / 1000:.6f}")
print(f"test loss: {abs(LR - 0.03) * 12 + 1.1:.6f}")
"""

TRAIN_WITH_FLAG = """\
import argparse, os
parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
LR = 0.01               # learning rate
print(f"seed: {args.seed} ARS_SEED={os.environ.get('ARS_SEED', '')}")
print(f"val_loss: {abs(LR - 0.03) * 10 + 1 + args.seed / 1000:.6f}")
"""

# reads the run's own checkpoint, as an evaluation of the weights would, and counts its calls
EVAL = """\
import os, sys
with open(sys.argv[1], "a") as calls:
    calls.write(os.environ["ARS_OUTPUT_DIR"] + "\\n")
ckpt = open(os.path.join(os.environ["ARS_OUTPUT_DIR"], "out", "ckpt.pt"), "rb").read()
lr = float(ckpt.split(b" ")[0].split(b"=")[1])
print(f"test loss: {abs(lr - 0.03) * 20 + 2:.6f}")
"""


def project(tmp_path: Path, train: str = TRAIN, **files: str) -> Path:
    """A repository whose train.py writes out/ckpt.pt, a folder git ignores."""
    return make_repo(tmp_path / "project", {"train.py": train, ".gitignore": "out/\n", **files})


def write_campaign(repo: Path, policy: dict, stop: str = "10 experiments", **extra) -> Path:
    """campaign.yaml beside the repository (not in it: the checkout stays as the user left it)."""
    config = {
        "name": "night",
        "metric": "val_loss",
        "direction": "min",
        "command": f"{sys.executable} train.py",
        "launcher": "local",
        "keep_rule": "noise",
        "stop": stop,
        "prefix": PREFIX,
        "baseline_repeats": 1,  # one run per commit unless a test is about repeats
        "policy": {"mutable": ["train.py"], **policy},
        **extra,
    }
    path = repo.parent / "campaign.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def lr_queue(*values: float) -> dict:
    return {
        "kind": "queue",
        "queue": [{"slug": f"lr-{v}", "description": f"LR {v}", "set": {"LR": v}} for v in values],
    }


def run_campaign(repo: Path, path: Path, code: int = 0) -> str:
    """`ars campaign run`: exit 0 once its stop condition is met, 1 when its policy runs out first."""
    return ars(repo, "campaign", "run", str(path), code=code, timeout=60).stdout


def rows(repo: Path) -> list[ledger.Row]:
    return ledger.read(repo / FOLDER / "results.tsv")


def by_slug(repo: Path) -> dict[str, ledger.Row]:
    """The last row of each experiment, by its slug."""
    return {Path(r.branch).name: r for r in rows(repo)}


def kept(repo: Path, row: ledger.Row) -> bool:
    """Whether the row's outputs folder is still there, its checkpoint in it."""
    return bool(row.outputs) and (repo / row.outputs / "out" / "ckpt.pt").is_file()


def held_out(out: str) -> str:
    """The `held-out:` line of a command's output (the campaign's end, `ars campaign finish`)."""
    found = [line for line in out.splitlines() if line.startswith("held-out: ")]
    assert len(found) == 1, out
    return found[0]


def log_of(row: ledger.Row) -> str:
    return Path(row.log_path).read_text()


# ------------------------------------------------------------------- outputs of a campaign's runs


def test_parallel_grid_moves_each_checkpoint_into_its_run_folder_and_finish_names_the_best_weights(
    tmp_path: Path,
):
    repo = project(tmp_path)
    policy = {"kind": "grid", "space": {"LR": [0.02, 0.03, 0.05]}}
    out = run_campaign(
        repo, write_campaign(repo, policy, stop="4 experiments or 10m total, 1m each", parallel=2)
    )
    table = by_slug(repo)
    assert list(table) == ["baseline", "lr-0-02", "lr-0-03", "lr-0-05"]
    best = table["lr-0-03"]
    assert best.status == "keep" and best.outputs.startswith(f"{FOLDER}/runs/")
    assert {s for s, r in table.items() if kept(repo, r)} == {"baseline", "lr-0-02", "lr-0-03"}
    for slug, lr in (("baseline", 0.01), ("lr-0-02", 0.02), ("lr-0-03", 0.03)):  # each run's own checkpoint
        assert (repo / table[slug].outputs / "out/ckpt.pt").read_bytes().startswith(f"lr={lr} ".encode())
    weights = f"weights: {best.outputs}/out/ckpt.pt (1.0 KB)"
    assert weights in out.splitlines()
    assert weights in ars(repo, "campaign", "finish").stdout.splitlines()
    status = ars(repo, "campaign", "status", code=None).stdout.splitlines()
    assert weights in status and any(line.startswith("outputs: 3.0 KB kept for 3 run(s)") for line in status)
    listed = ars(repo, "exp", "outputs", "lr-0-03").stdout
    assert f"#{best.index} keep: {repo / best.outputs}" in listed and "out/ckpt.pt  1.0 KB" in listed
    data = json.loads(ars(repo, "exp", "outputs", "lr-0-03", "--json").stdout)
    assert data["experiment"] == f"{PREFIX}/lr-0-03"
    assert data["runs"] == [
        {
            "index": best.index,
            "status": "keep",
            "seed": None,
            "outputs": str(repo / best.outputs),
            "dropped": False,
            "files": [{"path": "out/ckpt.pt", "bytes": 1000}],
        }
    ]
    dropped = ars(repo, "exp", "outputs", "lr-0-05").stdout  # discarded: `keep_outputs: kept` dropped it
    assert f"#{table['lr-0-05'].index} discard: dropped (keep_outputs)" in dropped


def test_a_campaign_leaves_the_users_checkpoint_and_untracked_files_as_they_were(tmp_path: Path):
    repo = project(tmp_path)
    (repo / "out").mkdir()
    (repo / "out/ckpt.pt").write_bytes(b"the user's own weights\x00\x01")
    (repo / "notes.txt").write_text("ideas for tomorrow\n")
    before = set(git(repo, "status", "--porcelain", "--ignored").splitlines())
    stats = {p: (repo / p).stat().st_mtime_ns for p in ("out/ckpt.pt", "notes.txt")}
    run_campaign(repo, write_campaign(repo, lr_queue(0.03), stop="2 experiments"))
    assert [r.status for r in rows(repo)] == ["keep", "keep"]
    assert all(kept(repo, r) for r in rows(repo))  # the runs wrote their checkpoints: elsewhere
    assert (repo / "out/ckpt.pt").read_bytes() == b"the user's own weights\x00\x01"
    assert (repo / "notes.txt").read_text() == "ideas for tomorrow\n"
    assert stats == {p: (repo / p).stat().st_mtime_ns for p in stats}
    after = set(git(repo, "status", "--porcelain", "--ignored").splitlines())
    assert after - before == {"!! reports/"}  # the campaign's own folder, nothing else new
    assert git(repo, "branch", "--show-current") == "main"


def test_a_carried_checkpoint_is_each_runs_input_and_the_users_file_stays_as_it_was(tmp_path: Path):
    resuming = 'print("resumed from:", open("out/ckpt.pt", "rb").read()[:12])\n' + TRAIN
    repo = project(tmp_path, resuming, **{".worktreeinclude": "out/\n"})
    (repo / "out").mkdir()
    (repo / "out/ckpt.pt").write_bytes(b"user weights")
    run_campaign(repo, write_campaign(repo, lr_queue(0.02, 0.03), stop="3 experiments"))
    table = by_slug(repo)
    # the worktree is reused: each run starts from the user's checkpoint, never the previous run's
    assert [log_of(r).splitlines()[0] for r in table.values()] == ["resumed from: b'user weights'"] * 3
    for slug, lr in (("baseline", 0.01), ("lr-0-02", 0.02), ("lr-0-03", 0.03)):
        assert (repo / table[slug].outputs / "out/ckpt.pt").read_bytes().startswith(f"lr={lr} ".encode())
    assert (repo / "out/ckpt.pt").read_bytes() == b"user weights"


# ---------------------------------------------------------------------- keep_outputs, outputs_max_gb

# baseline 1.2, lr-0-02 1.1 (keep), lr-0-03 1.0 (keep, the best), lr-0-05 1.2 (discard)
KEPT_BY_RULE = {
    "kept": {"baseline", "lr-0-02", "lr-0-03"},
    "best": {"lr-0-03"},
    "all": {"baseline", "lr-0-02", "lr-0-03", "lr-0-05"},
    "none": set(),
}


@pytest.mark.parametrize("rule", list(KEPT_BY_RULE))
def test_keep_outputs_keeps_the_runs_its_rule_names(tmp_path: Path, rule: str):
    repo = project(tmp_path)
    run_campaign(
        repo, write_campaign(repo, lr_queue(0.02, 0.03, 0.05), stop="4 experiments", keep_outputs=rule)
    )
    table = by_slug(repo)
    assert {s: r.status for s, r in table.items()} == {
        "baseline": "keep",
        "lr-0-02": "keep",
        "lr-0-03": "keep",
        "lr-0-05": "discard",
    }
    assert all(r.outputs for r in table.values())  # the ledger names every run's folder ...
    assert {s for s, r in table.items() if kept(repo, r)} == KEPT_BY_RULE[rule]  # ... the rule keeps these
    if rule == "none":
        assert "weights:" not in ars(repo, "campaign", "finish").stdout


def test_outputs_cap_drops_the_oldest_discarded_run_first(tmp_path: Path):
    repo = project(tmp_path)
    # five 1000-byte checkpoints under a 4500-byte cap: one must go, and it is the older discard
    path = write_campaign(
        repo,
        lr_queue(0.02, 0.03, 0.05, 0.06),
        stop="5 experiments",
        keep_outputs="all",
        outputs_max_gb=4.5e-6,
    )
    run_campaign(repo, path)
    table = by_slug(repo)
    assert [table[s].status for s in ("lr-0-05", "lr-0-06")] == ["discard", "discard"]
    assert {s for s, r in table.items() if kept(repo, r)} == {"baseline", "lr-0-02", "lr-0-03", "lr-0-06"}


def test_outputs_cap_never_drops_the_best_or_the_baseline(tmp_path: Path):
    repo = project(tmp_path)
    path = write_campaign(
        repo, lr_queue(0.02, 0.03, 0.05), stop="4 experiments", keep_outputs="all", outputs_max_gb=1e-9
    )
    out = run_campaign(repo, path)
    table = by_slug(repo)
    assert {s for s, r in table.items() if kept(repo, r)} == {
        "baseline",
        "lr-0-03",
    }  # over the cap, still kept
    assert f"weights: {table['lr-0-03'].outputs}/out/ckpt.pt (1.0 KB)" in out


# --------------------------------------------------------------------------------- the held-out check


def test_holdout_metric_is_recorded_and_finish_shows_it_for_baseline_and_best(tmp_path: Path):
    repo = project(tmp_path)
    out = run_campaign(repo, write_campaign(repo, lr_queue(0.03), stop="2 experiments", holdout="test loss"))
    assert [r.holdout for r in rows(repo)] == ["1.340000", "1.100000"]
    line = held_out(out)  # the metric and the held-out metric, each from the baseline to the best
    assert (
        "val_loss -16.7% (1.200000 -> 1.000000)" in line and "test loss -17.9% (1.340000 -> 1.100000)" in line
    )
    assert held_out(ars(repo, "campaign", "finish").stdout) == line


def test_holdout_command_evaluates_each_weights_once_and_a_second_finish_runs_nothing(tmp_path: Path):
    repo = project(tmp_path, **{"eval.py": EVAL})
    calls = tmp_path / "eval-calls.txt"
    path = write_campaign(
        repo,
        lr_queue(0.02, 0.03),
        stop="3 experiments",
        holdout="test loss",
        holdout_command=f"{sys.executable} eval.py {calls}",
    )
    out = run_campaign(repo, path)
    table = by_slug(repo)
    # the baseline's weights (LR 0.01) give 2.4, the best's (LR 0.03) 2.0
    line = held_out(out)
    assert (
        "val_loss -16.7% (1.200000 -> 1.000000)" in line and "test loss -16.7% (2.400000 -> 2.000000)" in line
    )
    evaluated = calls.read_text().splitlines()
    assert evaluated == [str(repo / table["baseline"].outputs), str(repo / table["lr-0-03"].outputs)]
    results = json.loads((repo / FOLDER / "holdout.json").read_text())
    assert {k: (v["commit"], v["value"]) for k, v in results.items()} == {
        str(table["baseline"].index): (table["baseline"].commit, 2.4),
        str(table["lr-0-03"].index): (table["lr-0-03"].commit, 2.0),
    }
    assert held_out(ars(repo, "campaign", "finish").stdout) == line
    assert calls.read_text().splitlines() == evaluated  # not run again
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1  # its checkouts are gone


def test_the_proposer_never_sees_the_held_out_value(tmp_path: Path):
    repo = project(tmp_path)
    seen = tmp_path / "requests.jsonl"
    script = tmp_path / "propose.py"
    script.write_text(
        "import json, sys\n"
        "text = sys.stdin.read()\n"
        f"open({str(seen)!r}, 'a').write(text.replace(chr(10), ' ') + chr(10))\n"
        "n = len(json.loads(text)['ledger'])\n"
        "print('null' if n >= 3 else json.dumps({'slug': f'lr-{n}', 'description': 'closer LR',\n"
        "                                       'set': {'LR': 0.01 + 0.01 * n}}))\n"
    )
    policy = {"kind": "command", "command": f"{sys.executable} {script}"}
    run_campaign(repo, write_campaign(repo, policy, holdout="test loss"), code=1)
    assert [r.holdout for r in rows(repo)] == ["1.340000", "1.220000", "1.100000"]  # recorded ...
    requests = [json.loads(line) for line in seen.read_text().splitlines()]
    assert [len(r["ledger"]) for r in requests] == [1, 2, 3]
    for request in requests:  # ... never shown to whoever proposes
        assert all("holdout" not in row and "metric_value" in row for row in request["ledger"])
    assert "holdout" not in seen.read_text() and "1.340000" not in seen.read_text()
    status = json.loads(ars(repo, "campaign", "status", "--json", code=None).stdout)
    assert status["best_row"]["metric_value"] == pytest.approx(1.0) and "holdout" not in status["best_row"]


# --------------------------------------------------------------------------------------------- seeds


def test_a_file_seed_knob_gives_each_repeat_its_own_seed_and_is_never_committed(tmp_path: Path):
    repo = project(tmp_path)
    path = write_campaign(repo, lr_queue(0.03), stop="4 experiments", seed="SEED", baseline_repeats=3)
    run_campaign(repo, path, code=1)  # the queue runs out first
    baseline = [r for r in rows(repo) if Path(r.branch).name == "baseline"]
    assert len(baseline) == 3 and len({r.commit for r in baseline}) == 1
    assert [r.seed for r in baseline] == ["0", "1", "2"]
    new_best = [r for r in rows(repo) if Path(r.branch).name == "lr-0-03"]
    assert [r.seed for r in new_best] == ["0", "1", "2"]  # a new best's reruns: its own seed, then above it
    assert [log_of(r).splitlines()[0] for r in baseline] == [
        "seed: 0 ARS_SEED=0",
        "seed: 1 ARS_SEED=1",
        "seed: 2 ARS_SEED=2",
    ]
    assert [r.metric_value for r in baseline] == pytest.approx([1.2, 1.201, 1.202])  # the runs differed
    for branch in (f"{PREFIX}/baseline", f"{PREFIX}/lr-0-03"):
        assert "SEED = 0                # seed of the run" in git(repo, "show", f"{branch}:train.py")
    assert (repo / "train.py").read_text() == TRAIN


def test_a_flag_seed_knob_reaches_the_script_on_its_command_line(tmp_path: Path):
    repo = project(tmp_path, TRAIN_WITH_FLAG)
    path = write_campaign(repo, lr_queue(0.03), stop="4 experiments", seed="--seed", baseline_repeats=3)
    run_campaign(repo, path, code=1)
    baseline = [r for r in rows(repo) if Path(r.branch).name == "baseline"]
    assert [r.seed for r in baseline] == ["", "1", "2"]  # the first runs as the commit says
    assert [log_of(r).splitlines()[0] for r in baseline] == [
        "seed: 0 ARS_SEED=",
        "seed: 1 ARS_SEED=1",
        "seed: 2 ARS_SEED=2",
    ]
    assert [r.command.endswith("--seed 2") for r in baseline] == [False, False, True]


# ------------------------------------------------------------------------------ where a run writes


def test_worktrees_off_copies_each_runs_output_into_its_run_folder_and_moves_nothing(tmp_path: Path):
    repo = project(tmp_path)
    out = run_campaign(repo, write_campaign(repo, lr_queue(0.03), stop="2 experiments", worktrees="off"))
    table = by_slug(repo)
    assert [r.status for r in table.values()] == ["keep", "keep"]
    assert (repo / table["baseline"].outputs / "out/ckpt.pt").read_bytes().startswith(b"lr=0.01 ")
    assert (repo / table["lr-0-03"].outputs / "out/ckpt.pt").read_bytes().startswith(b"lr=0.03 ")
    assert f"weights: {table['lr-0-03'].outputs}/out/ckpt.pt (1.0 KB)" in out
    # the checkout is also the user's: what the run wrote there stays, as the last run left it
    assert (repo / "out/ckpt.pt").read_bytes().startswith(b"lr=0.03 ")
    assert git(repo, "status", "--porcelain", "--ignored").splitlines() == ["!! out/", "!! reports/"]


def test_ars_output_dir_is_an_absolute_folder_whose_files_end_in_the_rows_outputs(tmp_path: Path):
    train = (
        "import os\n"
        "LR = 0.01\n"
        "folder = os.environ['ARS_OUTPUT_DIR']\n"
        "print(f'folder: {folder} absolute={os.path.isabs(folder)} exists={os.path.isdir(folder)}')\n"
        "print(f'alias: {os.environ[\"AR_MODEL_DIR\"] == folder}')\n"
        "open(os.path.join(folder, 'model.bin'), 'wb').write(b'w' * 2000)\n"
        "print(f'val_loss: {abs(LR - 0.03) * 10 + 1:.6f}')\n"
    )
    repo = project(tmp_path, train)
    out = run_campaign(repo, write_campaign(repo, lr_queue(0.03), stop="2 experiments"))
    for row in rows(repo):
        folder = repo / row.outputs
        assert log_of(row).splitlines()[:2] == [f"folder: {folder} absolute=True exists=True", "alias: True"]
        assert (folder / "model.bin").read_bytes() == b"w" * 2000
    assert f"weights: {by_slug(repo)['lr-0-03'].outputs}/model.bin (2.0 KB)" in out


def test_a_parallel_seeded_grid_reruns_a_candidate_whose_branch_sits_in_the_other_worktree(tmp_path: Path):
    repo = project(tmp_path, TRAIN.replace(" + SEED / 1000", ""))  # the seed does not move the metric
    (repo / "out").mkdir()
    (repo / "out/ckpt.pt").write_bytes(b"the user's own weights")
    policy = {"kind": "grid", "space": {"LR": [0.02, 0.03, 0.05]}}
    path = write_campaign(
        repo, policy, stop="6 experiments or 10m total, 1m each", parallel=2, holdout="test loss", seed="SEED"
    )
    config = yaml.safe_load(path.read_text())
    del config["baseline_repeats"]  # the noise rule's own: lr-0-02 is a candidate, rerun in wt-1
    path.write_text(yaml.safe_dump(config))
    out = run_campaign(repo, path, code=1)  # the grid runs out before 6 experiments
    candidate = [r for r in rows(repo) if Path(r.branch).name == "lr-0-02"]
    assert len(candidate) == 2 and candidate[1].rerun_of == str(candidate[0].index)
    best = by_slug(repo)["lr-0-03"]
    assert f"weights: {best.outputs}/out/ckpt.pt (1.0 KB)" in out
    assert (repo / "out/ckpt.pt").read_bytes() == b"the user's own weights"


# ------------------------------------------------------------------------------ runoutputs.collect


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A checkout holding untracked files before a run: the user's data and a note."""
    repo = make_repo(tmp_path / "checkout", {"train.py": "LR = 0.01\n", ".gitignore": "out/\ndata/\n"})
    (repo / "data").mkdir()
    (repo / "data/tokens.bin").write_bytes(b"t" * 100)
    (repo / "out").mkdir()
    (repo / "out/ckpt.pt").write_bytes(b"old weights")
    (repo / "notes.txt").write_text("a note\n")
    return repo


def collect(checkout: Path, tmp_path: Path) -> list[str]:
    return runoutputs.collect(checkout, tmp_path / "before.json", tmp_path / "outputs")


def test_collect_moves_a_new_file_and_the_folder_the_run_made(checkout: Path, tmp_path: Path):
    runoutputs.snapshot(checkout, tmp_path / "before.json")
    (checkout / "out/samples/epoch1").mkdir(parents=True)
    (checkout / "out/samples/epoch1/a.png").write_bytes(b"png")
    (checkout / "log.txt").write_text("step 1\n")
    assert collect(checkout, tmp_path) == ["log.txt", "out/samples/epoch1/a.png"]
    assert (tmp_path / "outputs/out/samples/epoch1/a.png").read_bytes() == b"png"
    assert (tmp_path / "outputs/log.txt").read_text() == "step 1\n"
    assert not (checkout / "out/samples").exists() and not (checkout / "log.txt").exists()
    assert (checkout / "out/ckpt.pt").read_bytes() == b"old weights"  # unchanged: input, not output
    assert not (tmp_path / "outputs/data").exists() and not (tmp_path / "outputs/notes.txt").exists()


def test_collect_copies_a_changed_file_the_checkout_held_before(checkout: Path, tmp_path: Path):
    runoutputs.snapshot(checkout, tmp_path / "before.json")
    (checkout / "out/ckpt.pt").write_bytes(b"new weights, longer")
    assert collect(checkout, tmp_path) == ["out/ckpt.pt"]
    assert (tmp_path / "outputs/out/ckpt.pt").read_bytes() == b"new weights, longer"
    assert (checkout / "out/ckpt.pt").read_bytes() == b"new weights, longer"  # the checkout keeps its file


def test_collect_in_a_shared_checkout_copies_and_moves_nothing(checkout: Path, tmp_path: Path):
    runoutputs.snapshot(checkout, tmp_path / "before.json")
    (checkout / "out/new.pt").write_bytes(b"new")
    moved = runoutputs.collect(checkout, tmp_path / "before.json", tmp_path / "outputs", shared=True)
    assert moved == ["out/new.pt"]
    assert (tmp_path / "outputs/out/new.pt").read_bytes() == (checkout / "out/new.pt").read_bytes() == b"new"


def test_collect_leaves_tool_folders_alone(checkout: Path, tmp_path: Path):
    runoutputs.snapshot(checkout, tmp_path / "before.json")
    for rel in ("__pycache__/train.cpython-312.pyc", ".venv/lib/site.py", "node_modules/x/index.js", "m.pyc"):
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_bytes(b"tool")
    (checkout / "out/ckpt.pt").unlink()
    (checkout / "out/best.pt").write_bytes(b"run")
    assert collect(checkout, tmp_path) == ["out/best.pt"]
    assert (checkout / "__pycache__/train.cpython-312.pyc").exists()
    assert (checkout / ".venv/lib/site.py").exists()


def test_collect_twice_collects_nothing_more(checkout: Path, tmp_path: Path):
    runoutputs.snapshot(checkout, tmp_path / "before.json")
    (checkout / "out/new.pt").write_bytes(b"new")
    (checkout / "out/ckpt.pt").write_bytes(b"changed weights")
    first = collect(checkout, tmp_path)
    listing = sorted(str(p.relative_to(tmp_path / "outputs")) for p in (tmp_path / "outputs").rglob("*"))
    assert first == ["out/ckpt.pt", "out/new.pt"]
    assert collect(checkout, tmp_path) == []
    assert (
        sorted(str(p.relative_to(tmp_path / "outputs")) for p in (tmp_path / "outputs").rglob("*")) == listing
    )


def test_collect_without_a_snapshot_takes_nothing(checkout: Path, tmp_path: Path):
    (checkout / "out/new.pt").write_bytes(b"new")
    assert collect(checkout, tmp_path) == []
    assert (checkout / "out/new.pt").exists() and not (tmp_path / "outputs").exists()
