"""Loss aggregation: reduce an ``[N, T]`` per-token loss matrix to a scalar (docs/algorithms.md §5).

Each constructor returns an :class:`Aggregation`, a named pure function
``(loss_matrix, token_mask, row_mask) -> scalar``. ``row_mask`` excludes padding rows, so the
"N" of the row-averaged modes counts real rows only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from arlarena_jax.objectives.stats import row_lengths

Array = jax.Array


class Aggregation(NamedTuple):
    """A loss-aggregation mode: ``fn(loss_matrix, token_mask, row_mask) -> scalar``."""

    name: str
    fn: Callable[[Array, Array, Array], Array]

    def __call__(self, loss: Array, mask: Array, row_mask: Array) -> Array:
        return self.fn(loss, mask, row_mask)


def token_mean() -> Aggregation:
    """Σ_{i,t} m·L / (Σ_{i,t} m + 1e-8) (docs/algorithms.md §5, ``token-mean``)."""

    def fn(loss, mask, row_mask):
        mask = mask * row_mask[:, None]
        return jnp.sum(loss * mask) / (jnp.sum(mask) + 1e-8)

    return Aggregation("token-mean", fn)


def seq_mean_token_sum() -> Aggregation:
    """(1/N) Σ_i Σ_t m·L, N = real rows, empty rows included
    (docs/algorithms.md §5, ``seq-mean-token-sum``)."""

    def fn(loss, mask, row_mask):
        per_row = jnp.sum(loss * mask, axis=-1) * row_mask
        return jnp.sum(per_row) / jnp.maximum(jnp.sum(row_mask), 1.0)

    return Aggregation("seq-mean-token-sum", fn)


def seq_mean_token_mean() -> Aggregation:
    """(1/|V|) Σ_{i∈V} Σ_t m·L / Σ_t m over non-empty rows V; 0 if V is empty.

    docs/algorithms.md §5, ``seq-mean-token-mean`` (the verl-core version that drops empty rows).
    """

    def fn(loss, mask, row_mask):
        lengths = row_lengths(mask)
        nonempty = (lengths > 0).astype(loss.dtype) * row_mask
        per_row = jnp.sum(loss * mask, axis=-1) / jnp.maximum(lengths, 1.0)
        return jnp.sum(per_row * nonempty) / jnp.maximum(jnp.sum(nonempty), 1.0)

    return Aggregation("seq-mean-token-mean", fn)


def seq_mean_token_sum_norm(max_response_length: int | None = None) -> Aggregation:
    """(Σ_{i,t} m·L) / L_max, no division by N (docs/algorithms.md §5, ``seq-mean-token-sum-norm``).

    verl divides by the padded width T. Pass ``max_response_length`` (the config's
    ``data.max_response_length``) so that the result does not depend on how a batch is padded;
    with ``None`` the array's width is used, as verl does.
    """

    def fn(loss, mask, row_mask):
        width = loss.shape[-1] if max_response_length is None else max_response_length
        return jnp.sum(loss * mask * row_mask[:, None]) / width

    return Aggregation("seq-mean-token-sum-norm", fn)


_BY_NAME = {
    "token-mean": token_mean,
    "seq-mean-token-sum": seq_mean_token_sum,
    "seq-mean-token-mean": seq_mean_token_mean,
    "seq-mean-token-sum-norm": seq_mean_token_sum_norm,
}


def by_name(name: str) -> Aggregation:
    """Look up an aggregation by its verl ``loss_agg_mode`` string (host-side, for configs)."""
    try:
        return _BY_NAME[name]()
    except KeyError:
        raise ValueError(
            f"unknown loss_agg_mode {name!r}; expected one of {sorted(_BY_NAME)}"
        ) from None
