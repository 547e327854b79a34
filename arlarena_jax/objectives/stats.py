"""Masked and segment statistics with static shapes (spec §1, "JAX advice").

Segment ids are dense int32 ids in ``[0, N)``; every reduction takes ``num_segments=N`` so shapes
stay static under ``jit``. A ``weight`` (the row mask) removes padding rows from every statistic.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array

EPS_STD = 1e-6  # the epsilon added to group standard deviations (spec §5.1)
EPS_WHITEN = 1e-8  # the epsilon inside the token-whitening square root (spec §5.5)


def masked_sum(x: Array, mask: Array) -> Array:
    """Σ x·m over all positions."""
    return jnp.sum(x * mask)


def masked_mean(x: Array, mask: Array) -> Array:
    """Σ x·m / (Σ m + 1e-8): the verl masked mean used by every metric (spec §2, §3)."""
    return jnp.sum(x * mask) / (jnp.sum(mask) + 1e-8)


def row_lengths(mask: Array) -> Array:
    """|y_i| = Σ_t m[i,t]."""
    return jnp.sum(mask, axis=-1)


def row_mean(x: Array, mask: Array) -> Array:
    """x̄_i = Σ_t x·m / max(|y_i|, 1) (spec §1)."""
    return jnp.sum(x * mask, axis=-1) / jnp.maximum(row_lengths(mask), 1.0)


def masked_whiten(x: Array, mask: Array) -> Array:
    """(x − μ)/√(var + 1e-8)·m with μ, var over valid tokens and var unbiased (n/(n−1)); spec §5.5.

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
    singleton test through rounding. Two passes (mean, then squared deviations) keep the
    variance accurate.
    """
    n = values.shape[0]
    count = jax.ops.segment_sum(weight, segment_ids, num_segments=n)
    total = jax.ops.segment_sum(values * weight, segment_ids, num_segments=n)
    mean = total / jnp.maximum(count, 1e-30)
    row_mean_ = mean[segment_ids]
    sq = jax.ops.segment_sum(jnp.square(values - row_mean_) * weight, segment_ids, num_segments=n)
    row_count = count[segment_ids]
    var = sq[segment_ids] / jnp.maximum(row_count - 1.0, 1e-30)
    std = jnp.sqrt(jnp.where(row_count > 1.0 + 1e-6, var, 0.0))
    return SegmentStats(count=row_count, mean=row_mean_, std=std)


def group_normalize(
    values: Array,
    segment_ids: Array,
    weight: Array,
    *,
    divide_by_std: bool,
    singleton_mean_is_value: bool,
) -> Array:
    """(x − μ_g)/(σ_g + 1e-6), or x − μ_g, per segment (spec §5.1, §5.9).

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


def segmented_reverse_discount(
    rewards: Array, segment_ids: Array, order: Array, gamma: float, weight: Array
) -> Array:
    """G_k = r_k + γ·G_{k+1} within each segment, rows visited in increasing ``order``.

    Used for GiGPO step returns (segment = trajectory, order = turn index; spec §5.9). Rows are
    sorted by (segment, order), a reverse linear recurrence runs as an associative scan that
    resets at segment boundaries, and the result is scattered back. Padding rows (weight 0) get 0.
    """
    n = rewards.shape[0]
    big = jnp.iinfo(jnp.int32).max
    seg = jnp.where(weight > 0, segment_ids, big)
    perm = jnp.lexsort((order, seg))
    r = (rewards * weight)[perm]
    s = seg[perm]
    same_next = jnp.concatenate([s[1:] == s[:-1], jnp.zeros((1,), bool)])
    a = jnp.where(same_next, gamma, 0.0).astype(r.dtype)

    def combine(left, right):
        # Elements are affine maps G ↦ b + a·G applied right to left along the reversed sequence.
        a_l, b_l = left
        a_r, b_r = right
        return a_l * a_r, b_r + a_r * b_l

    _, g = jax.lax.associative_scan(combine, (a, r), reverse=True)
    out = jnp.zeros((n,), r.dtype).at[perm].set(g)
    return out * weight
