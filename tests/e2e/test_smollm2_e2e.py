"""SmolLM2-135M-Instruct end to end on TextWorld, ALFWorld and WebShop (the issue-39 configs,
``configs/<env>/smollm2_base.yaml``, at the smallest sizes that still run the real pieces): the
model's own tokenizer and ChatML template, cloning on the expert's won episodes, one GRPO step in
the environment's pool (the projection of free text onto its actions, its reward) and a held-out
evaluation.

By default the model keeps its first 1 of 30 decoder layers (``model.num_layers``): the real
tokenizer, template and embeddings, compiled in seconds instead of minutes. What it generates is
not SmolLM2's behaviour, so the checks are of the pipeline: the cloning data in the chat template,
finite losses, rates in [0, 1]. ``ARLARENA_REAL_MODEL_E2E=1`` runs the full 30 layers (3.5-5
minutes per environment on 2 cores, mostly compiling). Skips with the reason where the model was
never fetched (``smollm2_dir``), TextWorld is missing (the ``alfworld`` extra) or the ALFWorld
games cannot be built (``alfworld_data_root``)."""

from __future__ import annotations

import math
import os

import pytest

from arlarena_jax.train.build import DEMO_SEED_BASE, build_tokenizer, demonstrations
from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.loop import train
from arlarena_jax.train.metrics import read_scalars
from arlarena_jax.train.sft import encode_example
from envs.webshop.prompts import SCORE_KEY

FULL_DEPTH = os.environ.get("ARLARENA_REAL_MODEL_E2E") == "1"
SMALL = [
    "env.history_length=0",  # the shortest prompts: fewest compiled shapes
    "env.train_batch_size=2",
    "env.group_size=2",
    "env.num_workers=2",
    "sft.steps=2",
    "sft.batch_size=2",
    "trainer.total_steps=1",
    "trainer.eval_at_start=false",
    "trainer.mini_batch_size=16",
    "trainer.micro_batch_size=8",
    "trainer.save_every=0",
    "trainer.export_hf=false",
    "sampler.max_concurrent_decodes=4",
    *([] if FULL_DEPTH else ["model.num_layers=1"]),
]
TEXTWORLD = [
    "env.textworld.train_games=2",
    "env.textworld.test_games=2",
    "env.textworld.validation_games=2",
    "env.textworld.build_workers=0",
    "env.max_turns=4",  # the walkthrough is 4 commands: cloning keeps won episodes only
    "env.eval_batch_size=2",
    "sft.num_episodes=2",
    "trainer.eval_episodes=2",
    "sampler.max_new_tokens=24",  # an expert reply is 13-27 tokens here
]
ALFWORLD = [
    "env.max_turns=6",
    "env.eval_batch_size=2",
    "env.alfworld.validation_games=1",  # one of the six training games kept apart
    "sft.num_episodes=5",  # every training game once: the short ones are won
    "trainer.eval_episodes=2",
    "sampler.max_new_tokens=24",
]
WEBSHOP = [
    "env.webshop.num_products=40",
    "env.webshop.test_goals=20",
    "env.webshop.nouns=lexicon",
    "env.max_turns=4",
    "env.eval_batch_size=3",
    "sft.num_episodes=4",
    "trainer.eval_episodes=3",
    "trainer.prompt_widths=2",  # search pages differ in length: micro-batches at two widths
]


def check_run(config, run_dir) -> dict:
    """Train ``config`` and check what every environment shares; the held-out metrics."""
    assert config.model.path == "smollm2-135m-instruct" and config.model.tokenizer is None
    summary = train(config, console=False)
    seeds = range(DEMO_SEED_BASE, DEMO_SEED_BASE + config.sft.num_episodes)
    demos = demonstrations(config, seeds)  # what cloning trained on, played again
    assert demos, "no won expert episode to clone"
    prompt, reply = demos[0][0], demos[0][1]
    assert "<action>" in reply and reply.endswith("</action>"), reply
    tokenizer = build_tokenizer(config)
    text = tokenizer.decode(encode_example(tokenizer, prompt, reply).ids)
    assert text.startswith("<|im_start|>system\n") and "<|im_start|>assistant\n" in text, text
    assert text.endswith(reply + "<|im_end|>"), text[-200:]
    assert "sft/loss" in read_scalars(run_dir / "tensorboard")
    assert math.isfinite(summary.history[0]["actor/pg_loss"])
    assert summary.steps == 1
    row = summary.history[-1]
    for key in ("episode/success_rate", "episode/valid_action_ratio"):
        assert 0.0 <= row[key] <= 1.0, key
    assert 0.0 <= summary.success_after_rl <= 1.0
    return summary.final_eval


def test_smollm2_on_textworld(smollm2_dir, tmp_path):
    pytest.importorskip("textworld", reason="TextWorld needs textworld (the alfworld extra)")
    run = tmp_path / "run"
    overrides = [f"env.data_path={tmp_path / 'games'}", f"trainer.run_dir={run}"]
    config = load_config("configs/textworld/smollm2_base.yaml", SMALL + TEXTWORLD + overrides)
    final = check_run(config, run)
    assert 0.0 <= final["val/success_rate"] <= 1.0


def test_smollm2_on_alfworld(smollm2_dir, alfworld_data_root, tmp_path):
    run = tmp_path / "run"
    overrides = [f"env.data_path={alfworld_data_root}", f"trainer.run_dir={run}"]
    config = load_config("configs/alfworld/smollm2_base.yaml", SMALL + ALFWORLD + overrides)
    final = check_run(config, run)
    assert 0.0 <= final["val/success_rate"] <= 1.0


def test_smollm2_on_webshop(smollm2_dir, tmp_path):
    run = tmp_path / "run"
    config = load_config(
        "configs/webshop/smollm2_base.yaml", SMALL + WEBSHOP + [f"trainer.run_dir={run}"]
    )
    final = check_run(config, run)
    assert 0.0 <= final[f"val/{SCORE_KEY}"] <= 1.0
