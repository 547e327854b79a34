"""The power of a paired comparison: its SE, the smallest difference it resolves, and how many
games or seeds would resolve the difference observed.

A comparison is a mean difference d̄ with a paired standard error SE, over ``count`` units:

- over n games of one seed, d_i = won_A,i − won_B,i and SE = sqrt(mean_i (d_i − d̄)² / n)
  (:func:`arlarena_jax.train.held_out.paired_change`);
- over k seeds, D_j the per-seed paired differences, SE = SD(D) / sqrt(k), SD with ddof = 1
  (:func:`seeds_se`), but never below the games' own noise sqrt(Σ_j SE_j²) / k
  (:func:`games_se`): two seeds can agree by chance more closely than their games allow.

The project's rank rule: a difference is *resolved* when |d̄| > 2 SE (:data:`RANK_SES`); only
then does the report state an order (``A > B``), else "not resolved". So 2 SE is the smallest
difference this many units can resolve (:func:`resolvable`). Not the same thing: the 80 %-power
minimum detectable effect (z_0.975 + z_0.8) · SE ≈ 2.80 SE (:func:`detectable`), the true
difference a two-sided 5 % test would detect four times in five.

Units needed: at a fixed spread σ per unit SE = σ / sqrt(n), so m units would give
SE · sqrt(n / m), and |d̄| > 2 SE sqrt(n / m) ⇔ m > n (2 SE / d̄)². The fewest is
m* = floor(n (2 SE / d̄)²) + 1 (:func:`needed`), none when d̄ = 0; m* ≤ n exactly when the
comparison is resolved.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence

RANK_SES = 2.0  # a rank needs |d̄| > RANK_SES · SE
POWER, ALPHA = 0.8, 0.05  # the minimum detectable effect's power and two-sided level
_NORMAL = statistics.NormalDist()
MDE_SES = _NORMAL.inv_cdf(1 - ALPHA / 2) + _NORMAL.inv_cdf(POWER)  # 1.95996 + 0.84162 ≈ 2.80
_EPS = 1e-9  # relative slack: a difference within rounding of 2 SE is not resolved
_ZERO = 1e-12  # |d̄| below this is no difference


def resolved(difference: float, se: float) -> bool:
    """|d̄| > 2 SE (the rank rule; a tie within float rounding is not resolved)."""
    if _none(difference):
        return False
    return difference * difference > (RANK_SES * se) ** 2 * (1 + _EPS)


def _none(difference: float) -> bool:
    return abs(difference) < _ZERO


def resolvable(se: float) -> float:
    """2 SE: the smallest |d̄| this many games or seeds resolve under the rank rule."""
    return RANK_SES * se


def detectable(se: float) -> float:
    """The 80 %-power minimum detectable effect at a two-sided 5 % level: (z_0.975 + z_0.8) SE
    ≈ 2.80 SE (not the rank rule)."""
    return MDE_SES * se


def needed(count: int, difference: float, se: float) -> int | None:
    """m* = floor(count · (2 SE / d̄)²) + 1, the fewest units (games or seeds) whose SE,
    SE · sqrt(count / m), would resolve ``difference``; None (never) when d̄ = 0. At most
    ``count`` exactly when :func:`resolved`."""
    if _none(difference):
        return None
    ratio = count * (RANK_SES * se / difference) ** 2
    fewest = math.floor(ratio * (1 + _EPS)) + 1
    return min(fewest, count) if resolved(difference, se) else max(fewest, count + 1)


def seeds_se(differences: Sequence[float]) -> float:
    """SD(D) / sqrt(k) over k ≥ 2 per-seed differences D (SD with ddof = 1)."""
    return statistics.stdev(differences) / math.sqrt(len(differences))


def games_se(ses: Sequence[float]) -> float:
    """sqrt(Σ_j SE_j²) / k: the SE of the mean of k per-seed differences from their games'
    noise alone (each SE_j over that seed's games)."""
    return math.sqrt(sum(se * se for se in ses)) / len(ses)


def verdict(difference: float, se: float, a: str, b: str) -> str:
    """``a > b`` or ``a < b`` where :func:`resolved`, else "not resolved"."""
    if not resolved(difference, se):
        return "not resolved"
    return f"{a} > {b}" if difference > 0 else f"{a} < {b}"


@dataclasses.dataclass(frozen=True)
class Power:
    """A difference (a fraction) and its paired SE over ``count`` units (``unit``: "games" or
    "seeds"); ``floored``: over seeds, the games' noise set the SE (:func:`games_se`)."""

    difference: float
    se: float
    count: int
    unit: str
    floored: bool = False

    @property
    def resolved(self) -> bool:
        return resolved(self.difference, self.se)

    @property
    def resolvable(self) -> float:
        return resolvable(self.se)

    @property
    def detectable(self) -> float:
        return detectable(self.se)

    @property
    def needed(self) -> int | None:
        return needed(self.count, self.difference, self.se)

    def verdict(self, a: str, b: str) -> str:
        return verdict(self.difference, self.se, a, b)


def over_seeds(differences: Sequence[float], ses: Sequence[float]) -> Power:
    """The mean of k ≥ 2 per-seed paired differences, its SE over seeds (:func:`seeds_se`),
    floored by the games' noise (:func:`games_se`)."""
    if len(differences) < 2 or len(ses) != len(differences):
        raise ValueError(f"need two or more seeds with an SE each, got {len(differences)}")
    spread, noise = seeds_se(differences), games_se(ses)
    mean = statistics.fmean(differences)
    return Power(mean, max(spread, noise), len(differences), "seeds", noise > spread)
