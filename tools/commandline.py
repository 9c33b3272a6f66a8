"""What a command line runs, seen through the wrappers in front of its program.

Contract (pure: no I/O, nothing looked up on PATH):
    commands(line)   for a shell line (a string: split at `&&`, `;`, `|` ..., redirections and
                     leading NAME=VALUE words dropped) or an argv list, one Command per simple
                     command: the program it really runs and its arguments, the wrappers in front,
                     the executables the shell must find, and the script or module a runner runs.
                     ValueError on a line the shell could not split (an unclosed quote).

`nice -n 10 python train.py` runs python, not `10`. Each wrapper in WRAPPERS says which of its
options take a value (as the next word `-n 10`, or attached: `-n10`, `--adjustment=10`), how many
plain words stand between its options and its program (taskset's CPU list, timeout's duration), and
what it runs: a program (perhaps wrapped again: `srun nice python`), a script (`torchrun ... train.py`),
or either (`uv run train.py`). Python and the shells are runners read the same way:
`python -m MODULE` runs the module (`-m torch.distributed.run` then reads like torchrun), and
`-c CODE` names no file.
A `cd DIR` is a Command whose program is `cd`; the caller follows it.

Limits: an option the table does not know is a flag (`--opt=value` and `-x` included), except that an
unknown `--opt` of a wrapper without operands takes the next word as its value when that word cannot
be a program (it starts with a digit, has no lower-case letter, or is true/false). Any other value of an
unknown option is taken for the program; the Command names that option (`unknown_option`), so a caller
can say "write `--opt=value`". A two-word wrapper (`uv run`) is seen when its words are adjacent; the
code inside `bash -c CODE` is not read. A program run in an environment (`uv run`, `conda run`,
`poetry run`, `pixi run`) comes from that environment, not from this PATH, so it is not listed to
find; the script it runs is.
"""

from __future__ import annotations

import dataclasses
import enum
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"}
LEADING_KEYWORDS = {"if", "then", "do", "else", "elif", "while", "until", "!", "{"}  # a command follows
BUILTINS = {"cd", "export", "source", ".", "set", "unset", "ulimit", "true", "false", ":", "echo", "exit", "trap", "umask", "wait", "printf", "test", "[", "[[", "for", "case", "select", "done", "fi", "esac", "}"}  # fmt: skip
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")


class Target(enum.Enum):
    """What follows a wrapper's or runner's own options."""

    PROGRAM = "program"  # a command, itself perhaps wrapped: `nice -n 10 python ...`
    SCRIPT = "script"  # a file the runner runs: `python train.py`, `torchrun ... train.py`
    PROGRAM_OR_SCRIPT = "program or script"  # `uv run train.py` runs python on it, `uv run pytest` a program
    MODULE = "module"  # `python -m MODULE`, `torchrun -m MODULE`
    CODE = "code"  # `python -c CODE`, `bash -c CODE`: no file
    WORDS = "words"  # `env -S "python -u"`: the value is split into words read in its place


@dataclass(frozen=True)
class Wrapper:
    """How a wrapper (or runner) reads its own words before what it runs."""

    values: str = ""  # options that take a value, short and long, space-separated
    operands: int = 0  # plain words between its options and what it runs
    runs: Target = Target.PROGRAM  # what follows its options and operands
    targets: Mapping[str, Target] = field(default_factory=dict)  # options that say what follows instead
    chdir: str = ""  # options whose value is the folder it runs its program in
    assignments: bool = False  # NAME=VALUE words among its options set the environment
    environment: bool = False  # what it runs comes from an environment, not from this PATH
    builtin: bool = False  # a shell keyword or builtin when written bare: nothing to find on PATH


# The long option lists, one per wrapper that has many; short and long spellings, `_` read as `-`.
ENV_VALUES = "-u --unset -C --chdir -S --split-string"
NUMACTL_VALUES = "-N --cpunodebind -C --physcpubind -m --membind -p --preferred -i --interleave -P --preferred-many -w --weighted-interleave"  # fmt: skip
SRUN_VALUES = "-n --ntasks -N --nodes -c --cpus-per-task -p --partition -t --time -J --job-name -G --gpus --gres --gpus-per-node --gpus-per-task --cpus-per-gpu --mem --mem-per-cpu --mem-per-gpu --ntasks-per-node -A --account -q --qos -w --nodelist -x --exclude -o --output -e --error -i --input -D --chdir -C --constraint --cpu-bind --mpi --export -d --dependency -m --distribution --reservation --container --signal --begin -W --wait -T --threads -r --relative --het-group --network --time-min --comment"  # fmt: skip
XVFB_VALUES = "-n --server-num -e --error-file -f --auth-file -p --xauth-protocol -s --server-args -w --wait"
UV_RUN_VALUES = "--with --with-editable --with-requirements -p --python --directory --project --package --extra --no-extra --group --only-group --no-group --env-file --index --default-index -i --index-url --extra-index-url -f --find-links --index-strategy --keyring-provider --resolution --prerelease --exclude-newer --link-mode -C --config-setting -P --upgrade-package --reinstall-package --refresh-package --no-binary-package --no-build-package --python-platform --cache-dir --config-file --color --allow-insecure-host"  # fmt: skip
TORCHRUN_VALUES = "--nnodes --nproc-per-node --rdzv-backend --rdzv-endpoint --rdzv-id --rdzv-conf --node-rank --master-addr --master-port --max-restarts --monitor-interval --start-method --role --log-dir -r --redirects -t --tee --local-addr --logs-specs --local-ranks-filter"  # fmt: skip
ACCELERATE_VALUES = "--config-file --num-processes --num-machines --machine-rank --main-process-ip --main-process-port --mixed-precision --gpu-ids --dynamo-backend --dynamo-mode --deepspeed-config-file --zero-stage --offload-optimizer-device --offload-param-device --gradient-accumulation-steps --gradient-clipping --num-cpu-threads-per-process --rdzv-backend --max-restarts --monitor-interval --fsdp-sharding-strategy --fsdp-auto-wrap-policy --fsdp-transformer-layer-cls-to-wrap --fsdp-backward-prefetch --fsdp-state-dict-type --deepspeed-hostfile --deepspeed-multinode-launcher --main-training-function --project-dir"  # fmt: skip
DEEPSPEED_VALUES = "-H --hostfile -i --include -e --exclude --num-nodes --num-gpus --min-elastic-nodes --max-elastic-nodes --master-port --master-addr --node-rank --launcher --launcher-args --ssh-port --autotuning --bind-core-list"  # fmt: skip

P, S, M, C, WORDS = Target.PROGRAM, Target.SCRIPT, Target.MODULE, Target.CODE, Target.WORDS
LAUNCHED = {"-m": M, "--module": M, "--no-python": P}  # a launcher runs a module, or a program, not a script

WRAPPERS: dict[str, Wrapper] = {
    "nice":              Wrapper("-n --adjustment"),                          # `nice -n 10 prog`: the niceness
    "taskset":           Wrapper(operands=1),                                 # `taskset -c 0-3 prog`: -c a flag, the CPUs a word
    "timeout":           Wrapper("-s --signal -k --kill-after", operands=1),  # `timeout 5m prog`: the duration first
    "env":               Wrapper(ENV_VALUES, assignments=True, chdir="-C --chdir", targets={"-S": WORDS, "--split-string": WORDS}),  # `env -u VAR A=1 prog`
    "numactl":           Wrapper(NUMACTL_VALUES),                             # NUMA placement: `numactl --cpunodebind=0 prog`
    "chrt":              Wrapper("-T --sched-runtime -P --sched-period -D --sched-deadline", operands=1),  # `chrt -f 10 prog`: the priority first
    "ionice":            Wrapper("-c --class -n --classdata -p --pid -P --pgid -u --uid"),  # `ionice -c2 -n7 prog`
    "srun":              Wrapper(SRUN_VALUES, chdir="-D --chdir"),            # a Slurm job step: `srun -n1 --gres=gpu:1 prog`
    "stdbuf":            Wrapper("-i --input -o --output -e --error"),        # `stdbuf -oL prog`: line-buffered logs
    "time":              Wrapper("-f --format -o --output", builtin=True),    # bash's `time -p`, or GNU time's -f FORMAT -o FILE
    "nohup":             Wrapper(),                                           # the run survives the terminal's hang-up
    "exec":              Wrapper("-a", builtin=True),                         # `exec -a NAME prog` replaces the shell
    "command":           Wrapper(builtin=True),                               # `command -p prog` skips shell functions
    "setsid":            Wrapper(),                                           # a new session; -c -f -w are flags
    "xvfb-run":          Wrapper(XVFB_VALUES),                                # a virtual display (rendering, gym)
    "uv run":            Wrapper(UV_RUN_VALUES, runs=Target.PROGRAM_OR_SCRIPT, targets={"-m": M, "--module": M, "-s": S, "--script": S}, chdir="--directory", environment=True),  # the project's venv
    "poetry run":        Wrapper("-C --directory -P --project", environment=True),  # the poetry venv
    "conda run":         Wrapper("-n --name -p --prefix --cwd", chdir="--cwd", environment=True),  # `conda run -n ENV prog`
    "pixi run":          Wrapper("-e --environment --manifest-path", environment=True),  # a pixi environment (or a task)
    "python":            Wrapper("-W -X -c -m --check-hash-based-pycs", runs=S, targets={"-c": C, "-m": M}),  # `python -u train.py`
    "bash":              Wrapper("-o -O -c --rcfile --init-file", runs=S, targets={"-c": C}),  # `bash run.sh`, `bash -lc CODE`
    "sh":                Wrapper("-o -c", runs=S, targets={"-c": C}),         # `sh run.sh`
    "torchrun":          Wrapper(TORCHRUN_VALUES, runs=S, targets=LAUNCHED),  # a process per GPU: `torchrun --nproc_per_node 8 train.py`
    "accelerate launch": Wrapper(ACCELERATE_VALUES, runs=S, targets=LAUNCHED),  # Hugging Face Accelerate
    "deepspeed":         Wrapper(DEEPSPEED_VALUES, runs=S, targets=LAUNCHED),  # DeepSpeed's launcher
}  # fmt: skip
# `python -m MODULE` of a launcher reads like the launcher: `python -m torch.distributed.run ... train.py`
MODULE_WRAPPERS = {"torch.distributed.run": "torchrun", "torch.distributed.launch": "torchrun", "accelerate.commands.launch": "accelerate launch"}  # fmt: skip


@dataclass(frozen=True)
class Command:
    """One simple command, seen through its wrappers."""

    program: str  # what runs in the end, as written: `python`, `./run.sh`, `torchrun`, `cd`; "" for nothing
    args: tuple[str, ...] = ()  # its arguments; after the script or module when it runs one
    wrappers: tuple[str, ...] = ()  # what starts it, outermost first: ("nice", "srun", "uv run")
    executables: tuple[str, ...] = ()  # to find on PATH or at their path; no builtins, `$WORD`s, nor
    #                                    what an environment wrapper (`uv run`) provides
    script: str = ""  # the file a runner runs (`python train.py`, `torchrun ... train.py`), if literal
    module: str = ""  # the module `python -m` (or `torchrun -m`) runs
    cwd: str = ""  # the folder a wrapper runs it in (`env -C DIR`, `srun -D DIR`), relative to the shell's
    unknown_option: str = ""  # an option no table knows, just before the program: it may be its value


def commands(line: str | Sequence[str]) -> list[Command]:
    """Each simple command of `line` (a shell line, or an argv list) with the program it runs."""
    if isinstance(line, str):
        return [_read(words) for words in _simple_commands(line)]
    return [_read(list(line))]


def _simple_commands(line: str) -> list[list[str]]:
    """The words of each simple command of a shell line (split at `&&`, `;`, `|` ...), redirections dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    segments: list[list[str]] = [[]]
    redirect = False
    for token in lexer:
        if token in SEPARATORS:
            segments.append([])
            redirect = False
        elif set(token) <= set("<>&") or redirect:
            redirect = True  # `> out.log`, `2>&1`: nothing after it in this command is a program
        else:
            segments[-1].append(token)
    return [s for s in segments if s]


def _read(words: list[str]) -> Command:
    while words and (words[0] in LEADING_KEYWORDS or ASSIGNMENT.fullmatch(words[0])):
        words = words[1:]  # `CUDA_VISIBLE_DEVICES=0 nohup ...`, `then python ...`
    wrappers: list[str] = []
    executables: list[str] = []
    cwd, unknown, provided = "", "", False  # provided: an environment wrapper supplies what follows
    while words:
        name, size = _wrapper_at(words)
        if not name:
            break
        head, wrapper = words[0], WRAPPERS[name]
        if not provided and (not wrapper.builtin or "/" in head):
            executables.append(head)
        target, words, folder, unknown = _own_words(wrapper, words[size:])
        cwd = posixpath.join(cwd, folder) if folder else cwd
        if target is Target.PROGRAM_OR_SCRIPT:
            target = Target.SCRIPT if words and words[0].endswith(".py") else Target.PROGRAM
        if target is not Target.PROGRAM:  # a runner: python, bash, torchrun ... (`uv run train.py`)
            return _runner(target, words, Command(head, (), tuple(wrappers), tuple(executables), cwd=cwd))
        wrappers.append(name)
        provided = provided or wrapper.environment
    if not words:
        return Command("", (), tuple(wrappers), tuple(executables), cwd=cwd)
    program = words[0]
    if not provided and program not in BUILTINS and _literal(program):
        executables.append(program)
    return Command(
        program, tuple(words[1:]), tuple(wrappers), tuple(executables), cwd, unknown_option=unknown
    )


def _runner(target: Target, words: list[str], command: Command) -> Command:
    """A runner's command, completed with the script, module or code it runs."""
    module = script = ""
    while target is Target.MODULE and words:
        module, words = words[0], words[1:]
        launcher = MODULE_WRAPPERS.get(module)  # `python -m torch.distributed.run` reads like torchrun
        if launcher is None:
            break
        target, words, _, _ = _own_words(WRAPPERS[launcher], words)
    if target is Target.SCRIPT and words and words[0] != "-" and _literal(words[0]):
        script, words = words[0], words[1:]
    return dataclasses.replace(command, args=tuple(words), script=script, module=module)


def _wrapper_at(words: list[str]) -> tuple[str, int]:
    """The table's name for the wrapper `words` start with, and how many words name it."""
    if not _literal(words[0]):
        return "", 0
    base = re.sub(r"(?<=python)[\d.]+$", "", posixpath.basename(words[0]))  # python3.11 -> python
    if len(words) > 1 and f"{base} {words[1]}" in WRAPPERS:
        return f"{base} {words[1]}", 2
    return (base, 1) if base in WRAPPERS else ("", 0)


def _own_words(wrapper: Wrapper, words: list[str]) -> tuple[Target, list[str], str, str]:
    """Read a wrapper's options and operands. Returns what follows them (its kind, and the words from it
    on), the folder it runs that in, and the unknown option just before it."""
    values, chdir = _names(wrapper.values), _names(wrapper.chdir)
    target, folder, unknown = wrapper.runs, "", ""
    i = 0
    while i < len(words) and words[i] != "--":
        word = words[i]
        if wrapper.assignments and ASSIGNMENT.fullmatch(word):
            i, unknown = i + 1, ""
            continue
        if not word.startswith("-") or word == "-":
            break
        option, value = _option(word, values, wrapper.targets)
        i += 1
        known = option in values or option in wrapper.targets
        unknown = option if option.startswith("--") and value is None and not known else ""
        if option in values and value is None:  # its value is the next word: `-n 10`
            value, i = (words[i] if i < len(words) else ""), i + 1
        elif unknown and not wrapper.operands and i < len(words) and _value_like(words[i]):
            value, i, unknown = words[i], i + 1, ""  # `--foo 4`: a count is no program
        kind = wrapper.targets.get(option)
        if option in chdir and value:
            folder = posixpath.join(folder, value)
        if kind is WORDS:
            words = [*words[:i], *shlex.split(value or ""), *words[i:]]  # `env -S "A=1 python -u"`
        elif kind is not None and option in values:
            return kind, [value or "", *words[i:]], folder, ""  # `python -m MODULE`, `-c CODE`
        elif kind is not None:
            target = kind  # a flag: `torchrun -m`, `torchrun --no-python`
    if i < len(words) and words[i] == "--":
        i, unknown = i + 1, ""
    if wrapper.operands:
        i, unknown = i + wrapper.operands, ""
    return target, words[i:], folder, unknown


def _option(word: str, values: set[str], targets: Mapping[str, Target]) -> tuple[str, str | None]:
    """One option word: its name and its attached value (None when there is none: a flag, or a value
    in the next word). `-n10` and `-oL` carry their value; `-lc` is -l then -c; `--nproc_per_node` is
    `--nproc-per-node`."""
    if word.startswith("--"):
        name, attached, value = word.partition("=")
        return name.replace("_", "-"), (value if attached else None)
    for j in range(1, len(word)):
        letter = "-" + word[j]
        if letter in values:
            return letter, (word[j + 1 :] or None)
        if letter in targets:
            return letter, None
    return word, None  # short flags only


def _names(spec: str) -> set[str]:
    return {name.replace("_", "-") if name.startswith("--") else name for name in spec.split()}


def _value_like(word: str) -> bool:
    """A word that cannot be a program name: `4`, `0-3`, `FULL_SHARD`, `true`."""
    if word.startswith("-"):
        return False
    return word[:1].isdigit() or not re.search(r"[a-z]", word) or word.lower() in ("true", "false")


def _literal(word: str) -> bool:
    """The word names a file as written: the shell expands nothing in it."""
    return not (set(word) & set("$`*?") or word.startswith("~"))
