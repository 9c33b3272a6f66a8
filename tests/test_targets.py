"""`ars init`: a shipped target becomes a fresh git repository with one commit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import warm_ars

from autoresearch_skills.targets import list_targets

TOOLS = Path(__file__).resolve().parent.parent / "tools"
TINY_LM_FILES = {".gitignore", "README.md", "prepare.py", "program.md", "shakespeare.txt", "train.py"}


def ars(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return warm_ars.run(*args, cwd=cwd, env=env, timeout=60)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def test_list_names_tiny_lm_with_its_description(tmp_path):
    result = ars("init", "--list", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("tiny-lm: "))
    assert "Shakespeare" in line


def test_list_json_gives_name_path_and_description(tmp_path):
    result = ars("init", "--list", "--json", cwd=tmp_path)
    targets = {t["name"]: t for t in json.loads(result.stdout)}
    assert Path(targets["tiny-lm"]["path"], "train.py").is_file()
    assert targets["tiny-lm"]["description"]


def test_init_makes_a_git_repo_with_one_commit_holding_every_file(tmp_path):
    result = ars("init", "tiny-lm", "my-lm", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    repo = tmp_path / "my-lm"
    assert git(repo, "rev-list", "--count", "HEAD") == "1"
    assert set(git(repo, "ls-files").split()) == TINY_LM_FILES
    assert git(repo, "status", "--porcelain") == ""
    assert (repo / "shakespeare.txt").read_bytes() == (
        list_targets()[0].path / "shakespeare.txt"
    ).read_bytes()
    assert f"directory: {repo.resolve()}" in result.stdout
    assert "next: cd " in result.stdout and "python train.py" in result.stdout


def test_run_outputs_are_ignored_by_the_new_repo(tmp_path):
    ars("init", "tiny-lm", "lm", cwd=tmp_path)
    repo = tmp_path / "lm"
    (repo / "run.log").write_text("val_bpb: 2.5\n")
    (repo / "results.tsv").write_text("index\n")
    (repo / "reports").mkdir()
    (repo / "reports" / "report.md").write_text("# report\n")
    (repo / "out").mkdir()
    (repo / "out" / "model.pt").write_bytes(b"weights of a run by hand")
    assert git(repo, "status", "--porcelain") == ""


def test_init_defaults_to_a_folder_named_after_the_target(tmp_path):
    assert ars("init", "tiny-lm", cwd=tmp_path).returncode == 0
    assert (tmp_path / "tiny-lm" / "train.py").is_file()


def test_init_into_an_existing_empty_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    assert ars("init", "tiny-lm", "empty", cwd=tmp_path).returncode == 0
    assert (tmp_path / "empty" / ".git").is_dir()


def test_init_refuses_a_non_empty_directory_and_touches_nothing(tmp_path):
    target = tmp_path / "busy"
    target.mkdir()
    (target / "notes.txt").write_text("mine\n")
    result = ars("init", "tiny-lm", "busy", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("Error: ") and "not empty" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]


def test_unknown_target_is_bad_input_naming_the_choices(tmp_path):
    result = ars("init", "huge-lm", "x", cwd=tmp_path)
    assert result.returncode == 2
    assert "unknown target 'huge-lm'" in result.stderr and "tiny-lm" in result.stderr
    assert not (tmp_path / "x").exists()


def test_missing_git_identity_falls_back_for_the_first_commit_only(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_AUTHOR_", "GIT_COMMITTER_"))}
    env.update(
        HOME=str(home), XDG_CONFIG_HOME=str(home), GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull
    )
    result = ars("init", "tiny-lm", "lm", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    repo = tmp_path / "lm"
    assert git(repo, "log", "-1", "--format=%an <%ae> / %cn <%ce>") == (
        "autoresearch-skills <ars@localhost> / autoresearch-skills <ars@localhost>"
    )
    assert "user.name" not in (repo / ".git" / "config").read_text()


def test_configured_identity_is_kept(tmp_path):
    env = {**os.environ, "GIT_AUTHOR_NAME": "Ada", "GIT_AUTHOR_EMAIL": "ada@example.org"}
    assert ars("init", "tiny-lm", "lm", cwd=tmp_path, env=env).returncode == 0
    assert git(tmp_path / "lm", "log", "-1", "--format=%an <%ae>") == "Ada <ada@example.org>"


def test_json_output_reports_the_commit(tmp_path):
    result = ars("init", "tiny-lm", "lm", "--json", cwd=tmp_path)
    report = json.loads(result.stdout)
    assert report["commit"] == git(tmp_path / "lm", "rev-parse", "HEAD")
    assert set(report["files"]) == TINY_LM_FILES


@pytest.mark.parametrize("args", [["--list"], ["tiny-lm", "busy"]])
def test_script_behaves_like_the_subcommand(tmp_path, args):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    script = subprocess.run(
        [sys.executable, str(TOOLS / "targets.py"), *args], cwd=tmp_path, capture_output=True, text=True
    )
    sub = ars("init", *args, cwd=tmp_path)
    assert (script.returncode, script.stdout) == (sub.returncode, sub.stdout)
