"""SmolLM2-135M-Instruct on TextWorld end to end (configs/textworld/smollm2_base.yaml at the
smallest sizes that still run the real pieces): the model's own tokenizer and ChatML template,
cloning on walkthrough turns, one GRPO step in the TextWorld pool (projection against the
admissible commands, the win reward) and a held-out evaluation. Structural checks only.
Skips with the reason where the model was never fetched (``smollm2_dir``) or ``textworld``
is missing (the ``alfworld`` extra). 3.5-5 minutes on 2 loaded cores, mostly compiling the
30-layer model's functions (cloning, sampler, log-probs, update): over the suite's time
budget, so opt-in until it is made faster (issue 39):
``ARLARENA_REAL_MODEL_E2E=1 python -m pytest -q tests/test_smollm2_textworld.py``."""

from __future__ import annotations

import math
import os

import pytest

pytest.importorskip("textworld", reason="TextWorld tests need textworld (the alfworld extra)")
if os.environ.get("ARLARENA_REAL_MODEL_E2E") != "1":
    pytest.skip(
        "the SmolLM2 TextWorld run (3.5-5 min of compiling on 2 cores) is opt-in: "
        "ARLARENA_REAL_MODEL_E2E=1 python -m pytest -q tests/test_smollm2_textworld.py",
        allow_module_level=True,
    )

from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.loop import train

CONFIG = "configs/textworld/smollm2_base.yaml"


def tiny(root, run_dir) -> list[str]:
    """The smallest run: 2 cloning steps of 2 turns, 1 RL step of 2 groups x 2, 2 held-out
    games, 4 turns (a walkthrough), no history (the shortest prompts)."""
    return [
        f"env.data_path={root}",
        f"trainer.run_dir={run_dir}",
        "env.textworld.train_games=2",
        "env.textworld.eval_games=2",
        "env.textworld.build_workers=0",
        "env.history_length=0",
        "env.max_turns=4",  # the walkthrough is 4 commands: cloning keeps won episodes only
        "env.train_batch_size=2",
        "env.group_size=2",
        "env.num_workers=2",
        "env.eval_batch_size=2",
        "sft.num_episodes=2",
        "sft.steps=2",
        "sft.batch_size=2",
        "trainer.total_steps=1",
        "trainer.eval_at_start=false",
        "trainer.eval_episodes=2",
        "trainer.mini_batch_size=16",
        "trainer.micro_batch_size=8",
        "trainer.save_every=0",
        "trainer.export_hf=false",
        "sampler.max_concurrent_decodes=4",
        "sampler.max_new_tokens=24",  # an expert reply is 13-27 tokens here
    ]


def test_smollm2_clones_trains_and_evaluates_on_textworld(smollm2_dir, tmp_path):
    """Every phase runs on the real model: the RL step's metrics are finite, its success rate
    and the held-out one are rates in [0, 1] (2 cloning steps teach nothing measurable)."""
    config = load_config(CONFIG, tiny(tmp_path / "games", tmp_path / "run"))
    assert config.model.path == "smollm2-135m-instruct" and config.model.tokenizer is None
    summary = train(config, console=False)
    assert summary.steps == 1
    row = summary.history[-1]
    for key in ("actor/pg_loss", "episode/success_rate", "timing/rollout"):
        assert math.isfinite(row[key]), key
    assert 0.0 <= row["episode/success_rate"] <= 1.0
    assert 0.0 <= summary.success_after_rl <= 1.0
    assert 0.0 <= summary.final_eval["val/success_rate"] <= 1.0
