"""The test end point against a numeric x axis (arlarena_jax.arena.report.axis, axis_numbers,
axis_table, axis_plot): which key is the axis and which keys name the lines, and the numbers of
a budget sweep worked by hand, in the report, its summary.json and its figure."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from arlarena_jax.arena.evaluate import EPISODES_FILE, EVALUATIONS_DIR
from arlarena_jax.arena.report import build_report
from arlarena_jax.arena.report.axis import AxisChoice, choose_axis, depends_on, find_axis
from arlarena_jax.arena.report.axis_numbers import axis_numbers, cell, change_verdict, gap_change
from arlarena_jax.arena.report.axis_plot import log_x
from arlarena_jax.arena.report.groups import group_runs
from arlarena_jax.arena.report.power import Power
from arlarena_jax.arena.report.runs import load_runs
from arlarena_jax.arena.spec import TEST_EVALUATION
from arlarena_jax.errors import ConfigError
from arlarena_jax.train.held_out import write_records
from tests.helpers.reports import make_run, val

EXACT = 1e-12  # a handful of float operations: rounding only
SHOWN = 1e-6  # summary.json rounds to 6 decimals (in points)
GAMES = 8
RECIPE = {8: (16, 1e-4), 32: (32, 3e-4)}  # G → (sft.steps, sft.optim.lr): a function of G
# games won of 8 (games 0, 1, ... won, the rest lost) by (G, trainer.total_steps), seeds 0-2
WINS = {
    (8, 0): (2, 3, 4),
    (8, 16): (4, 4, 6),
    (32, 0): (4, 5, 6),
    (32, 16): (4, 8, 6),
}
LINES = ("trainer.total_steps=0", "trainer.total_steps=16")
RL, CLONING = LINES[1], LINES[0]


def write_tested(run: Path, won: int, games: int = GAMES) -> None:
    """The run's end-point test episodes: games 0 .. won − 1 won, the others lost."""
    records = [{"seed": i, "won": i < won, "failed": False} for i in range(games)]
    write_records(run / EVALUATIONS_DIR / TEST_EVALUATION / EPISODES_FILE, records)


def budget_runs(root: Path, wins: dict = WINS) -> Path:
    """A budget sweep's runs: G in {8, 32} x trainer.total_steps in {0, 16} x seeds, each tested
    at its end point."""
    for (g, steps), per_seed in wins.items():
        sft_steps, lr = RECIPE[g]
        config = {
            "sft": {"num_episodes": g, "steps": sft_steps, "optim": {"lr": lr}},
            "trainer": {"total_steps": steps},
        }
        for seed, won in enumerate(per_seed):
            name = f"textworld/sampo_total_steps={steps}_num_episodes={g}_seed{seed}"
            run = make_run(
                root, name, method="sampo", env="textworld", seed=seed, config=config,
                scalars=val(0.5),
            )  # fmt: skip
            write_tested(run, won)
    return root


# --- detection ----------------------------------------------------------------------------------


def budget_points() -> list[dict[str, str]]:
    return [
        {
            "sft.num_episodes": str(g),
            "sft.steps": str(RECIPE[g][0]),
            "sft.optim.lr": f"{RECIPE[g][1]:g}",
            "trainer.total_steps": str(steps),
        }
        for g, steps in WINS
    ]


def test_the_recipe_keys_are_functions_of_the_budget_not_lines():
    """All four keys are numeric with two values each: the tie goes to the first name,
    sft.num_episodes; sft.steps and sft.optim.lr take one value per G, so only
    trainer.total_steps names the lines."""
    points = budget_points()
    assert depends_on(points, "sft.steps", "sft.num_episodes")
    assert depends_on(points, "sft.optim.lr", "sft.num_episodes")
    assert not depends_on(points, "trainer.total_steps", "sft.num_episodes")
    assert choose_axis(points) == AxisChoice("sft.num_episodes", ("trainer.total_steps",))


def test_the_key_with_most_values_is_the_axis_ties_by_name():
    """lr has three values, steps two: lr is x, steps a line; with two values each, the name
    decides (``a.lr`` before ``b.steps``)."""
    three = [{"a.lr": lr, "b.steps": s} for lr in ("1", "2", "4") for s in ("0", "16")]
    assert choose_axis(three) == AxisChoice("a.lr", ("b.steps",))
    swapped = [{"b.lr": lr, "a.steps": s} for lr in ("1", "2", "4") for s in ("0", "16")]
    assert choose_axis(swapped) == AxisChoice("b.lr", ("a.steps",))
    two = [{"b.lr": lr, "a.steps": s} for lr in ("1", "2") for s in ("0", "16")]
    assert choose_axis(two) == AxisChoice("a.steps", ("b.lr",))


def test_no_axis_without_a_numeric_key_that_some_line_spans():
    assert choose_axis([]) is None
    assert choose_axis([{"m": "grpo"}, {"m": "sampo"}]) is None  # no number
    assert choose_axis([{"x": "1", "m": "a"}, {"x": "1", "m": "b"}]) is None  # one value
    assert choose_axis([{"x": "true"}, {"x": "false"}]) is None
    # each line at one x only: x = 1 for a, b; x = 2 for c (m is no function of x)
    spread = [{"x": "1", "m": "a"}, {"x": "1", "m": "b"}, {"x": "2", "m": "c"}]
    assert choose_axis(spread) is None
    # one line is a line: no line keys
    assert choose_axis([{"x": "1"}, {"x": "2"}]) == AxisChoice("x", ())


# --- numbers by hand ----------------------------------------------------------------------------
# Cells (success of 8 games per seed), mean ± SD / sqrt(3):
#   G=8,  total_steps=0:  2/8, 3/8, 4/8 → 0.375,  SD 0.125 → SE 0.125 / sqrt(3) = 0.0721688
#   G=8,  total_steps=16: 4/8, 4/8, 6/8 → 0.58333, deviations −1/12, −1/12, 1/6: SD² = (1/144 +
#         1/144 + 1/36) / 2 = 1/48, SE = sqrt(1/48 / 3) = 1/12 = 0.0833333
#   G=32, total_steps=0:  4/8, 5/8, 6/8 → 0.625,  SE 0.125 / sqrt(3)
#   G=32, total_steps=16: 4/8, 8/8, 6/8 → 0.75,   SD 0.25 → SE 0.25 / sqrt(3) = 0.1443376
# Gaps (16 − 0), paired game by game; games won are prefixes, so d_i ∈ {0, 1}, d̄ = Δwins / 8,
# one seed's SE_j² = d̄ (1 − d̄) / 8:
#   G=8:  d̄ = 2/8, 1/8, 2/8 → mean 5/24 = 0.2083333; SD over seeds: deviations 1/24, −1/12,
#         1/24, SD² = (2/576 + 1/144) / 2 = 1/192, SE 1/24 = 0.0416667; the games' noise
#         sqrt(3/128 + 7/512 + 3/128) / 3 = sqrt(31/512) / 3 = 0.0820209 is larger and is the SE
#         (over games of 3 seeds); 0.2083 > 2 x 0.0820 = 0.1640: total_steps=16 > total_steps=0.
#   G=32: d̄ = 0, 3/8, 0 → mean 1/8; SD² = (1/64 + 1/16 + 1/64) / 2 = 3/64, SE = sqrt(1/64) =
#         0.125; the games' noise sqrt(15/512) / 3 = 0.0570544 is smaller; 0.125 = 1 SE: not
#         resolved.
# Change of the gap, 8 → 32: 1/8 − 5/24 = −1/12 = −0.0833333, SE = sqrt(31/4608 + 1/64) =
#   sqrt(103/4608) = 0.1495072; 0.083 < 0.299: not resolved.
CELLS = {
    ("8", CLONING): (0.375, 0.125 / math.sqrt(3)),
    ("8", RL): (7 / 12, 1 / 12),
    ("32", CLONING): (0.625, 0.125 / math.sqrt(3)),
    ("32", RL): (0.75, 0.25 / math.sqrt(3)),
}
GAP_8 = (5 / 24, math.sqrt(31 / 512) / 3)
GAP_32 = (1 / 8, 1 / 8)
CHANGE = (-1 / 12, math.sqrt(103 / 4608))


def test_the_budget_sweep_by_hand(tmp_path: Path):
    groups = group_runs(load_runs([budget_runs(tmp_path / "runs")]))
    axis = find_axis(groups)
    assert axis is not None
    assert (axis.key, axis.line_keys) == ("sft.num_episodes", ("trainer.total_steps",))
    assert (axis.xs, axis.lines, axis.pairs) == (("8", "32"), LINES, [(RL, CLONING)])
    numbers = axis_numbers(axis)
    for key, (mean, se) in CELLS.items():
        c = numbers.cells[key]
        assert (c.seeds, c.games, c.unit) == ((0, 1, 2), (8, 8, 8), "seeds")
        assert c.success == pytest.approx(mean, abs=EXACT)
        assert c.se == pytest.approx(se, abs=EXACT)
    at_8, at_32 = numbers.gaps["8", RL, CLONING], numbers.gaps["32", RL, CLONING]
    assert (at_8.power.difference, at_8.power.se) == pytest.approx(GAP_8, abs=EXACT)
    assert at_8.power.floored and at_8.verdict == f"{RL} > {CLONING}"
    assert (at_32.power.difference, at_32.power.se) == pytest.approx(GAP_32, abs=EXACT)
    assert not at_32.power.floored and at_32.verdict == "not resolved"
    change = numbers.changes["8", "32", RL, CLONING]
    assert (change.difference, change.se) == pytest.approx(CHANGE, abs=EXACT)
    assert math.sqrt(31 / 4608 + 1 / 64) == pytest.approx(0.1495072, abs=1e-7)
    assert change_verdict(change, "8", "32") == "not resolved"


def test_a_gap_that_changes_past_two_ses():
    """+30 ± 5 at x₁, −10 ± 5 at x₂: −40 ± sqrt(50) = 7.07 points, past 2 SE = 14.1."""
    change = gap_change(Power(0.3, 0.05, 3, "seeds"), Power(-0.1, 0.05, 3, "seeds"))
    assert change.difference == pytest.approx(-0.4, abs=EXACT)
    assert change.se == pytest.approx(math.sqrt(0.005), abs=EXACT)
    assert (change.count, change.unit) == (6, "seeds")
    assert change_verdict(change, "8", "32") == "gap at 32 < gap at 8"


def test_one_seed_has_the_binomial_se(tmp_path: Path):
    """One seed, 2 of 8 won: 0.25 ± sqrt(0.25 x 0.75 / 8) = 0.1530931; a failed episode is no
    game."""
    run = make_run(tmp_path, "sampo_seed0", method="sampo", scalars=val(0.5))
    records = [{"seed": i, "won": i < 2} for i in range(8)] + [{"seed": 8, "won": True}]
    records[-1]["failed"] = True
    write_records(run / EVALUATIONS_DIR / TEST_EVALUATION / EPISODES_FILE, records)
    (group,) = group_runs(load_runs([tmp_path]))
    c = cell(group)
    assert (c.seeds, c.games, c.unit, c.success) == ((0,), (8,), "games", 0.25)
    assert c.se == pytest.approx(0.1530931, abs=1e-7)


# --- the written report -------------------------------------------------------------------------

HEADING = "### Test end point against sft.num_episodes (each run's end point, test split)"
TABLE = """\
| sft.num_episodes | trainer.total_steps=0: success (%) | trainer.total_steps=16: success (%) \
| trainer.total_steps=16 − trainer.total_steps=0 (points) | Verdict |
|---|---|---|---|---|
| 8 | 37.5 ± 7.2 (SE, 3 seeds) | 58.3 ± 8.3 (SE, 3 seeds) | +20.8 ± 8.2 (SE, games of 3 seeds) \
| trainer.total_steps=16 > trainer.total_steps=0 |
| 32 | 62.5 ± 7.2 (SE, 3 seeds) | 75.0 ± 14.4 (SE, 3 seeds) | +12.5 ± 12.5 (SE, 3 seeds) \
| not resolved |
| 8 → 32: change of the gap | – | – | -8.3 ± 15.0 (SE, sqrt(SE₁² + SE₂²)) | not resolved |"""


def test_the_x_axis_is_log2_from_a_fourfold_span():
    assert log_x([8.0, 32.0]) and log_x([1.0, 4.0]) and not log_x([1.0, 3.0])
    assert not log_x([0.0, 16.0])


def test_the_report_shows_records_and_draws_the_axis(tmp_path: Path):
    out = tmp_path / "out"
    report = build_report([budget_runs(tmp_path / "runs")], out)
    md = (out / "report.md").read_text()
    assert HEADING in md and TABLE in md.split(HEADING)[1]
    png = out / "plots" / "textworld-test_against_sft.num_episodes.png"
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert png in report.files
    assert "](plots/textworld-test_against_sft.num_episodes.png)" in md.split(HEADING)[1]
    training = md.split("### Training dynamics")[1].split("###")[0]
    assert "test_against" not in training
    (found,) = json.loads((out / "summary.json").read_text())["test_against_axis"]
    assert (found["env"], found["key"], found["lines"]) == (
        "textworld",
        "sft.num_episodes",
        [*LINES],
    )
    for record in found["cells"]:
        mean, se = CELLS[record["x"], record["line"]]
        assert record["success"] == pytest.approx(100 * mean, abs=SHOWN)
        assert record["se"] == pytest.approx(100 * se, abs=SHOWN)
    gaps = {g["x"]: g for g in found["gaps"]}
    for x, (difference, se) in (("8", GAP_8), ("32", GAP_32)):
        assert (gaps[x]["a"], gaps[x]["b"]) == (RL, CLONING)
        assert gaps[x]["difference"] == pytest.approx(100 * difference, abs=SHOWN)
        assert gaps[x]["se"] == pytest.approx(100 * se, abs=SHOWN)
    assert gaps["8"]["verdict"] == f"{RL} > {CLONING}" and gaps["32"]["verdict"] == "not resolved"
    (change,) = found["gap_changes"]
    assert (change["x_from"], change["x_to"], change["verdict"]) == ("8", "32", "not resolved")
    assert change["difference"] == pytest.approx(100 * CHANGE[0], abs=SHOWN)
    assert change["se"] == pytest.approx(100 * CHANGE[1], abs=SHOWN)


POWER_TABLE = """\
| Comparison | At | Difference (points) | ± SE (paired) | SE over | Resolvable (2 SE) \
| 80%-power MDE (2.80 SE) | Would resolve it | Verdict |
|---|---|---|---|---|---|---|---|---|
| trainer.total_steps=16 − trainer.total_steps=0 | 8 | +20.8 | 8.2 | games of 3 seeds | 16.4 \
| 23.0 | 2 seeds | trainer.total_steps=16 > trainer.total_steps=0 |
| trainer.total_steps=16 − trainer.total_steps=0 | 32 | +12.5 | 12.5 | 3 seeds | 25.0 | 35.0 \
| 13 seeds | not resolved |
| change of the gap trainer.total_steps=16 − trainer.total_steps=0 | 8 → 32 | -8.3 | 15.0 \
| 6 seeds (both x values) | 29.9 | 41.9 | 78 seeds | not resolved |"""


def test_the_axis_comparisons_show_their_power(tmp_path: Path):
    """Each gap and the change of the gap with 2 SE, 2.80 SE and the units that would resolve
    it, m* = floor(m (2 SE / d)²) + 1: at 8, 3 seeds x (2 x 8.20 / 20.83)² = 1.86 -> 2 (resolved
    already); at 32, 3 x (2 x 12.5 / 12.5)² = 12 -> 13; the change, over both x values' 6 seeds,
    6 x (2 x 14.95 / 8.33)² = 77.25 -> 78."""
    out = tmp_path / "out"
    build_report([budget_runs(tmp_path / "runs")], out, plots=False)
    section = (out / "report.md").read_text().split(HEADING)[1]
    assert POWER_TABLE in section
    (found,) = json.loads((out / "summary.json").read_text())["test_against_axis"]
    (change,) = found["gap_changes"]
    assert (change["units"], change["se_over"], change["needed"]) == (6, "seeds", 78)
    assert change["resolvable"] == pytest.approx(200 * CHANGE[1], abs=SHOWN)
    assert change["detectable_80"] == pytest.approx(280.0 * CHANGE[1], rel=1e-3)


def test_a_change_over_games_against_seeds_has_no_unit_count():
    """One seed's games at one x, seeds at the other: no count of units resolves the change."""
    from arlarena_jax.arena.report.axis_table import change_power_cells

    change = gap_change(Power(0.3, 0.05, 128, "games"), Power(-0.1, 0.05, 3, "seeds"))
    cells = change_power_cells(change)
    assert cells[1] == "games and seeds" and cells[-1] == "–"


def test_a_report_without_an_axis_is_as_it_was(tmp_path: Path):
    """Two methods tested at their end point, no numeric key between them: no heading, no
    figure, no summary entry."""
    runs = tmp_path / "runs"
    for method in ("grpo", "sampo"):
        write_tested(make_run(runs, f"{method}_seed0", method=method, scalars=val(0.5)), 3)
    out = tmp_path / "out"
    build_report([runs], out)
    assert "Test end point against" not in (out / "report.md").read_text()
    assert not list((out / "plots").glob("*test_against*"))
    assert "test_against_axis" not in json.loads((out / "summary.json").read_text())


def test_one_line_has_no_gaps(tmp_path: Path):
    """Only the RL arm: G is the axis, one line (all runs), its cells, no gap columns and no
    change rows."""
    runs = budget_runs(tmp_path / "runs", {k: v for k, v in WINS.items() if k[1] == 16})
    out = tmp_path / "out"
    build_report([runs], out, plots=False)
    table = (out / "report.md").read_text().split(HEADING)[1].split("\n\n")[1]
    assert table.splitlines() == [
        "| sft.num_episodes | all runs: success (%) |",
        "|---|---|",
        "| 8 | 58.3 ± 8.3 (SE, 3 seeds) |",
        "| 32 | 75.0 ± 14.4 (SE, 3 seeds) |",
    ]


def test_a_declared_axis_is_the_only_candidate():
    """``--against``: trainer.total_steps as x (lines: the budgets), although the found axis is
    sft.num_episodes; a key the tested runs do not vary is one line."""
    points = budget_points()
    assert choose_axis(points).key == "sft.num_episodes"
    declared = choose_axis(points, "trainer.total_steps")
    assert declared is not None and declared.key == "trainer.total_steps"
    assert "sft.num_episodes" in declared.line_keys
    assert choose_axis(points, "optim.lr") is None


def test_the_report_takes_a_declared_axis_and_refuses_one_not_varied(tmp_path: Path):
    runs = budget_runs(tmp_path / "runs")
    report = build_report([runs], tmp_path / "r1", plots=False, against="trainer.total_steps")
    assert (
        "### Test end point against trainer.total_steps"
        in (tmp_path / "r1" / "report.md").read_text()
    )
    assert report.against == "trainer.total_steps"
    with pytest.raises(ConfigError, match=r"^--against optim.lr: no environment's runs"):
        build_report([runs], tmp_path / "r2", plots=False, against="optim.lr")
