"""Benchmark: WebShop search latency, and environment steps per second in and out of the host pool.

Part A, search (same run, same machine, same analysed documents and queries). Ours:
:class:`envs.webshop.search.BM25Search` (Lucene BM25 on ``bm25s``'s precomputed sparse scores).
Baseline: ``rank_bm25.BM25Okapi`` (k1 = 0.9, b = 0.4) over the same analysed token lists:
``get_scores`` then a stable argsort for the top 50 (both sides analyse the query). The catalogue
is the synthetic one (``--products``), the queries the goals' instruction texts (``--queries``).
Printed: build times, per-query ms of each and their ratio, how often the goal's product is in
our top 50 / first, and how much the two top-10s overlap (rank_bm25's idf differs, so they are
not expected to agree exactly).

Part B, environment steps per second. Baseline: the N environments stepped one after another in
this process (``envs.local.LocalEnvBatch``: what one environment steps per second, N times over).
Ours: the same N environments in the host pool (``envs.pool.EnvPool``, ``--workers`` processes).
Both are driven by the same seeded random policy over the admissible actions (the search bar's
``search[<your query>]`` becomes the goal instruction or a few of its words); the envs are
deterministic, so both runs replay the same action streams (checked by a digest). Each round
resets all N envs (new goals) and steps them until every episode is over (at most ``max_steps``).

    python bench/webshop_env.py [--products 1000] [--queries 200] [--envs 8] [--workers 2]
                                [--steps 200]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from timing import median_seconds

from envs.base import EnvBatch, Observation
from envs.pool import text_env_batch
from envs.webshop.catalogue import Catalogue
from envs.webshop.env import WebShopFactory
from envs.webshop.goals import synthetic_goals
from envs.webshop.pages import SEARCH_BAR_ACTION
from envs.webshop.search import TOP_K, BM25Search, analyze, document_text, import_bm25s
from envs.webshop.shop import ShopSource, read_catalogue


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``(fn(), seconds)``."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def okapi_top(okapi: Any, query: str, k: int = TOP_K) -> list[int]:
    """The baseline's top ``k``: analyse, ``get_scores``, stable argsort (rank_bm25's idf can be
    negative, so its scores are not filtered on > 0)."""
    scores = okapi.get_scores(analyze(query))
    return np.argsort(-scores, kind="stable")[:k].tolist()


def search_part(catalogue: Catalogue, queries: list[str], targets: list[str], repeats: int) -> None:
    """Part A: build times, per-query latency of ours against rank_bm25, and agreement."""
    from rank_bm25 import BM25Okapi

    _, t_import = timed(import_bm25s)
    engine, t_ours = timed(lambda: BM25Search(catalogue.products))
    docs, t_analyze = timed(lambda: [analyze(document_text(p)) for p in catalogue.products])
    okapi, t_okapi = timed(lambda: BM25Okapi(docs, k1=0.9, b=0.4))
    print(f"\n## Search over {len(catalogue)} products, {len(queries)} goal instructions\n")
    print(
        f"import bm25s {1000 * t_import:.0f} ms; build: BM25Search {1000 * t_ours:.0f} ms "
        "(analysis included, cold stem cache); "
        f"analysis alone {1000 * t_analyze:.0f} ms (warm cache); "
        f"rank_bm25 BM25Okapi {1000 * t_okapi:.0f} ms over the analysed docs"
    )
    t_base = median_seconds(lambda: [okapi_top(okapi, q) for q in queries], repeats)
    t_new = median_seconds(lambda: [engine.search(q) for q in queries], repeats)
    per_base, per_new = 1000 * t_base / len(queries), 1000 * t_new / len(queries)
    print("| search (top 50) | ms/query | speed-up |\n|---|---|---|")
    print(f"| rank_bm25 BM25Okapi get_scores + argsort (baseline) | {per_base:.3f} | 1.0× |")
    print(f"| BM25Search.search (bm25s, Lucene BM25) | {per_new:.3f} | {t_base / t_new:.1f}× |")
    found = [engine.search(q) for q in queries]
    in_top = np.mean([t in f for t, f in zip(targets, found, strict=True)])
    first = np.mean([bool(f) and f[0] == t for t, f in zip(targets, found, strict=True)])
    overlap = np.mean(
        [
            len({catalogue.products[i].asin for i in okapi_top(okapi, q, 10)} & set(f[:10])) / 10
            for q, f in zip(queries, found, strict=True)
        ]
    )
    print(
        f"\ngoal product in our top 50: {in_top:.0%}, ranked first: {first:.0%}; "
        f"top-10 overlap with rank_bm25: {overlap:.0%}"
    )


class RandomShopper:
    """A seeded random policy over the admissible actions; the search bar gets the instruction
    (half the time) or 2-5 of its words."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def act(self, obs: Observation) -> str:
        """One action for observation ``obs``."""
        action = self.rng.choice(obs.admissible) if obs.admissible else "click[back to search]"
        if action != SEARCH_BAR_ACTION:
            return action
        words = obs.task.split()
        if self.rng.random() < 0.5 or len(words) < 2:
            return f"search[{obs.task}]"
        picked = self.rng.sample(words, min(len(words), self.rng.randint(2, 5)))
        return f"search[{' '.join(picked)}]"


def drive(
    batch: EnvBatch, num_envs: int, steps_per_env: int, max_steps: int
) -> tuple[int, float, str]:
    """Rounds of reset + random steps until ``steps_per_env`` steps per env on average;
    returns (env steps, seconds, digest of the action streams)."""
    shoppers = [RandomShopper(i) for i in range(num_envs)]
    digest, count, round_ = hashlib.sha256(), 0, 0
    start = time.perf_counter()
    while count < steps_per_env * num_envs:
        obs = batch.reset([round_ * num_envs + i for i in range(num_envs)])
        live = np.ones(num_envs, bool)
        for _ in range(max_steps):
            actions = [
                s.act(o) if on else "click[back to search]"
                for s, o, on in zip(shoppers, obs, live, strict=True)
            ]
            digest.update("\n".join(a for a, on in zip(actions, live, strict=True) if on).encode())
            step = batch.step(actions)
            count += int(live.sum())
            live &= ~step.dones
            obs = step.observations
            if not live.any():
                break
        round_ += 1
    return count, time.perf_counter() - start, digest.hexdigest()[:12]


def steps_part(args: argparse.Namespace) -> None:
    """Part B: steps/s of the N envs in this process (baseline) and in the host pool."""
    factory = WebShopFactory(ShopSource(num_products=args.products), max_steps=args.max_steps)
    env, t_shop = timed(factory)  # loads (and caches) the shop in this process
    print(f"\n## Environment steps, {args.envs} envs, random shopper, max {env.max_steps} steps\n")
    print(f"shop load in this process (catalogue, goals, index, nouns): {t_shop:.2f} s")
    local = text_env_batch(factory, args.envs, 0)
    n_local, t_local, d_local = drive(local, args.envs, args.steps, env.max_steps)
    local.close()
    pool, t_start = timed(lambda: text_env_batch(factory, args.envs, args.workers))
    try:
        n_pool, t_pool, d_pool = drive(pool, args.envs, args.steps, env.max_steps)
    finally:
        pool.close()
    base, ours = n_local / t_local, n_pool / t_pool
    print(f"pool start ({args.workers} workers, each loading the shop): {t_start:.2f} s")
    print("| steppers | env steps | steps/s | ratio |\n|---|---|---|---|")
    print(f"| in-process, one env after another (baseline) | {n_local} | {base:,.0f} | 1.00× |")
    print(f"| host pool, {args.workers} workers | {n_pool} | {ours:,.0f} | {ours / base:.2f}× |")
    print(
        f"\nsame action streams: {'yes' if d_local == d_pool else 'NO'} "
        f"({d_local} / {d_pool}); one env step {1000 * t_local / n_local:.2f} ms in process"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--products", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200, help="env steps per environment")
    parser.add_argument("--max-steps", type=int, default=15)
    parser.add_argument("--skip", choices=("search", "steps"), default=None)
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    if args.skip != "search":
        catalogue, _ = read_catalogue(ShopSource(num_products=args.products))
        goals = synthetic_goals(catalogue, seed=0, test_size=0).goals[: args.queries]
        queries = [g.instruction_text for g in goals]
        search_part(catalogue, queries, [g.asin for g in goals], args.repeats)
    if args.skip != "steps":
        steps_part(args)


if __name__ == "__main__":
    main()
