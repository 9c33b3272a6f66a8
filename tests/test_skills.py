"""The skill pack: the shipped skills pass `ars skills check`; every installed form (ars skills
install for Claude Code and Codex, --link, the plugin as a clone of the repository) passes the spec
validator with every link resolving; re-installs update in place; foreign folders are never touched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoresearch_skills import __version__
from autoresearch_skills.cli import cli
from autoresearch_skills.errors import BadInput
from autoresearch_skills.skills import (
    MARKER,
    NOTE_BEGIN,
    NOTE_END,
    check,
    check_commands,
    find_links,
    install,
    plan_skill,
)

pytest.importorskip("skills_ref", reason="the Agent Skills validator needs Python 3.11+")

ROOT = Path(__file__).resolve().parents[1]
SKILLS = ["auto-research", "blueprint-swarm", "reward-profiling", "session-memory", "tmux-monitor"]


def ars(*args: str, home: Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`ars` as a user runs it, with HOME pointing at a temporary folder."""
    script = Path(sys.executable).parent / "ars"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "autoresearch_skills.cli"]
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run([*command, *args], capture_output=True, text=True, cwd=cwd, env=env)


def git_repo(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def assert_self_contained(folder: Path) -> None:
    """Every skill in `folder` passes the full check, and no link leaves its skill's folder
    except to a sibling skill installed beside it."""
    names, problems = check(folder)
    assert sorted(names) == SKILLS
    assert not problems, "\n".join(map(str, problems))
    for skill in folder.iterdir():
        for md in skill.rglob("*.md"):
            for link in find_links(md.read_text()):
                if not link.local or not link.path_part:
                    continue
                target = Path(os.path.normpath(md.parent / link.path_part))
                assert target.exists(), (md, link.target)
                assert target.is_relative_to(folder), (md, link.target)


# ---------------------------------------------------------------- the shipped skills


def test_shipped_skills_pass_ars_skills_check():
    result = CliRunner().invoke(cli, ["skills", "check"])
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith("checked: 5 skills, 0 problems")


def test_check_json_lists_the_five_skills():
    result = CliRunner().invoke(cli, ["skills", "check", "--json"])
    data = json.loads(result.output)
    assert result.exit_code == 0 and data["ok"] and data["problems"] == []
    assert sorted(data["skills"]) == SKILLS


@pytest.mark.parametrize("name", SKILLS)
def test_evals_are_in_skill_creator_format_with_checkable_expectations(name):
    data = json.loads((ROOT / "skills" / name / "evals" / "evals.json").read_text())
    assert data["skill_name"] == name and len(data["evals"]) >= 3
    assert [case["id"] for case in data["evals"]] == list(range(1, len(data["evals"]) + 1))
    for case in data["evals"]:
        assert set(case) == {"id", "prompt", "expected_output", "files", "expectations"}
        assert case["prompt"].strip() and case["expected_output"].strip() and case["expectations"]
    assert not (ROOT / "skills" / name / "evals.json").exists()  # one place for the evals


@pytest.mark.parametrize("name", SKILLS)
def test_trigger_evals_have_five_should_and_three_should_not_cases(name):
    cases = json.loads((ROOT / "skills" / name / "evals" / "trigger-evals.json").read_text())
    assert all(set(case) == {"query", "should_trigger"} for case in cases)
    assert len({case["query"] for case in cases}) == len(cases)
    assert sum(c["should_trigger"] is True for c in cases) >= 5
    assert sum(c["should_trigger"] is False for c in cases) >= 3


def test_shared_trigger_queries_name_one_owning_skill():
    owners: dict[str, list[str]] = {}
    negatives: dict[str, list[str]] = {}
    for name in SKILLS:
        for case in json.loads((ROOT / "skills" / name / "evals" / "trigger-evals.json").read_text()):
            (owners if case["should_trigger"] else negatives).setdefault(case["query"], []).append(name)
    cont = "Continue the lr-sweep campaign until its stop rule says stop."
    assert owners[cont] == ["auto-research"] and "session-memory" in negatives[cont]
    ajet = "Watch my ajet run in the ajet_math_topk50 session and fix it if it crashes."
    assert owners[ajet] == ["blueprint-swarm"] and {"tmux-monitor", "auto-research"} <= set(negatives[ajet])
    assert all(len(skills) == 1 for skills in owners.values())
    assert sum(query in owners for query in negatives) >= 8  # near-misses that another skill answers


def test_campaign_evals_check_baseline_verdict_sleep_and_kill_server_from_the_commands():
    evals = json.loads((ROOT / "skills/auto-research/evals/evals.json").read_text())["evals"]
    expectations = " ".join(e for case in evals for e in case["expectations"])
    for needle in ("`ars exp baseline` before the first `ars exp start`", "verdict line", "bare `sleep`",
                   "`tmux kill-server`", "`ars campaign pause`"):  # fmt: skip
        assert needle in expectations, needle


@pytest.mark.parametrize(
    "doc",
    [
        "references/git-workflow.md",
        "references/exploration-ideas.md",
        "references/blueprint-format.md",
        "templates/program.md",
        "templates/blueprint.md",
    ],
)
def test_references_and_templates_show_only_existing_commands(doc):
    assert check_commands((ROOT / doc).read_text()) == []


def test_plugin_manifests_list_every_skill_from_the_repository_root():
    plugin = json.loads((ROOT / ".claude-plugin" / "plugin.json").read_text())
    market = json.loads((ROOT / ".claude-plugin" / "marketplace.json").read_text())
    assert plugin["name"] == "autoresearch-skills" and plugin["version"] == __version__
    assert plugin["description"] and (ROOT / plugin["skills"]).resolve() == ROOT / "skills"
    assert market["name"] and market["owner"]["name"]
    [entry] = market["plugins"]
    assert entry["name"] == plugin["name"] and entry["source"] == "./"
    assert sorted(p.name for p in (ROOT / "skills").iterdir() if (p / "SKILL.md").exists()) == SKILLS


def test_plugin_installed_as_a_clone_resolves_every_link(tmp_path):
    """Claude Code installs the plugin by cloning the repository: only files git knows come along."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    for rel in listed.stdout.splitlines():
        if rel.startswith(("skills/", "references/", "templates/", ".claude-plugin/")):
            source = ROOT / rel
            if source.is_file():
                (clone / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, clone / rel)
    names, problems = check(clone / "skills")
    assert sorted(names) == SKILLS
    assert not problems, "\n".join(map(str, problems))


# ---------------------------------------------------------------- install


def test_install_for_both_agents_yields_valid_self_contained_skills(tmp_path):
    home = tmp_path / "home"
    done = ars("skills", "install", "--agent", "all", home=home, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "skills: 5 installed" in done.stdout
    for folder in (home / ".claude" / "skills", home / ".agents" / "skills"):
        assert_self_contained(folder)
        skill = (folder / "auto-research" / "SKILL.md").read_text()
        assert "../../references/" not in skill and "](references/git-workflow.md)" in skill
        assert (folder / "auto-research" / "references" / "git-workflow.md").is_file()
        assert (folder / "auto-research" / "templates" / "campaign.yaml").is_file()
        assert json.loads((folder / "auto-research" / MARKER).read_text())["mode"] == "copy"


def test_project_scope_installs_at_the_root_of_the_git_repository(tmp_path):
    repo = git_repo(tmp_path / "repo")
    (repo / "src").mkdir()
    done = ars("skills", "install", "--agent", "codex", "--scope", "project", home=tmp_path, cwd=repo / "src")
    assert done.returncode == 0, done.stderr
    assert (repo / ".agents" / "skills" / "tmux-monitor" / "SKILL.md").is_file()
    assert not (repo / ".claude").exists() and not (repo / "src" / ".agents").exists()


def test_reinstall_updates_in_place_and_leaves_nothing_behind(tmp_path):
    dest = tmp_path / "skills"
    assert ars("skills", "install", "--dest", str(dest), home=tmp_path).returncode == 0
    installed = dest / "session-memory"
    original = (installed / "SKILL.md").read_text()
    (installed / "SKILL.md").write_text("stale\n")
    (installed / "leftover.md").write_text("from an older version\n")

    done = ars("skills", "install", "--dest", str(dest), "--json", home=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert {item["action"] for item in report["installed"]} == {"updated"}
    assert (installed / "SKILL.md").read_text() == original
    assert not (installed / "leftover.md").exists()
    assert sorted(p.name for p in dest.iterdir()) == SKILLS  # no temporary folders left


def test_a_foreign_folder_is_never_touched_and_nothing_is_written(tmp_path):
    dest = tmp_path / "skills"
    foreign = dest / "tmux-monitor"
    foreign.mkdir(parents=True)
    (foreign / "SKILL.md").write_text("---\nname: tmux-monitor\ndescription: mine\n---\nmy own skill\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (dest / "auto-research").symlink_to(elsewhere)

    done = ars("skills", "install", "--dest", str(dest), home=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("Error: ")
    assert "was not installed by ars" in done.stderr
    assert (foreign / "SKILL.md").read_text().endswith("my own skill\n")
    assert sorted(p.name for p in dest.iterdir()) == ["auto-research", "tmux-monitor"]
    assert (dest / "auto-research").is_symlink() and list(elsewhere.iterdir()) == []


def test_link_mode_symlinks_what_needs_no_rewriting(tmp_path):
    dest = tmp_path / "skills"
    done = ars("skills", "install", "--dest", str(dest), "--link", home=tmp_path)
    assert done.returncode == 0, done.stderr
    skill = dest / "auto-research"
    reference = skill / "references" / "git-workflow.md"
    assert reference.is_symlink() and reference.resolve() == ROOT / "references" / "git-workflow.md"
    assert (skill / "evals" / "evals.json").is_symlink()
    assert (skill / "evals" / "trigger-evals.json").is_symlink()
    assert not (skill / "SKILL.md").is_symlink()  # its links are rewritten
    assert_self_contained(dest)


def test_agents_md_pointer_is_added_once_and_keeps_the_users_text(tmp_path):
    repo = git_repo(tmp_path / "repo")
    (repo / "CLAUDE.md").write_text("# My project\n\nUse tabs.\n")
    args = ("skills", "install", "--scope", "project", "--agents-md")
    assert ars(*args, home=tmp_path, cwd=repo).returncode == 0
    first = {name: (repo / name).read_text() for name in ("CLAUDE.md", "AGENTS.md")}
    assert ars(*args, home=tmp_path, cwd=repo).returncode == 0
    for name, text in first.items():
        assert (repo / name).read_text() == text
        assert text.count(NOTE_BEGIN) == 1 and text.count(NOTE_END) == 1
        assert "auto-research" in text
    assert first["CLAUDE.md"].startswith("# My project\n\nUse tabs.\n")
    assert "`.claude/skills/`" in first["CLAUDE.md"] and "`.agents/skills/`" in first["AGENTS.md"]


# ---------------------------------------------------------------- check on broken skills


def test_check_reports_each_problem_on_one_line(tmp_path):
    skill = tmp_path / "skills" / "Bad_Skill"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: Bad_Skill\ndescription: does things\n---\n\n"
        "Read [the notes](notes.md).\n\n```bash\nars nosuch run x\nars exp start a --bogus 1\n```\n"
    )
    (skill / "evals").mkdir()
    broken = {
        "skill_name": "bad",
        "evals": [{"id": 1, "prompt": "", "expectation": ["x"], "files": ["in.csv"]}],
    }
    (skill / "evals" / "evals.json").write_text(json.dumps(broken))
    (skill / "evals" / "trigger-evals.json").write_text(
        '[{"query": "go", "should_trigger": "yes"}, {"question": "x"}]'
    )
    (skill / "evals.json").write_text('[{"id": 1}]')
    result = CliRunner().invoke(cli, ["skills", "check", "--dir", str(tmp_path / "skills")])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert lines[-1] == f"checked: 1 skills, {len(lines) - 1} problems"
    text = result.output
    for expected in (
        "must be lowercase",
        "invalid characters",
        "Do NOT use for",
        "link notes.md does not resolve",
        "has no command 'nosuch'",
        "has no option --bogus",
        "skill_name is 'bad', expected 'Bad_Skill'",
        "eval id 1 lacks expected_output, expectations",
        "eval id 1: unknown key expectation",
        "eval id 1: prompt must be a non-empty string",
        "eval id 1: file in.csv does not exist",
        "1 evals (at least 3)",
        "evals/trigger-evals.json: case 1: should_trigger must be true or false",
        "case 2 has question: exactly query and should_trigger",
        "0 should-trigger and 0 should-not-trigger cases",
        "Bad_Skill/evals.json: old trigger format",
    ):
        assert expected in text, expected


def test_check_refuses_a_trigger_query_owned_by_two_skills(tmp_path):
    shutil.copytree(ROOT / "skills", tmp_path / "skills")
    path = tmp_path / "skills" / "tmux-monitor" / "evals" / "trigger-evals.json"
    cases = json.loads(path.read_text())
    cases.append(
        {"query": "continue the  lr-sweep campaign until its stop rule says stop.", "should_trigger": True}
    )
    path.write_text(json.dumps(cases))
    _, problems = check(tmp_path / "skills")
    owned = [p for p in problems if "give it one owner" in p.message]
    assert sorted(p.skill for p in owned) == ["auto-research", "tmux-monitor"]
    assert all("auto-research and tmux-monitor" in p.message for p in owned)


def test_installed_skills_carry_their_evals(tmp_path):
    install([tmp_path / "dest"])
    for name in SKILLS:
        for rel in ("evals/evals.json", "evals/trigger-evals.json"):
            assert (tmp_path / "dest" / name / rel).read_text() == (ROOT / "skills" / name / rel).read_text()


def test_check_of_a_missing_folder_is_bad_input(tmp_path):
    result = CliRunner().invoke(cli, ["skills", "check", "--dir", str(tmp_path / "nope")])
    assert result.exit_code == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    done = ars("skills", "check", "--dir", str(empty), home=tmp_path)
    assert done.returncode == 2 and "holds no skill" in done.stderr


# ---------------------------------------------------------------- install mechanics on a small tree


def small_tree(root: Path) -> dict[str, Path]:
    """skills/a links a reference (which links another and a template) and its sibling skill b."""
    files = {
        "skills/a/SKILL.md": "---\nname: a\ndescription: x\n---\nRead [r1](../../references/r1.md#part) "
        "and the [b skill](../b/SKILL.md).\n",
        "skills/b/SKILL.md": "---\nname: b\ndescription: y\n---\nNo links.\n",
        "references/r1.md": "See [r2](r2.md) and [the template](../templates/t.md).\n",
        "references/r2.md": "End.\n",
        "references/unused.md": "Nobody links here.\n",
        "templates/t.md": "Template.\n",
        "README.md": "Top.\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return {"references": root / "references", "templates": root / "templates"}


def test_install_copies_linked_files_transitively_and_rewrites_only_what_moves(tmp_path):
    shared = small_tree(tmp_path / "src")
    dest = tmp_path / "dest"
    install([dest], skills_dir=tmp_path / "src" / "skills", shared=shared)
    a = dest / "a"
    assert sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file()) == [
        MARKER,
        "SKILL.md",
        "references/r1.md",
        "references/r2.md",
        "templates/t.md",
    ]
    assert "](references/r1.md#part)" in (a / "SKILL.md").read_text()
    assert "](../b/SKILL.md)" in (a / "SKILL.md").read_text()  # installed beside it
    assert (a / "references" / "r1.md").read_text() == (tmp_path / "src" / "references" / "r1.md").read_text()
    for md in a.rglob("*.md"):
        for link in find_links(md.read_text()):
            assert (md.parent / link.path_part).resolve().exists(), (md, link.target)


def test_a_link_outside_the_shipped_folders_is_refused(tmp_path):
    shared = small_tree(tmp_path / "src")
    skill = tmp_path / "src" / "skills" / "a"
    (skill / "SKILL.md").write_text("---\nname: a\ndescription: x\n---\nSee [top](../../README.md).\n")
    plan = plan_skill(skill, shared)
    assert len(plan.problems) == 1 and "cannot resolve in an installed skill" in plan.problems[0].message
    with pytest.raises(BadInput, match="README.md"):
        install([tmp_path / "dest"], skills_dir=tmp_path / "src" / "skills", shared=shared)
    assert not (tmp_path / "dest").exists()


def test_tool_scripts_shown_in_a_skill_are_checked_like_their_ars_command():
    shown = "```bash\npython tools/tmux_wait.py exp_lr 30 -L ars\npython tools/tmux_wait.py exp_lr 30 --bogus\n```\n"
    problems = check_commands(shown + "`python tools/no_such_tool.py x`\n")
    assert [line for line, _ in problems] == [3, 5]
    assert "has no option --bogus" in problems[0][1] and "no_such_tool.py does not exist" in problems[1][1]


def test_every_skill_first_checks_that_ars_is_installed():
    from autoresearch_skills.resources import resource_dir

    for skill in sorted(resource_dir("skills").iterdir()):
        body = (skill / "SKILL.md").read_text().split("\n---\n", 1)[1]
        first_block = body.split("```bash\n", 1)[1].split("```", 1)[0]
        assert "ars --version" in first_block, skill.name
        # the package is on no public index: skills install it from a checkout, a wheel or a git URL
        assert "pip install -e" in body, skill.name
