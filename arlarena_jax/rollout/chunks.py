"""Seeds in fixed-size chunks, so any number of episodes runs on one environment batch."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple


class SeedChunk(NamedTuple):
    """``seeds`` (padded to the batch size with repeats of its first seed), the index of its first
    seed in the whole list, and how many of its seeds are real (the rest are dropped)."""

    seeds: list[int]
    start: int
    real: int


def seed_chunks(seeds: Sequence[int], size: int) -> Iterator[SeedChunk]:
    """Consecutive chunks of ``size`` seeds; the last one padded with its first seed."""
    if size < 1:
        raise ValueError(f"chunk size must be >= 1, got {size}")
    for start in range(0, len(seeds), size):
        chunk = [int(s) for s in seeds[start : start + size]]
        yield SeedChunk(chunk + [chunk[0]] * (size - len(chunk)), start, len(chunk))
