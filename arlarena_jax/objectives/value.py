"""PPO's critic objective: the clipped value loss and the critic's diagnostics
(docs/algorithms.md §3.7c; verl ``compute_value_loss``).

Pure, jittable functions of ``[N, T]`` token arrays; ``mask`` is the response mask and
``row_mask`` the real rows, so padding never counts.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from arlarena_jax.objectives.aggregate import Aggregation, token_mean
from arlarena_jax.objectives.declare import MetricTable, means
from arlarena_jax.objectives.stats import masked_mean

Array = jax.Array

VALUE_METRICS: MetricTable = means("vf_loss", "vf_clipfrac", "vpred_mean")


class ValueLoss(NamedTuple):
    loss: Array  # the scalar to minimise
    metrics: dict[str, Array]  # vf_loss, vf_clipfrac, vpred_mean


def clipped_value_loss(
    values: Array,
    old_values: Array,
    returns: Array,
    mask: Array,
    row_mask: Array,
    *,
    clip: float,
    aggregation: Aggregation | None = None,
) -> ValueLoss:
    """L_V = ½·agg(max((V − R)², (V_clip − R)²)) with V_clip = clip(V, V_old − ε_v, V_old + ε_v).

    ``values`` V are the critic's current predictions, ``old_values`` V_old the ones the
    advantages were computed with, ``returns`` R the GAE targets. ``agg`` defaults to token-mean
    (verl's critic). ``vf_clipfrac`` = masked mean of [(V_clip − R)² > (V − R)²]: the share of
    tokens whose loss the clip decides; ``vpred_mean`` = masked mean of V.
    """
    if clip <= 0:
        raise ValueError(f"the value clip must be > 0, got {clip}")
    aggregation = token_mean() if aggregation is None else aggregation
    clipped = jnp.clip(values, old_values - clip, old_values + clip)  # exactly V inside the band
    unclipped_loss = jnp.square(values - returns)
    clipped_loss = jnp.square(clipped - returns)
    loss = 0.5 * aggregation(jnp.maximum(unclipped_loss, clipped_loss), mask, row_mask)
    valid = mask * row_mask[:, None]
    metrics = {
        "vf_loss": loss,
        "vf_clipfrac": masked_mean((clipped_loss > unclipped_loss).astype(jnp.float32), valid),
        "vpred_mean": masked_mean(values, valid),
    }
    return ValueLoss(loss, metrics)


def explained_variance(returns: Array, values: Array, mask: Array) -> Array:
    """1 − Var(R − V)/Var(R) over the valid tokens (population variances; verl
    ``critic/vf_explained_var``): 1 is a perfect critic, 0 no better than the mean, < 0 worse."""
    n = jnp.maximum(jnp.sum(mask), 1.0)

    def variance(x: Array) -> Array:
        mean = jnp.sum(x * mask) / n
        return jnp.sum(jnp.square(x - mean) * mask) / n

    return 1.0 - variance(returns - values) / (variance(returns) + 1e-5)
