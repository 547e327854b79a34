"""Where each run ended: one PNG per environment, one column per method group, one dot per seed.

Left panel: each seed's final held-out success (%) with ± 1 standard error of that evaluation
over its episodes (``val/success_rate_se`` at the final step; no bar where none was logged),
and a dashed line at the mean after-cloning success (step 0) of the environment's runs.
Right panel: each seed's paired change from step 0 to its last evaluation (points), game by
game, ± 1 paired SE (:func:`~arlarena_jax.train.held_out.run_change`); runs without per-game
records are left out of it, and it is omitted when no run has them. A collapsed run is drawn
hollow. The curves of :mod:`plots` show the same finals as the last point of a mean line; with
``trainer.eval_every: 0`` (step 0 and the end only) this figure is the arena's result.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from arlarena_jax.arena.report.groups import Group
from arlarena_jax.arena.report.plots import Metric, Plot, group_colours, slug, split_names
from arlarena_jax.arena.report.table import SUCCESS_KEY, evaluation, logged_se
from arlarena_jax.train.held_out import run_change

FINAL = Metric("final/" + SUCCESS_KEY, "Final held-out success per run", "success (%)", 100.0)
SPREAD = 0.25  # seeds of a group spread over ± this much of the column's width
LABEL_CHARS = 18  # a tick label's lines hold this many characters (the label wraps at spaces)
COLUMN_INCHES = 1.6  # the width a column's wrapped label needs, in the "small" font
SIDE_BY_SIDE = 3  # with more groups than this, the paired panel goes under the first


@dataclasses.dataclass(frozen=True)
class FinalPoint:
    """One run's end, in % and points: final success ± SE, paired change ± SE (None: not
    logged)."""

    seed: int
    after_cloning: float | None
    final: float | None
    final_se: float | None
    change: float | None
    change_se: float | None
    collapsed: bool


def final_points(group: Group, collapsed: Mapping[str, bool]) -> list[FinalPoint]:
    """The group's runs' ends, in seed order (runs never evaluated after step 0 included, with
    ``final`` None)."""
    points = []
    for run in group.runs:
        ev = evaluation(run.scalars.get(SUCCESS_KEY))
        se = logged_se(run, SUCCESS_KEY, ev.final_step)
        change = run_change(run.path, run.eval_split)
        points.append(
            FinalPoint(
                seed=run.seed,
                after_cloning=_pct(ev.after_cloning),
                final=_pct(ev.final),
                final_se=_pct(se),
                change=None if change is None else 100.0 * change.change,
                change_se=None if change is None else 100.0 * change.se,
                collapsed=collapsed.get(str(run.path), False),
            )
        )
    return points


def _pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def _offsets(n: int) -> np.ndarray:
    """Horizontal offsets of ``n`` seeds within a column."""
    return np.zeros(1) if n == 1 else np.linspace(-SPREAD, SPREAD, n)


def _dots(ax, x: float, values: Sequence[tuple[float, float | None, bool]], colour) -> None:
    """``(value, se, collapsed)`` per seed around column ``x``: a dot, its ± SE bar."""
    for dx, (value, se, hollow) in zip(_offsets(len(values)), values, strict=True):
        face = "white" if hollow else colour
        ax.errorbar(x + dx, value, yerr=se, fmt="o", color=colour, mfc=face, ms=6, capsize=3)


def _panel(ax, columns: list[list[FinalPoint]], field: str, colours: list) -> bool:
    """Draw ``field`` (``final`` or ``change``) of every column; False if nothing was drawn."""
    drawn = False
    for x, points in enumerate(columns):
        values = [
            (getattr(p, field), getattr(p, field + "_se"), p.collapsed)
            for p in points
            if getattr(p, field) is not None
        ]
        if values:
            _dots(ax, x, values, colours[x % len(colours)])
            drawn = True
    return drawn


def tick_label(label: str, runs: int) -> str:
    """``label`` wrapped at its spaces into lines of at most :data:`LABEL_CHARS` characters (a
    longer word stays whole, on a line of its own), then the count of runs: long labels stack
    in their column and never run into the next."""
    wrapped = textwrap.fill(label, LABEL_CHARS, break_long_words=False, break_on_hyphens=False)
    return f"{wrapped}\n(n={runs})"


def _axes(ax, labels: list[str], title: str, ylabel: str) -> None:
    ax.set_xticks(range(len(labels)), labels, fontsize="small")
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set(title=title, ylabel=ylabel)
    ax.grid(alpha=0.3, axis="y")


def _legend(ax, points: Sequence[FinalPoint]) -> None:
    """The after-cloning line (mean over the runs' step 0) and, if any, the collapsed mark."""
    from matplotlib.lines import Line2D

    starts = [p.after_cloning for p in points if p.after_cloning is not None]
    if starts:
        ax.axhline(np.mean(starts), color="grey", ls="--", lw=1, label="after cloning")
    if any(p.collapsed for p in points):
        hollow = Line2D([], [], color="grey", marker="o", mfc="white", ls="", label="collapsed")
        ax.legend(
            handles=[*ax.get_legend_handles_labels()[0], hollow], fontsize="small", frameon=False
        )
    elif starts:
        ax.legend(fontsize="small", frameon=False)


def plot_final(
    env: str, groups: Sequence[Group], path: Path, collapsed: Mapping[str, bool]
) -> bool:
    """Draw the environment's final successes (and paired changes) into ``path``; False
    (nothing written) if no run was evaluated after step 0. ``collapsed``: a run's path (str)
    → whether it collapsed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = [final_points(g, collapsed) for g in groups]
    points = [p for column in columns for p in column]
    if not any(p.final is not None for p in points):
        return False
    paired = any(p.change is not None for p in points)
    panel = max(4.0, COLUMN_INCHES * len(groups))  # inches: each column's label fits
    stacked = paired and len(groups) > SIDE_BY_SIDE
    rows, cols = (1 + paired, 1) if stacked else (1, 1 + paired)
    fig, axes = plt.subplots(rows, cols, figsize=(panel * cols, 4.2 * rows), dpi=110)
    axes = np.atleast_1d(axes)
    colours = group_colours(plt, len(groups))
    labels = [tick_label(g.label, len(g.runs)) for g in groups]
    _panel(axes[0], columns, "final", colours)
    _legend(axes[0], points)
    title = f"{env}: final held-out success ({split_names(groups)})"
    _axes(axes[0], labels, title, "success (%) ± SE")
    if paired:
        _panel(axes[1], columns, "change", colours)
        axes[1].axhline(0.0, color="grey", lw=1)
        _axes(axes[1], labels, "change over step 0, paired", "points ± paired SE")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return True


def plot_finals(groups: Sequence[Group], out: Path, collapsed: Mapping[str, bool]) -> list[Plot]:
    """:func:`plot_final` for every environment, written as ``out/<env>-final_success.png``."""
    plots = []
    for env in dict.fromkeys(g.env for g in groups):
        path = out / f"{slug(env)}-final_success.png"
        if plot_final(env, [g for g in groups if g.env == env], path, collapsed):
            plots.append(Plot(env, FINAL, path))
    return plots
