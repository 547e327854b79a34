"""The tiny Sokoban runs the trainer tests share: their configs and the overrides that cut them to
seconds (2 groups x 2, 3 turns, evaluation on 4 episodes). Module constants, not fixtures: the
test modules build their own lists from them at import time."""

from __future__ import annotations

import shutil

from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.loop import train

SAMPO_TINY = "configs/sokoban/sampo_tiny.yaml"  # cloning, then SAMPO
BASE_TINY = "configs/sokoban/base_tiny.yaml"

RL_SIZES = [  # one RL step's sizes, evaluation and checkpoints every step or two
    "trainer.eval_episodes=4",
    "env.eval_batch_size=4",
    "env.train_batch_size=2",
    "env.group_size=2",
    "trainer.mini_batch_size=8",
    "trainer.micro_batch_size=4",
    "sampler.max_concurrent_decodes=4",
    "env.max_turns=3",
    "trainer.save_every=1",
    "trainer.eval_every=2",
    "trainer.export_hf=false",
]
SMALL = ["sft.num_episodes=16", "sft.steps=4", *RL_SIZES]  # with 4 cloning steps first


def train_tiny(config: str, sizes: list[str], directory, steps: int, *extra: str):
    """Train ``config`` cut to ``sizes`` for ``steps`` RL steps in ``directory`` (later keys win:
    ``extra`` over ``sizes``); returns the run's Summary."""
    overrides = [*sizes, *extra, f"trainer.total_steps={steps}", f"trainer.run_dir={directory}"]
    return train(load_config(config, overrides), console=False)


def stopped_after_step_2(directory, tmp_path):
    """A copy of the uninterrupted run as it stood after step 2: its checkpoints up to step 2
    (checkpoints are saved every step), without the later one and the exports."""
    copy = tmp_path / "run"
    shutil.copytree(directory, copy, ignore=shutil.ignore_patterns("hf", "hf_critic"))
    shutil.rmtree(copy / "checkpoints" / "3")
    return copy
