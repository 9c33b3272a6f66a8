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
BLUE, ORANGE = "#4878a8", "#e08a2c"
DISCRETE_MAX_VALUES = 20  # at most this many distinct rewards: plot them as categories
TOKEN_BINS = 30
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


def _binned_means(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean of y in up to TOKEN_BINS bins of x holding equal numbers of points."""
    import numpy as np

    if x.size == 0:
        return x, y
    edges = np.unique(np.quantile(x, np.linspace(0, 1, TOKEN_BINS + 1)))
    which = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, max(edges.size - 2, 0))
    counts = np.bincount(which)
    used = counts > 0
    centers = np.bincount(which, weights=x)[used] / counts[used]
    return centers, np.bincount(which, weights=y)[used] / counts[used]


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
    distinct, counts = np.unique(finite, return_counts=True)
    if distinct.size <= DISCRETE_MAX_VALUES:  # 0/1 or a few grades: one bar per value, not bins
        axes.bar([f"{v:g}" for v in distinct], counts, color=BLUE)
    else:
        axes.hist(finite, bins=50, color=BLUE, edgecolor="white")
    mean = f"{finite.mean():.4f}" if finite.size else "-"
    axes.set(
        title=f"Reward per rollout{suffix}: n={finite.size}, mean={mean}", xlabel="reward", ylabel="rollouts"
    )
    pngs[PLOT_FILES["histogram"]] = _png(figure)

    figure = _figure()
    axes = figure.add_subplot()
    means = np.sort(task_means[~np.isnan(task_means)])
    axes.plot(np.arange(means.size), means, color=BLUE, linewidth=1.2)
    axes.fill_between(np.arange(means.size), means, alpha=0.25, color=BLUE)
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
        few = x.size < 2_000  # small runs get big opaque dots, big runs a faint cloud
        discrete = np.unique(y).size <= DISCRETE_MAX_VALUES
        # a little vertical jitter, so 0/1 rewards show as bands with visible density
        jitter = np.random.default_rng(0).uniform(-0.03, 0.03, y.size) * (np.ptp(y) or 1) if discrete else 0
        axes.scatter(x, y + jitter, s=14 if few else 3, alpha=0.7 if few else 0.15, color=BLUE,
                     rasterized=True, linewidths=0, label="rollout")  # fmt: skip
        centers, binned = _binned_means(x, y)
        axes.plot(centers, binned, color=ORANGE, marker="o", markersize=3, linewidth=1.5,
                  label="mean reward per output-token bin")  # fmt: skip
        axes.legend(loc="best", fontsize="small")
        axes.set(
            title=f"Reward vs output tokens per rollout{suffix}", xlabel="output tokens", ylabel="reward"
        )
        pngs[PLOT_FILES["tokens"]] = _png(figure)
    return pngs
