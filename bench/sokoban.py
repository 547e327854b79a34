"""Benchmark: the vmapped JAX Sokoban against the NumPy/Python reference stepping one env at a time.

Baseline (same run, same machine): :mod:`envs.sokoban.reference`, the rules of
docs/environments.md §3 in NumPy/Python, one environment at a time, the way the original code runs
them (its room generator reproduces the spec's seed-0 room and 200-seed histogram exactly).

Measured:

* rooms generated per second: ``jax.jit(jax.vmap(env.reset_env))`` over a batch of keys against
  ``reference.generate_room(seed)`` in a loop;
* environment steps per second, uniform random actions 0..4: the jitted, vmapped ``step_env``
  (15 steps per call in a ``lax.scan``; observations are the device grids) against
  ``SokobanTextEnv.step`` in a loop (its observation is the rendered text, as the original's);
* the same steps through :class:`envs.sokoban.batch.SokobanBatch`, which also renders each grid
  to text on the host, as the rollout sees it.

    python bench/sokoban.py [--batches 1024 4096] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax
import numpy as np
from timing import median_seconds

from envs.sokoban import reference
from envs.sokoban.batch import SokobanBatch
from envs.sokoban.env import SokobanEnv

STEPS_PER_CALL = 15  # one episode's worth of steps per jitted call


def jax_rooms_per_second(batch: int, repeats: int) -> float:
    env = SokobanEnv()
    params = env.default_params
    reset = jax.jit(jax.vmap(lambda k: env.reset_env(k, params)))
    calls = iter(range(10**9))

    def run():
        keys = jax.random.split(jax.random.key(next(calls)), batch)
        jax.block_until_ready(reset(keys))

    return batch / median_seconds(run, repeats)


def jax_steps_per_second(batch: int, repeats: int) -> float:
    env = SokobanEnv()
    params = env.default_params
    _, states = jax.jit(jax.vmap(lambda k: env.reset_env(k, params)))(
        jax.random.split(jax.random.key(0), batch)
    )
    step = jax.vmap(lambda s, a: env.step_env(jax.random.key(0), s, a, params)[1])

    @jax.jit
    def episode(states, key):
        actions = jax.random.randint(key, (STEPS_PER_CALL, batch), 0, 5)
        return jax.lax.scan(lambda s, a: (step(s, a), None), states, actions)[0]

    keys = iter(jax.random.split(jax.random.key(1), 1000))
    return (
        batch
        * STEPS_PER_CALL
        / median_seconds(lambda: jax.block_until_ready(episode(states, next(keys))), repeats)
    )


def batch_steps_per_second(batch: int, repeats: int) -> float:
    envs = SokobanBatch(batch)
    envs.reset(list(range(batch)))
    rng = np.random.default_rng(0)
    return batch / median_seconds(lambda: envs.step(rng.integers(0, 5, batch)), repeats)


def reference_rooms_per_second(n: int) -> float:
    start = time.perf_counter()
    for seed in range(n):
        reference.generate_room(seed)
    return n / (time.perf_counter() - start)


def reference_steps_per_second(n_envs: int, steps: int) -> float:
    envs = [reference.SokobanTextEnv() for _ in range(n_envs)]
    for seed, env in enumerate(envs):
        env.reset(seed)
    actions = np.random.default_rng(0).integers(0, 5, (steps, n_envs)).tolist()
    start = time.perf_counter()
    for row in actions:
        for env, action in zip(envs, row, strict=True):
            if env.done:  # keep every measured step a live one, as in a rollout
                env.reset(0)
            env.step(action)
    return steps * n_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", nargs="+", type=int, default=[1024, 4096])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"JAX {jax.__version__} on {jax.devices()[0].platform}, NumPy {np.__version__}"
    )
    ref_rooms = reference_rooms_per_second(500)
    ref_steps = reference_steps_per_second(256, 40)
    print(
        f"reference (NumPy/Python, one env at a time): {ref_rooms:,.0f} rooms/s, "
        f"{ref_steps:,.0f} steps/s (text observations)\n"
    )
    print("| batch | measure | reference | ours | ratio |")
    print("|---|---|---|---|---|")
    for batch in args.batches:
        rooms = jax_rooms_per_second(batch, args.repeats)
        steps = jax_steps_per_second(batch, args.repeats)
        texts = batch_steps_per_second(batch, args.repeats)
        for name, ref, ours in (
            ("rooms generated / s", ref_rooms, rooms),
            ("env steps / s (device grids)", ref_steps, steps),
            ("env steps / s (SokobanBatch, text)", ref_steps, texts),
        ):
            print(f"| {batch:,} | {name} | {ref:,.0f} | {ours:,.0f} | {ours / ref:,.1f}× |")


if __name__ == "__main__":
    main()
