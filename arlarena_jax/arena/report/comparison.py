"""A comparison of held-out success over the same games, with its power: one seed's paired
difference over its games, or the mean of several seeds' (:mod:`~arlarena_jax.arena.report.power`).

Pairing is by seed and by game: each seed's difference is over the games both evaluations of
that seed played (:func:`arlarena_jax.train.held_out.paired_change`), and only then are seeds
averaged, so the SE over seeds holds both the game noise and the spread between trainings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from arlarena_jax.arena.report.power import Power, over_seeds
from arlarena_jax.train.held_out import PairedChange


@dataclasses.dataclass(frozen=True)
class Comparison:
    """``a`` − ``b`` in held-out success (``label`` names the row); ``games``: the games compared
    per seed; ``gained`` / ``lost``: games only ``a`` / only ``b`` won, over all seeds;
    ``step``: a one-seed comparison's step, ``final`` whether it is both runs' last."""

    label: str
    a: str
    b: str
    seeds: tuple[int, ...]
    games: tuple[int, ...]
    gained: int
    lost: int
    power: Power
    step: int | None = None
    final: bool = True

    @property
    def verdict(self) -> str:
        """``a > b`` / ``a < b`` where |d̄| > 2 SE, else "not resolved"."""
        return self.power.verdict(self.a, self.b)


def one_seed(
    label: str,
    names: tuple[str, str],
    seed: int,
    change: PairedChange,
    step: int | None = None,
    final: bool = True,
) -> Comparison:
    """``names[0]`` − ``names[1]`` on one seed, from their paired change over its games."""
    power = Power(change.change, change.se, change.n, "games")
    a, b = names
    return Comparison(
        label, a, b, (seed,), (change.n,), change.gained, change.lost, power, step, final
    )


def pooled(per_seed: Sequence[Comparison]) -> Comparison:
    """The mean over two or more seeds of one-seed comparisons of the same ``a`` and ``b``,
    with the SE over seeds (:func:`~arlarena_jax.arena.report.power.over_seeds`)."""
    first = per_seed[0]
    power = over_seeds([c.power.difference for c in per_seed], [c.power.se for c in per_seed])
    return Comparison(
        first.label,
        first.a,
        first.b,
        tuple(s for c in per_seed for s in c.seeds),
        tuple(n for c in per_seed for n in c.games),
        sum(c.gained for c in per_seed),
        sum(c.lost for c in per_seed),
        power,
        final=all(c.final for c in per_seed),
    )


def with_pooled(per_seed: Sequence[Comparison]) -> list[Comparison]:
    """Each row label's one-seed comparisons in their order, then, for two or more seeds, their
    mean over seeds."""
    by_label: dict[str, list[Comparison]] = {}
    for c in per_seed:
        by_label.setdefault(c.label, []).append(c)
    out: list[Comparison] = []
    for group in by_label.values():
        out += [*group, pooled(group)] if len(group) > 1 else group
    return out


def flipped(c: Comparison, label: str) -> Comparison:
    """``b`` − ``a``: the difference negated, who won alone swapped, the verdict turned."""
    power = dataclasses.replace(c.power, difference=-c.power.difference)
    return dataclasses.replace(
        c, label=label, a=c.b, b=c.a, gained=c.lost, lost=c.gained, power=power
    )


def record(c: Comparison) -> dict:
    """One comparison for summary.json (differences and SEs in points)."""
    p = c.power
    return {
        "a": c.a,
        "b": c.b,
        "seeds": list(c.seeds),
        "games": list(c.games),
        "difference": round(100 * p.difference, 6),
        "se": round(100 * p.se, 6),
        "se_over": p.unit,
        "se_from_games": p.floored,
        "resolvable": round(100 * p.resolvable, 6),
        "detectable_80": round(100 * p.detectable, 6),
        "needed": p.needed,
        "needed_unit": p.unit,
        "resolved": p.resolved,
        "verdict": c.verdict,
        "only_a_won": c.gained,
        "only_b_won": c.lost,
    }
