"""Write a built report's files: report.md, report.html, summary.json and runs.csv."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Any

from arlarena_jax.arena.report.axis_numbers import axis_record
from arlarena_jax.arena.report.comparison import Comparison, record
from arlarena_jax.arena.report.document import document
from arlarena_jax.arena.report.end_point import end_point_comparisons
from arlarena_jax.arena.report.groups import Group
from arlarena_jax.arena.report.html import data_uri, render_html
from arlarena_jax.arena.report.markdown import render_markdown
from arlarena_jax.arena.report.model import Report, run_records
from arlarena_jax.arena.report.start_change import start_changes
from arlarena_jax.arena.report.table import Row, Stat
from arlarena_jax.arena.report.versus import comparisons, head_to_head, versus_record

CSV_FIELDS = (
    "run", "env", "method", "label", "seed", "state", "error", "last_step", "total_steps",
    "success_after_cloning", "success_final", "success_final_step", "success_best",
    "success_best_step", "success_lowest", "success_lowest_step", "success_evaluations",
    "change_paired", "change_paired_se", "collapsed", "collapse_step", "collapse_kinds",
    "warning_step", "warning_kinds",
)  # fmt: skip


def _stat(s: Stat) -> dict[str, Any]:
    return dataclasses.asdict(s)


def row_record(row: Row) -> dict[str, Any]:
    """One group's numbers (fractions, as logged) for summary.json."""
    g = row.group
    return {
        "env": g.env,
        "method": g.method,
        "label": g.label,
        "dimension": g.dimension,
        "keys": dict(g.keys),
        "seeds": g.seeds,
        "success": {point: _stat(s) for point, s in row.success.items()},
        "score_key": row.score_key,
        "score": {point: _stat(s) for point, s in row.score.items()} if row.score_key else None,
        "change_vs_baseline_pct": row.change,
        "collapsed_seeds": row.collapsed,
        "warned_seeds": row.warned,
        "evaluated_success": {name: _stat(s) for name, s in row.evaluated.items()},
    }


def _by_env(report: Report) -> dict[str, list[Group]]:
    """The report's groups by environment, in table order."""
    envs: dict[str, list[Group]] = {}
    for group in report.groups:
        envs.setdefault(group.env, []).append(group)
    return envs


def _records(env: str, found: list[Comparison], seeds: bool) -> list[dict[str, Any]]:
    """The comparisons over seeds (``seeds``) or of one seed, for summary.json."""
    return [{"env": env} | record(c) for c in found if (len(c.seeds) > 1) == seeds]


def write_summary(report: Report, path: Path) -> None:
    """``summary.json``: the settings, every group's and every run's numbers, and every
    comparison with its power (:func:`~arlarena_jax.arena.report.comparison.record`); where an
    environment has an x axis, the test end point against it
    (:func:`~arlarena_jax.arena.report.axis_numbers.axis_record`)."""
    envs = _by_env(report)
    summary = {
        "title": report.title,
        "baseline": report.baseline,
        "success_collapse": dataclasses.asdict(report.rule),
        "monitor_overrides": {
            k: list(v) if isinstance(v, tuple) else v for k, v in report.monitor.items()
        },
        "collapse_on": sorted(report.collapse_on),
        "groups": [row_record(r) for r in report.rows],
        "runs": run_records(report),
        "head_to_head": [
            {"env": env} | versus_record(v)
            for env, groups in envs.items()
            for v in head_to_head(groups)
        ],
        "head_to_head_over_seeds": [
            r for env, groups in envs.items() for r in _records(env, comparisons(groups), True)
        ],
        "head_to_head_test": [
            {"env": env, "label": c.label} | record(c)
            for env, groups in envs.items()
            for c in end_point_comparisons(groups)
        ],
        "change_over_start": [
            {"env": env, "label": c.label} | record(c)
            for env, groups in envs.items()
            for c in start_changes(groups)
        ],
        "plots": [p.path.relative_to(report.out).as_posix() for p in report.plots],
    }
    if report.axes:  # a report without an x axis keeps its summary as it was
        summary["test_against_axis"] = [axis_record(numbers) for numbers in report.axes.values()]
    path.write_text(json.dumps(summary, indent=2) + "\n")


def write_runs_csv(report: Report, path: Path) -> None:
    """``runs.csv``: one line per run (success in %; collapse kinds joined by ``;``; the
    success of each evaluation under other settings as ``success@<name>``)."""
    records = run_records(report)
    names = sorted({name for rec in records for name in rec["evaluations"]})
    with path.open("w", newline="") as f:
        fields = [*CSV_FIELDS, *(f"success@{n}" for n in names)]
        writer = csv.DictWriter(f, fields, extrasaction="ignore")
        writer.writeheader()
        for rec in records:
            joined = {k: ";".join(rec[k]) for k in ("collapse_kinds", "warning_kinds")}
            evaluated = {f"success@{n}": e["success"] for n, e in rec["evaluations"].items()}
            writer.writerow(rec | joined | evaluated)


def write_files(report: Report, *, embed_images: bool = False) -> list[Path]:
    """Write the four files into ``report.out``; returns their paths. ``embed_images``: the
    HTML carries the PNGs as data URIs instead of linking ``plots/*.png``."""
    blocks = document(report)
    out = report.out
    src = (lambda p: data_uri(out / p)) if embed_images else (lambda p: p)
    files = [out / "report.md", out / "report.html", out / "summary.json", out / "runs.csv"]
    files[0].write_text(render_markdown(blocks))
    files[1].write_text(render_html(blocks, report.title, src))
    write_summary(report, files[2])
    write_runs_csv(report, files[3])
    return files
