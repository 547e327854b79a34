"""The decoder with a key/value cache: prefill a prompt, then extend it one token at a time.

A :class:`KVCache` holds, per layer, keys and values ``[B, kv_heads, L, head_dim]`` for ``B``
sequences (decode slots) of capacity ``L``: the layout the attention matmuls read directly, so a
decode step copies nothing but the new token's keys and values. :func:`forward_cached` runs ``T``
new tokens per row through the model's own layers
(:meth:`~arlarena_jax.models.qwen.QwenForCausalLM.hidden_states_cached`), writes their
keys/values at cache indices ``write_at[b] … write_at[b] + T − 1`` and lets the query at index i
attend to every cache index j ≤ i (causal over the cache; indices past a row's length hold stale
values and are never attended).

Prefill is ``T`` = the (right-padded) prompt length with ``write_at = 0`` into a cache of the
prompt's length; decoding is ``T = 1`` with ``write_at`` = each row's current length. Logits are
float32, as in :class:`~arlarena_jax.models.qwen.QwenForCausalLM`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from arlarena_jax.models.config import QwenConfig
from arlarena_jax.models.qwen import KVCache, LayerKV, QwenForCausalLM

Array = jax.Array

__all__ = ["KVCache", "LayerKV", "empty_cache", "forward_cached", "hidden_cached"]


def empty_cache(config: QwenConfig, batch: int, length: int, dtype=jnp.float32) -> KVCache:
    """A zero cache for ``batch`` rows of ``length`` tokens (bytes: 2·layers·B·L·kv·d·itemsize)."""
    shape = (batch, config.num_key_value_heads, length, config.head_dim)
    layers = range(config.num_hidden_layers)
    return KVCache(
        tuple(jnp.zeros(shape, dtype) for _ in layers),
        tuple(jnp.zeros(shape, dtype) for _ in layers),
    )


def hidden_cached(
    model: QwenForCausalLM,
    tokens: Array,
    positions: Array,
    cache: KVCache,
    write_at: Array,
) -> tuple[Array, KVCache]:
    """Final-norm hidden states ``[B, T, H]`` of ``tokens`` ``[B, T]`` and the cache with them
    written (the body of :func:`forward_cached`, for callers that project only some positions).

    ``positions`` ``[B, T]`` are the rotary positions (the count of real tokens before each one);
    ``write_at`` ``[B]`` the cache index of each row's first new token.
    """
    return model.hidden_states_cached(tokens, positions, cache, write_at)


def forward_cached(
    model: QwenForCausalLM,
    tokens: Array,
    positions: Array,
    cache: KVCache,
    write_at: Array,
) -> tuple[Array, KVCache]:
    """Logits ``[B, T, vocab]`` (float32) of ``tokens`` ``[B, T]`` and the cache with them written
    (arguments as :func:`hidden_cached`)."""
    hidden, cache = hidden_cached(model, tokens, positions, cache, write_at)
    return model.logits(hidden), cache
