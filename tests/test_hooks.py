"""The agent hooks (`ars hook ...`) fed real hook JSON on stdin, against real campaigns in temporary
git repositories; the settings merge of `ars skills install --hooks`; `ars campaign pause/resume`;
the plugin's hooks/hooks.json."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo_helpers import ars, git, make_repo

from autoresearch_skills.hooks import OURS, PLUGIN_LAUNCHER, hook_table, merge_settings

ROOT = Path(__file__).resolve().parents[1]


def hook(name: str, payload, *args: str, cwd: Path | None = None, env: dict | None = None):
    """`ars hook NAME` as Claude Code runs it: JSON on stdin, exit status and both streams kept."""
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.cli", "hook", name, *args],
        input=text,
        capture_output=True,
        text=True,
        cwd=cwd or Path.cwd(),
        env={**os.environ, **(env or {})},
        timeout=60,
    )


def stop(cwd: Path, active: bool = False, *args: str):
    done = hook("stop", {"cwd": str(cwd), "hook_event_name": "Stop", "stop_hook_active": active}, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


@pytest.fixture
def repo(tmp_path) -> Path:
    """A repository with a campaign `demo`: 3 experiments, nothing run yet."""
    repo = make_repo(tmp_path / "repo", {"train.py": "print('val_bpb: 1.0')\n"})
    ars(repo, "campaign", "init", "demo", "--keep-rule", "noise", "--metric", "val_bpb", "--direction", "min",
        "--command", "python train.py", "--stop", "3 experiments")  # fmt: skip
    return repo


def folder(repo: Path) -> Path:
    return repo / "reports" / "auto_research" / "demo"


def add_row(repo: Path, value: str = "1.0", status: str = "keep") -> None:
    ars(repo, "ledger", "append", str(folder(repo) / "results.tsv"), "--metric-name", "val_bpb",
        "--metric-value", value, "--status", status, "--branch", "autoresearch/x/baseline")  # fmt: skip


# ---------------------------------------------------------------- stop: block or allow


def test_stop_blocks_with_the_verdict_and_the_baseline_first(repo):
    answer = stop(repo)
    assert answer["decision"] == "block"
    assert "stop condition not yet met: 0/3 attempted" in answer["reason"]
    assert "`ars exp baseline --campaign demo`" in answer["reason"]
    assert "ars campaign pause" in answer["reason"]  # how the agent honours a user's "stop"


def test_stop_after_a_row_asks_for_the_next_hypothesis(repo):
    add_row(repo)
    reason = stop(repo)["reason"]
    assert "1/3 attempted" in reason and "ars exp start SLUG" in reason


def test_stop_with_an_open_baseline_asks_to_run_it(repo):
    ars(repo, "exp", "baseline", "--no-run")
    reason = stop(repo)["reason"]
    assert "`ars exp run --campaign demo`" in reason and "baseline" in reason


def test_stop_with_a_run_in_flight_asks_to_wait_for_it(repo):
    (repo / "train.py").write_text("import time; time.sleep(30); print('val_bpb: 1.0')\n")
    git(repo, "commit", "-qam", "slow")
    ars(repo, "exp", "baseline", "--detach")
    try:
        reason = stop(repo)["reason"]
        assert "`ars exp wait --campaign demo`" in reason and "baseline in flight" in reason
    finally:
        ars(repo, "exp", "cancel", "baseline", code=None)


def test_stop_allows_once_the_stop_condition_is_met(repo):
    for value in ("1.0", "0.9", "0.8"):
        add_row(repo, value)
    assert stop(repo) is None
    explained = hook("stop", {"cwd": str(repo)}, "--explain")
    assert explained.stdout == "" and "stop condition met: 3/3 attempted" in explained.stderr


def test_a_paused_campaign_lets_the_agent_stop_until_resumed(repo):
    ars(repo, "campaign", "pause", "--reason", "GPUs needed elsewhere")
    assert stop(repo) is None
    assert json.loads((folder(repo) / "paused").read_text())["reason"] == "GPUs needed elsewhere"
    ars(repo, "campaign", "resume")
    assert stop(repo)["decision"] == "block"


def test_stop_gives_up_after_max_blocks_without_progress_and_says_so_once(repo):
    assert stop(repo, active=False)["decision"] == "block"
    assert stop(repo, active=True)["decision"] == "block"
    assert stop(repo, active=True)["decision"] == "block"
    gave_up = stop(repo, active=True)
    assert "decision" not in gave_up and "3 times in a row" in gave_up["systemMessage"]
    assert stop(repo, active=True) is None  # the notice is shown once
    add_row(repo)  # progress: a new ledger row starts a new count
    assert stop(repo, active=True)["decision"] == "block"


def test_a_stop_after_a_user_turn_starts_a_new_count(repo):
    for active in (False, True, True):
        stop(repo, active=active)
    assert "decision" not in stop(repo, active=True)
    assert stop(repo, active=False)["decision"] == "block"


def test_max_blocks_is_configurable_and_zero_never_blocks(repo):
    assert stop(repo, False, "--max-blocks", "0") is None
    assert stop(repo, False, "--max-blocks", "1")["decision"] == "block"
    assert "decision" not in stop(repo, True, "--max-blocks", "1")


def test_a_campaign_driven_by_the_unattended_loop_is_not_blocked(repo):
    with open(folder(repo) / "campaign.yaml", "a") as handle:
        handle.write("policy:\n  kind: queue\n")
    assert stop(repo) is None


def test_stop_finds_the_campaign_from_a_worktree_inside_its_folder(repo):
    worktree = folder(repo) / "worktrees" / "wt-1"
    git(repo, "worktree", "add", "-q", "--detach", str(worktree))
    (worktree / "src").mkdir()
    reason = stop(worktree / "src")["reason"]
    assert "Campaign demo is not finished" in reason
    assert f"--campaign {folder(repo)}" in reason  # a worktree's checkout has no reports/ folder


def test_stop_finds_the_campaign_from_a_linked_worktree_elsewhere(repo, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    git(repo, "worktree", "add", "-q", "--detach", str(elsewhere))
    assert "Campaign demo is not finished" in stop(elsewhere)["reason"]


def test_only_the_current_campaign_or_one_in_flight_keeps_the_agent(repo):
    ars(
        repo,
        "campaign",
        "init",
        "other",
        "--keep-rule",
        "noise",
        "--metric",
        "m",
        "--direction",
        "min",
        "--command",
        "true",
    )
    reason = stop(repo)["reason"]  # `other` is now the current campaign; demo has nothing in flight
    assert "Campaign other is not finished" in reason


@pytest.mark.parametrize("where", ["plain", "repo"])
def test_no_campaign_no_answer(tmp_path, where):
    cwd = make_repo(tmp_path / "r", {"a": "b"}) if where == "repo" else tmp_path
    for name in ("stop", "session-start", "pre-compact"):
        done = hook(name, {"cwd": str(cwd), "stop_hook_active": False, "source": "startup"})
        assert done.returncode == 0 and done.stdout == "" and done.stderr == ""
    assert not (cwd / "session").exists()


# ---------------------------------------------------------------- never trap the agent


def test_broken_input_bad_options_and_internal_errors_exit_0_without_blocking(repo, tmp_path):
    assert hook("stop", "not json at all", cwd=tmp_path).stdout == ""
    bad_option = hook("stop", {"cwd": str(repo)}, "--bogus")
    assert bad_option.returncode == 0 and bad_option.stdout == "" and "ignored" in bad_option.stderr
    (folder(repo) / "campaign.yaml").write_text("name: [unclosed\n")
    for name in ("stop", "session-start"):
        done = hook(name, {"cwd": str(repo)})
        assert done.returncode == 0 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"ars hook {name}: skipped")


def test_the_hook_input_cwd_wins_over_the_process_cwd(repo, tmp_path):
    done = hook("stop", {"cwd": str(repo)}, cwd=tmp_path)
    assert json.loads(done.stdout)["decision"] == "block"


# ---------------------------------------------------------------- session start and pre-compact


def context(cwd: Path, source: str = "startup") -> str | None:
    done = hook("session-start", {"cwd": str(cwd), "hook_event_name": "SessionStart", "source": source})
    assert done.returncode == 0, done.stderr
    if not done.stdout.strip():
        return None
    out = json.loads(done.stdout)["hookSpecificOutput"]
    assert out["hookEventName"] == "SessionStart"
    return out["additionalContext"]


def test_session_start_restates_the_campaign_without_a_session_record(repo):
    text = context(repo, "compact")
    assert "Restate this to the user before acting" in text
    for line in ("campaign: demo", "verdict: stop condition not yet met: 0/3 attempted", "branch: main",
                 "next: `ars exp baseline --campaign demo`"):  # fmt: skip
        assert line in text, line
    assert "(compact)" in text


def test_session_start_adds_the_session_record(repo):
    ars(repo, "memory", "start", "--goal", "lower val_bpb in 3 runs")
    ars(repo, "memory", "handoff", "--resume-from", "baseline next", "--next", "ars exp baseline")
    text = context(repo)
    assert "objective: lower val_bpb in 3 runs" in text and "resume from: baseline next" in text
    assert "verdict: stop condition not yet met" in text
    [timeline] = (repo / "session").glob("*/timeline.md")
    assert "resume" in timeline.read_text().splitlines()[-1]


def test_session_start_restates_what_memory_resume_says(repo):
    """The hook gathers only the facts it shows (no launchers, no slot pool, one git call);
    `ars memory resume` is the reference, line for line, on a branch and on a detached HEAD."""
    ars(repo, "memory", "start", "--goal", "lower val_bpb")
    ars(repo, "memory", "handoff", "--resume-from", "the next idea", "--next", "try a wider model",
        "--watch-out", "the eval is slow")  # fmt: skip
    ars(repo, "exp", "baseline")  # a latest row and a best
    ars(repo, "exp", "start", "wider", "-m", "a wider model: more capacity")
    for detached in (False, True):
        if detached:
            git(repo, "checkout", "-q", "--detach")
        text = context(repo)
        resumed = ars(repo, "memory", "resume", "--campaign", "demo").stdout.rstrip()
        assert "experiment: wider [open]" in resumed and "objective: lower val_bpb" in resumed
        assert ("branch: (detached)" in resumed) is detached
        assert resumed in text


def test_session_start_tells_a_paused_campaign(repo):
    ars(repo, "campaign", "pause", "--reason", "holiday")
    text = context(repo)
    assert "paused: holiday" in text and "ars campaign resume demo" in text


def test_session_start_is_quiet_for_a_finished_campaign_without_a_record(repo):
    for value in ("1.0", "0.9", "0.8"):
        add_row(repo, value)
    assert context(repo) is None


# `ars hook NAME` in a process that says, as it exits, which modules it loaded and whether the
# settings tables were built (stderr, last line)
LOADS = """
import atexit, sys
def said():
    tables = "SETTINGS" in vars(sys.modules["autoresearch_skills.campaign.settings"])
    print("tables" if tables else "no-tables", *sorted(sys.modules), file=sys.stderr)
atexit.register(said)
from autoresearch_skills.cli import main
sys.argv = ["ars", "hook", sys.argv[1]]
main()
"""
NOT_FOR_THE_HOOKS = (
    "autoresearch_skills.campaign.experiment",  # the engine
    "autoresearch_skills.campaign.status",
    "autoresearch_skills.campaign.pool",  # the slot pool and the accelerators
    "autoresearch_skills.accelerators.machine",
    "autoresearch_skills.launch.tmux",  # the launchers
    "autoresearch_skills.launch.local",
    "statistics",  # Student's t, for decisions
    "yaml",  # campaign.yaml's parse is remembered (yamlfile.read_yaml_remembered)
    "autoresearch_skills.launch.base",  # a run is read only when one is in flight
    "shutil",  # and its bz2, lzma and zlib
)


def test_the_hooks_load_only_the_campaign_facts_and_ask_git_once_for_the_branch(repo, tmp_path):
    """Claude Code waits for these at every stop: with an active campaign they load neither the
    engine, the launchers, the slot pool, the settings tables, statistics nor PyYAML (the
    campaign's commands have left campaign.yaml's parse remembered); the stop hook starts
    no process, session-start one git process, for the branch it prints."""
    ars(repo, "exp", "baseline")  # the most common state at a stop: the baseline recorded
    shims = tmp_path / "bin"
    shims.mkdir()
    calls = tmp_path / "git-calls"
    (shims / "git").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {shutil.which("git")} "$@"\n')
    (shims / "git").chmod(0o755)
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    for name, git_calls in (("stop", []), ("session-start", ["symbolic-ref --quiet --short HEAD"])):
        calls.unlink(missing_ok=True)
        event = {"cwd": str(repo), "hook_event_name": name, "stop_hook_active": False, "source": "startup"}
        done = subprocess.run(
            [sys.executable, "-c", LOADS, name], input=json.dumps(event), capture_output=True, text=True,
            cwd=repo, env=env, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "demo" in done.stdout, name  # it answered: blocked the stop, or restated the campaign
        tables, *loaded = done.stderr.splitlines()[-1].split()
        assert tables == "no-tables", name
        assert not set(NOT_FOR_THE_HOOKS) & set(loaded), (name, set(NOT_FOR_THE_HOOKS) & set(loaded))
        assert (calls.read_text().splitlines() if calls.exists() else []) == git_calls, name


def test_pre_compact_writes_a_timeline_entry_and_nothing_else(repo):
    done = hook("pre-compact", {"cwd": str(repo), "hook_event_name": "PreCompact", "trigger": "auto"})
    assert done.returncode == 0 and done.stdout == "" and not (repo / "session").exists()
    ars(repo, "memory", "start", "--goal", "lower val_bpb")
    done = hook("pre-compact", {"cwd": str(repo), "hook_event_name": "PreCompact", "trigger": "manual"})
    assert done.returncode == 0 and done.stdout == "", done.stderr
    [timeline] = (repo / "session").glob("*/timeline.md")
    last = timeline.read_text().splitlines()[-1]
    assert "checkpoint before compaction (manual)" in last
    assert "campaign demo: stop condition not yet met: 0/3 attempted" in last


# ---------------------------------------------------------------- pause and resume


def test_pause_shows_in_status_and_resume_prints_the_verdict(repo):
    paused = ars(repo, "campaign", "pause", "--reason", "new data tomorrow")
    assert paused.stdout.splitlines()[0] == "paused: demo (new data tomorrow)"
    status = ars(repo, "campaign", "status")
    assert "paused: new data tomorrow" in status.stdout
    resumed = ars(repo, "campaign", "resume")
    assert resumed.stdout.splitlines() == ["resumed: demo", "stop condition not yet met: 0/3 attempted"]
    assert not (folder(repo) / "paused").exists()
    assert "paused: new data tomorrow" not in ars(repo, "campaign", "status").stdout


# ---------------------------------------------------------------- settings files


USER_SETTINGS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(git status)"]},
    "hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh"}]}],
    },
}


def install(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.cli", "skills", "install", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "HOME": str(home)},
    )


def test_install_hooks_merges_into_project_settings_idempotently(tmp_path):
    project = make_repo(tmp_path / "project", {"a": "b"})
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(USER_SETTINGS, indent=4) + "\n")
    first = install(tmp_path, project, "--agent", "claude", "--scope", "project", "--hooks")
    assert first.returncode == 0, first.stderr
    assert f"hooks: added -> {settings}" in first.stdout
    merged = json.loads(settings.read_text())
    assert {k: merged[k] for k in ("model", "permissions")} == {
        k: USER_SETTINGS[k] for k in ("model", "permissions")
    }
    assert merged["hooks"]["PreToolUse"] == USER_SETTINGS["hooks"]["PreToolUse"]
    assert merged["hooks"]["Stop"][0] == USER_SETTINGS["hooks"]["Stop"][0]  # theirs first, untouched
    assert merged["hooks"]["Stop"][1]["hooks"][0]["command"] == "ars hook stop"
    assert merged["hooks"]["SessionStart"][0]["matcher"] == "startup|resume|clear|compact"
    assert settings.read_text().startswith('{\n  "model": "opus"')  # indented, order kept
    text = settings.read_text()
    again = install(tmp_path, project, "--agent", "claude", "--scope", "project", "--hooks")
    assert f"hooks: unchanged -> {settings}" in again.stdout
    assert settings.read_text() == text
    assert (project / ".claude" / "skills" / "auto-research" / "SKILL.md").is_file()


def test_remove_takes_out_only_our_hooks(tmp_path):
    project = make_repo(tmp_path / "project", {"a": "b"})
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(USER_SETTINGS))
    install(tmp_path, project, "--agent", "claude", "--scope", "project", "--hooks")
    removed = install(tmp_path, project, "--agent", "claude", "--scope", "project", "--hooks", "--remove")
    assert removed.returncode == 0 and f"hooks: removed -> {settings}" in removed.stdout
    assert json.loads(settings.read_text()) == USER_SETTINGS
    assert (
        "absent"
        in install(tmp_path, project, "--agent", "claude", "--scope", "project", "--hooks", "--remove").stdout
    )
    assert (project / ".claude" / "skills" / "auto-research").is_dir()  # the skills stay


def test_user_scope_hooks_for_both_agents(tmp_path):
    done = install(tmp_path, tmp_path, "--agent", "all", "--hooks", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {item["action"] for item in report["hooks"]} == {"added"}
    for path in (tmp_path / ".claude" / "settings.json", tmp_path / ".codex" / "hooks.json"):
        assert json.loads(path.read_text())["hooks"] == hook_table()


def test_a_broken_settings_file_is_refused_and_left_as_it_was(tmp_path):
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"model": "opus",\n  "hooks": }\n')
    done = install(tmp_path, tmp_path, "--agent", "claude", "--hooks", "--remove")
    assert done.returncode == 2 and done.stderr.startswith("Error: ") and "line 2" in done.stderr
    assert settings.read_text() == '{"model": "opus",\n  "hooks": }\n'
    wrong = install(tmp_path, tmp_path, "--agent", "claude", "--remove")
    assert wrong.returncode == 2 and "pass --hooks" in wrong.stderr


def test_a_symlinked_settings_file_stays_a_symlink(tmp_path):
    dotfiles = tmp_path / "dotfiles" / "claude-settings.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text('{"model": "opus"}\n')
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").symlink_to(dotfiles)
    assert install(tmp_path, tmp_path, "--agent", "claude", "--hooks").returncode == 0
    assert (tmp_path / ".claude" / "settings.json").is_symlink()
    assert json.loads(dotfiles.read_text())["hooks"] == hook_table()


def test_merge_recognises_ours_by_command_and_keeps_foreign_handlers_in_a_shared_group():
    shared = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "/venv/bin/ars hook stop"},
                                            {"type": "command", "command": "make lint"}]}]}}  # fmt: skip
    merged = merge_settings(shared)
    assert merged["hooks"]["Stop"] == [
        {"hooks": [{"type": "command", "command": "make lint"}]},
        *hook_table()["Stop"],
    ]
    assert merge_settings(merged) == merged
    assert merge_settings(merged, remove=True) == {
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "make lint"}]}]}
    }
    assert OURS.search('"/home/me/.venv/bin/ars" hook pre-compact') and not OURS.search("echo cars hook stop")


# ---------------------------------------------------------------- the plugin


def test_plugin_hooks_json_runs_our_hooks_through_the_launcher():
    data = json.loads((ROOT / "hooks" / "hooks.json").read_text())
    assert data["hooks"] == hook_table(PLUGIN_LAUNCHER)
    assert "${CLAUDE_PLUGIN_ROOT}" in PLUGIN_LAUNCHER
    plugin = json.loads((ROOT / ".claude-plugin" / "plugin.json").read_text())
    assert "hooks" not in plugin  # hooks/hooks.json loads by itself; naming it again loads it twice
    ignored = subprocess.run(
        ["git", "check-ignore", "hooks/hooks.json", "hooks/ars-hook"], cwd=ROOT, capture_output=True
    )
    assert ignored.returncode == 1  # both travel with a clone of the repository


def test_plugin_launcher_runs_ars_and_without_it_does_nothing(repo):
    launcher = ROOT / "hooks" / "ars-hook"
    payload = json.dumps({"cwd": str(repo)})
    with_ars = subprocess.run(["/bin/sh", str(launcher), "stop"], input=payload, capture_output=True, text=True,
                              env={**os.environ, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})  # fmt: skip
    assert json.loads(with_ars.stdout)["decision"] == "block"
    without = subprocess.run(["/bin/sh", str(launcher), "stop"], input=payload, capture_output=True, text=True,
                             env={**os.environ, "PATH": "/nonexistent"})  # fmt: skip
    assert without.returncode == 0 and without.stdout == "" and "not on PATH" in without.stderr
