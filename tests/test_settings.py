"""One declaration of every campaign setting (campaign/settings.py), and the readers built from it:
the Settings object, `ars campaign init`'s options, the reference page; one GPU spelling."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest
import yaml
from repo_helpers import ars, make_repo

from autoresearch_skills.campaign import noise, settings, store
from autoresearch_skills.campaign.cli import init_cmd
from autoresearch_skills.campaign.paths import CAMPAIGNS_DIR
from autoresearch_skills.campaign.policy_settings import PolicySettings
from autoresearch_skills.campaign.pool import GpuSpec, Pool, parse_devices, parse_gpu_spec
from autoresearch_skills.campaign.settings import POLICY, SETTINGS, Settings, reference_table, shown_default
from autoresearch_skills.errors import BadInput
from autoresearch_skills.sources.reading import KEYS, MetricSource
from autoresearch_skills.yamlfile import read_yaml

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "references" / "campaign-settings.md"

# The keys a campaign folder's campaign.yaml holds, in order, as the release before the
# declaration wrote them: such a file must read back unchanged.
RELEASED_KEYS = [
    "name", "metric", "direction", "command", "repo", "prefix", "created_at", "preset", "launcher",
    "stop_text", "stop", "strategy", "worktrees", "decide", "keep_ties", "require_baseline", "tmux_socket",
    "keep_sessions", "policy", "parallel", "gpus", "gpus_per_run", "partition", "mem", "cpus",
    "baseline_repeats", "noise_margin", "comparable_margin", "frozen", "mutable", "watch", "prune",
    "metric_source", "first_step_timeout", "throughput_key", "max_commit_mb",
]  # fmt: skip

# `ars campaign init` options of that release: every one keeps its spelling.
RELEASED_OPTIONS = [
    "--metric", "--direction", "--command", "--stop", "--prefix", "--launcher", "--preset", "--strategy",
    "--worktrees", "--decide", "--keep-ties", "--tmux-socket", "--socket", "--keep-sessions", "--frozen",
    "--baseline-repeats", "--noise-margin", "--parallel", "--gpus", "--gpus-per-run", "--dir", "--json",
]  # fmt: skip

RELEASED_YAML = """\
# autoresearch-skills campaign: decided at `ars campaign init`; the deadline is absolute.
# Edit with care: the ledger and branches of this campaign follow these settings.
name: lr-sweep
metric: val_bpb
direction: min
command: python train.py
repo: /data/project
prefix: autoresearch/20250101-lr-sweep
created_at: '2025-01-01T09:00:00+00:00'
preset: karpathy
launcher: tmux
stop_text: 24 experiments or 6h total, 10m each
stop:
  max_experiments: 24
  budget: 21600.0
  per_run_timeout: 600.0
  deadline: '2025-01-01T15:00:00+00:00'
strategy: branches
worktrees: auto
decide: auto
keep_ties: false
require_baseline: true
tmux_socket: lr-sweep
keep_sessions: 5
policy: {}
parallel: 2
gpus: 0-3
gpus_per_run: 2
partition: null
mem: null
cpus: null
baseline_repeats: 2
noise_margin: null
comparable_margin: 0.2
frozen:
- prepare.py
mutable: []
watch: {}
prune: null
metric_source: null
first_step_timeout: null
throughput_key: null
max_commit_mb: 5
"""


# ---------------------------------------------------------------- the Settings object


# Keys added since, after the released ones: a released file lacks them and gets their defaults.
ADDED_KEYS = [
    "pattern", "worktree_include", "carry_copy_mb", "args_style", "ray_address", "ray_working_dir",
    "keep_sessions_at_end", "keep_outputs", "outputs_max_gb", "holdout", "holdout_pattern", "holdout_command",
    "seed", "keep_rule", "objectives", "accelerator", "cpus_per_run", "checks", "checks_timeout", "result_branch",
    "confirm", "slurm_allocation", "slurm_grace", "account", "qos", "constraint", "ray_allocation", "ray_grace",
]  # fmt: skip


def test_settings_fields_are_the_released_keys_in_the_released_order():
    assert [f.name for f in dataclasses.fields(Settings)] == RELEASED_KEYS + ADDED_KEYS
    assert store.Settings is Settings  # `from ...campaign.store import Settings` still works


def test_a_campaign_yaml_written_by_the_released_version_loads(tmp_path: Path):
    (tmp_path / "campaign.yaml").write_text(RELEASED_YAML)
    campaign = store.load(tmp_path)
    s = campaign.settings
    assert (s.name, s.launcher, s.tmux_socket, s.gpus, s.frozen) == (
        "lr-sweep", "tmux", "lr-sweep", "0-3", ["prepare.py"]
    )  # fmt: skip
    assert s.pool().describe() == "2 slot(s), GPUs 0,1,2,3, 2 per run (CUDA_VISIBLE_DEVICES)"
    assert s.noise_policy().best_runs == 2 and s.prune_rule() == "off"
    assert s.watch_policy().stall_after == 15 * 60


def test_a_released_campaign_yaml_is_written_back_as_it_was(tmp_path: Path):
    (tmp_path / "campaign.yaml").write_text(RELEASED_YAML)
    store.write_settings(store.load(tmp_path))
    written = (tmp_path / "campaign.yaml").read_text()
    assert written.startswith(RELEASED_YAML)  # the keys added since follow, at their defaults
    assert [line.split(":")[0] for line in written[len(RELEASED_YAML) :].splitlines()] == ADDED_KEYS


def _field_default(spec: dataclasses.Field):
    if spec.default is not dataclasses.MISSING:
        return spec.default
    return spec.default_factory() if spec.default_factory is not dataclasses.MISSING else None


@pytest.mark.parametrize(
    ("table", "typed"), [(SETTINGS, Settings), (POLICY, PolicySettings)], ids=["top", "policy"]
)
def test_each_key_of_a_table_is_a_field_of_its_dataclass_with_the_same_type_and_default(table, typed):
    keys = [key for key in table.values() if key.stored]
    fields = dataclasses.fields(typed)
    assert [f.name for f in fields] == [key.name for key in keys]  # and in the order campaign.yaml lists them
    for spec, key in zip(fields, keys):
        assert spec.type == key.kind.py + (" | None" if spec.default is None else ""), spec.name
        assert key.default == _field_default(spec), spec.name
    without_default = {f.name for f in fields if _field_default(f) is None and f.default is not None}
    assert without_default == {k.name for k in keys if k.written or (k.required and typed is PolicySettings)}


def test_a_default_written_in_a_table_instead_of_its_field_is_refused():
    timeout = settings.Key("timeout", settings.number(above=0), "seconds", default=60.0)
    with pytest.raises(
        TypeError, match="timeout: write its default on the PolicySettings field, not in the table"
    ):
        settings._declared(PolicySettings, [timeout])


def test_a_metric_source_has_a_field_for_every_key_its_kinds_read():
    names = {f.name for f in dataclasses.fields(MetricSource)}
    assert names == {"kind", "mode", *(key for keys in KEYS.values() for key in keys)}


SECTIONS_YAML = """\
policy:
  kind: random
  samples: 8
  seed: 3
  space: {LR: [0.01, 0.02]}
  mutable: [train.py]
watch: {stall_after: 5m, nan_loss: warn, first_step_timeout: cancel}
metric_source: {kind: jsonl, path: metrics.jsonl, key: val_loss, mode: best}
"""


def test_the_sections_of_a_campaign_folder_read_typed_and_are_written_back_as_given(tmp_path: Path):
    released = RELEASED_YAML.replace("policy: {}\n", "").replace("watch: {}\n", "")
    (tmp_path / "campaign.yaml").write_text(released.replace("metric_source: null\n", SECTIONS_YAML))
    s = store.load(tmp_path).settings
    policy, watch, source = s.policy, s.watch, s.metric_source
    assert (policy.kind, policy.samples, policy.seed, policy.mutable) == ("random", 8, 3, ["train.py"])
    assert (policy.timeout, policy.parent) == (POLICY["timeout"].default, POLICY["parent"].default)
    assert watch.stall_after == "5m" and watch.actions == {"nan_loss": "warn", "first_step_timeout": "cancel"}
    assert (source.kind, source.path, source.mode) == ("jsonl", "metrics.jsonl", "best")
    assert s.frozen_paths() == ["prepare.py"] and s.metric_reading() is source
    store.write_settings(store.load(tmp_path))
    written, given = read_yaml(tmp_path / "campaign.yaml"), yaml.safe_load(SECTIONS_YAML)
    assert written["policy"] == given["policy"]  # samples: 8 as given (unset, random also draws 8)
    assert written["watch"] == given["watch"] and written["metric_source"] == given["metric_source"]
    assert store.load(tmp_path).settings == s


def test_a_blueprints_own_watch_goes_over_the_campaigns_and_an_action_leaves_the_timeout_alone():
    s = Settings.from_mapping(
        {"name": "x", "metric": "m", "direction": "min", "command": "true", "repo": "/r", "prefix": "p",
         "created_at": "2025-01-01T09:00:00+00:00", "preset": "generic", "first_step_timeout": "5m",
         "watch": {"stall_after": "2m", "first_step_timeout": "warn"}}
    )  # fmt: skip
    campaign = s.watch_policy()
    assert (campaign.stall_after, campaign.first_step_timeout, campaign.first_step) == (120, 300, None)
    assert campaign.actions["first_step_timeout"] == "warn"
    own = s.watch_policy({"first_step": "step 1", "first_step_timeout": 60})
    assert (own.stall_after, own.first_step_timeout, own.first_step) == (120, 60, "step 1")


def test_a_section_that_cannot_be_read_is_refused_in_one_line_naming_the_file(tmp_path: Path):
    (tmp_path / "campaign.yaml").write_text(RELEASED_YAML.replace("watch: {}", "watch: {stall_afer: 5m}"))
    with pytest.raises(BadInput, match=r"campaign.yaml: watch key 'stall_afer' is unknown"):
        store.load(tmp_path)
    (tmp_path / "campaign.yaml").write_text(RELEASED_YAML.replace("policy: {}", "policy: {seed: 3}"))
    with pytest.raises(BadInput, match=r"campaign.yaml: `policy` needs `kind`"):
        store.load(tmp_path)


def test_settings_left_out_take_the_declared_defaults():
    s = Settings(name="x", metric="m", direction="min", command="true", repo="/r", prefix="p", created_at="t")
    for key in SETTINGS.values():
        if key.stored and not key.written:
            assert getattr(s, key.name) == key.default, key.name
    assert s.frozen is not Settings(**dataclasses.asdict(s)).frozen  # no list shared between objects
    with pytest.raises(TypeError, match="repo"):
        Settings(name="x", metric="m", direction="min", command="true")


def test_prose_defaults_in_the_help_match_the_modules_that_apply_them():
    from autoresearch_skills.anomalies import WATCH_DEFAULTS
    from autoresearch_skills.clock import format_duration

    timeout = format_duration(WATCH_DEFAULTS["first_step_timeout"])
    assert f"(default {timeout})" in SETTINGS["first_step_timeout"].help
    assert f"(default {noise.DEFAULT_POLICY.margin:g})" in SETTINGS["noise_margin"].help
    from autoresearch_skills.campaign import screening

    minutes = noise.SHORT_RUN_SECONDS // 60
    said = SETTINGS["baseline_repeats"].help
    assert f"default {screening.BASELINE_RUNS} when runs are under {minutes} min" in said
    assert f"under keep_rule noise {noise.DEFAULT_POLICY.best_runs}, else 1" in said
    assert f"default {CAMPAIGNS_DIR.as_posix()}/<name>" in SETTINGS["folder"].help
    from autoresearch_skills import runwatch

    assert settings.PRUNE_RULES == runwatch.PRUNE_RULES


# ---------------------------------------------------------------- `ars campaign init`


def test_init_has_one_option_per_settable_key_with_its_help_and_default():
    options = {p.name: p for p in init_cmd.params if p.name not in ("name", "as_json")}
    assert set(options) == {k.name for k in SETTINGS.values() if k.options}
    for name, param in options.items():
        key = SETTINGS[name]
        assert param.help.startswith(key.help), name
        assert param.required == key.required, name
        if isinstance(key.default, (bool, str, int, float)) and key.default != "":
            assert param.default == key.default, name
    spelled = [opt for p in init_cmd.params for opt in (*p.opts, *p.secondary_opts)]
    assert [o for o in RELEASED_OPTIONS if o not in spelled] == []
    assert options["frozen"].multiple and options["gpus_per_run"].type.min == 1
    assert list(options["launcher"].type.choices) == ["local", "tmux", "slurm", "ray"]
    file_only = {k.name for k in SETTINGS.values() if not k.options and not k.internal}
    assert {"policy", "watch", "metric_source"} <= file_only


def test_init_help_shows_the_declared_help_and_defaults(tmp_path: Path):
    shown = " ".join(ars(tmp_path, "campaign", "init", "--help").stdout.split())
    assert "--keep-sessions INTEGER RANGE tmux sessions of the latest finished runs left open" in shown
    assert "[default: 5; x>=0]" in shown
    assert (
        "--launcher [local|tmux|slurm|ray] where runs start: local, tmux, slurm or ray [default: local]"
        in shown
    )
    assert "--require-baseline / --no-require-baseline" in shown


def test_init_refuses_a_gpu_spelling_with_the_one_to_use(tmp_path: Path):
    done = ars(tmp_path, "campaign", "init", "x", "--metric", "m", "--direction", "min", "--command", "true",
               "--gpus", "0", code=2)  # fmt: skip
    assert done.stderr == 'Error: --gpus 0 is a count of zero GPUs; to pin device 0 write "0," or [0]\n'
    done = ars(tmp_path, "campaign", "init", "x", "--metric", "m", "--direction", "min", "--command", "true",
               "--first-step-timeout", "soon", code=2)  # fmt: skip
    assert done.stderr.startswith("Error: --first-step-timeout must be a duration such as 90s, 20m or 1h30m")


@pytest.mark.parametrize(
    ("gpus", "pool"),
    [
        ("4", "4 slot(s), GPUs 0,1,2,3, 1 per run (CUDA_VISIBLE_DEVICES)"),  # a count
        ("4,", "1 slot(s), GPUs 4, 1 per run (CUDA_VISIBLE_DEVICES)"),  # device 4 alone
        ("4-7", "4 slot(s), GPUs 4,5,6,7, 1 per run (CUDA_VISIBLE_DEVICES)"),
    ],
)
def test_init_reads_gpus_as_a_count_or_device_ids(tmp_path: Path, gpus: str, pool: str):
    repo = make_repo(tmp_path / "repo", {"train.py": "print('val_bpb: 1.0')\n"})
    done = ars(repo, "campaign", "init", "g", "--metric", "val_bpb", "--direction", "min",
               "--command", "python train.py", "--gpus", gpus, "--first-step-timeout", "5m")  # fmt: skip
    assert f"pool: {pool}\n" in done.stdout
    written = store.load(repo / CAMPAIGNS_DIR / "g").settings
    assert (written.gpus, written.first_step_timeout, written.require_baseline) == (gpus, "5m", True)


# ---------------------------------------------------------------- the reference page


def test_the_reference_page_holds_the_generated_tables():
    text = PAGE.read_text()
    assert reference_table() in text, "regenerate the tables with settings.reference_table()"
    assert reference_table(POLICY, "policy.") in text


def test_the_reference_page_lists_exactly_the_declared_keys_with_their_defaults():
    rows = re.findall(r"^\| `([\w.]+)` \| .*? \| (.*?) \| .*? \| .*? \|$", PAGE.read_text(), re.M)
    declared = {k.name: shown_default(k) for k in SETTINGS.values()}
    declared |= {f"policy.{k.name}": shown_default(k) for k in POLICY.values()}
    assert dict(rows) == declared and len(rows) == len(declared)
    assert declared["launcher"] == "`local`" and declared["parallel"] == "unset"


def test_the_reference_page_is_linked_from_the_auto_research_skill():
    assert "(../../references/campaign-settings.md)" in (ROOT / "skills/auto-research/SKILL.md").read_text()


# ---------------------------------------------------------------- one GPU spelling


@pytest.mark.parametrize(
    ("value", "spec"),
    [
        (4, GpuSpec(4)),  # a count: Slurm's --gpus=4
        ("4", GpuSpec(4)),
        ("0-7", GpuSpec(8, tuple(range(8)))),  # device ids: CUDA_VISIBLE_DEVICES
        ("0,1,2,3", GpuSpec(4, (0, 1, 2, 3))),
        ("0, 1, 2", GpuSpec(3, (0, 1, 2))),
        ("0-3,6", GpuSpec(5, (0, 1, 2, 3, 6))),
        ("4-7", GpuSpec(4, (4, 5, 6, 7))),
        ([4, 5], GpuSpec(2, (4, 5))),
        ("[4, 5]", GpuSpec(2, (4, 5))),
        ("CUDA_VISIBLE_DEVICES=4,5", GpuSpec(2, (4, 5))),
        ("4,", GpuSpec(1, (4,))),  # one device alone
        ([4], GpuSpec(1, (4,))),
        ("CUDA_VISIBLE_DEVICES=4", GpuSpec(1, (4,))),
        ("7,6", GpuSpec(2, (7, 6))),  # the order written is kept for pinning
    ],
)
def test_a_gpu_spec_is_a_count_or_device_ids(value, spec):
    assert parse_gpu_spec(value) == spec
    assert parse_gpu_spec(str(spec)) == spec  # its own spelling reads back the same


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, 'gpus 0 is a count of zero GPUs; to pin device 0 write "0," or [0]'),
        ("0", 'gpus 0 is a count of zero GPUs; to pin device 0 write "0," or [0]'),
        ("cuda:4", 'gpus cuda:4: write "4," or [4] for device 4 alone (CUDA_VISIBLE_DEVICES=4), or 4 for a count of 4 GPUs'),
        ("gpu4", 'gpus gpu4: write "4," or [4] for device 4 alone (CUDA_VISIBLE_DEVICES=4), or 4 for a count of 4 GPUs'),
        ("3-1", "gpus 3-1: the range 3-1 runs backwards (write 1-3)"),
        ("0-3,2", "gpus 0-3,2 names device 2 twice"),
        ("a100:2", 'gpus a100:2 is not a count (4: any four GPUs) or device ids ("0-7", "0,1,2,3", "4," or [4] for device 4 alone)'),
        (True, "gpus True is not a count"),
        ([], "gpus [] names no device"),
    ],
)  # fmt: skip
def test_the_other_spelling_is_refused_naming_the_right_one(value, message):
    with pytest.raises(BadInput) as err:
        parse_gpu_spec(value)
    assert err.value.message.startswith(message)


def test_a_pool_holds_the_devices_a_spec_names_or_the_first_n():
    assert parse_devices(4) == parse_devices("4") == (0, 1, 2, 3)
    assert parse_devices("6,4") == (4, 6) and parse_devices(None) == ()
    assert (
        Pool.from_settings(None, "4,", None).describe()
        == "1 slot(s), GPUs 4, 1 per run (CUDA_VISIBLE_DEVICES)"
    )


# ---------------------------------------------------------------- layers


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return {name for name in found if name.startswith("autoresearch_skills")}


def test_the_declaration_stays_in_its_layer():
    tools = ROOT / "tools"
    below = (
        "accelerators.machine",
        "campaign.paths",
        "campaign.policy_settings",
        "campaign.pool",
        "campaign.noise",
        "campaign.pareto",
        "clock",
        "errors",
        "launch",
        "stoprule",
        "runwatch",
        "metrics",
        "sources.reading",
    )
    for name in _imports(tools / "campaign" / "settings.py"):
        assert name.removeprefix("autoresearch_skills.").startswith(below), name
    assert _imports(tools / "campaign" / "paths.py") == set()  # the hooks import it on every tool call
    above = {"autoresearch_skills.monitor", "autoresearch_skills.runwatch"}
    assert not above & _imports(tools / "anomalies.py")
    assert store.CAMPAIGNS_DIR is CAMPAIGNS_DIR
    assert settings.Settings.__module__ == "autoresearch_skills.campaign.settings"
