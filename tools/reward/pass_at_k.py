"""pass@k per task and overall, and AgentJet's validation figures, from profiled rollouts.

pass@k is the unbiased estimator of Chen et al. (2021): with n rollouts of a task, c of them
successful, pass@k = 1 - C(n-c, k) / C(n, k), the chance that k rollouts drawn without
replacement contain a success. It is computed as a product of k ratios, never as factorials,
so n in the thousands neither overflows nor loses precision. Tasks with fewer than k rollouts
have no pass@k and are left out of the overall mean for that k (the count is reported).

AgentJet's figures (`task_pass_rate@k` etc.) are empirical instead: a task passes at k when
one of its first k rollouts (by rollout index) succeeds; `task_pass_rate@1` is the success
rate over all rollouts; `std_reward` is the population std (numpy's default), as AgentJet prints.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autoresearch_skills.errors import BadInput

if TYPE_CHECKING:
    import numpy as np

OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}
_RULE_RE = re.compile(
    r"^\s*([A-Za-z_][\w./@-]*)\s*(>=|<=|==|!=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$"
)


@dataclass(frozen=True)
class SuccessRule:
    """When a rollout counts as a success, e.g. `reward>=1`."""

    metric: str
    op: str
    threshold: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.threshold:g}"

    def apply(self, values: np.ndarray) -> np.ndarray:
        """Success flags; a rollout without the metric (NaN) is a failure."""
        import numpy as np

        with np.errstate(invalid="ignore"):
            return OPERATORS[self.op](values, self.threshold) & ~np.isnan(values)


def parse_success(text: str) -> SuccessRule:
    match = _RULE_RE.match(text)
    if not match:
        raise BadInput(
            f"--success {text!r} is not METRIC OP NUMBER: write e.g. 'reward>=1' or 'judge_score>0.5' "
            "(operators: >= > <= < == !=)"
        )
    return SuccessRule(match.group(1), match.group(2), float(match.group(3)))


def parse_ks(text: str) -> list[int]:
    """`"1,2,4,8"` -> [1, 2, 4, 8] (sorted, unique, each >= 1)."""
    try:
        ks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        ks = []
    if not ks or ks[0] < 1:
        raise BadInput(f"--pass-k {text!r} is not a list of positive integers: write e.g. --pass-k 1,2,4,8")
    return ks


def pass_at_k(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k per task; NaN where n < k.

    C(n-c, k) / C(n, k) = prod_{i<k} (n-c-i) / (n-i); a factor is 0 once n-c-i reaches 0.
    """
    import numpy as np

    n = np.asarray(n, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    none_pass = np.ones(n.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        for i in range(k):
            none_pass *= np.clip((n - c - i) / (n - i), 0.0, 1.0)
    result = 1.0 - none_pass
    result[n < k] = np.nan
    return result


@dataclass
class PassAtK:
    rule: SuccessRule
    ks: list[int]
    num_rollouts: np.ndarray  # per group (task, or task x agent)
    num_success: np.ndarray
    per_task: dict[int, np.ndarray]  # k -> pass@k per group, NaN where too few rollouts
    agentjet: dict[str, Any]

    def overall(self) -> dict[int, float | None]:
        import numpy as np

        return {k: (float(np.nanmean(v)) if (~np.isnan(v)).any() else None) for k, v in self.per_task.items()}

    def tasks_counted(self) -> dict[int, int]:
        import numpy as np

        return {k: int((~np.isnan(v)).sum()) for k, v in self.per_task.items()}

    def table(self) -> str:
        overall, counted = self.overall(), self.tasks_counted()
        lines = [
            f"pass@k (success: {self.rule}; unbiased estimator)",
            f"{'k':>5}  {'pass@k':>8}  {'tasks':>8}",
        ]
        for k in self.ks:
            value = "-" if overall[k] is None else f"{overall[k]:.4f}"
            lines.append(f"{k:>5}  {value:>8}  {counted[k]:>8}")
        lines.append("AgentJet validation figures:")
        for key, value in self.agentjet.items():
            if key.startswith("task_pass_rate@") and value is not None:
                lines.append(f"{key}: {100 * value:.2f}%")
            elif isinstance(value, float):
                lines.append(f"{key}: {value:.4f}")
            else:
                lines.append(f"{key}: {value}")
        return "\n".join(lines)

    def to_dict(self, group_keys: list[dict[str, Any]]) -> dict[str, Any]:
        overall, counted = self.overall(), self.tasks_counted()
        per_task_lists = {k: v.tolist() for k, v in self.per_task.items()}
        rows = []
        for g, key in enumerate(group_keys):
            row = {**key, "num_rollouts": int(self.num_rollouts[g]), "num_success": int(self.num_success[g])}
            for k in self.ks:
                value = per_task_lists[k][g]
                row[f"pass@{k}"] = None if value != value else value
            rows.append(row)
        return {
            "success": str(self.rule),
            "k": self.ks,
            "pass@k": {str(k): overall[k] for k in self.ks},
            "tasks_counted": {str(k): counted[k] for k in self.ks},
            "agentjet": self.agentjet,
            "per_task": rows,
        }


def compute_pass_at_k(
    starts: np.ndarray, success: np.ndarray, reward: np.ndarray | None, ks: list[int], rule: SuccessRule
) -> PassAtK:
    """pass@k for groups of consecutive rows (each group sorted by rollout index).

    `success` flags each rollout; `reward` (NaN = absent) feeds AgentJet's mean/std_reward.
    """
    import numpy as np

    n_rows = len(success)
    sizes = np.diff(np.append(starts, n_rows))
    if n_rows:
        wins = np.add.reduceat(success.astype(np.int64), starts) if len(starts) else np.zeros(0, np.int64)
        group = np.repeat(np.arange(len(starts)), sizes)
        position = np.arange(n_rows) - starts[group]
        first_win = np.minimum.reduceat(np.where(success, position, n_rows), starts)
    else:
        wins = first_win = np.zeros(0, dtype=np.int64)
    per_task = {k: pass_at_k(sizes, wins, k) for k in ks}
    total = len(starts)
    pass_n = int(sizes.max()) if total else 0
    figures: dict[str, Any] = {
        "pass_n": pass_n,
        "total_tasks": total,
        "num_all_success_tasks": int(((wins == sizes) & (sizes > 0)).sum()),
        "num_pass_n_tasks": int((wins > 0).sum()),
        "task_pass_rate@1": float(wins.sum() / n_rows) if n_rows else None,
    }
    for k in sorted({*ks, pass_n} - {1, 0}):
        figures[f"task_pass_rate@{k}"] = float((first_win < k).sum() / total) if total else None
    rewards = reward[~np.isnan(reward)] if reward is not None else np.zeros(0)
    figures["mean_reward"] = float(rewards.mean()) if len(rewards) else None
    figures["std_reward"] = float(rewards.std()) if len(rewards) else None
    return PassAtK(rule, ks, sizes, wins, per_task, figures)
