"""The report's data: what was read and computed, and the per-run records it lists."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from arlarena_jax.arena.report.axis_numbers import AxisNumbers
from arlarena_jax.arena.report.collapse import COLLAPSE_KINDS, Collapse, SuccessCollapse
from arlarena_jax.arena.report.groups import Group
from arlarena_jax.arena.report.plots import Plot
from arlarena_jax.arena.report.runs import Run
from arlarena_jax.arena.report.table import SUCCESS_KEY, Row, evaluated_success, evaluation
from arlarena_jax.train.held_out import run_change


@dataclasses.dataclass
class Report:
    """A built report: its inputs, numbers, figures and the files written to ``out``."""

    out: Path
    title: str
    baseline: str  # the baseline's preset key
    rule: SuccessCollapse
    runs: list[Run]
    groups: list[Group]
    rows: list[Row]
    collapses: dict[str, Collapse]  # by str(run.path)
    monitor: dict[str, Any] = dataclasses.field(default_factory=dict)  # over each run's own
    collapse_on: frozenset[str] = COLLAPSE_KINDS  # the event kinds that count as a collapse
    plots: list[Plot] = dataclasses.field(default_factory=list)
    against: str | None = None  # the declared x axis of the test end point (None: found)
    axes: dict[str, AxisNumbers] = dataclasses.field(default_factory=dict)  # by env, if any
    files: list[Path] = dataclasses.field(default_factory=list)

    @property
    def root(self) -> Path:
        """The folder above every run (run paths are shown relative to it)."""
        parents = [str(r.path.parent) for r in self.runs]
        return Path(os.path.commonpath(parents)) if parents else Path()


def _number(value: float | None, scale: float = 1.0) -> float | None:
    return None if value is None else round(value * scale, 6)


def run_record(report: Report, group: Group, run: Run) -> dict[str, Any]:
    """One run's numbers (success in %), as summary.json and runs.csv list them."""
    ev = evaluation(run.scalars.get(SUCCESS_KEY))
    collapse = report.collapses[str(run.path)]
    change = run_change(run.path, run.eval_split)  # step 0 to the last evaluation, by game
    return {
        "run": str(run.path.relative_to(report.root)),
        "path": str(run.path),
        "env": run.env,
        "method": run.method,
        "label": group.label,
        "seed": run.seed,
        "eval_split": run.split_label,
        "state": run.state,
        "error": run.error,
        "last_step": run.last_step,
        "total_steps": (run.config.get("trainer") or {}).get("total_steps"),
        "success_after_cloning": _number(ev.after_cloning, 100),
        "success_final": _number(ev.final, 100),
        "success_final_step": ev.final_step,
        "success_best": _number(ev.best, 100),
        "success_best_step": ev.best_step,
        "success_lowest": _number(ev.lowest, 100),
        "success_lowest_step": ev.lowest_step,
        "success_evaluations": ev.count,  # after step 0
        "change_paired": None if change is None else _number(change.change, 100),
        "change_paired_se": None if change is None else _number(change.se, 100),
        "collapsed": collapse.collapsed,
        "collapse_step": collapse.first_step,
        "collapse_kinds": collapse.kinds,
        "warning_step": collapse.first_warning_step,
        "warning_kinds": collapse.warning_kinds,
        "events": [e.message for e in collapse.events],
        "logged_events": [t.text for t in run.texts if t.tag.startswith("stability")],
        "evaluations": {name: _evaluation_record(run, name) for name in run.evaluations},
    }


def _evaluation_record(run: Run, name: str) -> dict[str, Any]:
    """One evaluation of the run under other settings: its overrides, step and metrics, and its
    success in %."""
    record = run.evaluations[name]
    return {
        "overrides": record.get("overrides", []),
        "step": record.get("step"),
        "episodes": record.get("episodes"),
        "success": _number(evaluated_success(run, name), 100),
        "metrics": record["metrics"],
    }


def run_records(report: Report) -> list[dict[str, Any]]:
    """Every run's record, in table order."""
    return [run_record(report, g, r) for g in report.groups for r in g.runs]
