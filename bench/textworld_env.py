"""Benchmark: TextWorld game generation time, reset and step latency on the real engine, and the
host pool's throughput.

Baseline (same run, same machine): :class:`envs.local.LocalEnvBatch`, the same N environments
stepped one after another in this process. Measured:

* generation: seconds per game of ``--tier`` (``make_game``, Inform 7 compile, walkthrough check)
  in this process, for ``--games`` training games built into a fresh folder;
* reset latency (first reset of a game: engine start, then the first state) and step latency of
  one :class:`envs.textworld.env.TextworldEnv`, over the walkthroughs of those games;
* expert episodes per second for N environments: :class:`envs.pool.EnvPool` with W worker
  processes against the in-process batch (the rollout's ``collect`` with the replayed expert),
  after one warm-up reset (the workers' start-up, importing textworld, is not counted).

    python bench/textworld_env.py [--tier w2-o3-q4] [--games 16] [--envs 8] [--workers 2]

The file is not called ``textworld.py``: that name would shadow the ``textworld`` package.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from arlarena_jax.rollout import collect
from envs.local import LocalEnvBatch
from envs.pool import EnvPool
from envs.textworld.build import build_split, split_folder
from envs.textworld.env import TextworldEnv, TextworldFactory
from envs.textworld.expert import WalkthroughExpert
from envs.textworld.prompts import TEXTWORLD_FORMAT


def latencies(games: list[str], walkthroughs: list[tuple[str, ...]]) -> tuple[list, list]:
    """Reset and step wall times (seconds) over one expert episode per game."""
    env = TextworldEnv(games, max_steps=50)
    resets, steps = [], []
    for seed, walkthrough in enumerate(walkthroughs):
        start = time.perf_counter()
        env.reset(seed)
        resets.append(time.perf_counter() - start)
        for command in walkthrough:
            start = time.perf_counter()
            env.step(command)
            steps.append(time.perf_counter() - start)
    env.close()
    return resets, steps


def episodes_per_second(envs, walkthroughs: list[tuple[str, ...]], seeds: list[int]) -> float:
    """Expert episodes per second through ``collect`` on ``envs`` (one chunk of N seeds)."""
    expert = WalkthroughExpert([walkthroughs[s % len(walkthroughs)] for s in seeds])
    envs.reset(seeds)  # warm-up: the pool's workers import textworld and start their engines
    start = time.perf_counter()
    collect(
        envs,
        TEXTWORLD_FORMAT,
        expert,
        group_seeds=seeds,
        group_size=1,
        max_turns=max(len(w) for w in walkthroughs),
        skip_done=False,
        training=False,
    )
    return len(seeds) / (time.perf_counter() - start)


def summary(name: str, values: list[float]) -> str:
    ms = sorted(1000 * v for v in values)
    return (
        f"| {name} | {len(ms)} | {statistics.mean(ms):.1f} | {statistics.median(ms):.1f} | "
        f"{ms[int(0.9 * (len(ms) - 1))]:.1f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", default="w2-o3-q4")
    parser.add_argument("--games", type=int, default=16)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, {args.tier}")
    with tempfile.TemporaryDirectory() as root:
        start = time.perf_counter()
        built = build_split(root, args.tier, 0, "train", args.games)
        per_game = (time.perf_counter() - start) / len(built)
        print(f"generation: {per_game:.2f} s per game ({len(built)} games, one process)")
        folder = split_folder(root, args.tier, 0, "train")
        games = [str(Path(folder) / g.file) for g in built]
        walkthroughs = [g.walkthrough for g in built]
        resets, steps = latencies(games, walkthroughs)
        print("| latency | n | mean ms | median ms | p90 ms |\n|---|---|---|---|---|")
        print(summary("reset (engine start + first state)", resets))
        print(summary("step", steps))
        seeds = list(range(args.envs))
        local = LocalEnvBatch(TextworldFactory(tuple(games)), args.envs)
        baseline = episodes_per_second(local, walkthroughs, seeds)
        local.close()
        with EnvPool(TextworldFactory(tuple(games)), args.envs, args.workers) as pool:
            pooled = episodes_per_second(pool, walkthroughs, seeds)
    print(
        f"\n{args.envs} expert episodes: in-process batch (baseline) {baseline:.1f} episodes/s, "
        f"pool of {args.workers} workers {pooled:.1f} episodes/s: {pooled / baseline:.2f}x"
    )


if __name__ == "__main__":
    main()
