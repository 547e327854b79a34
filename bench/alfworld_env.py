"""Benchmark: ALFWorld reset and step latency on the real engine, and the host pool's throughput.

Baselines (same run, same machine): the engine's own parsers (``ARLARENA_ALFWORLD_MEMO=off``,
:mod:`envs.alfworld.speedups`) for the latencies, and :class:`envs.local.LocalEnvBatch`, the same
N environments stepped one after another in this process (what a single-process rollout does), for
the pool. Measured:

* reset latency (game load = Fast Downward translation, then the first state) and step latency of
  one :class:`envs.alfworld.env.AlfworldEnv`, over the expert walkthroughs of the first games of a
  built split (one episode per game), with the engine's parsers memoised (the default) and
  without, and their ratio;
* expert episodes per second for N environments: :class:`envs.pool.EnvPool` with W worker
  processes against the in-process batch, on the same games and walkthroughs (the rollout's
  ``collect`` with the replayed expert), and their ratio.

    python bench/alfworld_env.py DATA_ROOT [--split valid_seen] [--games 16] [--envs 8]
                                 [--workers 2]

``DATA_ROOT`` holds ``json_2.1.1/<split>/`` games (``arlarena alfworld build DATA_ROOT``). The
file is not called ``alfworld.py``: Python puts a script's folder first on ``sys.path``, so that
name would shadow the ``alfworld`` package.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import time
from pathlib import Path

from arlarena_jax.rollout import collect
from envs.alfworld import speedups
from envs.alfworld.data import JSON_DIR, find_games
from envs.alfworld.env import AlfworldEnv, AlfworldFactory
from envs.alfworld.expert import WalkthroughExpert, walkthrough
from envs.alfworld.prompts import ALFWORLD_FORMAT
from envs.local import LocalEnvBatch
from envs.pool import EnvPool


@contextlib.contextmanager
def engine_memo(on: bool):
    """The engine's parsers memoised (``on``) or as shipped, in this process, for the block."""
    saved = dict(os.environ)
    os.environ[speedups.SWITCH_ENV] = "on" if on else "off"
    if on:
        speedups.install()
    else:
        speedups.uninstall()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def latencies(games: list[str]) -> tuple[list[float], list[float]]:
    """Reset and step wall times (seconds) over one expert episode per game, each game's first
    reset included (a fresh environment: nothing memoised from an earlier call)."""
    env = AlfworldEnv(games)
    resets, steps = [], []
    for seed in range(len(games)):
        start = time.perf_counter()
        env.reset(seed)
        resets.append(time.perf_counter() - start)
        for command in walkthrough(env.game_for(seed))[: env.max_steps]:
            start = time.perf_counter()
            env.step(command)
            steps.append(time.perf_counter() - start)
    return resets, steps


def episodes_per_second(envs, games: tuple[str, ...], seeds: list[int]) -> float:
    """Expert episodes per second through ``collect`` on ``envs`` (one chunk of N seeds)."""
    factory = AlfworldFactory(games)
    expert = WalkthroughExpert([walkthrough(factory().game_for(s)) for s in seeds])
    start = time.perf_counter()
    collect(
        envs,
        ALFWORLD_FORMAT,
        expert,
        group_seeds=seeds,
        group_size=1,
        max_turns=50,
        skip_done=False,
        training=False,
    )
    return len(seeds) / (time.perf_counter() - start)


def summary(name: str, values: list[float]) -> str:
    ms = sorted(1000 * v for v in values)
    return (
        f"| {name} | {len(ms)} | {statistics.mean(ms):.0f} | {statistics.median(ms):.0f} | "
        f"{ms[int(0.9 * (len(ms) - 1))]:.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_root")
    parser.add_argument("--split", default="valid_seen")
    parser.add_argument("--games", type=int, default=16)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    games = [str(g) for g in find_games(Path(args.data_root) / JSON_DIR / args.split)]
    if not games:
        raise SystemExit(f"no built games under {args.data_root}/{JSON_DIR}/{args.split}")
    games = games[: args.games]
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {len(games)} games"
    )
    with engine_memo(False):
        plain = latencies(games)
    with engine_memo(True):
        resets, steps = latencies(games)
    print("| latency | n | mean ms | median ms | p90 ms |\n|---|---|---|---|---|")
    print(summary("reset, engine's parsers (baseline)", plain[0]))
    print(summary("step, engine's parsers (baseline)", plain[1]))
    print(summary("reset (load + first state)", resets))
    print(summary("step", steps))
    ratio = (sum(plain[0]) + sum(plain[1])) / (sum(resets) + sum(steps))
    print(f"\nmemoised parsers: one expert episode per game {ratio:.2f}x faster than the baseline")
    seeds = list(range(args.envs))
    local = LocalEnvBatch(AlfworldFactory(tuple(games)), args.envs)
    baseline = episodes_per_second(local, tuple(games), seeds)
    local.close()
    with EnvPool(AlfworldFactory(tuple(games)), args.envs, args.workers) as pool:
        pooled = episodes_per_second(pool, tuple(games), seeds)
    print(
        f"\n{args.envs} expert episodes: in-process batch (baseline) {baseline:.2f} episodes/s, "
        f"pool of {args.workers} workers {pooled:.2f} episodes/s: {pooled / baseline:.2f}x"
    )


if __name__ == "__main__":
    main()
