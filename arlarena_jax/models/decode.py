"""The decoder with a key/value cache: prefill a prompt, then extend it one token at a time.

A :class:`KVCache` holds, per layer, keys and values ``[B, kv_heads, L, head_dim]`` for ``B``
sequences (decode slots) of capacity ``L``: the layout the attention matmuls read directly, so a
decode step copies nothing but the new token's keys and values. :func:`forward_cached` runs ``T``
new tokens per row, writes their keys/values at cache indices ``write_at[b] … write_at[b] + T − 1``
and lets the query at index i attend to every cache index j ≤ i (causal over the cache; indices
past a row's length hold stale values and are never attended).

Prefill is ``T`` = the (right-padded) prompt length with ``write_at = 0`` into a cache of the
prompt's length; decoding is ``T = 1`` with ``write_at`` = each row's current length. Logits are
float32, as in :class:`~arlarena_jax.models.qwen.QwenForCausalLM`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from arlarena_jax.models.config import QwenConfig
from arlarena_jax.models.qwen import (
    Attention,
    DecoderLayer,
    QwenForCausalLM,
    attention_kv_major,
    dense,
)

Array = jax.Array


class KVCache(NamedTuple):
    k: tuple[Array, ...]  # per layer [B, kv_heads, L, head_dim]
    v: tuple[Array, ...]

    @property
    def capacity(self) -> int:
        return self.k[0].shape[2]


def empty_cache(config: QwenConfig, batch: int, length: int, dtype=jnp.float32) -> KVCache:
    """A zero cache for ``batch`` rows of ``length`` tokens (bytes: 2·layers·B·L·kv·d·itemsize)."""
    shape = (batch, config.num_key_value_heads, length, config.head_dim)
    layers = range(config.num_hidden_layers)
    return KVCache(
        tuple(jnp.zeros(shape, dtype) for _ in layers),
        tuple(jnp.zeros(shape, dtype) for _ in layers),
    )


def _write_rows(cache: Array, new: Array, write_at: Array) -> Array:
    """cache[b, :, write_at[b] : write_at[b] + T] = new[b] for every row b.

    ``cache`` ``[B, kv_heads, L, d]``; ``new`` ``[B, T, kv_heads, d]`` (the projection layout).
    """

    def one(c, n, i):
        return jax.lax.dynamic_update_slice(c, n.swapaxes(0, 1).astype(c.dtype), (0, i, 0))

    return jax.vmap(one)(cache, new, write_at)


def _attend_cached(
    attn: Attention,
    x: Array,
    cos: Array,
    sin: Array,
    k_cache: Array,
    v_cache: Array,
    write_at: Array,
    allowed: Array,
) -> tuple[Array, Array, Array]:
    b, t, _ = x.shape
    q, k, v = attn.qkv(x, cos, sin)
    k_cache = _write_rows(k_cache, k, write_at)
    v_cache = _write_rows(v_cache, v, write_at)
    out = attention_kv_major(q, k_cache.astype(q.dtype), v_cache.astype(q.dtype), allowed)
    return dense(attn.o_proj, out.reshape(b, t, -1)), k_cache, v_cache


def _layer_cached(layer: DecoderLayer, x, cos, sin, k_cache, v_cache, write_at, allowed):
    h, k_cache, v_cache = _attend_cached(
        layer.self_attn, layer.input_layernorm(x), cos, sin, k_cache, v_cache, write_at, allowed
    )
    x = x + h
    return x + layer.mlp(layer.post_attention_layernorm(x)), k_cache, v_cache


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
    t = tokens.shape[1]
    query_index = write_at[:, None] + jnp.arange(t)[None, :]  # [B, T]
    key_index = jnp.arange(cache.capacity)
    allowed = key_index[None, None, :] <= query_index[:, :, None]  # [B, T, L]
    cos, sin = model.rope(positions)
    x = model.model.embed_tokens(tokens)
    ks, vs = [], []
    for layer, k_cache, v_cache in zip(model.model.layers, cache.k, cache.v, strict=True):
        x, k_cache, v_cache = _layer_cached(layer, x, cos, sin, k_cache, v_cache, write_at, allowed)
        ks.append(k_cache)
        vs.append(v_cache)
    return model.model.norm(x), KVCache(tuple(ks), tuple(vs))


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
