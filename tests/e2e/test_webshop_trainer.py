"""The trainer end to end on WebShop (configs/webshop/sampo_tiny.yaml cut to seconds): the tiny
tokenizer built from the scripted shopper's turns, cloning on its episodes, one SAMPO step with the
sessions in the pool, and evaluation on the test goals with the mean task score
(docs/environments.md §5, §6). Structural checks only: metrics are finite, the score key is there;
plus the one-line refusals of bad WebShop settings."""

from __future__ import annotations

import math

import pytest

from arlarena_jax.cli import main
from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.loop import summary_table, train
from arlarena_jax.train.metrics import read_scalars
from envs.webshop.prompts import SCORE_KEY

CONFIG = "configs/webshop/sampo_tiny.yaml"


def small(run_dir) -> list[str]:
    return [
        f"trainer.run_dir={run_dir}",
        "env.webshop.num_products=40",
        "env.webshop.test_goals=20",
        "env.webshop.validation_goals=20",
        "env.webshop.nouns=lexicon",
        "sft.num_episodes=8",  # on the training goals left after validation, some within 4 turns
        "sft.steps=1",
        "env.history_length=0",  # shorter prompts: fewer and smaller compiled shapes
        "env.train_batch_size=2",
        "env.group_size=2",
        "env.max_turns=4",
        "env.num_workers=2",
        "env.eval_batch_size=4",
        "trainer.eval_episodes=4",
        "trainer.total_steps=1",
        "trainer.mini_batch_size=8",
        "trainer.micro_batch_size=4",
        "sampler.max_concurrent_decodes=8",
        "trainer.export_hf=false",
    ]


def test_webshop_run_clones_trains_and_evaluates(tmp_path):
    summary = train(load_config(CONFIG, small(tmp_path)), console=False)
    assert summary.steps == 1 and summary.success_after_rl is not None
    row = summary.history[0]
    for key in ("actor/pg_loss", "episode/success_rate", "timing/rollout/env"):
        assert math.isfinite(row[key]), key
    score = summary.final_eval[f"val/{SCORE_KEY}"]
    assert 0.0 <= score <= 1.0
    assert "held-out mean task score (x100, test)" in summary_table(summary)
    scalars = read_scalars(tmp_path / "tensorboard")
    # TensorBoard tags replace the characters it rejects by "_" (arlarena_jax/train/metrics.py)
    assert "sft/loss" in scalars and "test/webshop_task_score__not_success_rate_" in scalars


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("env.webshop.data=files", "set env.data_path or $WEBSHOP_DATA"),
        (
            "env.webshop.nouns=wordnet",
            "config key 'env.webshop.nouns': must be one of auto, spacy, lexicon",
        ),
        (
            "env.webshop.test_goals=100000",
            "'env.webshop.test_goals': synthetic(seed=0): 921 goals, need more than the 100000",
        ),
    ],
)
def test_webshop_cli_refuses_bad_settings_in_one_line(
    override, message, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)
    with pytest.raises(SystemExit) as info:
        main(["train", CONFIG, override, f"trainer.run_dir={tmp_path}"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err
