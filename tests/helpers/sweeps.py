"""Sweep files and tiny sweep runs the arena tests share."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "configs" / "sokoban" / "base_tiny.yaml"


def planned_without_results(spec):
    """``spec``, its ``recipe_from`` zip axis (chosen from a search's results) replaced by every
    recipe the search tries: a shipped sweep planned before its search has run."""
    import dataclasses

    from arlarena_jax.arena.choice import every_recipe

    if spec.recipe_from is None:
        return spec
    return dataclasses.replace(spec, zip=every_recipe(spec.recipe_from))


def sweep_file(tmp_path: Path, body: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(
        f"base: {BASE}\nout: {tmp_path / 'runs'}\nstarts: {tmp_path / 'starts'}\n"
        + textwrap.dedent(body)
    )
    return path


TINY = """
overrides:
  sft.num_episodes: 64
  sft.steps: 10
  env.train_batch_size: 2
  env.group_size: 2
  env.max_turns: 8
  trainer.mini_batch_size: 16
  trainer.micro_batch_size: 8
  sampler.max_concurrent_decodes: 16
  trainer.eval_episodes: 16
  env.eval_batch_size: 16
  trainer.export_hf: false
budget: {rl_steps: 1}
"""


def child_env() -> dict[str, str]:
    """The runs see one CPU device (not the test session's eight simulated ones)."""
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    return env
