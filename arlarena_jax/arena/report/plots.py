"""Training dynamics: one PNG per (environment, metric), one line per method group.

The line is the mean over the group's seeds at each step of the union of their steps (a seed
that has not logged a step, e.g. a run in progress, is left out there); the band spans the
seeds' minimum to maximum. Success rates are drawn in % (axis kept within 0-100); other metrics
as logged, on a log scale when positive and spanning more than :data:`LOG_SPREAD` (a gradient
norm explosion). A dotted vertical line in a group's colour marks each seed's first collapse
event, if given.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from arlarena_jax.arena.report.events import Series
from arlarena_jax.arena.report.groups import Group


@dataclasses.dataclass(frozen=True)
class Metric:
    """A plotted metric: its tag, title, y-axis label and display scale."""

    key: str
    title: str
    unit: str
    scale: float = 1.0


METRICS = (
    Metric("episode/success_rate", "Training success", "success (%)", 100.0),
    Metric("val/success_rate", "Held-out success", "success (%)", 100.0),
    Metric("episode/reward/mean", "Episode reward", "mean episode return"),
    Metric("actor/grad_norm", "Gradient norm", "grad norm (before clipping)"),
    Metric("actor/kl_loss", "KL to the reference policy", "KL loss term (estimator of the config)"),
    Metric("actor/ppo_kl", "KL between old and new policy", "mean (log π_old − log π)"),
    Metric("actor/pg_clipfrac", "Clip fraction", "fraction clipped"),
    Metric("actor/entropy", "Policy entropy", "entropy (nats per token)"),
    Metric(
        "episode/valid_response_format_ratio", "Valid-format ratio", "valid responses (%)", 100.0
    ),
    Metric(
        "actor/sampler_trainer_kl",
        "Sampler-trainer KL",
        "k3 estimate of KL(π_sampler ‖ π_trainer)",
    ),
    Metric("async/staleness_mean", "Staleness", "mean updates behind, per token"),
)


LOG_SPREAD = 50.0  # a positive metric spanning more than this factor gets a log scale


@dataclasses.dataclass(frozen=True)
class Plot:
    """A written figure."""

    env: str
    metric: Metric
    path: Path


def mean_band(series: Sequence[Series]) -> tuple[np.ndarray, ...]:
    """``(steps, mean, low, high)`` on the union of the steps; at each step over the series
    that logged it (low/high: their min and max)."""
    steps = np.unique(np.concatenate([s.steps for s in series]))
    table = np.full((len(series), len(steps)), np.nan)
    for i, s in enumerate(series):
        table[i, np.searchsorted(steps, s.steps)] = s.values
    return steps, np.nanmean(table, 0), np.nanmin(table, 0), np.nanmax(table, 0)


def slug(text: str) -> str:
    """``text`` as a file-name part: runs of other characters than ``[A-Za-z0-9_.-]`` → ``_``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def _draw(ax, group: Group, metric: Metric, style: dict, marks: Sequence[int]) -> np.ndarray:
    """One group's mean line, band and collapse marks; returns the values drawn."""
    series = [r.scalars[metric.key] for r in group.runs if metric.key in r.scalars]
    series = [s for s in series if len(s.steps)]
    if not series:
        return np.empty(0)
    steps, mean, low, high = mean_band(series)
    colour, scale = style["colour"], metric.scale
    marker = "o" if len(steps) <= 40 else None
    label = f"{group.label} (n={len(series)})"
    ax.plot(steps, mean * scale, color=colour, marker=marker, ms=3, label=label)
    if len(series) > 1:
        ax.fill_between(steps, low * scale, high * scale, color=colour, alpha=style["alpha"])
    for step in marks:
        ax.axvline(step, color=colour, ls=":", lw=1.2)
    return np.concatenate([low, high]) * scale


def group_colours(plt, n: int) -> list:
    """tab10, or for more groups tab20's dark shades before its light ones."""
    if n <= 10:
        return list(plt.get_cmap("tab10").colors)
    tab20 = plt.get_cmap("tab20").colors
    return [*tab20[0::2], *tab20[1::2]]


def split_names(groups: Sequence[Group]) -> str:
    """The evaluation splits of the groups' runs, e.g. ``validation`` or ``test, before the
    protocol`` (an evaluated metric's title names them)."""
    return " / ".join(sorted({run.split_label for g in groups for run in g.runs}))


def _decorate(ax, title: str, metric: Metric, values: np.ndarray) -> None:
    """Title, labels, grid, legend; rates kept within 0-100 %, a wide positive range on a log
    scale."""
    from matplotlib.ticker import MaxNLocator

    ax.set(title=title, xlabel="RL step", ylabel=metric.unit)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.grid(alpha=0.3)
    if metric.scale == 100.0:
        low, high = ax.get_ylim()
        ax.set_ylim(max(low, -1.0), min(high, 101.0))
    elif values.min() > 0 and values.max() / values.min() > LOG_SPREAD:
        ax.set_yscale("log")
    legend_below(ax)


LEGEND_LINE_CHARS = 96  # characters a row of the legend holds under a 7.5-inch figure


def legend_columns(labels: Sequence[str]) -> int:
    """Columns of the legend under the axes: as many of the longest label as a row holds
    (:data:`LEGEND_LINE_CHARS`, with room for the marker), at least 1 and at most 3."""
    longest = max((len(label) for label in labels), default=1)
    return max(1, min(3, LEGEND_LINE_CHARS // (longest + 8)))


def legend_below(ax) -> None:
    """The legend under the axes, not beside them: the figure keeps its width, so a page that
    scales it to a column keeps the plot (and the labels) readable."""
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(
        handles,
        labels,
        fontsize="small",
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16),
        ncol=legend_columns(labels),
        frameon=False,
    )


def plot_metric(
    env: str,
    groups: Sequence[Group],
    metric: Metric,
    path: Path,
    marks: Mapping[str, int] | None = None,
) -> bool:
    """Draw one metric of one environment into ``path``; False (nothing written) if no run
    logged it. ``marks``: a run's path (str) → its first collapse step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    colours = group_colours(plt, len(groups))
    drawn = [np.empty(0)]
    for i, group in enumerate(groups):
        steps = [marks[str(r.path)] for r in group.runs if marks and str(r.path) in marks]
        style = {"colour": colours[i % len(colours)], "alpha": 0.2 if len(groups) <= 4 else 0.1}
        drawn.append(_draw(ax, group, metric, style, steps))
    values = np.concatenate(drawn)
    values = values[np.isfinite(values)]
    if len(values):
        split = f" ({split_names(groups)})" if metric.key.startswith("val/") else ""
        _decorate(ax, f"{env}: {metric.title}{split}", metric, values)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return bool(len(values))


def plot_all(
    groups: Sequence[Group], out: Path, marks: Mapping[str, int] | None = None
) -> list[Plot]:
    """Every metric of :data:`METRICS` of every environment that some run logged, written as
    ``out/<env>-<metric>.png``."""
    plots = []
    for env in dict.fromkeys(g.env for g in groups):
        members = [g for g in groups if g.env == env]
        for metric in METRICS:
            path = out / f"{slug(env)}-{slug(metric.key.replace('/', '_'))}.png"
            if plot_metric(env, members, metric, path, marks):
                plots.append(Plot(env, metric, path))
    return plots
