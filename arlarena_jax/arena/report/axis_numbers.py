"""The numbers of the test end point against an x axis (:mod:`~arlarena_jax.arena.report.axis`):
each (x, line)'s test success over its seeds, each pair of lines' paired difference at each x
(:func:`~arlarena_jax.arena.report.end_point.end_point_comparisons`, pooled over seeds), and how
that difference changes between adjacent x values.

- Cell: p_s = games won / games played (failed episodes left out) of seed s's run; the mean
  p̄ over k seeds ± SD(p) / sqrt(k) (ddof = 1, :func:`~arlarena_jax.arena.report.power.
  seeds_se`); one seed: p ± sqrt(p (1 − p) / n) over its n games (binomial).
- Gap at x: later line − earlier line, paired by seed and game, its mean over seeds with the SE
  over seeds (:func:`~arlarena_jax.arena.report.comparison.pooled`).
- Change of the gap from x₁ to x₂: D₂ − D₁ ± sqrt(SE₁² + SE₂²); the x values' runs are
  independent trainings. Verdicts by the 2-SE rule (:func:`~arlarena_jax.arena.report.power.
  verdict`).
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from arlarena_jax.arena.report.axis import Axis
from arlarena_jax.arena.report.comparison import Comparison, record
from arlarena_jax.arena.report.end_point import end_point_comparisons, test_episodes
from arlarena_jax.arena.report.groups import Group
from arlarena_jax.arena.report.power import Power, seeds_se
from arlarena_jax.arena.report.versus import by_seed


@dataclasses.dataclass(frozen=True)
class Cell:
    """Test success (a fraction) of one (x, line) over its ``seeds``, with its SE over
    ``unit`` ("seeds"; one seed: "games", binomial)."""

    seeds: tuple[int, ...]
    games: tuple[int, ...]
    success: float
    se: float
    unit: str


def seed_success(episodes: list[dict]) -> tuple[float, int] | None:
    """(games won / games played, games played), failed episodes left out; None without any."""
    played = [bool(r["won"]) for r in episodes if not r.get("failed")]
    return (sum(played) / len(played), len(played)) if played else None


def binomial_se(p: float, n: int) -> float:
    """sqrt(p (1 − p) / n): the SE of a success rate p over n games."""
    return math.sqrt(p * (1.0 - p) / n)


def cell(group: Group) -> Cell | None:
    """The group's test success: mean over seeds ± SD / sqrt(k), or one seed's ± binomial SE;
    None where no run was tested."""
    found = {}
    for seed, run in sorted(by_seed(group).items()):
        episodes = test_episodes(run.path)
        outcome = None if episodes is None else seed_success(episodes)
        if outcome is not None:
            found[seed] = outcome
    if not found:
        return None
    rates = [p for p, _ in found.values()]
    games = tuple(n for _, n in found.values())
    if len(rates) == 1:
        return Cell(tuple(found), games, rates[0], binomial_se(rates[0], games[0]), "games")
    return Cell(tuple(found), games, statistics.fmean(rates), seeds_se(rates), "seeds")


def gap(axis: Axis, x: str, later: str, earlier: str) -> Comparison | None:
    """``later`` − ``earlier`` line at ``x``, paired by seed and game: the mean over seeds where
    they share several, else the one seed's; named by the line labels. None without shared
    seeds."""
    a, b = axis.groups.get((x, later)), axis.groups.get((x, earlier))
    if a is None or b is None:
        return None
    found = end_point_comparisons([b, a])
    if not found:
        return None
    return dataclasses.replace(found[-1], label=f"{later} − {earlier}", a=later, b=earlier)


def mixed_units(change: Power) -> bool:
    """A change of the gap between gaps over different units (one seed's games, several seeds):
    no count of units resolves it."""
    return "/" in change.unit


def gap_change(first: Power, second: Power) -> Power:
    """``second`` − ``first`` of two independent differences: D₂ − D₁ ± sqrt(SE₁² + SE₂²), over
    their units together."""
    se = math.sqrt(first.se**2 + second.se**2)
    unit = first.unit if first.unit == second.unit else f"{first.unit} / {second.unit}"
    return Power(second.difference - first.difference, se, first.count + second.count, unit)


@dataclasses.dataclass(frozen=True)
class AxisNumbers:
    """The axis's cells by (x, line), gaps by (x, later, earlier), and changes of the gap by
    (x₁, x₂, later, earlier) for adjacent x values."""

    axis: Axis
    cells: dict[tuple[str, str], Cell]
    gaps: dict[tuple[str, str, str], Comparison]
    changes: dict[tuple[str, str, str, str], Power]


def axis_numbers(axis: Axis) -> AxisNumbers:
    """Every cell, gap and change of the gap of ``axis`` that its runs allow."""
    cells = {}
    for key in ((x, line) for x in axis.xs for line in axis.lines):
        found = cell(axis.groups[key]) if key in axis.groups else None
        if found is not None:
            cells[key] = found
    gaps = {}
    for x in axis.xs:
        for later, earlier in axis.pairs:
            found = gap(axis, x, later, earlier)
            if found is not None:
                gaps[x, later, earlier] = found
    changes = {}
    for x1, x2 in zip(axis.xs, axis.xs[1:], strict=False):
        for later, earlier in axis.pairs:
            one, two = gaps.get((x1, later, earlier)), gaps.get((x2, later, earlier))
            if one is not None and two is not None:
                changes[x1, x2, later, earlier] = gap_change(one.power, two.power)
    return AxisNumbers(axis, cells, gaps, changes)


def change_verdict(power: Power, x1: str, x2: str) -> str:
    """``gap at x₂ > gap at x₁`` (or <) past 2 SE, else "not resolved"."""
    return power.verdict(f"gap at {x2}", f"gap at {x1}")


def _pct(value: float) -> float:
    return round(100 * value, 6)


def axis_record(numbers: AxisNumbers) -> dict:
    """The axis for summary.json: success, differences and SEs in % / points."""
    axis = numbers.axis
    cells = [
        {"x": x, "line": line, "seeds": list(c.seeds), "games": list(c.games)}
        | {"success": _pct(c.success), "se": _pct(c.se), "se_over": c.unit}
        for (x, line), c in numbers.cells.items()
    ]
    gaps = [{"x": x, "label": c.label} | record(c) for (x, _, _), c in numbers.gaps.items()]
    changes = [
        {"x_from": x1, "x_to": x2, "a": a, "b": b, "difference": _pct(p.difference)}
        | {"se": _pct(p.se), "se_over": p.unit, "units": p.count}
        | {"resolvable": _pct(p.resolvable), "detectable_80": _pct(p.detectable)}
        | {"needed": None if mixed_units(p) else p.needed}
        | {"resolved": p.resolved, "verdict": change_verdict(p, x1, x2)}
        for (x1, x2, a, b), p in numbers.changes.items()
    ]
    head = {"env": axis.env, "key": axis.key, "line_keys": list(axis.line_keys)}
    head |= {"xs": list(axis.xs), "lines": list(axis.lines)}
    return head | {"cells": cells, "gaps": gaps, "gap_changes": changes}
