"""The test end point against a numeric x axis (arlarena_jax.arena.report.axis, axis_numbers,
axis_table, axis_plot): which key is the axis and which keys name the lines, and the numbers of
a budget sweep worked by hand, in the report, its summary.json and its figure."""

from __future__ import annotations

from pathlib import Path

from arlarena_jax.arena.evaluate import EPISODES_FILE, EVALUATIONS_DIR
from arlarena_jax.arena.report.axis import AxisChoice, choose_axis, depends_on
from arlarena_jax.arena.spec import TEST_EVALUATION
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
