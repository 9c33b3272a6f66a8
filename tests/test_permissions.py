"""`ars skills install --permissions`: the allow-rules an unattended campaign needs, merged into Claude
Code's settings.json and a Codex rules file of our own; never a rule that allows every command; the
user's own rules and settings kept, also by `--remove`. Real `ars` processes, real git repositories
and campaigns, real files under a private HOME.

The written settings are checked against SchemaStore's Claude Code settings schema (the excerpt in
tests/data/schemas/claude-code-settings.json, its source in its `$comment`), with `jsonschema` when
it is installed, else by `validate` below, which reads the keywords that excerpt uses.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from repo_helpers import ars, make_repo

from autoresearch_skills.permissions import HEADER, RULES, Allow, command_rules, refusal, wanted

SCHEMA = json.loads((Path(__file__).parent / "data" / "schemas" / "claude-code-settings.json").read_text())
BASE = [rule.claude for rule in RULES]
USER_SETTINGS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(git status:*)", "Bash(make lint)"], "deny": ["Bash(git push:*)"]},
    "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh"}]}]},
}


def install(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autoresearch_skills.cli", "skills", "install", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "HOME": str(home)},
    )


def claude(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    done = install(home, cwd, "--agent", "claude", "--scope", "project", "--permissions", *args)
    assert done.returncode == 0, done.stderr
    return done


def shown(done: subprocess.CompletedProcess, key: str) -> list[str]:
    """The values of the `key: value` lines of a command's output."""
    return [line.split(": ", 1)[1] for line in done.stdout.splitlines() if line.startswith(f"{key}: ")]


@pytest.fixture
def project(tmp_path) -> Path:
    return make_repo(tmp_path / "project", {"train.py": "print('val_bpb: 1.0')\n"})


def campaign(repo: Path, command: str, *options: str) -> None:
    ars(repo, "campaign", "init", "demo", "--metric", "val_bpb", "--direction", "min",
        "--command", command, "--stop", "3 experiments", *options)  # fmt: skip


def validate(instance, schema: dict, root: dict | None = None, where: str = "settings") -> None:
    """Assert `instance` matches `schema`: jsonschema when installed, else the keywords the excerpt uses."""
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    if jsonschema is not None and root is None:
        jsonschema.validate(instance, schema)
        return
    root = root or schema
    if "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[1]]
    kinds = {"object": dict, "array": list, "string": str}
    if "type" in schema:
        assert isinstance(instance, kinds[schema["type"]]), f"{where}: not a {schema['type']}"
    if "enum" in schema:
        assert instance in schema["enum"], f"{where}: {instance!r} not one of {schema['enum']}"
    if "pattern" in schema:
        assert re.search(schema["pattern"], instance), f"{where}: {instance!r} does not match the schema"
    if "minLength" in schema:
        assert len(instance) >= schema["minLength"], f"{where}: too short"
    if schema.get("uniqueItems"):
        assert len(set(instance)) == len(instance), f"{where}: repeated items"
    for i, item in enumerate(instance if "items" in schema else []):
        validate(item, schema["items"], root, f"{where}[{i}]")
    if isinstance(instance, dict):
        for key, value in instance.items():
            if key in schema.get("properties", {}):
                validate(value, schema["properties"][key], root, f"{where}.{key}")
            else:
                assert schema.get("additionalProperties", True) is not False, f"{where}: unknown key {key!r}"


# ---------------------------------------------------------------- Claude Code


def test_install_allows_ars_and_the_reads_says_what_it_added_and_that_there_is_no_campaign(tmp_path, project):
    done = claude(tmp_path, project)
    settings = project / ".claude" / "settings.json"
    assert f"permissions: added -> {settings}" in done.stdout
    assert shown(done, "allow") == BASE
    assert "Bash(ars:*)" in BASE and "Bash(git status:*)" in BASE and "Bash(tmux capture-pane:*)" in BASE
    assert "no current campaign" in shown(done, "campaign")[0]  # no command rule, and it says so
    data = json.loads(settings.read_text())
    assert data == {"permissions": {"allow": BASE}}
    validate(data, SCHEMA)
    assert (project / ".claude" / "skills" / "auto-research" / "SKILL.md").is_file()  # the skills too


def test_no_rule_allows_writes_to_git_or_tmux():
    prefixes = [rule.prefix for rule in RULES]
    for write in ("git push origin main", "git reset --hard", "git checkout main", "git commit -m x",
                  "git branch -D x", "tmux kill-server", "tmux attach -t x", "tmux send-keys -t x C-c"):  # fmt: skip
        assert not any(write == p or write.startswith(p + " ") for p in prefixes), write


def test_rerunning_changes_nothing_and_says_so(tmp_path, project):
    claude(tmp_path, project)
    settings = project / ".claude" / "settings.json"
    before = settings.read_text(), (project / ".claude" / "ars-permissions.json").read_text()
    again = claude(tmp_path, project)
    assert f"permissions: unchanged -> {settings} (every rule already there)" in again.stdout
    assert shown(again, "allow") == []
    assert (settings.read_text(), (project / ".claude" / "ars-permissions.json").read_text()) == before


def test_the_campaign_command_is_allowed_up_to_its_script_and_its_tmux_server_read(tmp_path, project):
    campaign(project, "CUDA_VISIBLE_DEVICES=0 python -u train.py --lr 3e-4", "--tmux-socket", "lab")
    done = claude(tmp_path, project, "--json")
    report = json.loads(done.stdout)["permissions"]
    assert report["command"]["skipped"] is None
    assert report["command"]["rules"] == ["CUDA_VISIBLE_DEVICES=0 python -u train.py", "tmux -L lab ls",
        "tmux -L lab list-sessions", "tmux -L lab capture-pane", "tmux -L lab has-session"]  # fmt: skip
    [change] = report["changes"]
    assert change["action"] == "added" and change["added"][: len(BASE)] == BASE
    assert change["added"][len(BASE)] == "Bash(CUDA_VISIBLE_DEVICES=0 python -u train.py:*)"
    data = json.loads((project / ".claude" / "settings.json").read_text())
    assert data["permissions"]["allow"] == change["added"]
    validate(data, SCHEMA)


@pytest.mark.parametrize("command", ['bash -c "python train.py"', "python -c 'import train'"])
def test_a_command_that_runs_any_code_gets_no_rule_and_one_line_why(tmp_path, project, command):
    campaign(project, command)
    done = claude(tmp_path, project)
    [why] = shown(done, "campaign")
    assert why.startswith(f"no rule for `{command}`:") and "would allow every command" in why
    allow = json.loads((project / ".claude" / "settings.json").read_text())["permissions"]["allow"]
    assert allow == BASE  # the rest is still written
    assert not any(rule.startswith(("Bash(bash", "Bash(python -c", "Bash(python:")) for rule in allow)


def test_remove_takes_out_exactly_the_rules_ars_added(tmp_path, project):
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(USER_SETTINGS, indent=2) + "\n")
    done = claude(tmp_path, project)
    assert f"permissions: added -> {settings}" in done.stdout  # none of ours was there before
    assert shown(done, "kept") == ["Bash(git status:*) (there before ars added it: yours, never removed)"]
    assert "Bash(git status:*)" not in shown(done, "allow")
    merged = json.loads(settings.read_text())
    assert merged["permissions"]["allow"][:2] == ["Bash(git status:*)", "Bash(make lint)"]  # theirs first
    assert merged["permissions"]["deny"] == ["Bash(git push:*)"] and merged["hooks"] == USER_SETTINGS["hooks"]
    validate(merged, SCHEMA)

    removed = claude(tmp_path, project, "--remove")
    assert f"permissions: removed -> {settings}" in removed.stdout
    assert "Bash(git status:*)" not in shown(removed, "removed") and "Bash(ars:*)" in shown(
        removed, "removed"
    )
    assert json.loads(settings.read_text()) == USER_SETTINGS  # their identical rule stays
    assert not (project / ".claude" / "ars-permissions.json").exists()
    again = claude(tmp_path, project, "--remove")
    assert f"permissions: absent -> {settings} (no rule that ars added)" in again.stdout
    assert (project / ".claude" / "skills" / "auto-research").is_dir()  # the skills stay


def test_a_rule_the_user_adds_after_the_install_survives_remove(tmp_path, project):
    claude(tmp_path, project)
    settings = project / ".claude" / "settings.json"
    data = json.loads(settings.read_text())
    data["permissions"]["allow"].append("Bash(nvidia-smi)")  # the user's own, added later
    settings.write_text(json.dumps(data))
    claude(tmp_path, project, "--remove")
    assert json.loads(settings.read_text()) == {"permissions": {"allow": ["Bash(nvidia-smi)"]}}


def test_hooks_and_permissions_share_one_settings_file_and_come_out_together(tmp_path, project):
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(USER_SETTINGS))
    done = claude(tmp_path, project, "--hooks", "--json")
    report = json.loads(done.stdout)
    assert (
        report["hooks"][0]["action"] == "added" and report["permissions"]["changes"][0]["action"] == "added"
    )
    merged = json.loads(settings.read_text())
    assert "Stop" in merged["hooks"] and "Bash(ars:*)" in merged["permissions"]["allow"]
    validate(merged, SCHEMA)
    claude(tmp_path, project, "--hooks", "--remove")
    assert json.loads(settings.read_text()) == USER_SETTINGS


@pytest.mark.parametrize(
    "text, said",
    [('{"model": "opus",\n  "permissions": }\n', "line 2: not valid JSON"),
     ('{"permissions": {"allow": "Bash(ars:*)"}}\n', '"permissions.allow" must be a list'),
     ("[]\n", "must hold a JSON object")],
)  # fmt: skip
def test_a_broken_settings_file_is_refused_and_left_as_it_was(tmp_path, project, text, said):
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(text)
    for extra in ((), ("--remove",)):
        done = install(tmp_path, project, "--agent", "claude", "--scope", "project", "--permissions", *extra)
        assert done.returncode == 2, done.stdout
        assert done.stderr.startswith("Error: ") and len(done.stderr.strip().splitlines()) == 1
        assert said in done.stderr and "nothing was changed" in done.stderr
        assert settings.read_text() == text


def test_a_broken_record_is_refused_and_nothing_is_written(tmp_path, project):
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text("{}\n")
    record = project / ".claude" / "ars-permissions.json"
    record.write_text('{"added": "Bash(ars:*)"}')
    for extra in ((), ("--remove",)):
        done = install(tmp_path, project, "--agent", "claude", "--scope", "project", "--permissions", *extra)
        assert done.returncode == 2 and str(record) in done.stderr
        assert settings.read_text() == "{}\n" and record.read_text() == '{"added": "Bash(ars:*)"}'


def test_user_scope_writes_under_home_for_both_agents_and_a_dotfiles_link_stays_a_link(tmp_path, project):
    dotfiles = tmp_path / "dotfiles" / "claude-settings.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text('{"model": "opus"}\n')
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").symlink_to(dotfiles)
    done = install(tmp_path, project, "--agent", "all", "--permissions", "--json")
    assert done.returncode == 0, done.stderr
    changes = json.loads(done.stdout)["permissions"]["changes"]
    assert [(c["agent"], c["action"]) for c in changes] == [("claude", "added"), ("codex", "added")]
    assert (tmp_path / ".claude" / "settings.json").is_symlink()
    assert json.loads(dotfiles.read_text()) == {"model": "opus", "permissions": {"allow": BASE}}
    assert (tmp_path / ".codex" / "rules" / "ars.rules").is_file()
    assert not (project / ".claude" / "settings.json").exists()


def test_the_schema_check_catches_what_claude_code_would_reject():
    validate({"permissions": {"allow": BASE}, "model": "opus"}, SCHEMA)
    for wrong in ({"permissions": {"allow": ["Bash(a(b):*)"]}}, {"permissions": {"allow": ["Bash(ars:*)"] * 2}},
                  {"permissions": {"allows": []}}, {"permissions": {"allow": "Bash(ars:*)"}}):  # fmt: skip
        with pytest.raises(Exception):  # noqa: B017 (jsonschema's ValidationError, or the fallback's AssertionError)
            validate(wrong, SCHEMA)


def test_remove_needs_hooks_or_permissions(tmp_path, project):
    done = install(tmp_path, project, "--agent", "claude", "--remove")
    assert done.returncode == 2 and "pass --hooks or --permissions" in done.stderr


# ---------------------------------------------------------------- Codex


def test_codex_gets_a_rules_file_of_its_own_and_remove_deletes_only_it(tmp_path, project):
    rules = tmp_path / ".codex" / "rules"
    rules.mkdir(parents=True)
    (rules / "default.rules").write_text('prefix_rule(pattern = ["git", "status"], decision = "allow")\n')
    campaign(project, "python train.py")
    done = install(tmp_path, project, "--agent", "codex", "--permissions")  # user scope: ~/.codex
    assert done.returncode == 0, done.stderr
    ours = rules / "ars.rules"
    assert f"permissions: added -> {ours}" in done.stdout and "note: Codex loads" in done.stdout
    lines = ours.read_text().splitlines()
    assert ours.read_text().startswith(HEADER)
    assert lines[2:] == [rule.codex for rule in wanted(command_rules("python train.py"))]
    assert 'prefix_rule(pattern = ["ars"], decision = "allow")' in lines
    assert 'prefix_rule(pattern = ["python", "train.py"], decision = "allow")' in lines
    text = ours.read_text()
    again = install(tmp_path, project, "--agent", "codex", "--permissions")
    assert f"permissions: unchanged -> {ours}" in again.stdout and ours.read_text() == text
    removed = install(tmp_path, project, "--agent", "codex", "--permissions", "--remove")
    assert f"permissions: removed -> {ours}" in removed.stdout
    assert sorted(p.name for p in rules.iterdir()) == ["default.rules"]  # the user's own file stays


def test_a_codex_rules_file_ars_did_not_write_is_never_touched(tmp_path, project):
    ours = project / ".codex" / "rules" / "ars.rules"
    ours.parent.mkdir(parents=True)
    for text in ('prefix_rule(pattern = ["make"])\n', HEADER + 'prefix_rule(pattern = ["rm"], decision = "allow", justification = "x")\n'):  # fmt: skip
        ours.write_text(text)
        for extra in ((), ("--remove",)):
            done = install(
                tmp_path, project, "--agent", "codex", "--scope", "project", "--permissions", *extra
            )
            assert done.returncode == 2 and done.stderr.startswith("Error: ") and str(ours) in done.stderr
            assert ours.read_text() == text


# ---------------------------------------------------------------- the rules themselves


def test_no_shipped_rule_could_allow_every_command():
    for rule in RULES:
        assert refusal(rule.words) is None, rule
    for blanket in [
        (),
        ("bash",),
        ("sh", "-c"),
        ("python",),
        ("python3.11",),
        ("sudo",),
        ("env",),
        ("git", "*"),
    ]:
        assert refusal(blanket), blanket


@pytest.mark.parametrize(
    "command, prefixes",
    [
        ("python train.py --lr 3e-4", ["python train.py"]),
        ("python -m pkg.train --steps 10", ["python -m pkg.train"]),
        ("uv run train.py", ["uv run train.py"]),
        ("uv run python train.py", ["uv run python train.py"]),
        ("torchrun --nproc_per_node 8 train.py --lr 1", ["torchrun --nproc_per_node 8 train.py"]),
        ("nice -n 10 python train.py > run.log 2>&1", ["nice -n 10 python train.py"]),
        ("cd src && python prep.py; python train.py", ["python prep.py", "python train.py"]),
        ("./run.sh 3", ["./run.sh"]),
        ("node train.js --fast", ["node train.js"]),
    ],
)
def test_a_command_is_allowed_up_to_the_script_or_module_it_runs(command, prefixes):
    found = command_rules(command)
    assert found.skipped is None
    assert [rule.prefix for rule in found.rules] == prefixes


@pytest.mark.parametrize(
    "command",
    ["bash -lc 'python train.py'", "sh -c x", "python -c 'print(1)'", "python", "python -u",
     "sudo python train.py", "env", "node -e 'x'", 'python "$SCRIPT"', "ssh gpu1 python train.py",
     "python prep.py && bash -c 'python train.py'"],
)  # fmt: skip
def test_a_command_that_would_allow_everything_gets_no_rule_at_all(command):
    found = command_rules(command)
    assert found.rules == [] and found.skipped.startswith(f"no rule for `{command}`:")


def test_codex_patterns_leave_out_leading_assignments():
    rule = Allow(("CUDA_VISIBLE_DEVICES=0", "python", "train.py"))
    assert rule.claude == "Bash(CUDA_VISIBLE_DEVICES=0 python train.py:*)"
    assert rule.codex == 'prefix_rule(pattern = ["python", "train.py"], decision = "allow")'
