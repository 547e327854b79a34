"""The text of the table of the test end point against an x axis
(:mod:`~arlarena_jax.arena.report.axis_numbers`): a row per x value (each line's success, each
pair of lines' paired gap and its verdict), then, where there are two lines or more, a row per
two adjacent x values (the change of each gap); and the power of those gaps and changes (their
SE, the difference they resolve, the units that would resolve the one observed). Values in %
and points; every ± is an SE."""

from __future__ import annotations

from arlarena_jax.arena.report.axis_numbers import AxisNumbers, Cell, change_verdict, mixed_units
from arlarena_jax.arena.report.comparison import Comparison
from arlarena_jax.arena.report.power import Power
from arlarena_jax.arena.report.power_table import POWER_HEADERS, needed_cell, over_cell, power_cells
from arlarena_jax.arena.report.table import DASH


def axis_heading(key: str) -> str:
    return f"Test end point against {key} (each run's end point, test split)"


AXIS_NOTE = (
    "One row per x value: each line's test success, the mean over its seeds ± the SE over "
    "seeds, SD / sqrt(k) (ddof=1; one seed: the binomial SE sqrt(p (1 − p) / n) over its n "
    "games); each pair of lines' gap (later − earlier line), paired by seed and game, its mean "
    "over seeds ± its paired SE as in the head-to-head tables. Then one row per two adjacent x "
    "values: the change of each gap, D₂ − D₁ ± sqrt(SE₁² + SE₂²) (the x values' runs are "
    "independent trainings). Verdicts only where |difference| > 2 SE, else not resolved."
)


def _points(value: float) -> str:
    return f"{100 * value:.1f}"


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def success_cell(c: Cell | None) -> str:
    """``62.5 ± 4.2 (SE, 3 seeds)``; one seed: ``62.5 ± 17.1 (SE over 8 games, 1 seed)``."""
    if c is None:
        return DASH
    text = f"{_points(c.success)} ± {_points(c.se)}"
    if c.unit == "games":
        return f"{text} (SE over {_plural(c.games[0], 'game')}, 1 seed)"
    return f"{text} (SE, {_plural(len(c.seeds), 'seed')})"


def gap_cell(c: Comparison | None) -> tuple[str, str]:
    """``+12.5 ± 3.6 (SE, 3 seeds)`` and the verdict; dashes without the gap."""
    if c is None:
        return DASH, DASH
    text = f"{100 * c.power.difference:+.1f} ± {_points(c.power.se)} (SE, {over_cell(c)})"
    return text, c.verdict


def change_cell(p: Power | None, x1: str, x2: str) -> tuple[str, str]:
    """``+5.0 ± 6.1 (SE, sqrt(SE₁² + SE₂²))`` and the verdict; dashes without both gaps."""
    if p is None:
        return DASH, DASH
    text = f"{100 * p.difference:+.1f} ± {_points(p.se)} (SE, sqrt(SE₁² + SE₂²))"
    return text, change_verdict(p, x1, x2)


def axis_rows(numbers: AxisNumbers) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """``(headers, rows)`` of the axis's table."""
    axis = numbers.axis
    headers = (axis.key, *(f"{line}: success (%)" for line in axis.lines))
    for later, earlier in axis.pairs:
        headers += (f"{later} − {earlier} (points)", "Verdict")
    rows = []
    for x in axis.xs:
        row = (x, *(success_cell(numbers.cells.get((x, line))) for line in axis.lines))
        for later, earlier in axis.pairs:
            row += gap_cell(numbers.gaps.get((x, later, earlier)))
        rows.append(row)
    for x1, x2 in zip(axis.xs, axis.xs[1:], strict=False) if axis.pairs else ():
        row = (f"{x1} → {x2}: change of the gap", *(DASH for _ in axis.lines))
        for later, earlier in axis.pairs:
            row += change_cell(numbers.changes.get((x1, x2, later, earlier)), x1, x2)
        rows.append(row)
    return headers, tuple(rows)


AXIS_POWER_NOTE = (
    "The power of the table's comparisons, as in the head-to-head tables. A gap is one x "
    "value's. A change of the gap is over both x values' units together: its SE would shrink "
    'as 1/sqrt(m) with m units split evenly between them, and "would resolve it" counts them '
    "together. A change whose two gaps are over different units (one seed's games against "
    "several seeds) has no such count (–)."
)


def change_power_cells(p: Power) -> tuple[str, ...]:
    """The :data:`POWER_HEADERS` cells of a change of the gap (units of both x values)."""
    mixed = mixed_units(p)
    over = "games and seeds" if mixed else f"{p.count} {p.unit} (both x values)"
    needed = DASH if mixed else needed_cell(p)
    return (_points(p.se), over, _points(p.resolvable), _points(p.detectable), needed)


def axis_power_rows(numbers: AxisNumbers) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """``(headers, rows)``: each gap at its x value, then each change of the gap, with its
    difference, :data:`POWER_HEADERS` and verdict; no rows without a gap."""
    headers = ("Comparison", "At", "Difference (points)", *POWER_HEADERS, "Verdict")
    rows = [
        (c.label, x, f"{100 * c.power.difference:+.1f}", *power_cells(c), c.verdict)
        for (x, _, _), c in numbers.gaps.items()
    ]
    for (x1, x2, later, earlier), p in numbers.changes.items():
        label = f"change of the gap {later} − {earlier}"
        difference = f"{100 * p.difference:+.1f}"
        verdict = change_verdict(p, x1, x2)
        rows.append((label, f"{x1} → {x2}", difference, *change_power_cells(p), verdict))
    return headers, tuple(rows)
