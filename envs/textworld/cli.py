"""``arlarena textworld build``: generate a tier's test, validation and training games into the
cache (docs/environments.md §10.2). ``OUT`` is what a config's ``env.data_path`` points at (default:
``$ARLARENA_TEXTWORLD_DIR``, else ``~/.cache/arlarena/textworld``)."""

from __future__ import annotations

import argparse
import sys
import time
from types import SimpleNamespace

from envs.textworld import engine
from envs.textworld.spec import TIER_NAMES, data_root


def build_command(args: argparse.Namespace) -> int:
    from envs.textworld.build import BUILD_ORDER, build_split, split_folder

    if not engine.available():
        print(f"arlarena textworld: needs the real engine: {engine.INSTALL_HINT}", file=sys.stderr)
        raise SystemExit(2)
    root = data_root(SimpleNamespace(data_path=args.out))
    for tier in args.tiers:
        exclude: frozenset[str] = frozenset()
        for split in BUILD_ORDER:
            count = getattr(args, f"{split}_games")
            start = time.perf_counter()
            games = build_split(
                root, tier, args.seed, split, count, exclude=exclude, workers=args.workers
            )
            seconds = time.perf_counter() - start
            folder = split_folder(root, tier, args.seed, split)
            print(f"{tier} {split}: {len(games)} games in {folder} ({seconds:.0f} s)", flush=True)
            exclude |= frozenset(g.hash for g in games)
    return 0


def add_commands(commands) -> None:
    """Register ``textworld build`` on the ``arlarena`` subparsers."""
    group = commands.add_parser("textworld", help="generate TextWorld games (tw-make)")
    sub = group.add_subparsers(dest="textworld_command", required=True)
    parser = sub.add_parser("build", help="test, validation and training games of the tiers")
    parser.add_argument("out", nargs="?", help="game root (a config's env.data_path)")
    parser.add_argument("--tiers", nargs="+", default=["w2-o3-q4"], choices=TIER_NAMES)
    parser.add_argument("--seed", type=int, default=0, help="env.textworld.seed")
    parser.add_argument("--train-games", type=int, default=1000)
    parser.add_argument("--validation-games", type=int, default=64)
    parser.add_argument("--test-games", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.set_defaults(handler=build_command)
