"""The power of the report's comparisons (arlarena_jax.arena.report.power): paired SEs, the
difference they resolve, the games or seeds that would resolve one, and the verdicts, against
numbers worked by hand and exact integer arithmetic; and the verdicts in a written report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arlarena_jax.arena.report import build_report
from arlarena_jax.arena.report.comparison import one_seed, pooled
from arlarena_jax.arena.report.power import (
    MDE_SES,
    Power,
    detectable,
    games_se,
    needed,
    over_seeds,
    resolvable,
    resolved,
    seeds_se,
    verdict,
)
from arlarena_jax.train.held_out import paired_change
from tests.helpers.reports import held_out_games, make_run, val

EXACT = 1e-12  # arithmetic on a handful of floats: only rounding


def outcomes(wins: list[bool]) -> list[dict]:
    return [{"seed": i, "won": w} for i, w in enumerate(wins)]


def exact_needed(n: int, gained: int, lost: int) -> int:
    """n* from the counts alone, in integers: d̄ = (g − l)/n, the per-game variance is
    (g + l)/n − d̄², so n (2 SE / d̄)² = 4 · variance / d̄² = 4 (n (g + l) − (g − l)²) / (g − l)²,
    and n* = floor of that + 1."""
    return 4 * (n * (gained + lost) - (gained - lost) ** 2) // (gained - lost) ** 2 + 1


def exact_resolved(n: int, gained: int, lost: int) -> bool:
    """|d̄| > 2 SE ⇔ d̄² > 4 variance / n ⇔ n (g − l)² > 4 (n (g + l) − (g − l)²)."""
    return n * (gained - lost) ** 2 > 4 * (n * (gained + lost) - (gained - lost) ** 2)


def test_a_paired_se_by_hand():
    """8 games, A wins 0-4, B wins 3-5: d = (1, 1, 1, 0, 0, −1, 0, 0), d̄ = 2/8 = 0.25;
    deviations 0.75² x 3 + 0.25² x 4 + 1.25² = 1.6875 + 0.25 + 1.5625 = 3.5, SE = sqrt(3.5 / 8 /
    8) = 0.2338536. 2 SE = 0.4677072 > 0.25: not resolved; 8 (2 SE / 0.25)² = 8 x 3.5 = 28
    exactly (the tie), so 29 games; the MDE 2.8015852 x 0.2338536 = 0.6551608."""
    a = outcomes([i < 5 for i in range(8)])
    b = outcomes([3 <= i < 6 for i in range(8)])
    change = paired_change(b, a)
    assert (change.change, change.gained, change.lost) == (0.25, 3, 1)
    assert change.se == pytest.approx(math.sqrt(3.5) / 8, abs=EXACT)
    power = Power(change.change, change.se, change.n, "games")
    assert power.resolvable == pytest.approx(0.4677072, abs=1e-7)
    assert power.detectable == pytest.approx(0.6551608, abs=1e-6)  # 7-digit factors
    assert not power.resolved and power.needed == 29 == exact_needed(8, 3, 1)
    assert power.verdict("A", "B") == "not resolved"


def test_the_mde_factor_is_z_0975_plus_z_08():
    """From the normal table: z_0.975 = 1.959964, z_0.8 = 0.841621."""
    assert pytest.approx(1.959964 + 0.841621, abs=2e-6) == MDE_SES
    assert detectable(0.1) == pytest.approx(0.2801585, abs=1e-6)
    assert resolvable(0.1) == pytest.approx(0.2, abs=EXACT)


def test_the_stressed_sampo_against_gspo():
    """10 games only SAMPO won, 1 only GSPO, of 64: d̄ = 9/64 = +14.1 points; the per-game
    variance 11/64 − (9/64)² = 623/4096, SE = sqrt(623 / 4096 / 64) = 4.87 points; 2 SE = 9.75
    < 14.1: SAMPO > GSPO; 4 x 623 / 81 = 30.77, so 31 games would have sufficed."""
    a = outcomes([i < 10 for i in range(64)])
    b = outcomes([i == 10 for i in range(64)])
    change = paired_change(b, a)
    assert change.se == pytest.approx(math.sqrt(623 / 4096 / 64), abs=EXACT)
    assert verdict(change.change, change.se, "SAMPO", "GSPO") == "SAMPO > GSPO"
    assert needed(64, change.change, change.se) == 31 == exact_needed(64, 10, 1)


def test_a_rank_needs_more_than_two_ses():
    assert not resolved(0.5, 0.25) and verdict(0.5, 0.25, "A", "B") == "not resolved"
    assert verdict(0.5, 0.2499, "A", "B") == "A > B"
    assert verdict(-0.5, 0.2, "A", "B") == "A < B"
    assert verdict(0.1, 0.0, "A", "B") == "A > B"  # no spread: any difference is resolved
    assert not resolved(0.0, 0.0) and needed(64, 0.0, 0.0) is None  # nothing ever resolves 0
    assert needed(4, 0.5, 0.25) == 5  # the tie at 4 games; one more resolves it


def test_two_seeds_that_disagree():
    """The issue's SAMPO − GiGPO: −6.2 ± 7.3 and +7.8 ± 5.5 points over two seeds. Mean 0.8;
    SD |7.8 + 6.2| / sqrt(2) = 9.8995, SE = 9.8995 / sqrt(2) = 7.0 (the games' noise alone:
    sqrt(7.3² + 5.5²) / 2 = 4.570); 2 SE = 14.0 > 0.8: not resolved; 2 (14.0 / 0.8)² = 612.5,
    so 613 seeds."""
    power = over_seeds([-0.062, 0.078], [0.073, 0.055])
    assert power.difference == pytest.approx(0.008, abs=EXACT)
    assert power.se == pytest.approx(0.07, abs=EXACT)
    assert games_se([0.073, 0.055]) == pytest.approx(0.0457001, abs=1e-7)
    assert (power.unit, power.count, power.floored) == ("seeds", 2, False)
    assert power.resolvable == pytest.approx(0.14, abs=EXACT)
    assert power.needed == 613 and power.verdict("SAMPO", "GiGPO") == "not resolved"


def test_seeds_that_agree_closer_than_their_games_allow():
    """+25 ± 41.46 and +50 ± 25 points: the seeds' spread 12.5 is below the games' noise
    sqrt(0.414578² + 0.25²) / 2 = 0.242061, which becomes the SE."""
    power = over_seeds([0.25, 0.5], [0.414578, 0.25])
    assert seeds_se([0.25, 0.5]) == pytest.approx(0.125, abs=EXACT)
    assert power.se == pytest.approx(0.242061, abs=1e-6) and power.floored
    with pytest.raises(ValueError, match="two or more seeds"):
        over_seeds([0.25], [0.1])


def test_pooling_sums_the_games_won_alone():
    first = one_seed("A − B", ("A", "B"), 0, paired_change(outcomes([0, 1]), outcomes([1, 1])))
    second = one_seed("A − B", ("A", "B"), 3, paired_change(outcomes([1, 1]), outcomes([0, 1])))
    both = pooled([first, second])
    assert (both.seeds, both.games, both.gained, both.lost) == ((0, 3), (2, 2), 1, 1)
    assert both.power.difference == 0.0 and both.verdict == "not resolved"


pairs = st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=200)


@given(pairs)
def test_games_needed_match_exact_arithmetic(games):
    """For any won/lost pairs: resolved and n* agree with the integer formulas, and n* ≤ n
    exactly when resolved (n* > n when not)."""
    change = paired_change(outcomes([b for _, b in games]), outcomes([a for a, _ in games]))
    n, won, lost = change.n, change.gained, change.lost
    power = Power(change.change, change.se, n, "games")
    if won == lost:
        assert power.needed is None and not power.resolved
        return
    assert power.resolved == exact_resolved(n, won, lost)
    assert power.needed == exact_needed(n, won, lost)
    assert (power.needed <= n) == power.resolved


@given(pairs, st.integers(min_value=2, max_value=9))
def test_repeating_the_games(games, repeats):
    """Playing every game ``repeats`` times over leaves d̄ and the per-game variance as they
    were (the population formula), so the SE falls by sqrt(repeats) (relative 1e-9) and the
    games needed to resolve d̄ stay the same."""
    once = paired_change(outcomes([b for _, b in games]), outcomes([a for a, _ in games]))
    many = games * repeats
    again = paired_change(outcomes([b for _, b in many]), outcomes([a for a, _ in many]))
    assert again.change == pytest.approx(once.change, abs=EXACT)
    assert again.se * math.sqrt(repeats) == pytest.approx(once.se, rel=1e-9, abs=EXACT)
    assert needed(again.n, again.change, again.se) == needed(once.n, once.change, once.se)


@given(
    st.lists(st.floats(-1, 1), min_size=2, max_size=8).flatmap(
        lambda d: st.tuples(
            st.just(d), st.lists(st.floats(0, 0.5), min_size=len(d), max_size=len(d))
        )
    )
)
def test_over_seeds_laws(data):
    """The SE over seeds is at least the games' noise and the seeds' spread; seeds needed are at
    most k exactly when resolved; negating every seed's difference keeps the SE and turns the
    verdict."""
    differences, ses = data
    power = over_seeds(differences, ses)
    assert power.se >= max(games_se(ses), seeds_se(differences)) - EXACT
    if power.needed is not None:
        assert (power.needed <= power.count) == power.resolved
    turned = over_seeds([-d for d in differences], ses)
    assert turned.se == pytest.approx(power.se, abs=EXACT)
    flip = {"A > B": "A < B", "A < B": "A > B", "not resolved": "not resolved"}
    assert turned.verdict("A", "B") == flip[power.verdict("A", "B")]


def test_a_resolved_lead_is_ranked_and_turns_with_the_baseline(tmp_path: Path):
    """Ten games, one seed: GRPO wins none, SAMPO games 0-5. d̄ = +60.0 points, SE =
    sqrt(0.6 · 0.4 / 10) = 15.5, 2 SE = 31.0 < 60: SAMPO > GRPO; 4 (10 · 6 − 36) / 36 = 2.67,
    so 3 games would have resolved it. Against SAMPO as the baseline GRPO's row reads the same
    comparison turned: −60.0, GRPO < SAMPO."""
    runs = tmp_path / "runs"
    grpo = make_run(runs, "grpo_seed0", scalars=val(0.0))
    sampo = make_run(runs, "sampo_seed0", method="sampo", scalars=val(0.6))
    for run in (grpo, sampo):
        held_out_games(run, 0, [False] * 10)
    held_out_games(grpo, 10, [False] * 10)
    held_out_games(sampo, 10, [i < 6 for i in range(10)])
    build_report([runs], tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| Paired vs GRPO (points) |" in md
    assert "| +60.0 ± 15.5 (SE, 10 games): SAMPO > GRPO |" in md
    assert (
        "| SAMPO − GRPO | 0 | +60.0 | 15.5 | 10 games | 31.0 | 43.4 | 3 games | 6/0 "
        "| SAMPO > GRPO |"
    ) in md
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    (versus,) = summary["head_to_head"]
    assert (versus["needed"], versus["verdict"], versus["resolved"]) == (3, "SAMPO > GRPO", True)
    assert versus["se"] == pytest.approx(100 * math.sqrt(0.024), abs=1e-6)
    build_report([runs], tmp_path / "turned", baseline="sampo", plots=False)
    turned = (tmp_path / "turned" / "report.md").read_text()
    assert "| Paired vs SAMPO (points) |" in turned
    assert "| -60.0 ± 15.5 (SE, 10 games): GRPO < SAMPO |" in turned
