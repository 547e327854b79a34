"""Build a report: read the runs, group them, detect collapses, tabulate, plot, write."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from arlarena_jax.arena.report.axis import find_axis
from arlarena_jax.arena.report.axis_numbers import AxisNumbers, axis_numbers
from arlarena_jax.arena.report.axis_plot import plot_axes
from arlarena_jax.arena.report.collapse import COLLAPSE_KINDS, SuccessCollapse, detect
from arlarena_jax.arena.report.final_plot import plot_finals
from arlarena_jax.arena.report.groups import group_runs
from arlarena_jax.arena.report.model import Report
from arlarena_jax.arena.report.plots import plot_all
from arlarena_jax.arena.report.runs import load_runs
from arlarena_jax.arena.report.table import build_rows
from arlarena_jax.arena.report.write import write_files
from arlarena_jax.errors import ConfigError
from arlarena_jax.objectives.presets import preset_key


def baseline_key(name: str) -> str:
    """The baseline method's preset key; an unknown name raises a ConfigError."""
    try:
        return preset_key(name)
    except ValueError as err:
        raise ConfigError(f"baseline: {err}") from None


def axes_of(groups: list, against: str | None) -> dict[str, AxisNumbers]:
    """Each environment's x axis of the test end point (``against`` where declared) with its
    numbers, for the environments that have one; found once, for the figure, the document and
    summary.json. A declared axis that no environment's tested groups make: one line."""
    axes = {}
    for env in dict.fromkeys(g.env for g in groups):
        axis = find_axis([g for g in groups if g.env == env], against)
        if axis is not None:
            axes[env] = axis_numbers(axis)
    if against is None or axes:
        return axes
    raise ConfigError(
        f"--against {against}: no environment's runs tested at their end point vary it as an x "
        "axis (numbers, two values or more, one group per value and line)"
    )


def build_report(
    paths: Iterable[Path],
    out: Path,
    *,
    title: str = "ARLArena report",
    baseline: str = "grpo",
    rule: SuccessCollapse | None = None,
    plots: bool = True,
    embed_images: bool = False,
    ignore_keys: Iterable[str] = (),
    monitor: Mapping[str, Any] | None = None,
    collapse_on: frozenset[str] = COLLAPSE_KINDS,
    against: str | None = None,
) -> Report:
    """Read every run at or below ``paths`` and write the report into ``out``: report.md,
    report.html, summary.json, runs.csv and plots/*.png (``plots=False``: no figures).
    ``ignore_keys``: dotted config keys that do not set groups apart (besides the seed, the run
    directory and the cloned start). ``monitor``: stability-monitor settings over each run's own
    for the replay (:func:`~arlarena_jax.arena.report.collapse.monitor_overrides`).
    ``collapse_on``: the event kinds that count as a collapse (the others are warnings).
    ``against``: the numeric key to show the test end point against (None: found from the runs;
    one that no environment's tested runs vary is one line)."""
    base = baseline_key(baseline)
    runs = load_runs(paths)
    rule = rule or SuccessCollapse()
    monitor = dict(monitor or {})
    collapses = {str(r.path): detect(r, rule, monitor, collapse_on) for r in runs}
    groups = group_runs(runs, ignore_keys)
    collapsed = {path: c.collapsed for path, c in collapses.items()}
    warned = {path: bool(c.warning_kinds) for path, c in collapses.items()}
    rows = build_rows(groups, collapsed, base, warned)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    axes = axes_of(groups, against)
    report = Report(out, title, base, rule, runs, groups, rows, collapses, monitor, collapse_on)
    report.against, report.axes = against, axes
    if plots:
        marks = {p: c.first_step for p, c in collapses.items() if c.first_step is not None}
        finals = plot_finals(groups, out / "plots", collapsed)
        drawn = plot_axes(axes, out / "plots")
        report.plots = [*finals, *drawn, *plot_all(groups, out / "plots", marks)]
    report.files = [
        *write_files(report, embed_images=embed_images),
        *(p.path for p in report.plots),
    ]
    return report
