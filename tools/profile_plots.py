"""Reward plots for a profile: reward histogram, mean reward per task (sorted), and reward vs
output tokens per rollout. matplotlib's Agg backend, imported only when plots are asked for."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

PLOT_FILES = {
    "histogram": "reward_histogram.png",
    "per_task": "mean_reward_per_task.png",
    "tokens": "reward_vs_output_tokens.png",
}
DPI = 110
SCATTER_MAX_POINTS = 200_000  # beyond this a scatter is a blob; thin evenly, keep every task's share


def _figure(width: float = 7.0, height: float = 4.2):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def render_plots(
    rewards: np.ndarray,
    task_means: np.ndarray,
    output_tokens: np.ndarray | None,
    title: str = "",
) -> dict[str, bytes]:
    """PNG bytes by file name (see PLOT_FILES), for the caller to write. NaN rewards are left out.

    `rewards` and `output_tokens` are per rollout, aligned (the same task and rollout index at
    each position); the tokens plot is skipped when the rollouts report no output tokens.
    """
    import numpy as np

    pngs = {}
    suffix = f" ({title})" if title else ""
    finite = rewards[~np.isnan(rewards)]

    figure = _figure()
    axes = figure.add_subplot()
    distinct = np.unique(finite)
    bins = distinct.size if 0 < distinct.size <= 20 else 50
    axes.hist(finite, bins=bins, color="#4878a8", edgecolor="white")
    axes.set(title=f"Reward per rollout{suffix}", xlabel="reward", ylabel="rollouts")
    axes.text(0.99, 0.97, f"n={finite.size}  mean={finite.mean() if finite.size else float('nan'):.4f}",
              transform=axes.transAxes, ha="right", va="top")  # fmt: skip
    pngs[PLOT_FILES["histogram"]] = _png(figure)

    figure = _figure()
    axes = figure.add_subplot()
    means = np.sort(task_means[~np.isnan(task_means)])
    axes.plot(np.arange(means.size), means, color="#4878a8", linewidth=1.2)
    axes.fill_between(np.arange(means.size), means, alpha=0.25, color="#4878a8")
    axes.set(
        title=f"Mean reward per task, sorted{suffix}",
        xlabel="task (sorted by mean reward)",
        ylabel="mean reward",
    )
    pngs[PLOT_FILES["per_task"]] = _png(figure)

    if output_tokens is not None:
        keep = ~np.isnan(rewards) & ~np.isnan(output_tokens)
        x, y = output_tokens[keep], rewards[keep]
        if x.size > SCATTER_MAX_POINTS:
            step = int(np.ceil(x.size / SCATTER_MAX_POINTS))
            x, y = x[::step], y[::step]
        figure = _figure()
        axes = figure.add_subplot()
        axes.scatter(x, y, s=4, alpha=0.3, color="#4878a8", rasterized=True, linewidths=0)
        axes.set(
            title=f"Reward vs output tokens per rollout{suffix}", xlabel="output tokens", ylabel="reward"
        )
        pngs[PLOT_FILES["tokens"]] = _png(figure)
    return pngs
