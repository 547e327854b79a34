"""``arlarena alfworld build`` and ``arlarena alfworld generate``: game files on disk.

* ``build``: unpack the evaluation problems (the shared tarball, or an ``$ALFWORLD_DATA``-style
  folder holding ``json_2.1.1/``) and write solvable ``game.tw-pddl`` files of the chosen splits
  under ``OUT/json_2.1.1/<split>/`` (docs/environments.md §4.2).
* ``generate``: new training games over the valid_train scenes into ``OUT/json_2.1.1/train/``
  (docs/environments.md §4.2), kept only when the expert solves them.

``OUT`` is what a config's ``env.data_path`` points at.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import sys
import time
from pathlib import Path

from envs.alfworld import engine
from envs.alfworld.data import JSON_DIR, default_tarball, unpack


def _source_root(args: argparse.Namespace, out: Path) -> Path:
    """``json_2.1.1/`` of the problems: ``--source`` folder, else the unpacked tarball."""
    if args.source is not None:
        root = Path(args.source)
        root = root if root.name == JSON_DIR else root / JSON_DIR
        if not root.is_dir():
            raise SystemExit(f"--source: no {JSON_DIR}/ folder at {args.source}")
        return root
    return unpack(Path(args.tarball or default_tarball()), out / "problems")


def _report(records, seconds: float) -> None:
    by_type = collections.Counter(r.task_type for r in records if r.solvable)
    total = collections.Counter(r.task_type for r in records)
    for task in sorted(total):
        print(f"  {task:<34} {by_type[task]:>4} / {total[task]:<4} solvable")
    solvable = sum(by_type.values())
    print(f"  {solvable} solvable of {len(records)} in {seconds:.0f} s")


def _require_engine() -> None:
    """Stop with one line, before any work, where the ``alfworld`` extra is not installed."""
    if not engine.available():
        print(f"arlarena alfworld: needs the real engine: {engine.INSTALL_HINT}", file=sys.stderr)
        raise SystemExit(2)


def build_command(args: argparse.Namespace) -> int:
    from envs.alfworld.games import build_split

    _require_engine()

    out = Path(args.out)
    root = _source_root(args, out)
    for split in args.splits:
        start = time.perf_counter()
        print(f"{split}:", flush=True)
        records = build_split(
            root / split, out / JSON_DIR / split, seed=args.seed, workers=args.workers
        )
        _report(records, time.perf_counter() - start)
    return 0


def generate_command(args: argparse.Namespace) -> int:
    from envs.alfworld.generate import generate_training_games

    _require_engine()

    out = Path(args.out)
    train = out / JSON_DIR / "train"
    if train.is_dir() and any(train.iterdir()):
        if not args.overwrite:
            raise SystemExit(f"{train} already holds games: pass --overwrite to replace them")
        shutil.rmtree(train)
    root = _source_root(args, out)
    start = time.perf_counter()
    records = generate_training_games(
        root / "valid_train",
        train,
        num_games=args.num_games,
        seed=args.seed,
        workers=args.workers,
    )
    print(f"train: {len(records)} solvable games in {time.perf_counter() - start:.0f} s")
    return 0


def add_commands(commands) -> None:
    """Register ``alfworld build`` / ``alfworld generate`` on the ``arlarena`` subparsers."""
    group = commands.add_parser("alfworld", help="build ALFWorld game files (TextWorld engine)")
    sub = group.add_subparsers(dest="alfworld_command", required=True)
    for name, handler, text in (
        ("build", build_command, "solvable games of the evaluation splits"),
        ("generate", generate_command, "new expert-solvable training games"),
    ):
        parser = sub.add_parser(name, help=text)
        parser.add_argument("out", help="data root (a config's env.data_path)")
        parser.add_argument("--tarball", help="evaluation problems tarball (default: shared)")
        parser.add_argument("--source", help="a folder holding json_2.1.1/ instead")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--workers", type=int, default=2)
        if name == "build":
            parser.add_argument(
                "--splits",
                nargs="+",
                default=["valid_seen", "valid_unseen"],
                choices=["valid_seen", "valid_unseen", "valid_train", "train"],
            )
        else:
            parser.add_argument("--num-games", type=int, default=600)
            parser.add_argument("--overwrite", action="store_true", help="replace existing games")
        parser.set_defaults(handler=handler)
