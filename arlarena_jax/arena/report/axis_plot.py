"""The test end point against an x axis, drawn: one PNG per environment that has an axis
(:func:`~arlarena_jax.arena.report.build.axes_of`), x the key's values (log2 where all are
positive and span a factor of :data:`LOG_SPAN` or more, ticks at the values), one line per line
value, y the test success in % (the mean over the seeds at that x) ± its SE over seeds (one
seed: the binomial SE over its games; :mod:`~arlarena_jax.arena.report.axis_numbers`); the
lines' points are shifted a little apart around each x value (:func:`dodge`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from arlarena_jax.arena.report.axis import number
from arlarena_jax.arena.report.axis_numbers import AxisNumbers
from arlarena_jax.arena.report.plots import Metric, Plot, group_colours, legend_below, slug

AXIS_KEY = "test/end_point_axis"  # the figures' metric key (the document files them apart)
LOG_SPAN = 4.0  # max / min of positive x values from which the x axis is log2
DODGE = 0.015  # each line's shift from the middle one, a fraction of the x span


def axis_metric(key: str) -> Metric:
    return Metric(AXIS_KEY, f"Test success against {key}", "success (%)", 100.0)


def log_x(xs: Sequence[float]) -> bool:
    """All x > 0 and max / min ≥ :data:`LOG_SPAN`."""
    return min(xs) > 0 and max(xs) / min(xs) >= LOG_SPAN


def dodge(xs: Sequence[float], i: int, lines: int, log: bool) -> list[float]:
    """Line ``i``'s x positions moved by :data:`DODGE` of the axis's span per line from the
    middle line (in log2 on a log axis), so that error bars at one x stay apart."""
    shift = DODGE * (i - (lines - 1) / 2)
    if log:
        return [x * 2 ** (shift * math.log2(max(xs) / min(xs))) for x in xs]
    return [x + shift * (max(xs) - min(xs)) for x in xs]


def plot_axis(numbers: AxisNumbers, path: Path) -> bool:
    """Draw ``numbers`` into ``path``; False (nothing written) without any cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axis = numbers.axis
    if not numbers.cells:
        return False
    fig, ax = plt.subplots(figsize=(6.0, 4.2), dpi=110)
    colours = group_colours(plt, len(axis.lines))
    values = [number(x) for x in axis.xs]
    log = log_x(values)
    for i, line in enumerate(axis.lines):
        found = [(x, numbers.cells[x, line]) for x in axis.xs if (x, line) in numbers.cells]
        if found:
            at = dict(zip(axis.xs, dodge(values, i, len(axis.lines), log), strict=True))
            xs = [at[x] for x, _ in found]
            ys = [100 * c.success for _, c in found]
            ses = [100 * c.se for _, c in found]
            ax.errorbar(xs, ys, yerr=ses, marker="o", capsize=4, color=colours[i], label=line)
    if log:
        ax.set_xscale("log", base=2)
    ax.set_xticks(values, list(axis.xs))
    ax.minorticks_off()
    title = f"{axis.env}: test success against {axis.key}\n(test split, end point)"
    ylabel = "test success (%) ± SE over seeds"
    if any(c.unit == "games" for c in numbers.cells.values()):
        ylabel += "\n(one seed: binomial SE over its games)"
    ax.set(title=title, xlabel=axis.key, ylabel=ylabel)
    low, high = ax.get_ylim()
    ax.set_ylim(max(low, -2.0), min(high, 102.0))
    ax.grid(alpha=0.3)
    legend_below(ax)  # long line labels never cover a point
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return True


def plot_axes(axes: Mapping[str, AxisNumbers], out: Path) -> list[Plot]:
    """:func:`plot_axis` for every environment's axis, as ``out/<env>-test_against_<key>.png``."""
    plots = []
    for env, numbers in axes.items():
        key = numbers.axis.key
        path = out / f"{slug(env)}-test_against_{slug(key)}.png"
        if plot_axis(numbers, path):
            plots.append(Plot(env, axis_metric(key), path))
    return plots
