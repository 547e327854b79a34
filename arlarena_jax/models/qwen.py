"""Dense Qwen2 / Qwen2.5 / Qwen3 decoders in Flax NNX.

Token embedding → N × [RMSNorm → grouped-query attention with RoPE (Qwen3: q/k RMSNorm per head;
Qwen2: q/k/v bias) → residual → RMSNorm → SwiGLU MLP → residual] → RMSNorm → LM head (tied to
the embedding or separate). Module and parameter names follow Hugging Face's, so a checkpoint's
tensor ``model.layers.3.self_attn.q_proj.weight`` is ``model.layers[3].self_attn.q_proj.kernel``
(transposed). Logits are returned in float32 whatever the compute dtype.

Padding: ``attention_mask`` ``[B, S]`` marks real tokens (left-padded prompts, right-padded
responses). Keys that are padding are never attended to; positions default to the count of real
tokens before each one, so a left-padded prompt gets the positions it would have unpadded.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from arlarena_jax.models.config import QwenConfig, rope_type_of

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


def rope_inverse_frequencies(config: QwenConfig) -> Array:
    """inv_freq_j = θ^(−2j/d), divided by ``factor`` for linear rope scaling."""
    d = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (jnp.arange(0, d, 2, dtype=jnp.float32) / d))
    if rope_type_of(config.rope_scaling) == "linear":
        inv_freq = inv_freq / float(config.rope_scaling["factor"])
    return inv_freq


def rope_cos_sin(positions: Array, inv_freq: Array) -> tuple[Array, Array]:
    """cos/sin ``[B, S, head_dim]`` for integer positions ``[B, S]`` (float32)."""
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def apply_rope(x: Array, cos: Array, sin: Array) -> Array:
    """x·cos + rotate_half(x)·sin on ``[B, S, heads, head_dim]`` (the rotate-half layout)."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    cos, sin = cos[:, :, None, :].astype(x.dtype), sin[:, :, None, :].astype(x.dtype)
    return x * cos + rotated * sin


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

    def __call__(self, x: Array, cos: Array, sin: Array, allowed: Array) -> Array:
        b, s, _ = x.shape
        q = self.q_proj(x).reshape(b, s, self.num_heads, self.head_dim)
        k = self.k_proj(x).reshape(b, s, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).reshape(b, s, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = jax.nn.dot_product_attention(q, k, v, mask=allowed[:, None, :, :])
        return self.o_proj(out.reshape(b, s, -1))


class MLP(nnx.Module):
    """SwiGLU: down(silu(gate(x)) · up(x))."""

    def __init__(self, config: QwenConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        def linear(n_in, n_out):
            return nnx.Linear(
                n_in, n_out, use_bias=False, dtype=dtype, param_dtype=param_dtype, rngs=rngs
            )

        self.gate_proj = linear(config.hidden_size, config.intermediate_size)
        self.up_proj = linear(config.hidden_size, config.intermediate_size)
        self.down_proj = linear(config.intermediate_size, config.hidden_size)

    def __call__(self, x: Array) -> Array:
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nnx.Module):
    def __init__(self, config: QwenConfig, *, dtype, param_dtype, rngs: nnx.Rngs):
        eps = config.rms_norm_eps
        kw = {"dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        self.input_layernorm = RMSNorm(config.hidden_size, eps, param_dtype=param_dtype)
        self.self_attn = Attention(config, **kw)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps, param_dtype=param_dtype)
        self.mlp = MLP(config, **kw)

    def __call__(self, x: Array, cos: Array, sin: Array, allowed: Array) -> Array:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, allowed)
        return x + self.mlp(self.post_attention_layernorm(x))


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


def _call_layer(layer: DecoderLayer, x: Array, cos: Array, sin: Array, allowed: Array) -> Array:
    return layer(x, cos, sin, allowed)


class QwenForCausalLM(nnx.Module):
    """A dense Qwen2/Qwen3 causal LM: ``model(input_ids, attention_mask) -> logits`` (float32).

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

    def hidden_states(
        self, input_ids: Array, attention_mask: Array | None = None, positions: Array | None = None
    ) -> Array:
        """Final-norm hidden states ``[B, S, hidden]``."""
        if attention_mask is None:
            attention_mask = jnp.ones(input_ids.shape, jnp.int32)
        real = attention_mask > 0
        if positions is None:
            positions = jnp.maximum(jnp.cumsum(real, axis=-1) - 1, 0)
        s = input_ids.shape[1]
        causal = jnp.tril(jnp.ones((s, s), bool))
        allowed = causal[None] & real[:, None, :]
        cos, sin = rope_cos_sin(positions, rope_inverse_frequencies(self.config))
        x = self.model.embed_tokens(input_ids)
        run = _call_layer
        if self.remat is not None:
            run = nnx.remat(_call_layer, policy=getattr(jax.checkpoint_policies, self.remat))
        for layer in self.model.layers:
            x = run(layer, x, cos, sin, allowed)
        return self.model.norm(x)

    def logits(self, hidden: Array) -> Array:
        """LM head on hidden states, float32 logits."""
        if self.lm_head is None:
            return self.model.embed_tokens.attend(hidden).astype(jnp.float32)
        return self.lm_head(hidden).astype(jnp.float32)

    def __call__(
        self, input_ids: Array, attention_mask: Array | None = None, positions: Array | None = None
    ) -> Array:
        return self.logits(self.hidden_states(input_ids, attention_mask, positions))
