"""``arlarena webshop build`` and ``arlarena webshop stats`` (docs/environments.md §6).

* ``build OUT``: write the synthetic catalogue as the original's data files
  (``items_shuffle_1000.json``, ``items_ins_v2_1000.json``, ``items_human_ins.json``) plus its
  noun lexicon ``nouns.json``: a folder ``env.webshop.data: files`` reads like the real data.
* ``stats``: what a catalogue makes: products, goals, the split, how often BM25 on a goal's
  instruction puts the target first / in the top 10 / in the top 50, and the scripted
  shopper's success on the train and test goals. ``--data DIR`` reads files (else the
  synthetic catalogue of ``--seed`` and ``--products``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from envs.webshop.goals import TEST_SIZE


def build_command(args: argparse.Namespace) -> int:
    from envs.webshop.synthetic import write_synthetic_catalogue

    start = time.perf_counter()
    folder = write_synthetic_catalogue(Path(args.out), seed=args.seed, num_products=args.products)
    print(
        f"synthetic catalogue (seed {args.seed}, {args.products} products) in {folder} "
        f"({time.perf_counter() - start:.1f} s)"
    )
    return 0


def _source(args: argparse.Namespace):
    from envs.webshop.shop import ShopSource

    data = "files" if args.data else "synthetic"
    return ShopSource(
        data=data,
        data_dir=args.data,
        catalogue_seed=args.seed,
        num_products=args.products,
        goal_seed=args.goal_seed,
        test_size=args.test_goals,
        nouns=args.nouns,
    )


def collect_stats(args: argparse.Namespace) -> dict:
    """The numbers ``stats`` prints (see module doc)."""
    from envs.webshop.expert import expert_success
    from envs.webshop.shop import load_shop
    from envs.webshop.stats import retrieval_ranks, retrieval_summary

    shop = load_shop(_source(args))
    stats: dict = {
        "products": len(shop.catalogue),
        "goals": len(shop.goals.goals),
        "train_goals": len(shop.goals.train),
        "test_goals": len(shop.goals.test),
    }
    for split in ("train", "test"):
        goals = shop.goals.split(split)
        ranks = retrieval_ranks(goals, shop.engine)
        stats[f"{split}_retrieval"] = retrieval_summary(ranks)
        wins, total = expert_success(shop, split, args.max_turns)
        stats[f"{split}_expert_success"] = wins / total
    return stats


def stats_command(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    try:
        stats = collect_stats(args)
    except (ValueError, RuntimeError) as exc:
        print(f"arlarena webshop stats: {exc}", file=sys.stderr)
        return 2
    stats["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(stats, indent=2))
    return 0


def add_commands(commands) -> None:
    """Register ``webshop build`` / ``webshop stats`` on the ``arlarena`` subparsers."""
    group = commands.add_parser("webshop", help="the synthetic WebShop catalogue and its numbers")
    sub = group.add_subparsers(dest="webshop_command", required=True)
    build = sub.add_parser("build", help="write the synthetic catalogue as WebShop data files")
    build.add_argument("out", help="folder (a config's env.data_path with webshop.data: files)")
    build.add_argument("--seed", type=int, default=0)
    build.add_argument("--products", type=int, default=1000)
    build.set_defaults(handler=build_command)
    stats = sub.add_parser("stats", help="goals, BM25 retrieval of targets, expert success")
    stats.add_argument("--data", help="a folder of WebShop data files (default: synthetic)")
    stats.add_argument("--seed", type=int, default=0, help="synthetic catalogue seed")
    stats.add_argument("--products", type=int, default=1000)
    stats.add_argument("--goal-seed", type=int, default=0)
    stats.add_argument("--test-goals", type=int, default=TEST_SIZE)
    stats.add_argument("--nouns", default="auto", choices=["auto", "spacy", "lexicon"])
    stats.add_argument("--max-turns", type=int, default=15)
    stats.set_defaults(handler=stats_command)
