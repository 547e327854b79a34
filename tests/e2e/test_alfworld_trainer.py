"""The trainer end to end on ALFWorld (configs/alfworld/sampo_tiny.yaml cut to seconds): the
tiny tokenizer built from expert turns, cloning on replayed walkthroughs, one SAMPO step in the
pool, and held-out evaluation with per-task-type success keys (docs/environments.md §1.7, §4, §5).
Structural checks only: files exist, metrics are finite, the success keys are those of the games
played. Uses the built games of tests/conftest.py (skips without the engine or the data)."""

from __future__ import annotations

import math

import pytest

from arlarena_jax.cli import main
from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.loop import summary_table, train
from arlarena_jax.train.metrics import read_scalars
from envs.alfworld.data import find_games, task_type_of

CONFIG = "configs/alfworld/sampo_tiny.yaml"


def small(root, run_dir) -> list[str]:
    return [
        f"env.data_path={root}",
        f"trainer.run_dir={run_dir}",
        "env.alfworld.validation_games=1",  # one of the six training games kept apart
        "sft.num_episodes=5",  # every training game once: the short ones succeed
        "sft.steps=1",
        "env.history_length=0",  # shorter prompts: fewer and smaller compiled shapes
        "env.train_batch_size=2",
        "env.group_size=2",
        "env.max_turns=6",
        "env.num_workers=2",
        "env.eval_batch_size=6",
        "trainer.eval_episodes=6",
        "trainer.total_steps=1",
        "trainer.mini_batch_size=16",
        "trainer.micro_batch_size=8",
        "sampler.max_concurrent_decodes=8",
        "trainer.export_hf=false",
    ]


def test_alfworld_run_clones_trains_and_evaluates(alfworld_data_root, tmp_path):
    summary = train(load_config(CONFIG, small(alfworld_data_root, tmp_path)), console=False)
    assert summary.steps == 1 and summary.success_after_rl is not None
    row = summary.history[0]
    for key in ("actor/pg_loss", "episode/success_rate", "timing/rollout/env"):
        assert math.isfinite(row[key]), key
    per_task = {k for k in summary.final_eval if k.endswith("_success_rate")}
    assert "val/success_rate" in summary.final_eval
    games = find_games(alfworld_data_root / "json_2.1.1" / "valid_seen")
    assert len(games) <= 6  # six evaluation episodes play every game, one per task type
    assert len(per_task) == len({task_type_of(g) for g in games})
    table = summary_table(summary)
    assert all(key.removeprefix("val/") in table for key in per_task)
    scalars = read_scalars(tmp_path / "tensorboard")
    assert "sft/loss" in scalars and "test/success_rate" in scalars


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("env.data_path={tmp}", "no solvable ALFWorld games"),
        ("env.alfworld.test_split=valid_train", "env.alfworld.test_split"),
    ],
)
def test_alfworld_cli_refuses_missing_games_or_a_bad_split_in_one_line(
    override, message, tmp_path, capsys
):
    with pytest.raises(SystemExit) as info:
        main(["train", CONFIG, override.format(tmp=tmp_path), f"trainer.run_dir={tmp_path}"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err
