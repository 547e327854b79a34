"""``recipe_from``: a sweep's zip axis chosen from a search sweep's validation results by the
written rule (arlarena_jax/arena/choice.py). No training: the search's run directories are written
by hand as its jobs leave them, with a chosen number of validation games won."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from arlarena_jax.arena import choice, jobs, plan, spec
from arlarena_jax.arena.sweep import sweep_command
from arlarena_jax.errors import ConfigError
from tests.helpers.sweeps import sweep_file

GAMES = 16
SEARCH = """
name: search
methods: [grpo]
seeds: [0]
zip:
  sft.num_episodes: [8, 8, 8, 32, 32]
  sft.steps: [4, 8, 8, 16, 32]
  sft.optim.lr: [1.0e-4, 3.0e-5, 1.0e-4, 1.0e-4, 1.0e-4]
overrides: {trainer.total_steps: 0}
protocol: {select_on: validation, end_point: none}
"""
ARMS = """
name: arms
methods: [grpo]
grid: {trainer.total_steps: [0, 2]}
seeds: [0, 1]
recipe_from:
  sweep: search.yaml
  per: sft.num_episodes
  tie_games: 1
  prefer_lower: [sft.steps, sft.optim.lr]
protocol: {select_on: validation, end_point: final}
"""


def validated(run_dir: Path, wins: int, *, state: str = "done", failed: int = 0) -> None:
    """A search run as its job leaves it: done, with ``wins`` of GAMES validation games won at
    its step-0 evaluation (``failed`` more episodes lost to the infrastructure)."""
    folder = run_dir / "held_out" / "validation"
    folder.mkdir(parents=True)
    records = [{"seed": i, "won": i < wins} for i in range(GAMES)]
    records += [{"seed": GAMES + i, "won": False, "failed": True} for i in range(failed)]
    (folder / "step_000000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    jobs.write_state(run_dir, state=state)


def search_with(tmp_path: Path, wins: list[int], **kwargs) -> list[plan.PlannedRun]:
    """The search sweep written and planned, its runs given ``wins`` validation wins each."""
    runs = plan.plan(spec.load_sweep(sweep_file(tmp_path, SEARCH, "search.yaml")))
    for run, won in zip(runs, wins, strict=True):
        validated(run.run_dir, won, **kwargs)
    return runs


def arms(tmp_path: Path, body: str = ARMS) -> spec.SweepSpec:
    return spec.load_sweep(sweep_file(tmp_path, body, "arms.yaml"))


def test_the_most_validation_wins_is_chosen_per_budget(tmp_path):
    """G=8: 9 wins beats 5 and 7 (2 games ahead: no tie); G=32: 12 beats 3. The zip axis is
    G and the chosen recipe, in the search's order, and the runs carry it."""
    search_with(tmp_path, [5, 7, 9, 3, 12])
    runs = plan.plan(arms(tmp_path))
    assert len(runs) == 2 * 2 * 2  # 2 RL budgets x 2 chosen recipes x 2 seeds
    chosen = {
        (r.values["sft.num_episodes"], r.values["sft.steps"], r.values["sft.optim.lr"])
        for r in runs
    }
    assert chosen == {(8, 8, 1.0e-4), (32, 32, 1.0e-4)}
    run = runs[0]
    assert run.config.sft.num_episodes == 8 and run.config.sft.steps == 8
    assert run.config.trainer.eval_split == "validation"


def test_a_tie_within_one_game_goes_to_fewer_steps_then_the_lower_lr(tmp_path):
    """G=8: 8, 9 and 9 wins all tie within one game of 9: the fewest steps (4) wins although it
    scored less; G=32: 10 and 11 tie, 16 steps < 32 steps."""
    search_with(tmp_path, [8, 9, 9, 10, 11])
    axis = choice.zip_axis(arms(tmp_path).recipe_from)
    assert axis == {
        "sft.num_episodes": (8, 32),
        "sft.steps": (4, 16),
        "sft.optim.lr": (1.0e-4, 1.0e-4),
    }


def test_equal_steps_tie_goes_to_the_lower_learning_rate(tmp_path):
    """G=8: the two 8-step recipes tie at 9 and 10 wins (4 steps far behind): lr 3e-5."""
    search_with(tmp_path, [2, 9, 10, 4, 4])
    recipe_from = arms(tmp_path).recipe_from
    made = {c.per_value: c.chosen.recipe for c in choice.choices(recipe_from)}
    assert made[8] == {"sft.steps": 8, "sft.optim.lr": 3.0e-5}
    assert made[32] == {"sft.steps": 16, "sft.optim.lr": 1.0e-4}  # a tie at 4 wins: fewer steps


def test_episodes_lost_to_the_infrastructure_are_not_games(tmp_path):
    search_with(tmp_path, [5, 7, 9, 3, 12], failed=2)
    (scored, *_) = choice.choices(arms(tmp_path).recipe_from)
    assert {s.games for s in scored.scored} == {GAMES}


def test_the_dry_run_prints_the_choice_and_every_recipe_it_beat(tmp_path, capsys):
    search_with(tmp_path, [5, 7, 9, 3, 12])
    path = sweep_file(tmp_path, ARMS, "arms.yaml")
    args = argparse.Namespace(sweep=str(path), out=None, dry_run=True)
    assert sweep_command(args) == 0
    out = capsys.readouterr().out
    assert "recipe_from search.yaml (validation only):" in out
    assert "sft.num_episodes=8: sft.steps=8 sft.optim.lr=0.0001 (9/16 validation games)" in out
    assert "sft.steps=4 sft.optim.lr=0.0001 (5/16 validation games)" in out
    assert "sft.num_episodes=32: sft.steps=32 sft.optim.lr=0.0001 (12/16" in out


def test_an_unfinished_search_refuses_the_choice(tmp_path):
    runs = search_with(tmp_path, [5, 7, 9, 3, 12])
    jobs.write_state(runs[3].run_dir, state="running")
    with pytest.raises(ConfigError, match=r"num_episodes=32_steps=16.* is running: not done"):
        plan.plan(arms(tmp_path))


def test_a_done_search_run_without_validation_games_refuses(tmp_path):
    runs = search_with(tmp_path, [5, 7, 9, 3, 12])
    (runs[0].run_dir / "held_out" / "validation" / "step_000000.jsonl").unlink()
    with pytest.raises(ConfigError, match="has no validation evaluation"):
        plan.plan(arms(tmp_path))


def test_kept_results_elsewhere_are_read_through_runs(tmp_path):
    """``runs``: the search's kept files (keep-results keeps each run's relative path)."""
    runs = plan.plan(spec.load_sweep(sweep_file(tmp_path, SEARCH, "search.yaml")))
    kept = tmp_path / "kept"
    for run, won in zip(runs, [5, 7, 9, 3, 12], strict=True):
        validated(kept / run.name, won)
    body = ARMS.replace("  tie_games: 1\n", f"  tie_games: 1\n  runs: {kept}\n")
    assert choice.zip_axis(arms(tmp_path, body).recipe_from)["sft.steps"] == (8, 32)


@pytest.mark.parametrize(
    ("search_protocol", "message"),
    [
        ("protocol: {select_on: train, end_point: none}", "must read the validation split"),
        ("", "must read the validation split"),
    ],
)
def test_a_search_that_does_not_read_validation_is_refused(tmp_path, search_protocol, message):
    body = SEARCH.replace("protocol: {select_on: validation, end_point: none}", search_protocol)
    sweep_file(tmp_path, body, "search.yaml")
    with pytest.raises(ConfigError, match=message):
        plan.plan(arms(tmp_path))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("  per: sft.num_episodes", "  per: optim.lr"), "per: 'optim.lr' is not an axis"),
        (("[sft.steps, sft.optim.lr]", "[sft.steps, optim.lr]"), "prefer_lower: 'optim.lr'"),
    ],
)
def test_a_rule_naming_no_search_axis_is_refused(tmp_path, edit, message):
    search_with(tmp_path, [5, 7, 9, 3, 12])
    with pytest.raises(ConfigError, match=message):
        plan.plan(arms(tmp_path, ARMS.replace(*edit)))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("recipe_from:\n", "zip: {sft.steps: [1, 2]}\nrecipe_from:\n"), "recipe_from both set"),
        (("  per: sft.num_episodes\n", ""), r"'recipe_from\.per': expected a per name"),
        (("search.yaml", "nowhere.yaml"), "no sweep file"),
        (("  tie_games: 1", "  tie_games: -1"), "expected a number of games >= 0"),
        (("  tie_games: 1", "  tie_game: 1"), r"'recipe_from\.tie_game': unknown"),
        (
            ("grid: {trainer.total_steps: [0, 2]}", "grid: {sft.num_episodes: [8]}"),
            r"'recipe_from\.sft\.num_episodes': is set by the chosen recipe",
        ),
    ],
)
def test_a_bad_recipe_from_block_is_one_line(tmp_path, edit, message):
    sweep_file(tmp_path, SEARCH, "search.yaml")
    with pytest.raises(ConfigError, match=message):
        arms(tmp_path, ARMS.replace(*edit))


def test_the_budget_sweep_reads_the_recipe_search_by_the_registered_rule():
    """The committed phase B file names the committed phase A file and its written rule."""
    root = Path(__file__).resolve().parents[2] / "configs" / "sweeps"
    arms_spec = spec.load_sweep(root / "budget_textworld_arms.yaml")
    assert arms_spec.recipe_from == choice.RecipeFrom(
        root / "budget_textworld_recipe.yaml",
        "sft.num_episodes",
        1.0,
        ("sft.steps", "sft.optim.lr"),
    )
    search = spec.load_sweep(root / "budget_textworld_recipe.yaml")
    assert search.protocol == spec.Protocol("validation", "none")
    assert arms_spec.protocol == spec.Protocol("validation", "final")
    for key, value in search.overrides.items():
        if key != "trainer.total_steps":
            assert arms_spec.overrides[key] == value, key


def test_every_recipe_is_the_searchs_axis_without_results(tmp_path):
    """Before the search has run: every (G, recipe) it tries, in its order, nothing read."""
    sweep_file(tmp_path, SEARCH, "search.yaml")
    assert choice.every_recipe(arms(tmp_path).recipe_from) == {
        "sft.num_episodes": (8, 8, 8, 32, 32),
        "sft.steps": (4, 8, 8, 16, 32),
        "sft.optim.lr": (1.0e-4, 3.0e-5, 1.0e-4, 1.0e-4, 1.0e-4),
    }
