"""Every campaign setting, declared once: its key, type and check, default, and one line of help.

    Settings                  one campaign's settings: each field's name, type and default, in the order a
                              campaign folder's campaign.yaml lists them; `policy`, `watch` and
                              `metric_source` are typed sections (PolicySettings, WatchSettings, MetricSource)
    SETTINGS                  the top-level keys: each one's check, help and `ars campaign init` form; its
                              default is read from the Settings field of that name
    POLICY                    the same for the keys under `policy:`, whose fields and defaults are
                              campaign/policy_settings.PolicySettings' (that module sits below the policies)
    Settings.from_mapping(m)  the settings a campaign.yaml mapping describes; `to_mapping()` writes it back
    check_keys(data, where)   BadInput naming every unknown key and the known key it is closest to
    reference_table()         the tables of references/campaign-settings.md

A type and a default are written once, in a dataclass a type checker reads (`s.policy.timeout` is a
float to mypy and to the reader who jumps to its definition); a key's check, help and command-line
form are written once, in the tables. `_declared` joins the two when a table is first used and
refuses a default written in a table, and tests/test_settings.py holds them to the same names, order
and types.
Three readers are built from the tables, so they cannot drift from them or from each other:
campaign.yaml validation (unknown keys here; types, ranges and the rest in campaign/config.py), the
options of `ars campaign init` (campaign/cli.py: `gpus_per_run` becomes `--gpus-per-run`, a choice
a click.Choice, a boolean a flag, a list of paths a repeatable option; help and default come from
here), and the reference page. A section (`policy`, `watch`, `metric_source`) has no command-line
form: it is set in campaign.yaml only.

The tables are built on first use (`SETTINGS`, `POLICY` and `SECTIONS` are read through the module's
`__getattr__`): a hook that loads a campaign at every stop needs none of them, nor the modules their
checks call (the slot pool, the accelerators), so `check_keys` answers from the dataclasses' fields
when every key is one of them, and builds the tables only to name an unknown key.

A campaign.yaml written by an earlier release reads as it did: its keys are these keys, and a
section is written back as the mapping it was read from (its keys at their default left out).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autoresearch_skills.campaign.paths import CAMPAIGNS_DIR
from autoresearch_skills.clock import parse_duration
from autoresearch_skills.errors import BadInput
from autoresearch_skills.launch import LAUNCHERS

if TYPE_CHECKING:  # loaded when a campaign has these sections: a hook that loads a campaign stays fast
    from autoresearch_skills.campaign.noise import Policy as NoisePolicy
    from autoresearch_skills.campaign.pareto import Objective
    from autoresearch_skills.campaign.policy_settings import PolicySettings
    from autoresearch_skills.campaign.pool import Pool
    from autoresearch_skills.runwatch import WatchPolicy, WatchSettings
    from autoresearch_skills.sources.reading import MetricSource
    from autoresearch_skills.stoprule import StopRules

PRESETS = ("karpathy", "nemo-rl", "verl", "agentjet", "generic")  # how a run log is read (metrics.py)
PRUNE_RULES = ("off", "median", "forecast", "both")  # runwatch.PRUNE_RULES (a test keeps them equal)


def launchers() -> tuple[str, ...]:
    """The launchers registered now (a plug-in may add one after this module loads)."""
    return tuple(LAUNCHERS)


@dataclass(frozen=True)
class Kind:
    """A value check: `test(value)` is True when the value is acceptable; `what` completes
    "`key` must be ..." in the error. `form` says how a command line asks for the value."""

    test: Callable[[Any], bool]
    what: str
    form: str = "text"  # text | choice | integer | number | flag | paths | folder; mapping: in a file only
    py: str = "str"  # the Python type of the value: the annotation of its field (" | None" when unset)
    choices: Callable[[], tuple[str, ...]] = tuple  # choice: the options
    minimum: float | None = None  # integer, number: the smallest value allowed ...
    open_minimum: bool = False  # ... or the bound the value must be above
    explain: Callable[[Any, str], str | None] | None = None  # a sharper sentence than `what`, by value


@dataclass(frozen=True)
class Key:
    name: str
    kind: Kind
    help: str
    default: Any = None  # read from the dataclass field of the same name (`_declared`), never written here
    required: bool = False  # a campaign file (`ars campaign run`) must set it
    written: bool = False  # ars fills it in at init: a Settings field without default
    internal: bool = False  # only ars writes it; users never do
    stored: bool = True  # a Settings field, kept in the campaign folder's campaign.yaml
    where: str = "option"  # how `ars campaign init` takes it: option, argument, or file (campaign.yaml only)
    flags: tuple[str, ...] = ()  # the option's spellings, when not --<name with dashes>

    @property
    def options(self) -> tuple[str, ...]:
        """The `ars campaign init` spellings of this setting; () when a command line cannot set it."""
        if self.internal or self.where != "option":
            return ()
        flags = self.flags or ("--" + self.name.replace("_", "-"),)
        if self.kind.form == "flag" and self.default is True:  # on unless switched off
            return (f"{flags[0]}/--no-{flags[0][2:]}",)
        return flags

    def problem(self, value: Any, label: str | None = None) -> str | None:
        """Why `value` is refused, one sentence naming `label` (default `name`); None when it is fine.
        `key:` with nothing after it means the default, which for most keys is none."""
        if value is None and self.default is None and not self.required:
            return None
        if self.kind.test(value):
            return None
        label = label or f"`{self.name}`"
        sharper = self.kind.explain(value, label.strip("`")) if self.kind.explain else None
        return sharper or f"{label} must be {self.kind.what} (got {shown(value)})"


def shown(value: Any) -> str:
    """A value in an error message, cut to 60 characters."""
    text = "nothing" if value is None else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------- kinds of values


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def text() -> Kind:
    return Kind(lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty text")


def folder() -> Kind:
    return Kind(lambda v: isinstance(v, str) and bool(v.strip()), "a folder path", form="folder")


def choice(*options: str) -> Kind:
    return Kind(
        lambda v: v in options, "one of " + ", ".join(options), form="choice", choices=lambda: options
    )


def lazy_choice(options: Callable[[], tuple[str, ...]], what: str) -> Kind:
    """A choice whose options are known only when asked (the launcher registry)."""
    return Kind(lambda v: isinstance(v, str) and v in options(), what, form="choice", choices=options)


def integer(minimum: int | None = None) -> Kind:
    what = "an integer" + (f" >= {minimum}" if minimum is not None else "")
    return Kind(
        lambda v: _is_int(v) and (minimum is None or v >= minimum),
        what,
        form="integer",
        py="int",
        minimum=minimum,
    )


def number(above: float | None = None, at_least: float | None = None) -> Kind:
    what = "a number" + (
        f" > {above:g}" if above is not None else f" >= {at_least:g}" if at_least is not None else ""
    )
    return Kind(
        lambda v: _is_number(v) and (above is None or v > above) and (at_least is None or v >= at_least),
        what,
        form="number",
        py="float",
        minimum=above if above is not None else at_least,
        open_minimum=above is not None,
    )


def boolean() -> Kind:
    return Kind(lambda v: isinstance(v, bool), "true or false", form="flag", py="bool")


def mapping() -> Kind:
    return Kind(
        lambda v: isinstance(v, dict), "a mapping (key: value lines)", form="mapping", py="dict[str, Any]"
    )


def section(typed: str) -> Kind:
    """A mapping read into a typed section (`typed`: its class), e.g. `policy:` into PolicySettings."""
    return Kind(lambda v: isinstance(v, dict), "a mapping (key: value lines)", form="mapping", py=typed)


def paths() -> Kind:
    return Kind(
        lambda v: isinstance(v, list) and all(isinstance(p, str) and p.strip() for p in v),
        "a list of file paths, e.g. [train.py]",
        form="paths",
        py="list[str]",
    )


def duration(above_zero: bool = False) -> Kind:
    def test(value: Any) -> bool:
        if isinstance(value, bool):
            return False
        try:
            seconds = parse_duration(value)
        except (ValueError, TypeError):
            return False
        return seconds > 0 or not above_zero

    what = "a duration" + (" above zero" if above_zero else "") + " such as 90s, 20m or 1h30m"
    return Kind(test, what, py="str | float")


def command_line() -> Kind:
    return Kind(
        lambda v: (
            (isinstance(v, str) and bool(v.strip()))
            or (isinstance(v, list) and bool(v) and all(isinstance(p, str) for p in v))
        ),
        "a command line (text) or a list of arguments",
        py="str | list[str]",
    )


def stop_rules() -> Kind:
    return Kind(
        lambda v: isinstance(v, (str, dict)),
        'stop rules in words ("24 experiments or 6h total") or a mapping',
        py="dict[str, Any]",
    )


def slurm_value() -> Kind:
    return Kind(
        lambda v: (isinstance(v, str) and bool(v.strip())) or _is_int(v),
        'a Slurm value such as "64G" or 8',
        py="str | int",
    )


def gpus() -> Kind:
    """campaign/pool.py's one GPU spelling: a count, or device ids."""
    from autoresearch_skills.campaign.pool import GPU_SPELLINGS, parse_gpu_spec

    def problem(value: Any, label: str = "gpus") -> str | None:
        try:
            parse_gpu_spec(value, label)
        except BadInput as err:
            return err.message
        return None

    return Kind(lambda v: problem(v) is None, GPU_SPELLINGS, py="str | int | list[int]", explain=problem)


def value_pattern() -> Kind:
    """A regex that reads a value: metrics.py's rule (one capture group, or a named `value`)."""

    def problem(value: Any, label: str = "pattern") -> str | None:
        return _pattern_problem(value, f"`{label}`")

    return Kind(lambda v: problem(v) is None, "a regex with one capture group", explain=problem)


def prune_rule() -> Kind:
    return Kind(
        lambda v: v in PRUNE_RULES or isinstance(v, bool),  # YAML reads a bare `off`/`on` as a boolean
        "one of " + ", ".join(PRUNE_RULES),
        form="choice",
        py="str | bool",
        choices=lambda: PRUNE_RULES,
    )


def _pattern_problem(value: Any, label: str) -> str | None:
    """Why `value` cannot read a value from a log (metrics.py's rule), or None."""
    if not isinstance(value, str) or not value.strip():
        return f"{label} must be a regex with one capture group around the value (got {shown(value)})"
    from autoresearch_skills.metrics import compile_pattern  # loaded only when a pattern is given

    try:
        compile_pattern(value, what=label)
    except BadInput as err:
        return err.message
    return None


def objective_list() -> Kind:
    """`objectives:`: a list of {metric, direction, pattern}; the first bad entry named in one line."""

    def problem(value: Any, label: str = "objectives") -> str | None:
        from autoresearch_skills.campaign.pareto import objective_problem

        if not isinstance(value, list):
            return f"`{label}` must be a list of {{metric: NAME, direction: min|max}} (got {shown(value)})"
        for number, entry in enumerate(value, start=1):
            said = objective_problem(entry, number)
            if said is None and entry.get("pattern") is not None:
                said = _pattern_problem(entry["pattern"], f"`objectives` entry {number} pattern")
            if said:
                return said
        names = [entry["metric"] for entry in value]
        twice = sorted({name for name in names if names.count(name) > 1})
        return f"`{label}` names {', '.join(twice)} more than once" if twice else None

    return Kind(
        lambda v: problem(v) is None, "a list of {metric: NAME, direction: min|max}", py="list[dict[str, Any]]",
        explain=problem,
    )  # fmt: skip


def command_list() -> Kind:
    """`checks:`: one command, or a list of them, each a non-empty text; the first bad entry named."""

    def problem(value: Any, label: str = "checks") -> str | None:
        if not (isinstance(value, list) or (isinstance(value, str) and value.strip())):
            return f"`{label}` must be a command or a list of commands (got {shown(value)})"
        if isinstance(value, str):
            return None
        for number, entry in enumerate(value, start=1):
            if not isinstance(entry, str) or not entry.strip():
                return f"`{label}` entry {number} must be a command (text), got {shown(entry)}"
        return None

    return Kind(
        lambda v: problem(v) is None, "a command or a list of commands", form="paths", py="str | list[str]",
        explain=problem,
    )  # fmt: skip


def confirm_section() -> Kind:
    """`confirm:` (campaign/confirmation.py `AtScale`): {set, args, top, command, timeout}, with one
    of set, args or command; the first bad entry named in one line. {} is no confirmation."""
    keys = ("set", "args", "top", "command", "timeout")

    def problem(value: Any, label: str = "confirm") -> str | None:
        if not isinstance(value, dict):
            return f"`{label}` must be a mapping such as {{set: {{DEPTH: 24}}, top: 2}} (got {shown(value)})"
        unknown = sorted(str(k) for k in value if k not in keys)
        if unknown:
            return f"`{label}` has unknown key(s) {', '.join(unknown)}; it takes {', '.join(keys)}"
        for key in ("set", "args"):
            if value.get(key) is not None and not isinstance(value[key], dict):
                return f"`{label}.{key}` must map knob names to values, e.g. {{DEPTH: 24}} (got {shown(value[key])})"
        if value and not (value.get("set") or value.get("args") or value.get("command")):
            return f"`{label}` needs `set:`, `args:` or `command:`: what makes a run bigger than the proxy's"
        top = value.get("top")
        if top is not None and not (_is_int(top) and top >= 1):
            return f"`{label}.top` must be an integer >= 1: how many results besides the baseline (got {shown(top)})"
        if value.get("command") is not None and not text().test(value["command"]):
            return f"`{label}.command` must be a command line (text) (got {shown(value['command'])})"
        if value.get("timeout") is not None and not duration(above_zero=True).test(value["timeout"]):
            return f"`{label}.timeout` must be a duration above zero such as 30m or 2h (got {shown(value['timeout'])})"
        return None

    return Kind(
        lambda v: problem(v) is None, "a mapping {set, args, top, command, timeout}", py="dict[str, Any]",
        explain=problem,
    )  # fmt: skip


def policy_queue() -> Kind:
    return Kind(
        lambda v: isinstance(v, list) and all(isinstance(i, dict) for i in v),
        "a list of {slug, description, set, args or patch}",
        py="list[dict[str, Any]]",
    )


# ---------------------------------------------------------------- the settings object


@dataclass
class Settings:
    """campaign.yaml in a campaign folder: everything decided up front, so a resumed agent decides
    nothing twice. The first seven are written by `ars` at init; the rest take these defaults. Each
    key's check and help: SETTINGS."""

    # fmt: off
    name: str
    metric: str
    direction: str
    command: str
    repo: str
    prefix: str
    created_at: str
    preset: str = "karpathy"
    launcher: str = "local"
    stop_text: str = ""
    stop: dict[str, Any] = field(default_factory=dict)          # stoprule's mapping, fixed at init
    strategy: str = "branches"
    worktrees: str = "auto"
    decide: str = "auto"
    keep_ties: bool = False
    require_baseline: bool = True
    tmux_socket: str | None = None
    keep_sessions: int = 5
    policy: PolicySettings | None = None                         # None: no loop proposes (`policy: {}`)
    parallel: int | None = None                                  # None: 1, or as many as fit in `gpus`
    gpus: str | int | list[int] | None = None
    gpus_per_run: int | None = None
    partition: str | int | None = None
    mem: str | int | None = None
    cpus: str | int | None = None
    baseline_repeats: int | None = None                          # None: the keep rule's, by run length
    noise_margin: float | None = None                            # None: campaign/noise.py's
    comparable_margin: float = 0.2
    frozen: list[str] = field(default_factory=list)
    mutable: list[str] = field(default_factory=list)
    watch: WatchSettings | None = None                           # None: the watcher's defaults
    prune: str | bool | None = None                              # None: by run length (prune_rule)
    metric_source: MetricSource | None = None                    # None: the run log, by `preset`
    first_step_timeout: str | float | None = None                # None: anomalies.WATCH_DEFAULTS
    throughput_key: str | None = None
    max_commit_mb: float = 5
    pattern: str | None = None
    worktree_include: list[str] = field(default_factory=list)
    carry_copy_mb: float = 100
    args_style: str = "flags"
    ray_address: str | None = None
    ray_working_dir: str | None = None
    keep_sessions_at_end: bool = False
    keep_outputs: str = "kept"
    outputs_max_gb: float | None = None                          # None: no cap
    holdout: str | None = None                                   # None: no held-out check
    holdout_pattern: str | None = None
    holdout_command: str | None = None
    seed: str | None = None                                      # None: repeats run as the commit says
    keep_rule: str | None = None                                 # None: the ledger's, else screening
    objectives: list[dict[str, Any]] = field(default_factory=list)  # [] : one objective, `metric`
    accelerator: str = "auto"                                    # auto: what `ars doctor` finds
    cpus_per_run: int | None = None                              # None: split by default on CPU only; 0: off
    checks: str | list[str] = field(default_factory=list)        # []: a run's metric decides alone
    checks_timeout: str | float = "10m"                          # each check's own limit
    result_branch: str | None = None                             # None: no result branch at the end
    confirm: dict[str, Any] = field(default_factory=dict)        # {}: no confirmation at a larger scale
    slurm_allocation: str = "per_run"                            # per_run: a job per run; campaign: steps
    slurm_grace: str | float = "10m"                             # an allocation idle this long is released
    account: str | int | None = None
    qos: str | int | None = None
    constraint: str | None = None
    ray_allocation: str = "per_run"                              # per_run: a Ray job per run; campaign: holders
    ray_grace: str | float = "10m"                               # a holder idle this long ends
    # fmt: on

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Settings:
        """The settings a campaign.yaml mapping holds, each section read into its type; an empty
        section is None (`policy: {}`: no policy). Keys are checked by `check_keys` first; a section
        that cannot be read raises BadInput in one line, a field missing or unknown TypeError."""
        values = dict(data)
        for name in ("policy", "watch", "metric_source"):
            if values.get(name) is not None and not isinstance(values[name], Mapping):
                raise BadInput(
                    f"`{name}` must be {_settings_table()[name].kind.what} (got {shown(values[name])})"
                )
            if name in values and not values[name]:
                values[name] = None
        if values.get("policy") is not None:
            if "kind" not in values["policy"]:
                raise BadInput(
                    "`policy` needs `kind` (queue, grid, random, command, llm, llm_diff or hybrid)"
                )
            from autoresearch_skills.campaign.policy_settings import PolicySettings

            values["policy"] = PolicySettings.from_mapping(values["policy"])
        if values.get("watch") is not None:
            from autoresearch_skills.runwatch import WatchSettings

            values["watch"] = WatchSettings.from_mapping(values["watch"])
        if values.get("metric_source") is not None:
            from autoresearch_skills.sources.reading import MetricSource

            values["metric_source"] = MetricSource.from_mapping(values["metric_source"])
        return cls(**values)

    def to_mapping(self) -> dict[str, Any]:
        """The mapping campaign.yaml holds, in field order; each section as the mapping it is read from."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["policy"] = self.policy.to_mapping() if self.policy else {}
        data["watch"] = self.watch.to_mapping() if self.watch else {}
        data["metric_source"] = self.metric_source.to_mapping() if self.metric_source else None
        return data

    # ------------------------------------------------------------ what the settings imply

    def stop_rules(self) -> StopRules:
        from autoresearch_skills.stoprule import from_mapping

        return from_mapping(self.stop, source="campaign.yaml stop")

    def prune_rule(self) -> str:
        """The early-stopping rule in force. Unset: the median rule for runs longer than 10 minutes
        (bench/bench_prune.py: about half the compute saved, under 1% of eventual winners stopped),
        off for shorter ones, whose curves are too short to judge."""
        if self.prune is not None:
            return "off" if self.prune is False else str(self.prune)
        per_run = self.stop_rules().per_run_timeout
        return "median" if per_run and per_run > 600 else "off"

    def noise_policy(self) -> NoisePolicy:
        """The keep/discard rule that knows the noise (campaign/noise.py): every new best, the
        baseline first, is run `baseline_repeats` times; a result within noise is a candidate."""
        from autoresearch_skills.campaign.noise import default_policy

        changes: dict[str, Any] = {"keep_ties": bool(self.keep_ties), "seeded": self.seed is not None}
        if self.noise_margin is not None:
            changes["margin"] = float(self.noise_margin)
        if self.baseline_repeats is not None:
            changes["best_runs"] = int(self.baseline_repeats)
        return default_policy(self.stop_rules().per_run_timeout, **changes)

    def watch_policy(self, own: Mapping[str, Any] | None = None) -> WatchPolicy:
        """How runs are watched: `watch:` over the defaults, and `own` over both (an experiment's own
        watch settings: a blueprint's first-step line and timeout). `first_step_timeout:` at the top
        level wins over the default, not over a `first_step_timeout` under `watch:`."""
        from autoresearch_skills.runwatch import WatchPolicy, WatchSettings

        watch = self.watch or WatchSettings()
        if own:
            watch = watch.updated(own)
        return WatchPolicy.from_settings(
            watch, self.prune_rule(), self.first_step_timeout, preset=self.preset
        )

    def metric_reading(self) -> MetricSource | None:
        """Where the metric comes from when not the run log read with `preset`: `metric_source:`,
        or `pattern:` (the run log through that regex). Every reader of a run's metric (judging,
        watching, pruning) asks this, so the two spellings cannot mean different things."""
        if self.metric_source is not None:
            return self.metric_source
        if self.pattern:
            from autoresearch_skills.sources.reading import MetricSource

            return MetricSource(kind="log", pattern=self.pattern)
        return None

    def objective_list(self) -> list[Objective]:
        """The campaign's objectives, its own metric first; one alone without `objectives:`."""
        from autoresearch_skills.campaign.pareto import Objective

        return [Objective(self.metric, self.direction), *map(Objective.from_mapping, self.objectives)]

    def frozen_paths(self) -> list[str]:
        """Files no experiment may change: `frozen:` and the loop policy's `frozen:`."""
        listed = [*self.frozen, *(self.policy.frozen if self.policy else [])]
        return list(dict.fromkeys(str(p) for p in listed))

    def pool(self) -> Pool:
        from autoresearch_skills.campaign.pool import Pool

        return Pool.from_settings(
            self.parallel, self.gpus, self.gpus_per_run, self.launcher, self.accelerator, self.cpus_per_run
        )

    def cluster_resources(self, own_gpus: int | None = None) -> dict[str, str]:
        """What a cluster is asked for per run: partition, mem, cpus (`cpus:`, else `cpus_per_run:`),
        and the GPUs it places the run on (a blueprint's own `gpus` when it has one)."""
        from autoresearch_skills.campaign.pool import CLUSTER_LAUNCHERS

        pool = self.pool()
        cpus = self.cpus or (self.cpus_per_run if pool.launcher in CLUSTER_LAUNCHERS else None)
        pairs = (("partition", self.partition), ("mem", self.mem), ("cpus", cpus))
        resources = {key: str(value) for key, value in pairs if value}
        gpus = pool.cluster_gpus(own_gpus)  # Slurm or Ray places the run on its GPUs
        if gpus:
            resources["gpus"] = str(gpus)
        return resources


def _declared(typed: type, keys: list[Key]) -> dict[str, Key]:
    """The table of `keys`, each with its default read from `typed`'s field of the same name (the
    dataclass holds the one written default; a table that writes one too is refused here)."""
    fields = {f.name: f for f in dataclasses.fields(typed)}
    table = {}
    for key in keys:
        if key.name in fields:
            if key.default is not None:
                raise TypeError(
                    f"{key.name}: write its default on the {typed.__name__} field, not in the table"
                )
            key = dataclasses.replace(key, default=_default_of(fields[key.name]))
        table[key.name] = key
    return table


def _default_of(spec: dataclasses.Field) -> Any:
    if spec.default is not dataclasses.MISSING:
        return spec.default
    if spec.default_factory is not dataclasses.MISSING:
        return spec.default_factory()
    return None  # set at init, or required


# ---------------------------------------------------------------- the declaration

# The tables, built once on first use: `SETTINGS`, `POLICY` and `SECTIONS` below (a plain read of
# them from another module goes through `__getattr__`; this module calls the builders).
SETTINGS: dict[str, Key]
POLICY: dict[str, Key]
SECTIONS: dict[str, dict[str, Key]]


@functools.cache
def _settings_table() -> dict[str, Key]:
    from autoresearch_skills.accelerators.machine import CHOICES as ACCELERATORS

    # fmt: off
    return _declared(Settings, [
        Key("name", text(), "campaign name: its folder and the branch prefix autoresearch/<date>-<name>", required=True, written=True, where="argument"),
        Key("metric", text(), "the metric the ledger ranks attempts by, e.g. val_bpb", required=True, written=True),
        Key("direction", choice("min", "max"), "min: lower is better; max: higher is better", required=True, written=True),
        Key("command", text(), 'the training command, run in the experiment\'s checkout, e.g. "uv run train.py"', required=True, written=True),
        Key("repo", text(), "the repository's root", written=True, internal=True),
        Key("prefix", text(), "branch prefix (default autoresearch/<YYYYmmdd>-<name>)", written=True),
        Key("folder", folder(), f"campaign folder (default {CAMPAIGNS_DIR.as_posix()}/<name>)", stored=False, flags=("--dir",)),
        Key("created_at", text(), "when the campaign started (the deadline is fixed from it)", written=True, internal=True),
        Key("preset", choice(*PRESETS), "how the metric is read from the run log; a name the preset does not know is found as the log prints it (`val loss 2.40`)"),
        Key("launcher", lazy_choice(launchers, "one of local, tmux, slurm, ray"), "where runs start: local, tmux, slurm or ray"),
        Key("stop_text", Kind(lambda v: isinstance(v, str), "a text"), "the stop rules as the user wrote them", internal=True),
        Key("stop", stop_rules(), 'stop rules in words ("24 experiments or 6h total, 10m each") or, in a file, a mapping; none: baseline plus three, then stop'),
        Key("strategy", choice("branches", "ratchet"), "branches: one branch per hypothesis; ratchet: one branch reset on discard (only when asked for)"),
        Key("worktrees", choice("auto", "always", "off"), "auto (or always): every run in a git worktree of the campaign's, so nothing a run writes lands in your checkout; off: runs in your checkout (one at a time, refused with uncommitted changes), where a run writes over files of yours"),
        Key("decide", choice("auto", "manual"), "manual: `ars exp mark` writes each row"),
        Key("keep_ties", boolean(), "a result equal to the best counts as kept"),
        Key("require_baseline", boolean(), "experiments wait for a recorded baseline"),
        Key("tmux_socket", text(), "private tmux server for the runs (tmux -L NAME, or -S PATH)", flags=("--tmux-socket", "--socket")),
        Key("keep_sessions", integer(0), "tmux sessions of the latest finished runs left open while the campaign runs; older ones are closed, and all of them at its end unless `keep_sessions_at_end` (logs stay)"),
        Key("policy", section("PolicySettings"), "where the unattended loop's hypotheses come from (the policy keys below); `ars campaign run` needs it", required=True, where="file"),
        Key("parallel", integer(1), "experiments in flight at once (default 1, or as many as fit in `gpus`)"),
        Key("gpus", gpus(), "the GPU pool: a count (4: devices 0-3) or device ids (0-7, 0,1,2,3, `4,` or [4] for device 4 alone); each run gets its own CUDA_VISIBLE_DEVICES"),
        Key("gpus_per_run", integer(1), "GPUs each run gets from the pool, or asks Slurm or Ray for, and each Ray holder holds (default 1)"),
        Key("partition", slurm_value(), "Slurm: the partition (sbatch --partition)"),
        Key("mem", slurm_value(), "Slurm: memory per run (sbatch --mem), e.g. 64G"),
        Key("cpus", slurm_value(), "Slurm: CPUs per run (sbatch --cpus-per-task); each run gets as many threads (OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS) unless the environment sets them"),
        Key("baseline_repeats", integer(1), "baseline runs, to measure the noise between identical runs (default 2 when runs are under 30 min, else 1; under keep_rule noise 4, else 1, and every new best is run as often); without `seed:`, two identical runs end the repeats (a fixed seed: reruns cannot measure noise)"),
        Key("noise_margin", number(above=0), "a pooled mean of 2 runs is kept when it leads the best by this many sigma of the difference, 0.15 less per further run, as a Student t line at sigma's degrees of freedom (default 2.5)"),
        Key("comparable_margin", number(at_least=0), "how far (as a fraction) steps or throughput may differ from the parent's for rows to be ranked together"),
        Key("frozen", paths(), "files no experiment may change (the evaluation, e.g. prepare.py)"),
        Key("mutable", paths(), "the only files experiments may change; the loop's proposals follow `policy.mutable`", where="file"),
        Key("watch", section("WatchSettings"), "anomaly checks while a run goes: per kind cancel, warn or ignore; stall_after, first_step (references/anomaly-catalogue.md)", where="file"),
        Key("prune", prune_rule(), "early stopping: off, median, forecast or both (default: median for runs over 10 min, else off)"),
        Key("metric_source", section("MetricSource"), "where the metric comes from when not the run log (jsonl, tensorboard, wandb, mlflow)", where="file"),
        Key("first_step_timeout", duration(), "cancel a run that has not logged its first step in this long (default 20m)"),
        Key("throughput_key", text(), "the log key for throughput (default: tokens/s, samples/s or it/s, read from the progress lines; references/metric-presets.md)"),
        Key("max_commit_mb", number(above=0), "new files larger than this many MB stay out of hypothesis commits"),
        Key("pattern", value_pattern(), "a regex that reads the metric from the run log instead of the preset, as `ars metric extract --pattern`: one capture group, or (?P<value>..)"),
        Key("worktree_include", paths(), "gitignore patterns of ignored files (prepared data, .env, tokenizers) carried into every experiment's worktree, as .worktreeinclude lines are", flags=("--worktree-include", "--include")),
        Key("carry_copy_mb", number(at_least=0), "carried files up to this many MB are copied into a worktree where the filesystem cannot clone them; bigger ones are hard links to one read-only snapshot"),
        Key("args_style", choice("flags", "spaced", "hydra"), "how `args:` knobs are written into the command, at `${args}` or at the end: flags (--lr=0.002), spaced (--lr 0.002) or hydra (optimizer.lr=0.002); a knob written as its flag (`-n`, `--lr`) is passed as `-n 24576`, `--lr 0.002`"),
        Key("ray_address", text(), "Ray: the cluster runs are submitted to as Ray jobs (http://HEAD:8265, HEAD:6379, ray://...); unset: RAY_ADDRESS, then the cluster started on this machine"),
        Key("ray_working_dir", choice("shared", "upload"), "Ray: shared (the cluster sees this file system: runs `cd <workdir> && <command>`) or upload (the checkout ships as the job's runtime_env working_dir); unset: shared for a cluster on this machine, else upload"),
        Key("keep_sessions_at_end", boolean(), "tmux: true leaves the latest `keep_sessions` sessions of finished runs open when the campaign ends; false closes every finished session of its runs then (logs stay; a running session, or one ars did not start, is never closed)"),
        Key("keep_outputs", choice("kept", "best", "all", "none"), "which runs' outputs (the files a run creates that git does not track: checkpoints, samples) stay under runs/NNN-name/outputs/: kept (the baseline's and every kept commit's runs), best (the best's runs), all, or none"),
        Key("outputs_max_gb", number(above=0), "a cap on the kept outputs: the oldest discarded or crashed runs' outputs go first, then the oldest kept ones; the best's and the baseline's never"),
        Key("holdout", text(), "a second metric the run prints (e.g. `test loss`), recorded beside the metric and shown for the baseline and the best; it never enters a keep decision, a proposal or a stop rule"),
        Key("holdout_pattern", value_pattern(), "a regex that reads the held-out metric, as `pattern:` reads the metric"),
        Key("holdout_command", text(), "a command run once at the end in the best's and the baseline's checkouts, with ARS_OUTPUT_DIR set to that run's outputs (`python eval.py --ckpt $ARS_OUTPUT_DIR/out/ckpt.pt`); it prints the `holdout` metric"),
        Key("seed", text(), "the seed knob (a flag such as --seed, or a config key as `space:` names one): the repeats of one commit run with seeds 1, 2, 3 ... above its own (1, 2, 3 ... for a flag the command does not set), so reruns measure seed-to-seed noise"),
        Key("keep_rule", choice("screening", "noise"), "how a result is kept: screening (one run per idea judged on a shrinkage estimate, then the best and the baseline re-measured at the end) or noise (every lead confirmed by reruns); default: the rule the ledger was started with, screening for a new campaign (references/stop-rules.md)"),
        Key("objectives", objective_list(), "more metrics the run prints besides `metric`, each with its own direction (`[{metric: peak_ms, direction: min}]`, an optional `pattern:` as `holdout_pattern:`): recorded in the ledger, told to the optuna policy's study (multi-objective: NSGA-II unless `sampler: tpe`) and shown as the Pareto front by status, finish and the report; the best stays `metric`'s", where="file"),
        Key("accelerator", choice(*ACCELERATORS), "which devices `gpus` names and the variable a run gets for them: nvidia (CUDA_VISIBLE_DEVICES), amd (HIP_VISIBLE_DEVICES), intel (ZE_AFFINITY_MASK), apple (one MPS device all runs share), cpu (no device: cores are the slots); auto: the first vendor whose tool lists a device (`ars doctor` says which)"),
        Key("cpus_per_run", integer(0), "CPU cores each run is pinned to (Linux affinity; local and tmux launchers), with OMP_NUM_THREADS, MKL_NUM_THREADS and OPENBLAS_NUM_THREADS set to it unless the environment sets them; on Slurm, --cpus-per-task when `cpus` is unset. Unset: on a machine without accelerators at parallel 2 or more, the cores are split evenly between the runs; 0: never pinned"),
        Key("checks", command_list(), "commands run one after another in the experiment's checkout after a run that gave its metric (ARS_OUTPUT_DIR, ARS_CAMPAIGN, ARS_EXPERIMENT, ARS_METRIC set; output in runs/NNN-name/checks.log): one that fails (a non-zero exit, or past `checks_timeout`) turns the result into a crash (cause checks_failed), never kept; the baseline must pass them"),
        Key("checks_timeout", duration(above_zero=True), "each check's time limit: past it, the check and every process it started are killed, and it has failed"),
        Key("result_branch", text(), "a branch the unattended loop makes when the campaign ends (as `ars campaign finish --branch NAME` does): the best's change as one commit on the commit the campaign started from, its message the chain of kept changes and the evidence; none when nothing beat the baseline"),
        Key("confirm", confirm_section(), "confirmation at a larger scale: `set:` and `args:` (knobs as a proposal's) make the runs bigger, `top:` how many of the best results besides the baseline (default 2), optional `command:` and `timeout:` at scale; the unattended loop runs them at its end while the deadline allows (`ars campaign confirm` at any time), each once, on a branch of its own; never part of a keep decision", where="file"),
        Key("slurm_allocation", choice("per_run", "campaign"), "Slurm: per_run (each run its own sbatch job, queued on its own) or campaign (one allocation for the whole campaign, each run a job step in it that starts in about a second; released when the campaign ends, pauses, or sits idle past `slurm_grace`)"),
        Key("slurm_grace", duration(above_zero=True), "Slurm, slurm_allocation campaign: how long the allocation waits with no step running and no word from the campaign (a loop killed and not resumed) before it releases itself; enforced inside the allocation"),
        Key("account", slurm_value(), "Slurm: the account charged (sbatch --account)"),
        Key("qos", slurm_value(), "Slurm: the quality of service (sbatch --qos)"),
        Key("constraint", text(), "Slurm: node features the runs need (sbatch --constraint), e.g. a100|h100"),
        Key("ray_allocation", choice("per_run", "campaign"), "Ray: per_run (each run its own Ray job, about a second of Ray's own start each) or campaign (`parallel` holder jobs for the whole campaign, each holding one run's GPUs, CPUs and memory and running the runs one after another, each starting in a fraction of a second; needs a file system the cluster shares; they end when the campaign ends, pauses, or sits idle past `ray_grace`)"),
        Key("ray_grace", duration(above_zero=True), "Ray, ray_allocation campaign: how long a holder waits with no run and no word from the campaign (a loop killed and not resumed) before it ends and frees its GPUs; enforced on the cluster"),
    ])
    # fmt: on


@functools.cache
def _policy_table() -> dict[str, Key]:
    from autoresearch_skills.campaign.policy_settings import OPTUNA_SAMPLERS, PolicySettings

    # fmt: off
    return _declared(PolicySettings, [
        Key("kind", choice("queue", "grid", "random", "command", "llm", "llm_diff", "hybrid", "optuna"), "queue, grid, random, command; llm (a model proposes knob values), llm_diff (a model proposes diffs), hybrid (knob values, then diffs when the campaign stalls); optuna (Optuna's samplers propose knob values and learn from the results; `pip install 'autoresearch-skills[optuna]'`)", required=True, where="file"),
        Key("queue", policy_queue(), "queue: the hypotheses, in order: `set:` knobs of the mutable files, `args:` command-line knobs (`{--lr: 3e-4}`), or a `patch:`", where="file"),
        Key("space", mapping(), "grid, random, llm, hybrid, optuna: knobs of the mutable files and their values: a top-level Python name as written (learning_rate), a dotted YAML/JSON/TOML key (optimizer.lr); `file:name` when several files hold it; llm without a space: any knob of the mutable files; optuna: a list (categorical), {low, high} (a float range), {low, high, log: true}, {low, high, step}, integer bounds for an integer range", where="file"),
        Key("args", mapping(), "grid, random, llm, hybrid, optuna: command-line arguments and their values, written into the command (`args_style`; a key written `-n` or `--lr` is its own flag)", where="file"),
        Key("samples", integer(1), "random: how many draws (unset: 8); optuna: the most trials proposed (unset: until the stop rule)", where="file"),
        Key("seed", integer(), "random, optuna: the seed of the draws", where="file"),
        Key("sampler", choice(*OPTUNA_SAMPLERS), "optuna: the sampler: tpe (with a constant liar for parallel runs), cmaes (needs cmaes), gp (needs torch and scipy), qmc (needs scipy), random, nsga2; unset: tpe, or nsga2 with `objectives:`", where="file"),
        Key("command", command_line(), "command: the external proposer (JSON in on stdin, one proposal out)", where="file"),
        Key("program", text(), "command, llm, llm_diff, hybrid: the research program the proposer reads", where="file"),
        Key("timeout", number(above=0), "command: seconds the proposer may think", where="file"),
        Key("mutable", paths(), "the only files proposals may change; `set:` and `space:` knobs are looked up in all of them", where="file"),
        Key("frozen", paths(), "files proposals may never change", where="file"),
        Key("parent", text(), "where each experiment branches from: best, baseline or a git ref (default baseline for grid, random and optuna, whose trials set their knobs whole, so a trial says nothing of the point before it; best for the others, whose changes build on each other)", where="file"),
        Key("model", text(), "llm, llm_diff, hybrid (required): the model name the OpenAI-compatible endpoint serves", where="file"),
        Key("base_url", text(), "llm, llm_diff, hybrid: the endpoint, e.g. http://localhost:8000/v1 (vLLM), http://localhost:11434/v1 (Ollama); default OPENAI_BASE_URL, then OpenAI's", where="file"),
        Key("api_key_env", text(), "llm, llm_diff, hybrid: the environment variable holding the endpoint's key (its name only: the key is never written anywhere)", where="file"),
        Key("request_timeout", number(above=0), "llm, llm_diff, hybrid: seconds one request to the model may take", where="file"),
        Key("request_retries", integer(0), "llm, llm_diff, hybrid: retries of a request answered 408, 409, 429 or 5xx, refused or timed out, with backoff", where="file"),
        Key("temperature", number(at_least=0), "llm, llm_diff, hybrid: the sampling temperature (default: the server's)", where="file"),
        Key("required_calls", Kind(lambda v: isinstance(v, list) and all(isinstance(c, str) and c.strip() for c in v), "a list of call names, e.g. [print, evaluate_bpb]", form="paths", py="list[str]"), "llm_diff, hybrid: calls a diff may not remove (the metric's print, the evaluation)", where="file"),
        Key("max_diff_lines", integer(1), "llm_diff, hybrid: the most lines (added plus removed) one diff may change", where="file"),
        Key("stall_threshold", integer(1), "hybrid: rows since the best before the model proposes diffs instead of knob values", where="file"),
        Key("max_rejected_diffs", integer(1), "hybrid: diffs rejected in a row before it goes back to knob values", where="file"),
    ])
    # fmt: on


def _sections() -> dict[str, dict[str, Key]]:
    return {"policy": _policy_table()}


_TABLES: dict[str, Callable[[], dict[str, Any]]] = {
    "SETTINGS": _settings_table,
    "POLICY": _policy_table,
    "SECTIONS": _sections,
}


def __getattr__(name: str) -> dict[str, Any]:
    """`SETTINGS`, `POLICY` and `SECTIONS` for whoever imports them (PEP 562): built on the first
    read, then module attributes like any other."""
    if name not in _TABLES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    table = _TABLES[name]()
    globals()[name] = table
    return table


# ---------------------------------------------------------------- unknown keys

STOP_KEYS = (
    "max_experiments", "budget", "deadline", "per_run_timeout", "target", "patience",
    "max_failure_rate", "failure_window", "text",
)  # fmt: skip


def key_problems(data: dict, where: str) -> list[str]:
    """One line per unknown key, top level and inside `policy:`."""
    if not isinstance(data, dict):
        return [f"{where}: must be a mapping of keys to values, not {type(data).__name__}"]
    problems = _unknown(data, _settings_table(), where, "")
    for section, schema in _sections().items():
        if isinstance(data.get(section), dict):
            problems += _unknown(data[section], schema, where, f"{section}.")
    return problems


def _unknown(data: dict, schema: dict[str, Key], where: str, prefix: str) -> list[str]:
    problems = []
    for key in data:
        if key in schema:
            continue
        name = str(key)
        if not prefix and name in _policy_table():
            hint = f" (it belongs under `policy:`: `policy.{name}`)"
        elif not prefix and name in STOP_KEYS:
            hint = f" (it belongs under `stop:`: `stop.{name}`)"
        elif prefix and name in _settings_table():
            hint = f" (it belongs at the top level, not under `{prefix[:-1]}:`)"
        else:
            import difflib  # only to name the key a typo meant

            close = difflib.get_close_matches(name, list(schema), n=1, cutoff=0.6)
            hint = f" (did you mean `{prefix}{close[0]}`?)" if close else f"; known keys: {', '.join(schema)}"
        problems.append(f"{where}: unknown key `{prefix}{name}`{hint}")
    return problems


def _all_fields(data: dict) -> bool:
    """Whether every key, top level and inside `policy:`, is a field of Settings (PolicySettings):
    the common case, answered without building the tables."""
    if not isinstance(data, dict) or not set(data) <= _field_names(Settings):
        return False
    policy = data.get("policy")
    if not isinstance(policy, dict) or not policy:
        return True
    from autoresearch_skills.campaign.policy_settings import PolicySettings

    return set(policy) <= _field_names(PolicySettings)


@functools.cache
def _field_names(typed: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(typed))


def check_keys(data: dict, where: str) -> None:
    """BadInput naming every unknown key (and the known key each one is closest to). A typo must
    never be silently ignored: `launchr: tmux` would run the night on the default launcher."""
    if _all_fields(data):
        return  # every key is a field, so every key is in the tables (tests/test_settings.py)
    problems = key_problems(data, where)
    if problems:
        raise BadInput("; ".join(problems))


# ---------------------------------------------------------------- the reference page


def reference_table(keys: dict[str, Key] | None = None, prefix: str = "") -> str:
    """A table of references/campaign-settings.md: every key (default SETTINGS; POLICY with prefix
    "policy.") with its type, default, how `ars campaign init` sets it, and its help."""
    header = ["| key | type | default | `ars campaign init` | what it does |", "|---|---|---|---|---|"]
    rows = [_row(prefix + key.name, key) for key in (_settings_table() if keys is None else keys).values()]
    return "\n".join([*header, *rows]) + "\n"


def shown_default(key: Key) -> str:
    """A key's default as the reference page shows it."""
    value = key.default
    if key.required:
        return "required"
    if key.written:
        return "set at init"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, (dict, list)):
        return "`{}`" if isinstance(value, dict) else "`[]`"
    return f'`"{value}"`' if value == "" else f"`{value}`"


def _row(name: str, key: Key) -> str:
    if key.internal:
        cli = "written by ars"
    elif key.where == "argument":
        cli = key.name.upper() + " (argument)"
    elif key.options:
        cli = ", ".join(f"`{flag}`" for flag in key.options)
    else:
        cli = "file only"
    cells = [f"`{name}`", key.kind.what, shown_default(key), cli, key.help]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"
