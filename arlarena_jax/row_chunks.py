"""Row-independent device functions over consecutive chunks of rows (one ``lax.map``), so peak
memory and the batch a kernel sees are one chunk's: the trainer's micro-batches, the on-device
rollout's prefill chunks and decode batches."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
from jax import Array


def largest_divisor_at_most(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``max(limit, 1)``."""
    size = max(1, min(limit, n))
    while n % size:
        size -= 1
    return size


def map_row_chunks(fn: Callable, arrays: Sequence[Array], chunk: int):
    """``fn(*rows)`` over consecutive chunks of ``chunk`` rows of ``arrays`` (all ``[N, ...]``),
    its ``[chunk, ...]`` outputs (any pytree) joined back to ``[N, ...]``:
    out[i·chunk + j] = fn(*(x[i·chunk : (i+1)·chunk] for x in arrays))[j].
    ``N`` must be a multiple of ``chunk``; a single chunk is ``fn(*arrays)``, with no loop."""
    n = arrays[0].shape[0]
    if chunk < 1 or n % chunk:
        raise ValueError(f"{n} rows are not a multiple of the chunk size {chunk}")
    if chunk == n:
        return fn(*arrays)
    split = tuple(x.reshape(n // chunk, chunk, *x.shape[1:]) for x in arrays)
    out = jax.lax.map(lambda xs: fn(*xs), split)
    return jax.tree.map(lambda x: x.reshape(n, *x.shape[2:]), out)
