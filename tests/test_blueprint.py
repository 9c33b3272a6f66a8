"""Blueprints: `ars blueprint new` writes them, `check` finds what would break a run before it
starts, `status` reads the result dirs, and the writers leave every run's documents the same way."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
import warm_ars

from autoresearch_skills.blueprint import (
    Attempt,
    check_all,
    diagnose,
    end_attempt,
    launch_environment,
    new_attempt_log,
    parse,
    parse_gpus,
    read_flag,
    read_trial_log,
    session_name,
    start_attempt,
    validation_file,
    write_finish_flag,
    write_results,
)

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "data" / "logs"
TEMPLATE = ROOT / "templates" / "blueprint.md"

SOUND_YAML = """\
ajet:
  execute_test: false
  trainer_common:
    n_gpus_per_node: 4
    test_freq: 10
    total_epochs: 100
    val_before_train: true
    val_print_to_markdown_file_path: auto_agent/exp_results/math_topk50/val_results.md
"""


def ars(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return warm_ars.run(*args, cwd=cwd, timeout=60)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A codebase with a sound AgentJet config; this interpreter stands in for its venv python."""
    code = tmp_path / "project"
    (code / "tests").mkdir(parents=True)
    (code / "tests" / "math_topk50.yaml").write_text(SOUND_YAML)
    return code


def new_blueprint(project: Path, *extra: str, name: str = "math_topk50") -> Path:
    done = ars(
        "blueprint", "new", "--name", name,
        "--purpose", "top-k 50 raises task_pass_rate@1 over top-k 20",
        "--prediction", "+2 points of task_pass_rate@1 by step 200",
        "--codebase", str(project), "--python", sys.executable,
        "--yaml", f"tests/{name}.yaml",
        "--command", f"python -m ajet.launcher --conf tests/{name}.yaml",
        "--gpus", "4", "--max-time", "12h", *extra,
        cwd=project.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return project.parent / "blueprints" / f"{name}.md"


def problems_of(path: Path, cwd: Path) -> tuple[int, list[str]]:
    done = ars("blueprint", "check", str(path), cwd=cwd)
    return done.returncode, done.stderr.splitlines()


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new))


# ---------------------------------------------------------------- check


def test_unfilled_template_fails_check_with_one_clear_line_per_gap(tmp_path):
    done = ars("blueprint", "check", str(TEMPLATE), cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert all(line.startswith(f"{TEMPLATE}: ") and " — " in line for line in lines), lines
    for expected in (
        "title is not filled in",
        "[exp_purpose] the purpose is not filled in (still `<the hypothesis",
        "[exp_codebase_dir] the code path is not filled in (still `</abs/path/to/project>`)",
        "[exp_venv_exe] the python path is not filled in",
        "[exp_yaml_path] the YAML path is not filled in",
        "[exp_launch_command] the launch command is not filled in",
        "[exp_result_dir] the result dir is not filled in",
        "[exp_max_time] the max time is not filled in (still `<24h>`)",
        "[Other Notes] gpus is not filled in (still `<4>`)",
        "[exp_purpose] `prediction:` still holds",
    ):
        assert any(expected in line for line in lines), expected
    assert "problems:" in done.stdout


def test_new_blueprint_from_flags_is_sound(project):
    path = new_blueprint(project)
    done = ars("blueprint", "check", str(path), cwd=project.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "sound: 1 blueprint (math_topk50)"
    assert done.stderr == ""


def test_parse_gives_back_what_new_wrote(project):
    bp = parse(new_blueprint(project, "--first-step-timeout", "15m", "--note", "preparation: none"))
    assert bp.slug == "math_topk50"
    assert bp.purpose == "top-k 50 raises task_pass_rate@1 over top-k 20"
    assert bp.prediction == "+2 points of task_pass_rate@1 by step 200"
    assert bp.codebase == project
    assert bp.python == Path(sys.executable)
    assert bp.yaml == project / "tests" / "math_topk50.yaml"
    assert bp.command == "python -m ajet.launcher --conf tests/math_topk50.yaml"
    assert bp.result_dir == project / "auto_agent" / "exp_results" / "math_topk50"
    assert bp.max_time_seconds == 12 * 3600
    assert (bp.gpus, bp.devices) == (4, ())
    assert bp.first_step_pattern == "actor/kl_loss:"
    assert bp.first_step_timeout_seconds == 15 * 60
    assert "- preparation: none" in bp.notes
    assert bp.issues == []


@pytest.mark.parametrize(
    ("line", "count", "devices"),
    [
        ("4", 4, ()),  # a count, as Slurm's --gpus=4
        ("4 (one node)", 4, ()),  # words after the spec are a comment
        ("4,5,6,7", 4, (4, 5, 6, 7)),  # device ids, as CUDA_VISIBLE_DEVICES
        ("4, 5, 6, 7", 4, (4, 5, 6, 7)),
        ("4-7", 4, (4, 5, 6, 7)),
        ("4,", 1, (4,)),  # one device alone
        ("[4]", 1, (4,)),
        ("CUDA_VISIBLE_DEVICES=4", 1, (4,)),
        ("`CUDA_VISIBLE_DEVICES=4,5`", 2, (4, 5)),
    ],
)
def test_a_gpus_line_is_a_count_or_device_ids(line, count, devices):
    spec = parse_gpus(line)
    assert (spec.count, spec.devices) == (count, devices)


def test_new_writes_one_device_so_that_it_reads_back_as_that_device(project):
    path = project.parent / "one.md"
    done = ars(
        "blueprint", "new", "--purpose", "one GPU run", "--codebase", str(project), "--command", "bash run.sh",
        "--gpus", "[4]", "-o", str(path), cwd=project.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "- gpus: 4,\n" in path.read_text()
    bp = parse(path)
    assert (bp.gpus, bp.devices) == (1, (4,))
    refused = ars(
        "blueprint", "new", "--purpose", "x", "--codebase", str(project), "--command", "true", "--gpus", "gpu4",
        "-o", str(project.parent / "two.md"), cwd=project.parent,
    )  # fmt: skip
    assert refused.returncode == 2
    assert 'gpus gpu4: write "4," or [4] for device 4 alone' in refused.stderr


def test_new_writes_the_defaults_and_a_todo_list(project):
    done = ars(
        "blueprint", "new", "--purpose", "baseline run of the math benchmark",
        "--codebase", str(project), "--command", "bash run.sh", "-o", "bp.md",
        cwd=project.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    bp = parse(project.parent / "bp.md")
    assert bp.slug == "baseline_run_of_the_math_benchmark"
    assert bp.max_time_seconds == 24 * 3600 and bp.first_step_timeout_seconds == 20 * 60
    assert bp.yaml is None and bp.gpus == 1
    assert bp.python == project / ".venv" / "bin" / "python"
    text = (project.parent / "bp.md").read_text()
    assert "  - [ ] write finish.flag last" in text
    assert "  - [ ] write the prediction into [exp_purpose] before the run" in text
    assert "tmux session: ajet_baseline_run_of_the_math_benchmark" in text


def test_new_refuses_to_overwrite_unless_forced(project):
    path = new_blueprint(project)
    path.write_text(path.read_text() + "- my own note\n")
    before = path.read_text()
    done = ars(
        "blueprint", "new", "--name", "math_topk50", "--purpose", "other", "--codebase", str(project),
        "--command", "true", cwd=project.parent,
    )  # fmt: skip
    assert done.returncode == 2
    assert "exists" in done.stderr and "--force" in done.stderr
    assert path.read_text() == before
    forced = ars(
        "blueprint", "new", "--name", "math_topk50", "--purpose", "other", "--codebase", str(project),
        "--command", "true", "--force", cwd=project.parent,
    )  # fmt: skip
    assert forced.returncode == 0, forced.stderr
    assert parse(path).purpose == "other"


def test_new_from_a_plan_writes_one_blueprint_per_entry(project):
    plan = project.parent / "plan.yaml"
    plan.write_text(
        f"""\
defaults:
  codebase: {project.name}
  python: {sys.executable}
  gpus: 4
  max-time: 6h
  yaml: tests/{{name}}.yaml
  command: python -m ajet.launcher --conf tests/{{name}}.yaml
  result_root: runs
  notes: ["preparation: copy the config to {{name}}.yaml"]
blueprints:
  - name: math_topk20
    purpose: top-k 20 is the baseline
  - name: math_topk50
    purpose: top-k 50 raises pass@1
    gpus: "4,5,6,7"
    prediction: +2 points
"""
    )
    done = ars("blueprint", "new", "--from", str(plan), "--out-dir", "bps", "--json", cwd=project.parent)
    assert done.returncode == 0, done.stderr
    written = [Path(p) for p in json.loads(done.stdout)["written"]]
    assert [p.name for p in written] == ["math_topk20.md", "math_topk50.md"]
    first, second = (parse(project.parent / p) for p in written)
    assert first.codebase == project  # relative to the plan's folder
    assert first.command == "python -m ajet.launcher --conf tests/math_topk20.yaml"
    assert first.result_dir == project / "runs" / "math_topk20"
    assert first.max_time_seconds == 6 * 3600 and first.gpus == 4
    assert (second.gpus, second.devices) == (4, (4, 5, 6, 7))
    assert second.prediction == "+2 points"
    assert "- preparation: copy the config to math_topk50.yaml" in second.notes
    again = ars("blueprint", "new", "--from", str(plan), "--out-dir", "bps", cwd=project.parent)
    assert again.returncode == 2 and "exists" in again.stderr


def test_plan_with_an_unknown_key_is_refused_naming_it(tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("blueprints:\n  - name: a\n    purpose: p\n    codebase: /tmp\n    comand: x\n")
    done = ars("blueprint", "new", "--from", str(plan), cwd=tmp_path)
    assert done.returncode == 2
    assert "blueprint 1 has unknown key 'comand'" in done.stderr
    assert not (tmp_path / "blueprints").exists()


def test_shipped_plan_template_makes_blueprints(tmp_path):
    done = ars("blueprint", "new", "--from", str(ROOT / "templates" / "blueprint-plan.yaml"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in (tmp_path / "blueprints").iterdir())
    assert names == ["math_topk20.md", "math_topk50.md"]


def test_init_offers_and_copies_the_plan_template(tmp_path):
    listed = ars("init", "--list", cwd=tmp_path)
    assert any(line.startswith("blueprint-plan: ") for line in listed.stdout.splitlines())
    done = ars("init", "blueprint-plan", "plan.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "plan.yaml").read_text() == (ROOT / "templates" / "blueprint-plan.yaml").read_text()
    assert "ars blueprint new --from plan.yaml" in done.stdout
    again = ars("init", "blueprint-plan", "plan.yaml", cwd=tmp_path)
    assert again.returncode == 2 and "exists" in again.stderr


BROKEN = {
    "missing section": (
        ("## [exp_venv_exe]\n", "## Notes on the python\n"),
        "[exp_venv_exe] section `## [exp_venv_exe]` is missing",
    ),
    "relative codebase": (("- path: {project}\n", "- path: project\n"), "[exp_codebase_dir] project is not an absolute path"),
    "missing codebase": (("- path: {project}\n", "- path: {project}-gone\n"), "-gone does not exist"),
    "missing python": (("- path: {python}\n", "- path: /nonexistent/bin/python\n"), "[exp_venv_exe] /nonexistent/bin/python does not exist"),
    "unparsable max time": (("- max time: 12h", "- max time: until it works"), "[exp_max_time] max time `until it works` does not parse"),
    "first step after max time": (("- max time: 12h", "- max time: 10m"), "the first-step timeout (20m) is not shorter than the max time (10m)"),
    "bad gpus": (("- gpus: 4", "- gpus: lots"), "[Other Notes] gpus lots is not a count (4: any four GPUs) or device ids"),
    "zero gpus": (("- gpus: 4", "- gpus: 0"), '[Other Notes] gpus 0 is a count of zero GPUs; to pin device 0 write "0," or [0]'),
    "a torch device": (("- gpus: 4", "- gpus: cuda:4"), '[Other Notes] gpus cuda:4: write "4," or [4] for device 4 alone'),
    "no gpus line": (("- gpus: 4\n", ""), "[Other Notes] says nothing about GPUs"),
    "empty command": (("- command: `python -m ajet.launcher --conf tests/math_topk50.yaml`", "- command:"), "[exp_launch_command] the launch command is empty"),
    "command runs another config": (("--conf tests/math_topk50.yaml`", "--conf tests/math_topk20.yaml`"), "passes a config but not math_topk50.yaml"),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_each_kind_of_broken_blueprint_fails_with_its_line(project, kind):
    path = new_blueprint(project)
    (old, new), expected = BROKEN[kind]
    values = {"project": str(project), "python": sys.executable}
    edit(path, old.format(**values), new.format(**values))
    code, lines = problems_of(path, project.parent)
    assert code == 2
    matching = [line for line in lines if expected in line]
    assert matching, (expected, lines)
    assert matching[0].startswith(f"{path}: ") and " — " in matching[0]


def test_a_python_that_does_not_start_is_reported(project):
    path = new_blueprint(project)
    broken = project / "bin" / "python"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named encodings' >&2\nexit 1\n")
    broken.chmod(0o755)
    edit(path, f"- path: {sys.executable}\n", f"- path: {broken}\n")
    code, lines = problems_of(path, project.parent)
    assert code == 2
    assert any(f"{broken} fails to start: ModuleNotFoundError" in line for line in lines), lines


def test_invalid_yaml_is_reported_with_its_line(project):
    path = new_blueprint(project)
    (project / "tests" / "math_topk50.yaml").write_text("ajet:\n  trainer_common: [unclosed\n")
    code, lines = problems_of(path, project.parent)
    assert code == 2
    assert any("[exp_yaml_path]" in line and "is not valid YAML (line" in line for line in lines), lines


def test_result_dir_that_cannot_be_created_is_reported(project):
    path = new_blueprint(project)
    (project / "auto_agent").write_text("a file where a folder should be")
    code, lines = problems_of(path, project.parent)
    assert code == 2
    assert any(
        "[exp_result_dir]" in line and "cannot be created" in line and "is a file" in line for line in lines
    )


def test_result_dir_holding_an_old_finish_flag_is_reported(project):
    path = new_blueprint(project)
    folder = project / "auto_agent" / "exp_results" / "math_topk50"
    folder.mkdir(parents=True)
    (folder / "finish.flag").write_text("status: ok\n")
    code, lines = problems_of(path, project.parent)
    assert code == 2
    assert any("already holds finish.flag" in line and "fresh result dir" in line for line in lines)
    assert check_all([parse(path)], finished_ok=True) == []  # a swarm skips what is over


def test_a_relative_validation_file_is_where_the_run_ran(project, tmp_path):
    bp = parse(new_blueprint(project))
    assert validation_file(bp) == project / "auto_agent/exp_results/math_topk50/val_results.md"
    worktree = tmp_path / "wt-1" / "project"
    assert validation_file(bp, worktree) == worktree / "auto_agent/exp_results/math_topk50/val_results.md"


def test_agentjet_settings_people_get_wrong_are_flagged_with_the_fix(project):
    path = new_blueprint(project)
    (project / "tests" / "math_topk50.yaml").write_text(
        "ajet:\n  execute_test: True\n  trainer_common:\n    test_freq: 999999\n    n_gpus_per_node: 8\n"
    )
    code, lines = problems_of(path, project.parent)
    assert code == 2
    result_dir = project / "auto_agent" / "exp_results" / "math_topk50"
    for expected in (
        "ajet.execute_test is True: its test probe stops training — set ajet.execute_test: false",
        "ajet.trainer_common.val_before_train is not set (AgentJet's default is false)",
        "— set ajet.trainer_common.val_before_train: true",
        "ajet.trainer_common.test_freq is 999999",
        "— set ajet.trainer_common.test_freq: 10",
        "ajet.trainer_common.total_epochs is not set",
        "ajet.trainer_common.n_gpus_per_node is 8 but the blueprint gets 4 GPUs",
        f"— set ajet.trainer_common.val_print_to_markdown_file_path: {result_dir}/val_results.md",
    ):
        expected = expected.replace(
            "stops training —", "stops training when the reward falls below a threshold —"
        )
        assert any(expected in line for line in lines), (expected, lines)
    assert all("[exp_yaml_path]" in line for line in lines)


def test_dotted_keys_and_command_overrides_are_read_like_nested_ones(project):
    path = new_blueprint(project)
    (project / "tests" / "math_topk50.yaml").write_text(
        SOUND_YAML.replace("    test_freq: 10\n", "") + "ajet.trainer_common.test_freq: 0\n"
    )
    code, lines = problems_of(path, project.parent)
    assert code == 2
    assert [line.split(" — ")[0].split("] ", 1)[1] for line in lines] == [
        "ajet.trainer_common.test_freq is 0: the run never validates"
    ]
    # verl: no YAML, every setting on the command line (Hydra overrides)
    edit(path, "- path: tests/math_topk50.yaml", "- path: NA")
    edit(
        path,
        "`python -m ajet.launcher --conf tests/math_topk50.yaml`",
        "`python3 -m verl.trainer.main_ppo trainer.n_gpus_per_node=8 trainer.test_freq=5 trainer.total_epochs=15`",
    )
    code, lines = problems_of(path, project.parent)
    assert code == 2
    assert len(lines) == 1, lines
    assert "[exp_launch_command] trainer.n_gpus_per_node is 8 but the blueprint gets 4 GPUs" in lines[0]


def test_check_json_and_cross_blueprint_clashes(project):
    first = new_blueprint(project)
    second = new_blueprint(project, "--result-dir", "auto_agent/exp_results/math_topk50", name="math_topk20")
    (project / "tests" / "math_topk20.yaml").write_text(SOUND_YAML)
    done = ars("blueprint", "check", str(first.parent), "--json", cwd=project.parent)
    assert done.returncode == 2
    report = json.loads(done.stdout)
    assert report["ok"] is False
    # in file order: the second to claim the folder is the one told
    (sound, clashing) = report["blueprints"]
    assert (sound["name"], sound["ok"], clashing["ok"]) == ("math_topk20", True, False)
    assert [p["section"] for p in clashing["problems"]] == ["exp_result_dir"]
    assert f"is also the result dir of {second}" in clashing["problems"][0]["message"]
    assert clashing["file"] == str(first)


def test_a_missing_file_is_one_problem_line(tmp_path):
    done = ars("blueprint", "check", "nope.md", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("nope.md: does not exist")


def test_agentjet_style_hand_written_blueprint_parses(tmp_path):
    path = tmp_path / "blueprint_1.md"
    path.write_text(
        """\
# Experiment Blueprint - Qwen2.5-14B with LoRA rank 16

## [exp_purpose]
- description: Experiment Purpose
- purpose: LoRA rank 16 on appworld, against the full fine-tune

## [exp_codebase_dir]
- description: Main experiment code path (absolute path)
- dir: /foo/bar/codebase

## [exp_venv_exe]
- /foo/bar/venv/.venv/bin/python

## [exp_yaml_path] (only needed in classic mode)
- path: /foo/bar/codebase/tests/appworld.yaml

Note: this yaml file must set model.lora.lora_rank: 16

## [exp_launch_command]
- description: Training execution command
- command:
    cd /foo/bar/codebase && \\
    python -m ajet.launcher --conf tests/appworld.yaml --with-appworld
- hint: adjust to the system

## [exp_result_dir]
- path: /foo/bar/results/qwen_lora16/

## [exp_max_time]
- 12h; first step (actor/kl_loss:) within 30 min

## Other Notes
- GPUs: CUDA_VISIBLE_DEVICES=4,5,6,7
### Preparatory work
1. download appworld
"""
    )
    bp = parse(path)
    assert bp.issues == []
    assert bp.purpose == "LoRA rank 16 on appworld, against the full fine-tune"
    assert bp.slug == "lora_rank_16_on_appworld_against"
    assert bp.codebase == Path("/foo/bar/codebase")
    assert bp.python == Path("/foo/bar/venv/.venv/bin/python")
    assert bp.command == (
        "cd /foo/bar/codebase && \\\npython -m ajet.launcher --conf tests/appworld.yaml --with-appworld"
    )
    assert bp.max_time_seconds == 12 * 3600
    assert bp.first_step_timeout_seconds == 30 * 60
    assert bp.first_step_pattern == "actor/kl_loss:"
    assert (bp.gpus, bp.devices) == (4, (4, 5, 6, 7))
    assert "1. download appworld" in bp.notes


# ---------------------------------------------------------------- names and environment


def test_session_names_contain_ajet_and_the_name():
    assert session_name("math_topk50") == "ajet_math_topk50"
    assert session_name("math_topk50", attempt=3) == "ajet_math_topk50_try3"
    assert session_name("ajet_lr_3e-6") == "ajet_lr_3e_6"
    assert session_name("Top-K 50: math!") == "ajet_top_k_50_math"


def test_launch_environment_puts_the_venv_first_and_pins_gpus(project):
    bp = parse(new_blueprint(project))
    env = launch_environment(bp, devices=[4, 5])
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)
    assert env["CUDA_VISIBLE_DEVICES"] == "4,5"


# ---------------------------------------------------------------- the result dir


def test_each_attempt_gets_a_fresh_log_and_none_is_truncated(tmp_path):
    folder = tmp_path / "results"
    number, log = new_attempt_log(folder)
    assert (number, log.name) == (1, "attempt-1.log")
    log.write_text("attempt 1 output\n")
    number, second = new_attempt_log(folder)
    assert (number, second.name) == (2, "attempt-2.log")
    assert log.read_text() == "attempt 1 output\n"
    start_attempt(folder, Attempt(5, session="ajet_x_try5"))  # recorded by hand, its log gone
    assert new_attempt_log(folder)[0] == 6


def test_trial_log_records_start_and_end_of_each_attempt(tmp_path):
    folder = tmp_path / "results"
    start_attempt(
        folder,
        Attempt(
            1, started_at="2026-03-01T14:00:00+00:00", session="ajet_m", devices="0,1", command="python a.py"
        ),
        title="m",
    )
    end_attempt(folder, 1, verdict="failed", exit_status=1, diagnosis="cuda_oom line 22", fix="batch 8 -> 4")
    start_attempt(
        folder, Attempt(2, session="ajet_m_try2", devices="0,1", command="python a.py\n  --batch 4")
    )
    with open(folder / "trial_log.md", "a") as handle:  # a note written by hand in between
        handle.write("## A note\n- the node was busy\n")
    end_attempt(folder, 2, verdict="ok", exit_status=0)
    text = (folder / "trial_log.md").read_text()
    assert text.startswith("# Trial log: m\n")
    assert "## Attempt 2 (end)" in text
    first, second = read_trial_log(folder)
    assert (first.session, first.devices, first.exit_status, first.verdict) == ("ajet_m", "0,1", 1, "failed")
    assert (first.diagnosis, first.fix) == ("cuda_oom line 22", "batch 8 -> 4")
    assert first.started_at == "2026-03-01T14:00:00+00:00" and first.ended_at
    assert second.command.splitlines() == ["python a.py", "--batch 4"]  # common indentation dropped
    assert (second.verdict, second.exit_status, second.running) == ("ok", 0, False)


def test_a_suggested_fix_is_not_a_fix_and_a_handwritten_fix_keeps_the_next_heading_apart(tmp_path):
    folder = tmp_path / "results"
    start_attempt(folder, Attempt(1, session="ajet_m", other={"branch": "autoresearch/x/m", "commit": "abc"}))
    end_attempt(folder, 1, verdict="failed", exit_status=1, suggestion="halve the micro-batch")
    with open(folder / "trial_log.md", "a") as handle:  # the agent's fix, appended by hand
        handle.write("- fix: ppo_micro_batch_size_per_gpu 8 -> 4")
    start_attempt(folder, Attempt(2, session="ajet_m_try2"))
    text = (folder / "trial_log.md").read_text()
    assert "- branch: autoresearch/x/m\n- commit: abc\n" in text
    assert "- fix: ppo_micro_batch_size_per_gpu 8 -> 4\n\n## Attempt 2\n" in text
    first, second = read_trial_log(folder)
    assert first.fix == "ppo_micro_batch_size_per_gpu 8 -> 4"
    assert first.other == {
        "branch": "autoresearch/x/m",
        "commit": "abc",
        "suggested fix": "halve the micro-batch",
    }
    assert (second.number, second.running) == (2, True)


def test_diagnose_names_the_catalogue_kind(tmp_path):
    diagnosis, fix = diagnose(LOGS / "karpathy_oom.log")
    assert diagnosis.startswith("cuda_oom line ")
    assert "micro-batch" in fix
    clean = tmp_path / "clean.log"
    clean.write_text("step 1 loss 2.0\n")
    assert diagnose(clean) == ("", "")


def finished_blueprint(project: Path, log: Path, validation: Path | None = None):
    bp = parse(new_blueprint(project))
    number, attempt_log = new_attempt_log(bp.result_dir)
    start_attempt(
        bp.result_dir, Attempt(number, session=session_name(bp), devices="0,1,2,3", log=str(attempt_log))
    )
    shutil.copyfile(log, attempt_log)
    end_attempt(bp.result_dir, number, verdict="ok", exit_status=0)
    if validation is not None:
        target = bp.result_dir / "val_results.md"  # where the YAML's val_print_to_markdown_file_path points
        shutil.copyfile(validation, target)
    return bp


def test_results_md_from_agentjet_validation_markdown_and_verl_log(project):
    bp = finished_blueprint(project, LOGS / "verl_console.log", LOGS / "agentjet_val_results.md")
    results = write_results(bp, "ok")
    assert results.headline == "task_pass_rate@1 96.490000 at step 20"
    text = results.path.read_text()
    assert "- headline: task_pass_rate@1 96.490000 at step 20" in text
    assert f"- validation file: {bp.result_dir / 'val_results.md'}" in text
    assert "| task_pass_rate@4 | 91.230000 at step 0 | 98.250000 at step 20 |" in text
    assert (
        "| mean_reward | 0.441800 at step 0 | 0.537800 at step 20 | 0.537800 at step 20 (max) | 3 |" in text
    )
    assert "| std_reward |" in text and "| pass_n |" not in text
    assert "## Training log" in text
    assert "| actor/kl_loss | 0.001100 at step 1 | 0.001500 at step 5 |" in text
    assert "- attempt 1: ok, exit 0" in text


def test_results_md_from_validation_dict_lines_reports_best_and_last(project):
    bp = finished_blueprint(project, LOGS / "verl_console.log", LOGS / "agentjet_val_dict.md")
    results = write_results(bp, "ok")
    assert results.headline == "task_pass_rate@1 0.785088 at step 40 (best 0.802632 at step 20)"


def test_results_md_reads_any_preset(project):
    bp = finished_blueprint(project, LOGS / "karpathy.log")
    results = write_results(
        bp, "ok", preset="karpathy", metrics=["val_bpb"], validation=LOGS / "karpathy.log"
    )
    assert results.headline.startswith("val_bpb 0.99")


def test_results_md_of_a_failed_blueprint_says_what_is_missing(project):
    bp = finished_blueprint(project, LOGS / "karpathy_oom.log")
    results = write_results(bp, "failed", note="OOM on every batch size tried")
    text = results.path.read_text()
    assert results.headline == ""
    assert "- headline: none (no metric found)" in text
    assert "## Missing figures" in text and "no verl metrics in" in text
    assert "OOM on every batch size tried" in text


def test_finish_flag_comes_last_atomically_with_the_final_status(project, monkeypatch):
    bp = finished_blueprint(project, LOGS / "verl_console.log", LOGS / "agentjet_val_results.md")
    with pytest.raises(FileNotFoundError, match="write results.md before finish.flag"):
        write_finish_flag(bp.result_dir, "ok")
    results = write_results(bp, "ok")
    with pytest.raises(ValueError, match="unknown final status"):
        write_finish_flag(bp.result_dir, "great")

    def crash(*args):  # the process dies between writing the temp file and renaming it
        raise OSError("killed")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        write_finish_flag(bp.result_dir, "ok", results.headline)
    assert not (bp.result_dir / "finish.flag").exists()  # no half-written flag is ever visible
    monkeypatch.undo()
    write_finish_flag(bp.result_dir, "ok", results.headline)
    assert read_flag(bp.result_dir / "finish.flag") == {
        "status": "ok",
        "ended_at": read_flag(bp.result_dir / "finish.flag")["ended_at"],
        "attempts": "1",
        "headline": "task_pass_rate@1 96.490000 at step 20",
    }


# ---------------------------------------------------------------- status


def test_status_reads_each_blueprints_result_dir(project):
    names = ["a_queued", "b_running", "c_retrying", "d_finished", "e_touched"]
    paths = {name: new_blueprint(project, name=name) for name in names}
    results = {name: parse(path).result_dir for name, path in paths.items()}
    start_attempt(
        results["b_running"],
        Attempt(1, started_at="2020-01-01T00:00:00+00:00", session="ajet_b_running", devices="0,1"),
    )
    start_attempt(results["c_retrying"], Attempt(1, session="ajet_c_retrying"))
    end_attempt(
        results["c_retrying"],
        1,
        verdict="failed",
        exit_status=1,
        diagnosis="cuda_oom line 22: CUDA out of memory (...)",
    )
    folder = results["d_finished"]
    start_attempt(folder, Attempt(1))
    end_attempt(folder, 1, verdict="ok", exit_status=0)
    (folder / "results.md").write_text("# Results\n\n- headline: mean_reward 0.5378 at step 20\n")
    write_finish_flag(folder, "ok", "mean_reward 0.5378 at step 20")
    results["e_touched"].mkdir(parents=True)
    (results["e_touched"] / "results.md").write_text("- headline: task_pass_rate@1 91 at step 10\n")
    (results["e_touched"] / "finish.flag").touch()  # by hand, as AgentJet's own workers do

    done = ars("blueprint", "status", cwd=project.parent)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "a_queued: queued (needs 4 GPUs)"
    assert lines[1].startswith("b_running: running attempt 1 on GPUs 0,1 for ")
    assert lines[1].endswith("(session ajet_b_running)")
    assert lines[2] == "c_retrying: attempt 1 ended (failed: cuda_oom line 22); no finish.flag yet"
    assert lines[3] == "d_finished: finished ok: mean_reward 0.5378 at step 20 (1 attempt)"
    assert lines[4] == "e_touched: finished unknown: task_pass_rate@1 91 at step 10"
    assert lines[5] == "blueprints: 5 (1 queued, 1 running, 1 between attempts, 2 finished)"

    as_json = json.loads(ars("blueprint", "status", "blueprints", "--json", cwd=project.parent).stdout)
    running = next(s for s in as_json if s["slug"] == "b_running")
    assert running["state"] == "running" and running["devices"] == "0,1" and running["elapsed_s"] > 3600


def test_status_of_a_swarm_blueprint_comes_from_its_record_and_unrecorded_rows(project):
    from autoresearch_skills.blueprint import blueprint_status
    from autoresearch_skills.campaign.record import Experiment
    from autoresearch_skills.ledger import Row

    bp = parse(new_blueprint(project))
    opened = {
        "slug": "math-topk50",
        "description": "topk50",
        "branch": "b/math-topk50",
        "branch_start": "abc",
    }
    queued = blueprint_status(bp, [], in_flight=Experiment.from_json({**opened, "phase": "queued"}))
    assert queued.line() == "math_topk50: queued (needs 4 GPUs)"
    run = {
        "launcher": "tmux", "run_id": "ajet_math_topk50_try2", "log_path": "x.log", "state_path": "x.log.run.json",
        "name": "ajet_math_topk50_try2", "command": "python train.py", "started_at": "2020-01-01T00:00:00+00:00",
    }  # fmt: skip
    record = {
        **opened, "phase": "running", "started_at": "2020-01-01T00:00:00+00:00", "devices": [4, 5, 6, 7],
        "run": run, "blueprint": {"attempt": 2},
    }  # fmt: skip
    running = blueprint_status(bp, [], in_flight=Experiment.from_json(record))
    assert running.line().startswith("math_topk50: running attempt 2 on GPUs 4,5,6,7 for ")
    log = bp.result_dir / "003-math-topk50.log"
    start_attempt(bp.result_dir, Attempt(1, session="ajet_math_topk50", log=str(log)))
    row = Row(index=3, status="crash", log_path=str(log))  # reaped by `ars exp wait`, not yet recorded
    ended = blueprint_status(bp, [row])
    assert ended.state == "between_attempts" and ended.status == "row #3 crash"
    assert "the next `ars blueprint run` records it" in ended.line()


def test_status_takes_the_figure_from_the_ledger_when_the_flag_has_none(project):
    from autoresearch_skills import ledger

    bp = parse(new_blueprint(project))
    bp.result_dir.mkdir(parents=True)
    (bp.result_dir / "finish.flag").write_text("status: ok\n")
    ledger.init(project.parent / "results.tsv")
    ledger.append(
        project.parent / "results.tsv",
        {"metric_name": "task_pass_rate@1", "metric_value": 0.93, "status": "keep",
         "log_path": str(bp.result_dir / "attempt-1.log")},
    )  # fmt: skip
    done = ars("blueprint", "status", "blueprints", cwd=project.parent)
    assert (
        done.stdout.splitlines()[0]
        == "math_topk50: finished ok: task_pass_rate@1 0.93 (ledger row 0) (1 attempt)"
    )


# ---------------------------------------------------------------- the tool script


def test_blueprint_script_runs_from_a_checkout_without_the_package(tmp_path):
    only_click = tmp_path / "site"
    only_click.mkdir()
    (only_click / "click").symlink_to(Path(click.__file__).parent)
    done = subprocess.run(
        [sys.executable, "-S", str(ROOT / "tools" / "blueprint.py"), "check", str(TEMPLATE)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(only_click)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    assert "[exp_codebase_dir] the code path is not filled in" in done.stderr


def test_run_without_blueprints_says_what_to_give(tmp_path):
    done = ars("blueprint", "run", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "Error: give blueprint files or their folder (or --name SWARM to follow a swarm)"
    )
    missing = ars("blueprint", "run", "x.md", "--gpus", "0-7", cwd=tmp_path)
    assert missing.returncode == 2 and "x.md does not exist" in missing.stderr


def test_finish_writes_results_then_the_flag_and_refuses_twice(project):
    bp = finished_blueprint(project, LOGS / "verl_console.log", LOGS / "agentjet_val_results.md")
    path = project.parent / "blueprints" / "math_topk50.md"
    done = ars("blueprint", "finish", str(path), "--status", "ok", cwd=project.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"results: {bp.result_dir / 'results.md'}",
        "headline: task_pass_rate@1 96.490000 at step 20",
        f"finish.flag: {bp.result_dir / 'finish.flag'} (status ok)",
    ]
    assert read_flag(bp.result_dir / "finish.flag")["status"] == "ok"
    again = ars("blueprint", "finish", str(path), "--status", "failed", cwd=project.parent)
    assert again.returncode == 2 and "exists (status ok)" in again.stderr
    assert read_flag(bp.result_dir / "finish.flag")["status"] == "ok"
