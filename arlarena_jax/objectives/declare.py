"""What a component declares: the batch inputs it reads and how each of its metrics reduces.

A component never has its capabilities guessed from its name. It states them:

- ``needs``: a set of :class:`Input` values, the optional inputs its function reads (the
  trainer computes reference log-probs only when some component needs them, and refuses an
  objective needing an input it cannot provide, see
  :func:`~arlarena_jax.objectives.compose.check_requirements`);
- ``reductions``: a table ``((key, Reduction), ...)`` with one entry per metric key it emits, so
  that micro-batch and mini-batch metrics are reduced by declaration, never by key text.

Both are plain hashable values (a ``frozenset`` and a tuple of pairs) so that components and the
objective stay hashable, static Python data.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

import jax
import jax.numpy as jnp

Array = jax.Array


class Input(enum.Enum):
    """An input a component reads beyond the always-present turn rows; value = its description."""

    OLD_LOG_PROBS = "old-policy log-probs"  # lp_old: TurnBatch.old_log_probs
    REF_LOG_PROBS = "reference log-probs"  # lp_ref: TurnBatch.ref_log_probs (KL terms)
    ROLLOUT_LOG_PROBS = "sampler log-probs"  # lp_rollout: TurnBatch.rollout_log_probs (TIS)
    OLD_ENTROPY = "old-policy token entropies"  # TurnBatch.old_entropy (EMPG)
    ENTROPY = "current-policy token entropies"  # Objective.loss(..., entropy=) (entropy bonus)
    VALUES = "critic values"  # TurnBatch.values (GAE)


Needs = frozenset[Input]


class Reduction(enum.Enum):
    """How one metric combines over micro-batches (and steps): one value from a stacked axis."""

    MEAN = "mean"
    MAX = "max"
    MIN = "min"
    SUM = "sum"

    def reduce(self, values: Array, valid: Array | None = None) -> Array:
        """Reduce the leading axis of ``values`` over the entries where ``valid`` [K] is true.

        MEAN: Σ_v x / max(|v|, 1); SUM: Σ_v x; MAX / MIN over v, 0 when no entry is valid.
        """
        w = jnp.ones(values.shape[:1], bool) if valid is None else valid
        w = w.reshape(w.shape + (1,) * (values.ndim - 1))
        if self is Reduction.MAX:
            return jnp.where(jnp.any(w, 0), jnp.max(jnp.where(w, values, -jnp.inf), 0), 0.0)
        if self is Reduction.MIN:
            return jnp.where(jnp.any(w, 0), jnp.min(jnp.where(w, values, jnp.inf), 0), 0.0)
        total = jnp.sum(jnp.where(w, values, 0.0), 0)
        if self is Reduction.SUM:
            return total
        return total / jnp.maximum(jnp.sum(w, 0), 1)


MetricTable = tuple[tuple[str, Reduction], ...]


def means(*keys: str) -> MetricTable:
    """A metric table declaring every key in ``keys`` a :attr:`Reduction.MEAN`."""
    return tuple((key, Reduction.MEAN) for key in keys)


def merge_tables(tables: Iterable[tuple[str, MetricTable]]) -> dict[str, Reduction]:
    """``{key: Reduction}`` from (owner name, table) pairs; two reductions for one key raise."""
    out: dict[str, Reduction] = {}
    owner: dict[str, str] = {}
    for name, table in tables:
        for key, reduction in table:
            if key in out and out[key] is not reduction:
                raise ValueError(
                    f"metric {key!r} is declared {out[key].value} by {owner[key]!r} and "
                    f"{reduction.value} by {name!r}"
                )
            out[key], owner[key] = reduction, owner.get(key, name)
    return out


def reduce_stacked(
    stacked: Mapping[str, Array], reductions: Mapping[str, Reduction], valid: Array | None = None
) -> dict[str, Array]:
    """Collapse the leading axis of every metric by its declared reduction (jittable).

    ``valid`` [K] (optional) leaves out entries (e.g. micro-batches holding only padding rows).
    A key without a declaration raises: declare it in the emitting component's ``reductions``.
    """
    out = {}
    for key, value in stacked.items():
        if key not in reductions:
            raise ValueError(
                f"metric {key!r} has no declared reduction: add it to the reductions of the "
                "component that emits it"
            )
        out[key] = reductions[key].reduce(value, valid)
    return out
