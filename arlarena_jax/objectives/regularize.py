"""Loss terms added to the policy loss: KL to a reference and the entropy bonus
(docs/algorithms.md §6).

Both aggregate with the objective's aggregation unless given their own, and always use the
original response mask (not the sequence-masked one), as verl does. The PPO critic's clipped
value loss is here too, as a plain function for a critic's own update.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from arlarena_jax.objectives import kl as kl_estimators
from arlarena_jax.objectives.aggregate import Aggregation
from arlarena_jax.objectives.batch import TurnBatch
from arlarena_jax.objectives.compose import Regularizer
from arlarena_jax.objectives.declare import Input, means

Array = jax.Array


def kl(kind: str = "k3", coef: float = 0.01, aggregation: Aggregation | None = None) -> Regularizer:
    """KL loss term: + coef·agg(kl(lp, lp_ref), m) (docs/algorithms.md §6.1).

    ``kind`` is a :mod:`~arlarena_jax.objectives.kl` estimator (k1, abs, k2, k3 and verl's aliases).
    ARLArena's agentic scripts use k3 with coef 0.01. Needs ``ref_log_probs`` in the batch.
    Metrics: kl_loss (the aggregated estimate, unscaled) and kl_coef.
    """
    estimator = kl_estimators.estimator(kind)
    if coef < 0:
        raise ValueError(f"kl_loss_coef must be >= 0, got {coef}")

    def fn(log_probs: Array, entropy: Array | None, batch: TurnBatch, default: Aggregation):
        if batch.ref_log_probs is None:
            raise ValueError("the KL loss needs TurnBatch.ref_log_probs (reference log-probs)")
        agg = aggregation or default
        value = agg(estimator(log_probs, batch.ref_log_probs), batch.response_mask, batch.row_mask)
        metrics = {"kl_loss": value, "kl_coef": jnp.asarray(coef, jnp.float32)}
        return coef * value, metrics

    return Regularizer(
        f"kl_{kind}",
        fn,
        needs=frozenset({Input.REF_LOG_PROBS}),
        reductions=means("kl_loss", "kl_coef"),
    )


def entropy(coef: float = 1e-3, aggregation: Aggregation | None = None) -> Regularizer:
    """Entropy bonus: − coef·agg(H, m), H the current policy's token entropy
    (docs/algorithms.md §6.2).

    ``Objective.loss`` must receive the entropies. ARLArena's ALFWorld and WebShop configs carry
    coef = 0.001. Metric: entropy (the aggregated entropy).
    """
    if coef < 0:
        raise ValueError(f"entropy_coeff must be >= 0, got {coef}")

    def fn(log_probs: Array, entropy_: Array | None, batch: TurnBatch, default: Aggregation):
        if entropy_ is None:
            raise ValueError(
                "the entropy bonus needs token entropies: Objective.loss(..., entropy=)"
            )
        agg = aggregation or default
        value = agg(entropy_, batch.response_mask, batch.row_mask)
        return -coef * value, {"entropy": value}

    return Regularizer("entropy", fn, needs=frozenset({Input.ENTROPY}), reductions=means("entropy"))
