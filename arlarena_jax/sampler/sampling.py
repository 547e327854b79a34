"""Next-token sampling: greedy, temperature, top-k, top-p, with the behaviour log-prob.

The behaviour log-prob of a token is log softmax(z/τ)[token] with z the float32 logits and τ the
temperature (τ = 1 for greedy): the quantity the trainer recomputes with ``token_log_probs(…,
temperature=τ)``, so the importance ratio starts at 1. Top-k and top-p only
restrict which tokens can be drawn; they are not folded into the log-prob (as in verl).

Sampling settings are static (a frozen, hashable dataclass): each distinct setting compiles once,
typically two per run (training and evaluation).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Iterator

import jax
import jax.numpy as jnp

from arlarena_jax.errors import InvalidField

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """``temperature`` 0 means greedy; ``top_k`` 0 and ``top_p`` 1.0 disable those filters."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        for field, message in invalid_sampling(self):
            raise InvalidField("sampling", field, message)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def invalid_sampling(p: SamplingParams) -> Iterator[tuple[str, str]]:
    """``(field, message)`` for every setting out of range (NaN fails every rule)."""
    if not 0 <= p.temperature < math.inf:
        yield "temperature", f"must be finite and >= 0, got {p.temperature!r}"
    if not 0.0 < p.top_p <= 1.0:
        yield "top_p", f"must lie in (0, 1], got {p.top_p!r}"
    if isinstance(p.top_k, bool) or not isinstance(p.top_k, numbers.Integral) or p.top_k < 0:
        yield "top_k", f"must be an int >= 0 (0 = off), got {p.top_k!r}"


GREEDY = SamplingParams(temperature=0.0)


def _filtered_candidates(z: Array, params: SamplingParams) -> tuple[Array, Array]:
    """Candidate scores ``[B, K]`` (−inf where filtered out) and their token ids ``[B, K]``."""
    vocab = z.shape[-1]
    if params.top_k and params.top_k < vocab:
        scores, ids = jax.lax.top_k(z, params.top_k)
    elif params.top_p < 1.0:
        ids = jnp.argsort(-z, axis=-1)
        scores = jnp.take_along_axis(z, ids, axis=-1)
    else:
        return z, jnp.broadcast_to(jnp.arange(vocab), z.shape)
    if params.top_p < 1.0:
        probs = jax.nn.softmax(scores, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # mass of strictly better candidates
        scores = jnp.where(before < params.top_p, scores, -jnp.inf)  # the best always stays
    return scores, ids


def first_argmax(z: Array) -> tuple[Array, Array]:
    """The first index of the largest entry of each row ``[B, V]`` (as ``jnp.argmax``: a NaN
    counts as the largest) and that maximum ``[B]``: i* = min{i : z_i = max_j z_j}.

    Two plain reductions (max, then min over matching indices) instead of ``argmax``'s
    (value, index) pair reduction, which XLA:CPU runs several times slower.
    """
    top = jnp.max(z, axis=-1)
    hit = (z == top[:, None]) | jnp.isnan(z)
    index = jnp.min(jnp.where(hit, jnp.arange(z.shape[-1], dtype=jnp.int32), z.shape[-1]), -1)
    return index, top


def categorical(keys: Array, scores: Array) -> Array:
    """One draw per row from softmax(scores) ``[B, K]`` with the row's key: the draw of
    ``jax.vmap(jax.random.categorical)(keys, scores)``, i = argmax(g + scores) with Gumbel noise
    g from the row's key, through :func:`first_argmax` (identical indices, faster on CPU)."""
    noise = jax.vmap(lambda key: jax.random.gumbel(key, scores.shape[-1:], scores.dtype))(keys)
    return first_argmax(noise + scores)[0]


def greedy_sample(logits: Array) -> tuple[Array, Array]:
    """Greedy tokens ``[B]`` and their log-probs ``[B]``: i* = argmax z and
    log softmax(z)[i*] = −log Σ_j exp(z_j − max z) (the shifted logit of i* is exactly 0)."""
    z = logits.astype(jnp.float32)
    tokens, top = first_argmax(z)
    shifted = z - jax.lax.stop_gradient(top)[:, None]
    return tokens, -jnp.log(jnp.sum(jnp.exp(shifted), axis=-1))


def sample(logits: Array, keys: Array, params: SamplingParams) -> tuple[Array, Array]:
    """Tokens ``[B]`` (int32) and behaviour log-probs ``[B]`` (float32) from logits ``[B, V]``.

    ``keys`` holds one PRNG key per row, so each slot's draw depends on its own key only.
    Greedy decoding reads no key (:func:`greedy_sample`).
    """
    if params.greedy:
        return greedy_sample(logits)
    tau = params.temperature
    z = logits.astype(jnp.float32) / tau
    scores, ids = _filtered_candidates(z, params)
    choice = categorical(keys, scores)
    tokens = jnp.take_along_axis(ids, choice[:, None], axis=-1)[:, 0]
    log_probs = jax.nn.log_softmax(z, axis=-1)
    picked = jnp.take_along_axis(log_probs, tokens[:, None], axis=-1)[:, 0]
    return tokens.astype(jnp.int32), picked
