"""Compare two reward profiles task by task: `ars profile compare BEFORE AFTER`.

Tasks are matched on `_ng_task_index` (and `agent_ref.name` when the profile has one row per
task and agent). A task is solved when one of its rollouts meets the success rule (read from
`rollout_infos`; `max/<metric>` when the rule's metric is not there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoresearch_skills.errors import BadInput
from autoresearch_skills.reward.jsonl_stream import iter_jsonl
from autoresearch_skills.reward.pass_at_k import OPERATORS, SuccessRule

TASK = "_ng_task_index"
UNCHANGED_TOLERANCE = 1e-12  # float noise, not a change

TaskKey = tuple[int, Any]


@dataclass
class TaskScore:
    mean: float | None  # mean/<metric> over the task's rollouts
    solved: bool | None  # None: the profile cannot tell


def load_profile(path: Path, metric: str, rule: SuccessRule) -> dict[TaskKey, TaskScore]:
    """Per-task mean and solved flag from a `*_reward_profiling.jsonl` file."""
    passes = OPERATORS[rule.op]
    scores: dict[TaskKey, TaskScore] = {}
    for lineno, _raw, row in iter_jsonl(Path(path)):
        task = row.get(TASK)
        if type(task) is not int:
            raise BadInput(f"{path} line {lineno} has no {TASK}: give a *_reward_profiling.jsonl file")
        agent_ref = row.get("agent_ref")
        key = (task, agent_ref.get("name") if isinstance(agent_ref, dict) else None)
        mean = row.get(f"mean/{metric}")
        values = [
            info[rule.metric]
            for info in row.get("rollout_infos") or []
            if isinstance(info, dict) and isinstance(info.get(rule.metric), (int, float))
        ]
        if values:
            solved: bool | None = any(passes(v, rule.threshold) for v in values)
        elif isinstance(row.get(f"max/{rule.metric}"), (int, float)):
            solved = bool(passes(row[f"max/{rule.metric}"], rule.threshold))
        else:
            solved = None
        scores[key] = TaskScore(float(mean) if isinstance(mean, (int, float)) else None, solved)
    return scores


@dataclass
class Change:
    key: TaskKey
    before: float
    after: float

    @property
    def delta(self) -> float:
        return self.after - self.before

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {TASK: self.key[0]}
        if self.key[1] is not None:
            out["agent_ref"] = {"name": self.key[1]}
        return {**out, "before": self.before, "after": self.after, "delta": self.delta}


@dataclass
class Comparison:
    metric: str
    rule: str
    common: int
    only_before: list[TaskKey]
    only_after: list[TaskKey]
    changes: list[Change]  # tasks with a value on both sides, most improved first
    newly_solved: list[TaskKey]
    newly_unsolved: list[TaskKey]
    top: int = 10
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.counts = {
            "improved": sum(c.delta > UNCHANGED_TOLERANCE for c in self.changes),
            "regressed": sum(c.delta < -UNCHANGED_TOLERANCE for c in self.changes),
        }
        self.counts["unchanged"] = len(self.changes) - self.counts["improved"] - self.counts["regressed"]

    def means(self) -> tuple[float | None, float | None]:
        if not self.changes:
            return None, None
        n = len(self.changes)
        return sum(c.before for c in self.changes) / n, sum(c.after for c in self.changes) / n

    def most_improved(self) -> list[Change]:
        return [c for c in self.changes[: self.top] if c.delta > UNCHANGED_TOLERANCE]

    def most_regressed(self) -> list[Change]:
        return [c for c in reversed(self.changes[-self.top :]) if c.delta < -UNCHANGED_TOLERANCE]

    def summary_line(self) -> str:
        before, after = self.means()
        if before is None or after is None:
            trend = f"no task has mean/{self.metric} on both sides"
        else:
            trend = f"mean {self.metric} {before:.4f} -> {after:.4f} ({after - before:+.4f})"
        return (
            f"summary: {self.common} tasks in both; {trend}; {self.counts['improved']} improved, "
            f"{self.counts['regressed']} regressed, {self.counts['unchanged']} unchanged; "
            f"{len(self.newly_solved)} newly solved, {len(self.newly_unsolved)} newly unsolved ({self.rule})"
        )

    def to_dict(self) -> dict[str, Any]:
        before, after = self.means()
        return {
            "metric": self.metric,
            "success": self.rule,
            "tasks_compared": self.common,
            "only_before": [_key_dict(k) for k in self.only_before],
            "only_after": [_key_dict(k) for k in self.only_after],
            f"mean_{self.metric}_before": before,
            f"mean_{self.metric}_after": after,
            **self.counts,
            "most_improved": [c.to_dict() for c in self.most_improved()],
            "most_regressed": [c.to_dict() for c in self.most_regressed()],
            "newly_solved": [_key_dict(k) for k in self.newly_solved],
            "newly_unsolved": [_key_dict(k) for k in self.newly_unsolved],
            "per_task": [c.to_dict() for c in sorted(self.changes, key=lambda c: _sort_key(c.key))],
            "summary": self.summary_line(),
        }

    def report(self) -> str:
        before, after = self.means()
        lines = [
            f"tasks_compared: {self.common}",
            f"only_before: {len(self.only_before)}",
            f"only_after: {len(self.only_after)}",
        ]
        if before is not None and after is not None:
            lines += [
                f"mean_{self.metric}_before: {before:.4f}",
                f"mean_{self.metric}_after: {after:.4f}",
                f"mean_{self.metric}_delta: {after - before:+.4f}",
            ]
        lines += [f"{name}: {count}" for name, count in self.counts.items()]
        lines += [f"newly_solved: {len(self.newly_solved)}", f"newly_unsolved: {len(self.newly_unsolved)}"]
        for title, changes in (
            ("Most improved", self.most_improved()),
            ("Most regressed", self.most_regressed()),
        ):
            if changes:
                lines += [
                    "",
                    f"{title} (mean/{self.metric}):",
                    f"  {'task':<24} {'before':>8} {'after':>8} {'delta':>8}",
                ]
                lines += [
                    f"  {_key_text(c.key):<24} {c.before:>8.4f} {c.after:>8.4f} {c.delta:>+8.4f}"
                    for c in changes
                ]
        for title, keys in (("Newly solved", self.newly_solved), ("Newly unsolved", self.newly_unsolved)):
            if keys:
                shown = ", ".join(_key_text(k) for k in keys[: self.top * 2])
                more = f" (+{len(keys) - self.top * 2} more)" if len(keys) > self.top * 2 else ""
                lines += ["", f"{title} ({self.rule}): {shown}{more}"]
        lines += ["", self.summary_line()]
        return "\n".join(lines)


def _sort_key(key: TaskKey) -> tuple[int, bool, str]:
    return key[0], key[1] is not None, str(key[1])


def _key_dict(key: TaskKey) -> dict[str, Any]:
    return {TASK: key[0], **({"agent_ref": {"name": key[1]}} if key[1] is not None else {})}


def _key_text(key: TaskKey) -> str:
    return f"{key[0]}" if key[1] is None else f"{key[0]} ({key[1]})"


def compare_profiles(
    before: dict[TaskKey, TaskScore],
    after: dict[TaskKey, TaskScore],
    metric: str,
    rule: SuccessRule,
    top: int = 10,
) -> Comparison:
    common = sorted(before.keys() & after.keys(), key=_sort_key)
    changes = [
        Change(key, was, now)
        for key in common
        if (was := before[key].mean) is not None and (now := after[key].mean) is not None
    ]
    changes.sort(key=lambda c: (-c.delta, _sort_key(c.key)))
    return Comparison(
        metric=metric,
        rule=str(rule),
        common=len(common),
        only_before=sorted(before.keys() - after.keys(), key=_sort_key),
        only_after=sorted(after.keys() - before.keys(), key=_sort_key),
        changes=changes,
        newly_solved=[k for k in common if before[k].solved is False and after[k].solved is True],
        newly_unsolved=[k for k in common if before[k].solved is True and after[k].solved is False],
        top=top,
    )
