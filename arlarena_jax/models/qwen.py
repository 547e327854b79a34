"""Dense Qwen2 / Qwen2.5 / Qwen3 / Llama decoders in Flax NNX: one decoder, the differences
declared by the config (:mod:`arlarena_jax.models.config`), whose ``qkv_bias`` / ``o_bias`` /
``qk_norm`` / ``mlp_bias`` come from its family (:mod:`arlarena_jax.models.families`).

Token embedding → N × [RMSNorm → grouped-query attention with RoPE (Qwen3: q/k RMSNorm per head;
Qwen2: q/k/v bias; Qwen3 and Llama: ``attention_bias`` on q/k/v/o) → residual → RMSNorm → SwiGLU
MLP (Llama: ``mlp_bias``) → residual] → RMSNorm → LM head (tied to the embedding or separate).
Module and parameter names follow Hugging Face's, so a checkpoint's tensor
``model.layers.3.self_attn.q_proj.weight`` is ``model.layers[3].self_attn.q_proj.kernel``
(transposed). Logits are returned in float32 whatever the compute dtype.

Padding: ``attention_mask`` ``[B, S]`` marks real tokens (left-padded prompts, right-padded
responses). Keys that are padding are never attended to; positions default to the count of real
tokens before each one, so a left-padded prompt gets the positions it would have unpadded.

KV cache: the same layers serve cached prefill and decoding
(:meth:`QwenForCausalLM.hidden_states_cached`). A :class:`KVCache` holds per layer keys and values
``[B, kv_heads, L, head_dim]`` (the layout the attention matmuls read); a call writes its ``T`` new
tokens' keys/values at cache indices ``write_at[b] … write_at[b] + T − 1`` and the query at index
i attends to every index j ≤ i.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from arlarena_jax.models.causal_attention import causal_attention
from arlarena_jax.models.config import QwenConfig
from arlarena_jax.models.lora import lora_delta
from arlarena_jax.models.rope import rotary_embedding
from arlarena_jax.models.sharding import table_for_lookup

Array = jax.Array


class RMSNorm(nnx.Module):
    """y = w · (x / √(mean(x²) + ε)), normalised in float32 then cast back before the weight."""

    def __init__(self, dim: int, eps: float, *, param_dtype=jnp.float32):
        self.weight = nnx.Param(jnp.ones((dim,), param_dtype))
        self.eps = eps

    def __call__(self, x: Array) -> Array:
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + self.eps)
        return self.weight.get_value().astype(x.dtype) * normed.astype(x.dtype)


def apply_rope(x: Array, cos: Array, sin: Array) -> Array:
    """x·cos + rotate_half(x)·sin on ``[B, S, heads, head_dim]`` (the rotate-half layout)."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    cos, sin = cos[:, :, None, :].astype(x.dtype), sin[:, :, None, :].astype(x.dtype)
    return x * cos + rotated * sin


def dense(layer: nnx.Linear, x: Array) -> Array:
    """``layer(x)`` with ``x`` flattened to 2-D ``[tokens, in]`` and reshaped back.

    XLA:CPU sends a 2-D matmul to its GEMM library; the 3-D form's kernel gradient (two
    contracting dimensions) takes a generic path, measured 3× slower on the MLP backward. On GPU
    and TPU the reshape is free. A linear with LoRA adapters adds its low-rank update
    (:func:`arlarena_jax.models.lora.lora_delta`).
    """
    flat = x.reshape(-1, x.shape[-1])
    out = layer(flat)
    delta = lora_delta(layer, flat)  # LoRA adapters, when the linear has them
    if delta is not None:
        out = out + delta
    return out.reshape(*x.shape[:-1], -1)


def embed_tokens(embed: nnx.Embed, tokens: Array) -> Array:
    """``embed(tokens)``: the table's rows at ``tokens`` (x[b, s] = E[tokens[b, s]]), in the
    module's dtype, read from the table as :func:`~arlarena_jax.models.sharding.table_for_lookup`
    lays it out."""
    (table,) = embed.promote_dtype((embed.embedding[...],), dtype=embed.dtype, inexact=False)
    return jnp.take(table_for_lookup(table), tokens, axis=0)


def attention(q: Array, k: Array, v: Array, allowed: Array) -> Array:
    """softmax(q·kᵀ/√d, masked)·v with grouped-query heads, as two batched matmuls.

    q ``[B, S, heads, d]``; k, v ``[B, T, kv_heads, d]``; ``allowed`` ``[B, S, T]``. See
    :func:`attention_kv_major` (this transposes k and v into its layout). The model's training
    path uses the blocked :func:`causal_attention` instead; this plain form is its reference.
    """
    return attention_kv_major(q, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3), allowed)


def attention_kv_major(q: Array, k: Array, v: Array, allowed: Array) -> Array:
    """Grouped-query attention with keys and values in the KV-cache layout ``[B, kv_heads, T, d]``.

    q ``[B, S, heads, d]``; ``allowed`` ``[B, S, T]``; output ``[B, S, heads, d]``. Query head h
    reads KV head h // (heads / kv_heads). Scores and softmax in float32; a disallowed score is
    the most negative float32, so a row with nothing allowed (a padding query) stays finite.
    """
    b, s, heads, d = q.shape
    kv, t = k.shape[1], k.shape[2]
    g = heads // kv
    qg = q.reshape(b, s, kv, g, d).transpose(0, 2, 3, 1, 4).reshape(b, kv, g * s, d)
    scores = jax.lax.dot_general(qg, k, (((3,), (3,)), ((0, 1), (0, 1))))  # [B, kv, g·S, T]
    scores = scores.reshape(b, kv, g, s, t).astype(jnp.float32) * (d**-0.5)
    scores = jnp.where(allowed[:, None, None], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype).reshape(b, kv, g * s, t)
    out = jax.lax.dot_general(probs, v, (((3,), (2,)), ((0, 1), (0, 1))))  # [B, kv, g·S, d]
    return out.reshape(b, kv, g, s, d).transpose(0, 3, 1, 2, 4).reshape(b, s, heads, d)


def attention_cached(q: Array, k: Array, v: Array, allowed: Array) -> Array:
    """:func:`attention_kv_major` for a few queries per row (decoding): scores computed as k·qᵀ.

    Same shapes and formula, softmax(q·kᵀ/√d, masked)·v. The scores are computed with the cache
    ``k`` ``[B, kv, T, d]`` as the left operand (its natural row-major layout, one pass over it)
    and transposed afterwards ``[B, kv, T, g·S] → [B, kv, g·S, T]`` (small at S = 1). The
    optimization barrier keeps XLA from folding the transpose back into q·kᵀ, which on CPU
    repacks the whole cache per call (measured 2.5-3.6× slower for the score matmul).
    """
    b, s, heads, d = q.shape
    kv, t = k.shape[1], k.shape[2]
    g = heads // kv
    qg = q.reshape(b, s, kv, g, d).transpose(0, 2, 3, 1, 4).reshape(b, kv, g * s, d)
    scores = jax.lax.dot_general(k, qg, (((3,), (3,)), ((0, 1), (0, 1))))  # [B, kv, T, g·S]
    scores = jnp.swapaxes(jax.lax.optimization_barrier(scores), 2, 3)
    scores = scores.reshape(b, kv, g, s, t).astype(jnp.float32) * (d**-0.5)
    scores = jnp.where(allowed[:, None, None], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype).reshape(b, kv, g * s, t)
    out = jax.lax.dot_general(probs, v, (((3,), (2,)), ((0, 1), (0, 1))))  # [B, kv, g·S, d]
    return out.reshape(b, kv, g, s, d).transpose(0, 3, 1, 2, 4).reshape(b, s, heads, d)


def write_rows(cache: Array, new: Array, write_at: Array) -> Array:
    """cache[b, :, write_at[b] : write_at[b] + T] = new[b] for every row b.

    ``cache`` ``[B, kv_heads, L, d]``; ``new`` ``[B, T, kv_heads, d]`` (the projection layout).
    """

    def one(c, n, i):
        return jax.lax.dynamic_update_slice(c, n.swapaxes(0, 1).astype(c.dtype), (0, i, 0))

    return jax.vmap(one)(cache, new, write_at)


class LayerKV(NamedTuple):
    """One layer's cached keys and values, each ``[B, kv_heads, L, head_dim]``, and the cache
    index ``write_at`` ``[B]`` of each row's first new token in this call."""

    k: Array
    v: Array
    write_at: Array

    def write(self, k: Array, v: Array) -> LayerKV:
        """The cache with new keys/values ``[B, T, kv_heads, d]`` at ``write_at[b] …`` (row b)."""
        at = self.write_at
        return LayerKV(write_rows(self.k, k, at), write_rows(self.v, v, at), at)


class KVCache(NamedTuple):
    """Every layer's cache: ``k[i]``, ``v[i]`` ``[B, kv_heads, L, head_dim]`` for layer i."""

    k: tuple[Array, ...]
    v: tuple[Array, ...]

    @property
    def capacity(self) -> int:
        return self.k[0].shape[2]

    def layers(self, write_at: Array) -> tuple[LayerKV, ...]:
        """Per-layer views that write at ``write_at`` ``[B]``."""
        return tuple(LayerKV(k, v, write_at) for k, v in zip(self.k, self.v, strict=True))

    @staticmethod
    def from_layers(layers) -> KVCache:
        return KVCache(tuple(kv.k for kv in layers), tuple(kv.v for kv in layers))


def padded_causal_mask(real: Array) -> Array:
    """allowed[b, i, j] = j ≤ i ∧ real[b, j] for ``real`` ``[B, S]`` (bool): ``[B, S, S]``."""
    s = real.shape[1]
    causal = jnp.tril(jnp.ones((s, s), bool))
    return causal[None] & real[:, None, :]


def cache_mask(write_at: Array, length: int, capacity: int) -> Array:
    """allowed[b, i, j] = j ≤ write_at[b] + i: ``[B, length, capacity]``, causal over the cache
    (indices past a row's length hold stale values and are never attended)."""
    query_index = write_at[:, None] + jnp.arange(length)[None, :]  # [B, T]
    key_index = jnp.arange(capacity)
    return key_index[None, None, :] <= query_index[:, :, None]


class Attention(nnx.Module):
    def __init__(self, config: QwenConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        c = config
        self.num_heads, self.num_kv_heads, self.head_dim = (
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
        )

        def linear(n_in, n_out, bias):
            return nnx.Linear(
                n_in, n_out, use_bias=bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs
            )

        self.q_proj = linear(c.hidden_size, c.num_attention_heads * c.head_dim, c.qkv_bias)
        self.k_proj = linear(c.hidden_size, c.num_key_value_heads * c.head_dim, c.qkv_bias)
        self.v_proj = linear(c.hidden_size, c.num_key_value_heads * c.head_dim, c.qkv_bias)
        self.o_proj = linear(c.num_attention_heads * c.head_dim, c.hidden_size, c.o_bias)
        if c.qk_norm:
            self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps, param_dtype=param_dtype)
            self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps, param_dtype=param_dtype)
        else:
            self.q_norm = self.k_norm = None

    def qkv(self, x: Array, cos: Array, sin: Array) -> tuple[Array, Array, Array]:
        """Queries ``[B, S, heads, d]``, keys and values ``[B, S, kv_heads, d]``, rotated."""
        b, s, _ = x.shape
        q = dense(self.q_proj, x).reshape(b, s, self.num_heads, self.head_dim)
        k = dense(self.k_proj, x).reshape(b, s, self.num_kv_heads, self.head_dim)
        v = dense(self.v_proj, x).reshape(b, s, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def __call__(
        self, x: Array, cos: Array, sin: Array, allowed: Array, kv: LayerKV | None = None
    ) -> tuple[Array, LayerKV | None]:
        """o_proj(attention(q, k, v)) of ``x`` ``[B, S, hidden]`` and the updated cache.

        Without ``kv`` the keys are ``x``'s own (``allowed`` ``[B, S, S]``, causal; returns
        ``None`` for the cache) and :func:`causal_attention` computes it in query blocks.
        With ``kv``, ``x``'s keys/values are written at ``kv.write_at[b] …`` and the queries
        attend over the whole cache (``allowed`` ``[B, S, L]``); one query per row (decoding)
        takes :func:`attention_cached`.
        """
        b, s, _ = x.shape
        q, k, v = self.qkv(x, cos, sin)
        if kv is None:
            out = causal_attention(q, k, v, allowed)
        else:
            kv = kv.write(k, v)
            attend = attention_cached if s == 1 else attention_kv_major
            out = attend(q, kv.k.astype(q.dtype), kv.v.astype(q.dtype), allowed)
        return dense(self.o_proj, out.reshape(b, s, -1)), kv


class MLP(nnx.Module):
    """SwiGLU: down(silu(gate(x)) · up(x)) (biases where the config has ``mlp_bias``)."""

    def __init__(self, config: QwenConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        def linear(n_in, n_out):
            return nnx.Linear(
                n_in,
                n_out,
                use_bias=config.mlp_bias,
                dtype=dtype,
                param_dtype=param_dtype,
                rngs=rngs,
            )

        self.gate_proj = linear(config.hidden_size, config.intermediate_size)
        self.up_proj = linear(config.hidden_size, config.intermediate_size)
        self.down_proj = linear(config.intermediate_size, config.hidden_size)

    def __call__(self, x: Array) -> Array:
        hidden = jax.nn.silu(dense(self.gate_proj, x)) * dense(self.up_proj, x)
        return dense(self.down_proj, hidden)


class DecoderLayer(nnx.Module):
    def __init__(self, config: QwenConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        eps = config.rms_norm_eps
        kw = {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        self.input_layernorm = RMSNorm(config.hidden_size, eps, param_dtype=param_dtype)
        self.self_attn = Attention(config, **kw)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps, param_dtype=param_dtype)
        self.mlp = MLP(config, **kw)

    def __call__(
        self, x: Array, cos: Array, sin: Array, allowed: Array, kv: LayerKV | None = None
    ) -> tuple[Array, LayerKV | None]:
        """h = x + attn(norm(x)); h + mlp(norm(h)), and the layer's updated cache (see
        :meth:`Attention.__call__` for ``kv``)."""
        h, kv = self.self_attn(self.input_layernorm(x), cos, sin, allowed, kv)
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x)), kv


class QwenBody(nnx.Module):
    """The decoder stack (Hugging Face's ``model.``)."""

    def __init__(self, config: QwenConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        self.embed_tokens = nnx.Embed(
            config.vocab_size,
            config.hidden_size,
            dtype=dtype,
            param_dtype=param_dtype,
            embedding_init=nnx.initializers.normal(0.02),
            rngs=rngs,
        )
        kw = {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        self.layers = nnx.List(
            [DecoderLayer(config, **kw) for _ in range(config.num_hidden_layers)]
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, param_dtype=param_dtype)


def _call_layer(layer: DecoderLayer, x, cos, sin, allowed, kv):
    return layer(x, cos, sin, allowed, kv)


def _remat_layer(policy: Callable) -> Callable:
    """``_call_layer`` without a cache under ``jax.checkpoint(policy)``, over the layer's split
    state. (``nnx.remat`` updates the layer's Variables inside its own trace, which fails with a
    TraceContextError when the model was merged from closed-over parameters inside a
    ``lax.cond`` / ``lax.map`` / ``eval_shape``, as the trainer's log-prob pass does.)"""

    def run(layer: DecoderLayer, x, cos, sin, allowed, kv):
        graphdef, state = nnx.split(layer)

        def pure(state, x, cos, sin, allowed):
            return nnx.merge(graphdef, state)(x, cos, sin, allowed, None)

        return jax.checkpoint(pure, policy=policy)(state, x, cos, sin, allowed)

    return run


class QwenForCausalLM(nnx.Module):
    """A dense decoder causal LM: ``model(input_ids, attention_mask) -> logits`` (float32).

    ``remat`` names a ``jax.checkpoint_policies`` policy applied per decoder layer (e.g.
    ``"nothing_saveable"``: keep only layer inputs, recompute the rest in the backward pass).
    """

    def __init__(
        self,
        config: QwenConfig,
        *,
        rngs: nnx.Rngs,
        dtype=jnp.float32,
        param_dtype=jnp.float32,
        remat: str | None = None,
    ):
        if remat is not None and not hasattr(jax.checkpoint_policies, remat):
            raise ValueError(
                f"unknown remat policy {remat!r}; use a jax.checkpoint_policies name such as "
                "'nothing_saveable' or 'dots_with_no_batch_dims_saveable'"
            )
        self.config = config
        self.remat = remat
        self.model = QwenBody(config, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        if config.tie_word_embeddings:
            self.lm_head = None
        else:
            self.lm_head = nnx.Linear(
                config.hidden_size,
                config.vocab_size,
                use_bias=False,
                dtype=dtype,
                param_dtype=param_dtype,
                rngs=rngs,
            )

    def rope(self, positions: Array) -> tuple[Array, Array]:
        """Rotary cos/sin ``[B, S, head_dim]`` (float32) for integer positions ``[B, S]``.

        The config's rope scaling applied (see :mod:`arlarena_jax.models.rope`), yarn's attention
        factor included.
        """
        return rotary_embedding(self.config, positions)

    def hidden_states(
        self, input_ids: Array, attention_mask: Array | None = None, positions: Array | None = None
    ) -> Array:
        """Final-norm hidden states ``[B, S, hidden]`` (no cache; ``remat`` applies)."""
        if attention_mask is None:
            attention_mask = jnp.ones(input_ids.shape, jnp.int32)
        real = attention_mask > 0
        if positions is None:
            positions = jnp.maximum(jnp.cumsum(real, axis=-1) - 1, 0)
        hidden, _ = self.decoder(input_ids, positions, padded_causal_mask(real))
        return hidden

    def hidden_states_cached(
        self, tokens: Array, positions: Array, cache: KVCache, write_at: Array
    ) -> tuple[Array, KVCache]:
        """Final-norm hidden states ``[B, T, hidden]`` of ``tokens`` ``[B, T]`` and the cache with
        their keys/values written at ``write_at[b] … write_at[b] + T − 1`` (``write_at`` ``[B]``).

        ``positions`` ``[B, T]`` are the rotary positions; the query at cache index i attends to
        every index j ≤ i (:func:`cache_mask`).
        """
        allowed = cache_mask(write_at, tokens.shape[1], cache.capacity)
        return self.decoder(tokens, positions, allowed, cache, write_at)

    def decoder(
        self,
        tokens: Array,
        positions: Array,
        allowed: Array,
        cache: KVCache | None = None,
        write_at: Array | None = None,
    ) -> tuple[Array, KVCache | None]:
        """Embedding → every :class:`DecoderLayer` → final norm, with an optional cache (the
        layers' ``kv``); ``remat`` wraps each layer only without a cache (training)."""
        cos, sin = self.rope(positions)
        x = embed_tokens(self.model.embed_tokens, tokens)
        run = _call_layer
        if self.remat is not None and cache is None:
            run = _remat_layer(getattr(jax.checkpoint_policies, self.remat))
        layer_kvs = (None,) * len(self.model.layers) if cache is None else cache.layers(write_at)
        new_kvs = []
        for layer, kv in zip(self.model.layers, layer_kvs, strict=True):
            x, kv = run(layer, x, cos, sin, allowed, kv)
            new_kvs.append(kv)
        new_cache = None if cache is None else KVCache.from_layers(new_kvs)
        return self.model.norm(x), new_cache

    def logits(self, hidden: Array) -> Array:
        """LM head on hidden states, float32 logits (on ``[tokens, hidden]``, see :func:`dense`)."""
        flat = hidden.reshape(-1, hidden.shape[-1])
        head = self.model.embed_tokens.attend if self.lm_head is None else self.lm_head
        out = head(flat)
        return out.reshape(*hidden.shape[:-1], -1).astype(jnp.float32)

    def __call__(
        self, input_ids: Array, attention_mask: Array | None = None, positions: Array | None = None
    ) -> Array:
        return self.logits(self.hidden_states(input_ids, attention_mask, positions))


DecoderForCausalLM = QwenForCausalLM  # the same class under a name that fits every model type
