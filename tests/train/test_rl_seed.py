"""``trainer.rl_seed``: seeds that replicate RL from one shared cloned start.

``trainer.seed`` seeds the model's initialisation, cloning's start settings and the evaluation
stream, so it is part of a start; ``trainer.rl_seed`` seeds only RL's streams (the training tasks
drawn and the training sampler), so runs that differ in it share one start, as the paper's
methods and seeds do."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arlarena_jax.arena import plan, spec
from arlarena_jax.arena.report.groups import group_runs
from arlarena_jax.arena.report.runs import Run
from arlarena_jax.errors import ConfigError
from arlarena_jax.train.config_io import config_from_dict
from arlarena_jax.train.resolution import default_run_dir, resolve, rl_stream_seed
from arlarena_jax.train.start import start_key

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "configs" / "sokoban" / "base_tiny.yaml"


def config(seed: int = 0, rl_seed: int | None = None):
    return config_from_dict({"trainer": {"seed": seed, "rl_seed": rl_seed}})


def test_without_an_rl_seed_or_with_the_same_one_the_streams_are_the_seeds():
    assert rl_stream_seed(config(3)) == 3
    assert rl_stream_seed(config(3, rl_seed=3)) == 3  # the run repeats one without rl_seed


@given(st.integers(0, 2**31), st.integers(0, 2**31))
def test_another_rl_seed_gets_its_own_large_stream(seed, rl_seed):
    if seed == rl_seed:
        return
    mixed = rl_stream_seed(config(seed, rl_seed))
    assert mixed == rl_stream_seed(config(seed, rl_seed))  # deterministic
    assert 0 <= mixed < 2**63  # fits NumPy's and JAX's 64-bit seeds
    assert mixed not in (seed, seed + 1, rl_seed)  # not the training or evaluation stream
    np.random.default_rng(mixed)  # a valid seed


def test_rl_seeds_give_distinct_streams():
    streams = {rl_stream_seed(config(0, r)) for r in range(1, 50)}
    streams |= {rl_stream_seed(config(1, r)) for r in (0, 2, 3)}
    assert len(streams) == 52


def test_the_start_ignores_the_rl_seed_but_not_the_seed():
    assert start_key(config(0)) == start_key(config(0, rl_seed=1)) == start_key(config(0, 7))
    assert start_key(config(1)) != start_key(config(0))


def test_resolve_drops_an_rl_seed_equal_to_the_seed_and_names_the_run_dir():
    assert resolve(config(2, rl_seed=2)).trainer.rl_seed is None
    assert resolve(config(2, rl_seed=2)).trainer.run_dir == default_run_dir(config(2))
    assert default_run_dir(config(2)).endswith("sampo_seed2")  # the defaults: SAMPO
    assert resolve(config(2, rl_seed=5)).trainer.run_dir.endswith("sampo_seed2_rl5")


def test_a_negative_rl_seed_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"trainer.rl_seed.*must be >= 0, got -1") as info:
        config(0, rl_seed=-1)
    assert "\n" not in str(info.value)


def test_a_sweep_over_rl_seeds_clones_one_start(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        f"base: {BASE}\nout: {tmp_path / 'runs'}\nstarts: {tmp_path / 'starts'}\n"
        + textwrap.dedent(
            """
            methods: [grpo, sampo]
            seeds: [0]
            grid: {trainer.rl_seed: [0, 1]}
            """
        )
    )
    runs = plan.plan(spec.load_sweep(path))
    assert [r.name for r in runs] == [
        "sokoban/grpo_rl_seed=0_seed0",
        "sokoban/grpo_rl_seed=1_seed0",
        "sokoban/sampo_rl_seed=0_seed0",
        "sokoban/sampo_rl_seed=1_seed0",
    ]
    assert len(plan.starts(runs)) == 1
    assert not [o for o in plan.starts(runs)[0].overrides if "rl_seed" in o]


def _run(tmp_path: Path, name: str, seed: int, rl_seed: int | None) -> Run:
    trainer = {"seed": seed} | ({} if rl_seed is None else {"rl_seed": rl_seed})
    body = {"env": {"name": "textworld"}, "algorithm": {"method": "grpo"}, "trainer": trainer}
    return Run(path=tmp_path / name, config=body, scalars={}, texts=[], state="done")


def test_the_report_pools_rl_seeds_as_seeds_of_one_group(tmp_path):
    runs = [_run(tmp_path, "a", 0, None), _run(tmp_path, "b", 0, 1), _run(tmp_path, "c", 0, 2)]
    assert [r.seed for r in runs] == [0, 1, 2]
    (group,) = group_runs(runs)
    assert group.seeds == [0, 1, 2]
