"""Masked and segment statistics with static shapes (docs/algorithms.md §1.2).

Segment ids are dense int32 ids in ``[0, N)``; every reduction takes ``num_segments=N`` so shapes
stay static under ``jit``. A ``weight`` (the row mask) removes padding rows from every statistic.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array

EPS_STD = 1e-6  # the epsilon added to group standard deviations (docs/algorithms.md §3.1)
EPS_WHITEN = 1e-8  # the epsilon inside the token-whitening square root (docs/algorithms.md §3.5)


def masked_mean(x: Array, mask: Array) -> Array:
    """Σ x·m / (Σ m + 1e-8): the verl masked mean used by every metric
    (docs/algorithms.md §4, §5)."""
    return jnp.sum(x * mask) / (jnp.sum(mask) + 1e-8)


def row_lengths(mask: Array) -> Array:
    """|y_i| = Σ_t m[i,t]."""
    return jnp.sum(mask, axis=-1)


def row_mean(x: Array, mask: Array) -> Array:
    """x̄_i = Σ_t x·m / max(|y_i|, 1)."""
    return jnp.sum(x * mask, axis=-1) / jnp.maximum(row_lengths(mask), 1.0)


def masked_whiten(x: Array, mask: Array) -> Array:
    """(x − μ)/√(var + 1e-8)·m with μ, var over valid tokens and var unbiased (n/(n−1));
    docs/algorithms.md §3.5.

    With a single valid token the unbiased variance is undefined; it is taken as 0 (the value is
    then centred to 0), which keeps the result finite.
    """
    n = jnp.sum(mask)
    mean = jnp.sum(x * mask) / jnp.maximum(n, 1.0)
    var = jnp.sum(jnp.square(x - mean) * mask) / jnp.maximum(n - 1.0, 1.0)
    return (x - mean) * jax.lax.rsqrt(var + EPS_WHITEN) * mask


class SegmentStats(NamedTuple):
    """Per-row view of the statistics of the row's segment."""

    count: Array  # number of (weighted) members of the row's segment
    mean: Array  # segment mean
    std: Array  # segment standard deviation, ddof=1 (0 for a singleton)


def segment_stats(values: Array, segment_ids: Array, weight: Array) -> SegmentStats:
    """Mean and unbiased std of ``values`` within each segment, gathered back to rows.

    ``weight`` is the multiplicity of each row: 1 real, 0 padding. To count a trajectory once,
    weight one representative row 1 and the others 0; fractional weights (1/rows) can miss the
    singleton test through rounding.

    The sums run on values shifted by a per-segment pivot p (the value of the segment's first
    real row), μ = p + Σ w(x − p)/Σ w and σ² = Σ w(x − μ)²/(Σ w − 1): for identical members every
    x − p is exactly 0, so μ = x and σ = 0 exactly, and a normalised advantage (x − μ)/(σ + ε)
    is exactly 0 (docs/algorithms.md §3.11: a float32 mean of 24 copies of 10.3 is off by 2e-6
    otherwise, and that error divided by a σ of 1e-6 is of order one). The shift also keeps the
    two-pass variance accurate for values far from 0.
    """
    n = values.shape[0]
    rows = jnp.arange(n)
    count = jax.ops.segment_sum(weight, segment_ids, num_segments=n)
    first = jax.ops.segment_min(jnp.where(weight > 0, rows, n), segment_ids, num_segments=n)
    pivot = values[jnp.minimum(first, n - 1)][segment_ids]
    shifted = values - pivot
    offset = jax.ops.segment_sum(shifted * weight, segment_ids, num_segments=n)
    row_offset = (offset / jnp.maximum(count, 1e-30))[segment_ids]
    deviation = shifted - row_offset
    sq = jax.ops.segment_sum(jnp.square(deviation) * weight, segment_ids, num_segments=n)
    row_count = count[segment_ids]
    var = sq[segment_ids] / jnp.maximum(row_count - 1.0, 1e-30)
    std = jnp.sqrt(jnp.where(row_count > 1.0 + 1e-6, var, 0.0))
    return SegmentStats(count=row_count, mean=pivot + row_offset, std=std)


def group_normalize(
    values: Array,
    segment_ids: Array,
    weight: Array,
    *,
    divide_by_std: bool,
    singleton_mean_is_value: bool,
) -> Array:
    """(x − μ_g)/(σ_g + 1e-6), or x − μ_g, per segment (docs/algorithms.md §3.1, §3.9).

    Singletons (one member): episode groups use μ = 0, σ = 1 (``singleton_mean_is_value=False``),
    step groups use μ = x so the result is 0 (``singleton_mean_is_value=True``).
    """
    stats = segment_stats(values, segment_ids, weight)
    singleton = stats.count <= 1.0 + 1e-6
    singleton_mean = values if singleton_mean_is_value else jnp.zeros_like(values)
    mean = jnp.where(singleton, singleton_mean, stats.mean)
    centred = values - mean
    if divide_by_std:
        std = jnp.where(singleton, 1.0, stats.std)
        centred = centred / (std + EPS_STD)
    return centred * weight


def last_token_onehot(mask: Array) -> Array:
    """One-hot of the last response token of each row: column (|y_i| − 1) mod T.

    As in verl, an empty row puts its entry in the last column, so row sums still carry the score.
    """
    t = mask.shape[-1]
    last = (row_lengths(mask).astype(jnp.int32) - 1) % t
    return jax.nn.one_hot(last, t, dtype=mask.dtype)


def first_token_onehot(mask: Array) -> Array:
    """One-hot of the first valid position of each row (all zeros for an empty row)."""
    first = jnp.argmax(mask > 0, axis=-1)
    return jax.nn.one_hot(first, mask.shape[-1], dtype=mask.dtype) * (jnp.sum(mask, -1) > 0)[
        :, None
    ].astype(mask.dtype)


def segmented_reverse_discount(
    rewards: Array, segment_ids: Array, order: Array, gamma: float | Array, weight: Array
) -> Array:
    """G_k = r_k + γ_k·G_{k+1} within each segment, rows visited in increasing ``order``.

    ``gamma`` is one discount for every row or one per row ``[N]`` (γ_k: the factor between row k
    and the next row of its segment; multi-turn GAE's per-row decay (γλ)^{L_k}).

    Used for GiGPO step returns (segment = trajectory, order = turn index; docs/algorithms.md §3.9).
    Rows are sorted by (segment, order) and the recurrence runs as written, G ← r + a·shift(G) with
    a = γ inside a segment and 0 at its end, repeated once per member of the longest segment:
    after j rounds every row within j of its segment's end holds its final value, computed as
    r_k + γ·G_{k+1} from the final G_{k+1}. Every value is therefore the sequential recurrence's,
    so equal suffixes of two trajectories give bitwise equal returns wherever they sit in the
    batch (an associative scan rounds by position). The loop is a ``while_loop`` with a traced trip
    count: O(N·L) work for N rows and L turns. Padding rows (weight 0) get 0.
    """
    n = rewards.shape[0]
    big = jnp.iinfo(jnp.int32).max
    seg = jnp.where(weight > 0, segment_ids, big)
    perm = jnp.lexsort((order, seg))
    r = (rewards * weight)[perm]
    s = seg[perm]
    same_next = jnp.concatenate([s[1:] == s[:-1], jnp.zeros((1,), bool)])
    decay = jnp.broadcast_to(jnp.asarray(gamma, r.dtype), (n,))[perm]
    a = jnp.where(same_next, decay, 0.0).astype(r.dtype)
    members = jax.ops.segment_sum((weight > 0).astype(jnp.int32), segment_ids, num_segments=n)
    rounds = jnp.max(members)

    def one_round(_, g: Array) -> Array:
        return r + a * jnp.concatenate([g[1:], jnp.zeros((1,), g.dtype)])

    g = jax.lax.fori_loop(0, rounds, one_round, r)
    out = jnp.zeros((n,), r.dtype).at[perm].set(g)
    return out * weight
