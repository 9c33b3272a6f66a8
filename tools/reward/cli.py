"""`ars profile`: NeMo Gym-compatible reward profiles (`ars profile --inputs ... --rollouts ...`)
and task-by-task comparison (`ars profile compare BEFORE AFTER`). Wiring only: the join and the
output files live in `profiler`, statistics in `stats`, pass@k in `pass_at_k`, comparison in
`compare`, plots in `plots`; each is imported inside the command that needs it, so `--help`
loads neither numpy nor matplotlib. Runs as `python tools/reward/cli.py` too."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from autoresearch_skills.errors import run_cli


@click.group("profile", invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--inputs",
    type=click.Path(dir_okay=False, path_type=Path),
    help="X_materialized_inputs.jsonl[.gz] written by ng_collect_rollouts",
)
@click.option("--rollouts", type=click.Path(dir_okay=False, path_type=Path), help="X.jsonl[.gz]: the results")
@click.option(
    "--allow-partial",
    is_flag=True,
    help="profile a partial collection: drop tasks without results, report missing counts",
)
@click.option(
    "--out-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="write here instead of beside --rollouts",
)
@click.option("--pass-k", metavar="K[,K...]", help="also compute pass@k for these k (e.g. 1,2,4,8)")
@click.option("--success", default="reward>=1", show_default=True, help="when a rollout counts as a success")
@click.option(
    "--plots", "plots_dir", type=click.Path(file_okay=False, path_type=Path), help="write PNG plots here"
)
@click.option("--json", "as_json", is_flag=True, help="print the summary as one JSON object")
@click.pass_context
def cli(
    ctx: click.Context,
    inputs: Path | None,
    rollouts: Path | None,
    allow_partial: bool,
    out_dir: Path | None,
    pass_k: str | None,
    success: str,
    plots_dir: Path | None,
    as_json: bool,
) -> None:
    """Profile NeMo Gym rollouts per task, as `ng_reward_profile` does, fast.

    Joins X_materialized_inputs.jsonl to X.jsonl on (_ng_task_index,
    _ng_rollout_index) and writes X_reward_profiling.jsonl (one row per task:
    mean/max/min/median/std of every numeric field, rollout_infos, sample)
    and X_agent_metrics.json beside the rollouts. Missing, extra or
    duplicate results fail (exit 2, nothing written) unless --allow-partial
    covers them. Rollouts with a truthy mask_sample stay out of the
    statistics and are counted in coverage/* keys.

    \b
    Examples:
      ars profile --inputs run_materialized_inputs.jsonl --rollouts run.jsonl
      ars profile --inputs in.jsonl.gz --rollouts run.jsonl.gz --allow-partial --out-dir prof/
      ars profile --inputs in.jsonl --rollouts run.jsonl --pass-k 1,2,4,8 --success "reward>=1"
      ars profile --inputs in.jsonl --rollouts run.jsonl --plots plots/
      ars profile compare before_reward_profiling.jsonl after_reward_profiling.jsonl
    """
    if ctx.invoked_subcommand is not None:
        return
    if inputs is None or rollouts is None:
        raise click.UsageError(
            "give --inputs X_materialized_inputs.jsonl and --rollouts X.jsonl, or use `profile compare BEFORE AFTER`"
        )
    # numpy's BLAS starts a thread per core as it loads (~70 ms); profiling does no linear algebra
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from autoresearch_skills.reward.pass_at_k import parse_ks, parse_success
    from autoresearch_skills.reward.profiler import run_profile

    ks = parse_ks(pass_k) if pass_k is not None else None
    rule = parse_success(success)
    run = run_profile(inputs, rollouts, allow_partial, out_dir, ks, rule, plots_dir)
    if as_json:
        click.echo(json.dumps(run.to_dict(), indent=2))
    else:
        click.echo(run.report())


@click.command("compare")
@click.argument("before", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("after", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--metric", default="reward", show_default=True, help="compare mean/<metric> per task")
@click.option("--success", default="reward>=1", show_default=True, help="when a rollout solves its task")
@click.option(
    "--top", default=10, show_default=True, type=click.IntRange(min=1), help="tasks listed per table"
)
@click.option("--json", "as_json", is_flag=True, help="print one JSON object instead of the report")
def compare_cmd(before: Path, after: Path, metric: str, success: str, top: int, as_json: bool) -> None:
    """Compare two *_reward_profiling.jsonl files task by task.

    Prints per-task changes of mean/<metric>: counts of improved, regressed and
    unchanged tasks, the most improved and most regressed, the tasks that went
    from never solved to solved and back, and a `summary:` line.

    \b
    Examples:
      ars profile compare base_reward_profiling.jsonl step200_reward_profiling.jsonl
      ars profile compare a.jsonl b.jsonl --top 20 --success "reward>=0.5"
      ars profile compare a.jsonl b.jsonl --json | jq .newly_solved
    """
    from autoresearch_skills.reward.compare import compare_profiles, load_profile
    from autoresearch_skills.reward.pass_at_k import parse_success

    rule = parse_success(success)
    comparison = compare_profiles(
        load_profile(before, metric, rule), load_profile(after, metric, rule), metric, rule, top
    )
    click.echo(json.dumps(comparison.to_dict(), indent=2) if as_json else comparison.report())


cli.add_command(compare_cmd)


def main() -> None:
    run_cli(cli, prog_name="ars profile")


if __name__ == "__main__":
    main()
