"""The text of the report's comparison tables: each comparison's difference, its paired SE and
what that SE is over, the difference it can resolve, the games or seeds that would resolve the
observed one, and the verdict (:mod:`~arlarena_jax.arena.report.power`). Values in points."""

from __future__ import annotations

from collections.abc import Sequence

from arlarena_jax.arena.report.comparison import Comparison, flipped
from arlarena_jax.arena.report.power import Power

POWER_HEADERS = (
    "± SE (paired)",
    "SE over",
    "Resolvable (2 SE)",
    "80%-power MDE (2.80 SE)",
    "Would resolve it",
)


def _points(value: float) -> str:
    return f"{100 * value:.1f}"


def seeds_cell(c: Comparison) -> str:
    """``0``; ``1 @step 10`` where not both runs' last; ``mean of 0, 1`` over seeds, ``(steps as
    above)`` added where some seed's comparison is not at both runs' last step."""
    if len(c.seeds) > 1:
        text = "mean of " + ", ".join(str(s) for s in c.seeds)
        return text if c.final else f"{text} (steps as above)"
    return f"{c.seeds[0]}" if c.final or c.step is None else f"{c.seeds[0]} @step {c.step}"


def over_cell(c: Comparison) -> str:
    """``64 games`` (one seed); ``2 seeds``; ``games of 2 seeds`` where the games' noise, larger
    than the seeds' spread, set the SE."""
    p = c.power
    if p.unit == "games":
        return f"{c.games[0]} games"
    return f"games of {p.count} seeds" if p.floored else f"{p.count} seeds"


def needed_cell(p: Power) -> str:
    """``17 games``, ``613 seeds``; ``never`` for no difference at all."""
    n = p.needed
    if n is None:
        return "never (no difference)"
    noun = p.unit if n != 1 else p.unit.removesuffix("s")
    return f"{n:,} {noun}"


def power_cells(c: Comparison) -> tuple[str, ...]:
    """The :data:`POWER_HEADERS` cells of ``c``."""
    p = c.power
    resolvable, mde = _points(p.resolvable), _points(p.detectable)
    return (_points(p.se), over_cell(c), resolvable, mde, needed_cell(p))


def comparison_rows(
    comparisons: Sequence[Comparison], won: str
) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """``(headers, rows)``: label, seed, difference, :data:`POWER_HEADERS`, games won by one
    side alone (``won`` heads that column), verdict."""
    headers = ("Comparison", "Seed", "Difference (points)", *POWER_HEADERS, won, "Verdict")
    rows = tuple(
        (
            c.label,
            seeds_cell(c),
            f"{100 * c.power.difference:+.1f}",
            *power_cells(c),
            f"{c.gained}/{c.lost}",
            c.verdict,
        )
        for c in comparisons
    )
    return headers, rows


def against(comparisons: Sequence[Comparison], label: str, base: str) -> Comparison | None:
    """``label`` − ``base``: their mean over seeds where they share several, else their one
    seed's comparison (flipped where ``base`` came later in table order); None without one."""
    for a, b, turn in ((label, base, False), (base, label, True)):
        found = [c for c in comparisons if (c.a, c.b) == (a, b)]
        if found:
            chosen = found[-1]  # the mean over seeds follows the seeds it averages
            return flipped(chosen, f"{label} − {base}") if turn else chosen
    return None


def against_cell(c: Comparison | None) -> str:
    """E.g. ``+14.1 ± 4.9 (SE, 64 games): SAMPO > GRPO``, ``@step N`` after the games where not
    both runs' last; "–" without a comparison."""
    if c is None:
        return "–"
    p = c.power
    where = "" if c.final or c.step is None else f" @step {c.step}"
    text = f"{100 * p.difference:+.1f} ± {_points(p.se)} (SE, {over_cell(c)}{where})"
    return f"{text}: {c.verdict}"
