"""The trainer end to end on TextWorld (configs/textworld/sampo_tiny.yaml cut to seconds): games
generated on demand into a temporary folder, the tiny tokenizer built from walkthrough turns,
cloning on them, PPO steps in the pool and held-out evaluation with the score-ratio metric
(docs/environments.md §5, §10). Structural checks only: metrics are finite, the keys are there.
(SAMPO's pieces run on Sokoban in tests/train/test_trainer.py; here the method is PPO, the
recipe's.)
Needs ``textworld`` (the ``alfworld`` extra); skips with the reason otherwise."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("textworld", reason="TextWorld tests need textworld (the alfworld extra)")

from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.loop import train
from arlarena_jax.train.metrics import read_scalars

CONFIG = "configs/textworld/sampo_tiny.yaml"


def small(root, run_dir) -> list[str]:
    return [
        f"env.data_path={root}",
        f"trainer.run_dir={run_dir}",
        "env.textworld.train_games=3",
        "env.textworld.test_games=2",
        "env.textworld.validation_games=2",
        "env.textworld.build_workers=0",
        "sft.num_episodes=3",
        "sft.steps=1",
        "env.history_length=0",  # shorter prompts: fewer and smaller compiled shapes
        "env.train_batch_size=2",
        "env.group_size=2",
        "env.max_turns=4",
        "env.num_workers=2",
        "env.eval_batch_size=2",
        "trainer.eval_episodes=2",
        "trainer.total_steps=1",
        "trainer.mini_batch_size=8",
        "trainer.micro_batch_size=4",
        "sampler.max_concurrent_decodes=8",
        "trainer.export_hf=false",
    ]


def test_ppo_with_a_critic_and_dense_rewards_runs_on_textworld(tmp_path):
    """The practitioner's recipe cut to seconds: PPO with the value head on the policy's trunk,
    GAE along the trajectory over quest-progress rewards normalised to sum 1 on a win, two steps
    in the pool. The rewards the rows carry are the dense ones (each a multiple of 1/4 for a
    4-step quest), and the critic's metrics are logged."""
    run = tmp_path / "run"
    overrides = [
        *small(tmp_path / "games", run),
        "algorithm.method=ppo",
        "algorithm.gae_across_turns=true",
        "critic.model=head",
        "env.reward=dense",
        "env.reward_normalise=true",
        "trainer.total_steps=2",
    ]
    summary = train(load_config(CONFIG, overrides), console=False)
    assert summary.steps == 2
    for row in summary.history:
        for key in ("critic/vf_loss", "critic/vf_explained_var", "critic/grad_norm"):
            assert math.isfinite(row[key]), key
        assert -1.0 <= row["episode/reward/mean"] <= 1.0  # normalised: a win sums to 1
    for key in ("actor/pg_loss", "episode/success_rate", "timing/rollout/env"):
        assert math.isfinite(summary.history[-1][key]), key
    assert summary.success_after_rl is not None and "val/success_rate" in summary.final_eval
    assert 0.0 <= summary.final_eval["val/textworld_score_ratio"] <= 1.0
    scalars = read_scalars(run / "tensorboard")
    assert "sft/loss" in scalars and [s for s, _ in scalars["critic/vf_loss"]] == [1, 2]
