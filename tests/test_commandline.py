"""A command line read through its wrappers: the program that really runs, never an option's value."""

from __future__ import annotations

import pytest

from autoresearch_skills.commandline import WRAPPERS, Command, commands


def one(line: str | list[str]) -> Command:
    (command,) = commands(line)
    return command


# (line, the program that runs, the wrappers in front, what the shell must find)
WRAPPED = [
    ("nice -n 10 python train.py", "python", ("nice",), ("nice", "python")),
    ("nice -n10 python train.py", "python", ("nice",), ("nice", "python")),
    ("nice --adjustment=10 python train.py", "python", ("nice",), ("nice", "python")),
    ("taskset -c 0 python train.py", "python", ("taskset",), ("taskset", "python")),
    ("taskset 0x3 python train.py", "python", ("taskset",), ("taskset", "python")),
    ("timeout 5m python train.py", "python", ("timeout",), ("timeout", "python")),
    ("timeout -s KILL -k 10 5m python train.py", "python", ("timeout",), ("timeout", "python")),
    ("env -u VAR python train.py", "python", ("env",), ("env", "python")),
    ("env -i A=1 B=2 python train.py", "python", ("env",), ("env", "python")),
    ("numactl --cpunodebind=0 --membind=0 python train.py", "python", ("numactl",), ("numactl", "python")),
    ("numactl -N 0 -m 0 python train.py", "python", ("numactl",), ("numactl", "python")),
    ("srun -n1 python train.py", "python", ("srun",), ("srun", "python")),
    ("srun -n 1 --gres gpu:1 -t 10 python train.py", "python", ("srun",), ("srun", "python")),
    ("chrt -f 10 python train.py", "python", ("chrt",), ("chrt", "python")),
    ("ionice -c2 -n7 python train.py", "python", ("ionice",), ("ionice", "python")),
    ("ionice -c 2 -n 7 python train.py", "python", ("ionice",), ("ionice", "python")),
    ("stdbuf -oL -eL python train.py", "python", ("stdbuf",), ("stdbuf", "python")),
    ("stdbuf -o L python train.py", "python", ("stdbuf",), ("stdbuf", "python")),
    ("time -p python train.py", "python", ("time",), ("python",)),  # bash's keyword: nothing to find
    ("/usr/bin/time -f %e python train.py", "python", ("time",), ("/usr/bin/time", "python")),
    ("nohup python train.py", "python", ("nohup",), ("nohup", "python")),
    ("exec -a trainer python train.py", "python", ("exec",), ("python",)),
    ("command -p python train.py", "python", ("command",), ("python",)),
    ("setsid -f python train.py", "python", ("setsid",), ("setsid", "python")),
    (
        "xvfb-run -a -s '-screen 0 640x480x24' python train.py",
        "python",
        ("xvfb-run",),
        ("xvfb-run", "python"),
    ),
    ("CUDA_VISIBLE_DEVICES=0 nohup python train.py", "python", ("nohup",), ("nohup", "python")),
    ("/usr/bin/env python3 train.py", "python3", ("env",), ("/usr/bin/env", "python3")),
    (
        "nice -n 10 srun -n 2 numactl -N 0 python -u train.py",
        "python",
        ("nice", "srun", "numactl"),
        ("nice", "srun", "numactl", "python"),
    ),
]


@pytest.mark.parametrize(("line", "program", "wrappers", "executables"), WRAPPED)
def test_a_wrapper_and_its_option_values_are_seen_through(line, program, wrappers, executables):
    command = one(line)
    assert (command.program, command.wrappers, command.executables) == (program, wrappers, executables)
    assert command.script == "train.py"


# (line, the program that runs, its script, its module, what the shell must find)
RUNNERS = [
    ("python -u train.py --lr 1", "python", "train.py", "", ("python",)),
    ("python -W ignore -X importtime train.py", "python", "train.py", "", ("python",)),
    (".venv/bin/python3.11 train.py", ".venv/bin/python3.11", "train.py", "", (".venv/bin/python3.11",)),
    ("python -m mypkg.train --lr 1", "python", "", "mypkg.train", ("python",)),
    ("python -um mypkg.train", "python", "", "mypkg.train", ("python",)),
    ("python -c 'import train'", "python", "", "", ("python",)),
    ("bash run.sh --fast", "bash", "run.sh", "", ("bash",)),
    ("bash -lc 'python train.py'", "bash", "", "", ("bash",)),
    ("torchrun --nproc_per_node 2 train.py --lr 1", "torchrun", "train.py", "", ("torchrun",)),
    ("torchrun --nproc-per-node=2 --standalone train.py", "torchrun", "train.py", "", ("torchrun",)),
    ("torchrun --nproc_per_node 2 -m mypkg.train", "torchrun", "", "mypkg.train", ("torchrun",)),
    (
        "python -m torch.distributed.run --nproc_per_node 2 --master_port 29500 train.py",
        "python",
        "train.py",
        "torch.distributed.run",
        ("python",),
    ),
    ("accelerate launch --num_processes 2 train.py", "accelerate", "train.py", "", ("accelerate",)),
    (
        "accelerate launch --multi_gpu --fsdp_offload_params true --mixed_precision bf16 train.py",
        "accelerate",
        "train.py",
        "",
        ("accelerate",),
    ),
    ("deepspeed --num_gpus 2 train.py --deepspeed ds.json", "deepspeed", "train.py", "", ("deepspeed",)),
    ("uv run --with rich train.py", "uv", "train.py", "", ("uv",)),
    ("uv run -m mypkg.train", "uv", "", "mypkg.train", ("uv",)),
]


@pytest.mark.parametrize(("line", "program", "script", "module", "executables"), RUNNERS)
def test_a_runner_names_the_script_or_module_it_runs(line, program, script, module, executables):
    command = one(line)
    assert (command.program, command.script, command.module, command.executables) == (
        program,
        script,
        module,
        executables,
    )


def test_the_script_s_own_arguments_stay_its_arguments():
    command = one("deepspeed --num_gpus 2 train.py --deepspeed ds.json")
    assert command.args == ("--deepspeed", "ds.json")
    assert one("torchrun --nproc_per_node 2 train.py --lr 1").args == ("--lr", "1")


@pytest.mark.parametrize(
    "line",
    [
        "uv run --with rich python train.py",
        "uv run -- python train.py",
        "poetry run python train.py",
        "conda run -n torch --no-capture-output python train.py",
        "pixi run -e cuda python train.py",
    ],
)
def test_a_program_an_environment_provides_is_not_looked_for_on_path(line):
    command = one(line)
    assert command.program == "python"
    assert command.executables == (line.split()[0],)
    assert command.script == "train.py"


def test_a_pixi_task_is_no_program_to_find():
    command = one("pixi run train")
    assert (command.program, command.executables) == ("train", ("pixi",))


def test_an_option_value_is_never_the_program():
    for line in (
        "nice -n 10 prog",
        "chrt -f 10 prog",
        "timeout 5m prog",
        "taskset -c 0 prog",
        "srun -n 1 prog",
    ):
        assert one(line).program == "prog", line


def test_an_unknown_option_is_a_flag_and_is_named_when_a_word_follows_it():
    assert one("srun --exclusive python train.py").program == "python"
    assert one("srun --frobnicate=fast python train.py").program == "python"
    assert one("srun --frobnicate 4 python train.py").program == "python"  # a number is no program
    command = one("srun --frobnicate fast python train.py")
    assert (command.program, command.unknown_option) == ("fast", "--frobnicate")


def test_env_runs_its_split_string_and_changes_folder():
    command = one("env -S 'A=1 python -u' train.py")
    assert (command.program, command.script) == ("python", "train.py")
    assert one("env -C sub python train.py").cwd == "sub"
    assert one("srun -D runs/a env -C b python train.py").cwd == "runs/a/b"
    assert one("conda run -n torch --cwd sub python train.py").cwd == "sub"


def test_a_shell_line_is_split_into_its_simple_commands():
    found = commands("cd sub && CUDA_VISIBLE_DEVICES=0 nohup python -u train.py > out.log 2>&1; echo done")
    assert [(c.program, c.args) for c in found] == [("cd", ("sub",)), ("python", ()), ("echo", ("done",))]
    assert [c.executables for c in found] == [(), ("nohup", "python"), ()]
    loop = commands("for lr in 1 2; do python train.py --lr $lr; done")
    assert [c.program for c in loop] == ["for", "python", "done"]
    assert [c.executables for c in loop] == [(), ("python",), ()]


def test_a_program_only_the_shell_can_name_is_not_looked_for():
    command = one("$PYTHON train.py")
    assert (command.program, command.executables, command.script) == ("$PYTHON", (), "")
    assert one("python $SCRIPT").script == ""


def test_an_argv_list_is_one_command():
    command = one(["nice", "-n", "10", "python", "train.py"])
    assert (command.program, command.wrappers, command.script) == ("python", ("nice",), "train.py")


def test_an_unclosed_quote_is_a_value_error():
    with pytest.raises(ValueError, match="No closing quotation"):
        commands("python 'train.py")


def test_every_wrapper_names_a_real_option_spelling():
    for name, wrapper in WRAPPERS.items():
        for option in (wrapper.values + " " + wrapper.chdir).split() + list(wrapper.targets):
            assert option.startswith("-") and " " not in option, (name, option)
        assert set(wrapper.chdir.split()) <= set(wrapper.values.split()), name
