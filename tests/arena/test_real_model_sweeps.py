"""The real-model sweeps of issue 39 compare what they say they compare.

The stressed TextWorld sweep is the arena's recipe with more off-policy optimizer steps per
rollout: its runs must resolve to the arena's configs of the same method except for the key that
makes the stress (the mini-batch size) and two that do not change the values learned (held-out
evaluation points, prompt widths). A key that silently fell back to the
base config (the learning rate did once: 1e-5 instead of the arena's 3e-5) fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from arlarena_jax.arena.plan import PlannedRun, plan
from arlarena_jax.arena.spec import load_sweep
from arlarena_jax.train.config_io import config_to_dict
from arlarena_jax.train.resolution import resolve
from arlarena_jax.train.start import flatten

SWEEPS = Path(__file__).resolve().parents[2] / "configs" / "sweeps"
STRESS_KEYS = {
    "trainer.mini_batch_size",  # 8 rows: ~6 optimizer steps per rollout instead of 1
    "trainer.eval_every",  # a held-out point at step 8 as well
    "trainer.prompt_widths",  # narrower micro-batches, the same values
}


def planned(sweep: str, tmp_path: Path) -> list[PlannedRun]:
    """The runs of ``configs/sweeps/<sweep>``, planned into ``tmp_path`` (nothing is run)."""
    return plan(load_sweep(SWEEPS / sweep, out=tmp_path / sweep))


def resolved_runs(sweep: str, tmp_path: Path) -> dict[str, dict]:
    """Method → the flattened, resolved config of the sweep's RL-seed-0 run of it."""
    by_method = {}
    for run in planned(sweep, tmp_path):
        config = flatten(config_to_dict(resolve(run.config)))
        if config["trainer.rl_seed"] is None:  # resolved: 0, or unset, is trainer.seed's
            by_method[config["algorithm.method"]] = config
    return by_method


@pytest.mark.parametrize("method", ["grpo", "gspo", "sampo"])
def test_the_stressed_sweep_is_the_arena_with_more_off_policy_steps(method, tmp_path):
    arena = resolved_runs("smollm2_arena_textworld.yaml", tmp_path)[method]
    stressed = resolved_runs("smollm2_stress_textworld.yaml", tmp_path)[method]
    differing = {k for k in set(arena) | set(stressed) if arena.get(k) != stressed.get(k)}
    assert differing == STRESS_KEYS, {k: (arena.get(k), stressed.get(k)) for k in differing}
    assert stressed["optim.lr"] == arena["optim.lr"] == pytest.approx(3e-5)
    assert stressed["trainer.mini_batch_size"] < arena["trainer.mini_batch_size"]


def start_keys(sweep: str, tmp_path: Path) -> dict[str, str | None]:
    """Run name → the key of the shared cloned start it begins from (None: no cloning)."""
    return {run.name: run.start and run.start.key for run in planned(sweep, tmp_path)}


def test_the_textworld_sweeps_reuse_the_second_recipes_start(tmp_path):
    (recipe,) = start_keys("smollm2_textworld_rl.yaml", tmp_path).values()
    for sweep in ("smollm2_arena_textworld.yaml", "smollm2_stress_textworld.yaml"):
        assert set(start_keys(sweep, tmp_path).values()) == {recipe}, sweep


def test_alfworld_rl_starts_from_the_more_cloning_arms_policy(tmp_path):
    arms = start_keys("smollm2_alfworld.yaml", tmp_path)
    more_cloning = arms["alfworld/grpo_enabled=True_steps=204_total_steps=0_seed0"]
    assert set(start_keys("smollm2_alfworld_rl_204.yaml", tmp_path).values()) == {more_cloning}
    assert more_cloning != arms["alfworld/grpo_enabled=True_steps=24_total_steps=12_seed0"]
