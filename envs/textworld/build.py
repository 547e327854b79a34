"""The game sets: deterministic, deduplicated, disjoint train, validation and test splits in a
cache folder, built incrementally (docs/environments.md §10.2).

A split's folder holds the generated games and ``manifest.json``: every candidate generated so
far, in seed order (``Generated`` records). Test candidates are seeds ``seed + TEST_OFFSET + k``,
validation candidates ``seed + VALIDATION_OFFSET + k``, training candidates ``seed + k``
(k = 0, 1, …). A split's games are the first ``count`` candidates in seed order that are solvable
(the walkthrough wins on the engine) and not a duplicate (content hash) of an earlier one; the
splits are built in :data:`BUILD_ORDER` and each skips every hash of the splits built before it,
so they are disjoint in content, not just in seeds. The test set depends only on (tier, seed,
count); the validation set also on the test set, the training set on both.
A build generates only the missing candidates (in ``workers`` spawned processes) and rewrites
the manifest atomically after each batch.
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from envs.textworld.games import Generated, generate

TEST_OFFSET = 1_000_000
VALIDATION_OFFSET = 2_000_000
SPLITS = ("train", "validation", "test")
BUILD_ORDER = ("test", "validation", "train")  # each split excludes the games of those before it
MANIFEST = "manifest.json"
MAX_REJECTS = 100  # stop when this many candidates in a row are rejected
BATCH = 64  # candidates generated between two manifest writes (at least one per worker)


def split_folder(root: str | Path, tier: str, seed: int, split: str) -> Path:
    """``<root>/<tier>-seed<seed>/<split>``."""
    return Path(root) / f"{tier}-seed{seed}" / split


def first_seed(seed: int, split: str) -> int:
    """The split's first candidate seed (see module doc)."""
    return seed + {"train": 0, "validation": VALIDATION_OFFSET, "test": TEST_OFFSET}[split]


def read_manifest(folder: Path) -> list[Generated]:
    """The candidates recorded in ``folder`` (none when there is no manifest)."""
    path = folder / MANIFEST
    if not path.is_file():
        return []
    return [Generated.from_json(c) for c in json.loads(path.read_text())["candidates"]]


def write_manifest(folder: Path, candidates: Sequence[Generated]) -> None:
    """Write the manifest atomically."""
    data = {"candidates": [c.to_json() for c in candidates]}
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", dir=folder)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, folder / MANIFEST)


def select(
    candidates: Iterable[Generated], count: int, exclude: frozenset[str] = frozenset()
) -> list[Generated]:
    """The first ``count`` solvable candidates whose hash is new and not in ``exclude``."""
    seen, chosen = set(exclude), []
    for candidate in candidates:
        if len(chosen) == count:
            break
        if candidate.solvable and candidate.hash not in seen:
            chosen.append(candidate)
        seen.add(candidate.hash)
    return chosen


def _executor(workers: int) -> concurrent.futures.Executor | None:
    """``workers`` spawned processes (spawn: the caller may hold JAX threads); None for <= 1."""
    if workers <= 1:
        return None
    context = multiprocessing.get_context("spawn")
    return concurrent.futures.ProcessPoolExecutor(workers, mp_context=context)


def _generate_batch(
    pool: concurrent.futures.Executor | None, tier: str, seeds: list[int], split: str, folder: Path
) -> list[Generated]:
    if pool is None:
        return [generate(tier, s, split, str(folder)) for s in seeds]
    futures = [pool.submit(generate, tier, s, split, str(folder)) for s in seeds]
    return [f.result() for f in futures]


def build_split(
    root: str | Path,
    tier: str,
    seed: int,
    split: str,
    count: int,
    *,
    exclude: frozenset[str] = frozenset(),
    workers: int = 0,
) -> list[Generated]:
    """The split's ``count`` games, generating the missing ones (see module doc)."""
    folder = split_folder(root, tier, seed, split)
    folder.mkdir(parents=True, exist_ok=True)
    candidates = read_manifest(folder)
    chosen = select(candidates, count, exclude)
    if len(chosen) == count:
        return chosen
    pool = _executor(workers)
    try:
        rejected = 0  # candidates in a row that added no game
        while len(chosen) < count:
            start = first_seed(seed, split) + len(candidates)
            size = max(min(count - len(chosen), BATCH), workers, 1)
            batch = list(range(start, start + size))
            candidates += _generate_batch(pool, tier, batch, split, folder)
            write_manifest(folder, candidates)
            before, chosen = len(chosen), select(candidates, count, exclude)
            rejected = 0 if len(chosen) > before else rejected + len(batch)
            if rejected >= MAX_REJECTS:
                raise RuntimeError(f"{tier} {split}: {rejected} candidates in a row rejected")
    finally:
        if pool is not None:
            pool.shutdown()
    return chosen


def existing_split(
    root: str | Path, tier: str, seed: int, split: str, count: int, exclude: frozenset[str]
) -> list[Generated]:
    """The split's games already built (fewer than ``count`` when some are missing)."""
    folder = split_folder(root, tier, seed, split)
    chosen = select(read_manifest(folder), count, exclude)
    return [c for c in chosen if (folder / c.file).is_file()]
