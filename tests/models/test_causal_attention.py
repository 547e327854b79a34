"""Blocked causal attention with its own VJP (``models/causal_attention.py``) against the plain
form (``models/qwen.attention``: two batched matmuls and a softmax, differentiated by JAX).

The two compute the same function on every query that has a key to attend; a left-padding
query (nothing allowed) is garbage in both and never read, so comparisons cover real query
rows, and the cotangent on padding rows is zero, as the model's losses make it. Tolerances:
float32 sums of at most a few hundred terms of size ~1, 2e-5 absolute on outputs and 1e-4 on
gradients; bfloat16 keeps 8 bits of mantissa, so 3e-2 absolute plus 2e-2 relative (2.5 ulps).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arlarena_jax.models.causal_attention import causal_attention, query_block
from arlarena_jax.models.qwen import attention, padded_causal_mask


def _inputs(seed, b, s, heads, kv_heads, d, left_pad, right_pad, dtype=jnp.float32):
    keys = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(keys[0], (b, s, heads, d), dtype)
    k = jax.random.normal(keys[1], (b, s, kv_heads, d), dtype)
    v = jax.random.normal(keys[2], (b, s, kv_heads, d), dtype)
    real = np.ones((b, s), bool)
    for row in range(b):
        real[row, : left_pad[row]] = False
        if right_pad[row]:
            real[row, s - right_pad[row] :] = False
    real = jnp.asarray(real)
    # A real query attends at least itself; a left-padding query attends nothing.
    has_key = jnp.cumsum(real, axis=1) > 0
    cotangent = jax.random.normal(keys[3], (b, s, heads, d), jnp.float32) * has_key[..., None, None]
    return q, k, v, padded_causal_mask(real), has_key, cotangent


def _value_and_grads(fn, q, k, v, allowed, cotangent):
    def loss(q, k, v):
        return jnp.sum(fn(q, k, v, allowed).astype(jnp.float32) * cotangent)

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(q, k, v)


def _assert_same(q, k, v, allowed, has_key, cotangent, *, block, atol_out, atol_grad, rtol=0.0):
    got = jax.jit(causal_attention, static_argnames="block")(q, k, v, allowed, block=block)
    want = jax.jit(attention)(q, k, v, allowed)
    assert got.shape == want.shape and got.dtype == want.dtype
    rows = np.asarray(has_key)
    np.testing.assert_allclose(
        np.asarray(got, np.float32)[rows],
        np.asarray(want, np.float32)[rows],
        atol=atol_out,
        rtol=rtol,
    )
    blocked = _value_and_grads(
        lambda *a: causal_attention(*a, block=block), q, k, v, allowed, cotangent
    )
    plain = _value_and_grads(attention, q, k, v, allowed, cotangent)
    for g, w in zip(jax.tree.leaves(blocked), jax.tree.leaves(plain), strict=True):
        np.testing.assert_allclose(
            np.asarray(g, np.float32), np.asarray(w, np.float32), atol=atol_grad, rtol=rtol
        )


@pytest.mark.parametrize(
    ("s", "block", "heads", "kv_heads"),
    [(37, 16, 4, 2), (64, 64, 2, 2), (20, 64, 4, 1), (48, 7, 8, 2), (9, 1, 2, 1)],
)
def test_blocked_attention_equals_plain_attention_and_its_gradient(s, block, heads, kv_heads):
    """Blocks that divide S, that do not, one block (≥ S), and one query per block; GQA group
    sizes 1, 2, 4; left- and right-padded rows."""
    inputs = _inputs(0, 3, s, heads, kv_heads, 8, left_pad=[0, 5, 2], right_pad=[0, 3, 6])
    _assert_same(*inputs, block=block, atol_out=2e-5, atol_grad=1e-4)


@settings(max_examples=12, deadline=None)
@given(
    s=st.integers(1, 32),
    block=st.integers(4, 40),
    group=st.sampled_from([1, 2, 3]),
    pads=st.lists(st.tuples(st.integers(0, 10), st.integers(0, 10)), min_size=2, max_size=2),
    seed=st.integers(0, 2**16),
)
def test_blocked_attention_property(s, block, group, pads, seed):
    """Any length, block, group size and padding (fully padded rows included)."""
    left = [min(a, s) for a, _ in pads]
    right = [min(b, s - a) for a, (_, b) in zip(left, pads, strict=True)]
    inputs = _inputs(seed, 2, s, 2 * group, 2, 4, left_pad=left, right_pad=right)
    _assert_same(*inputs, block=block, atol_out=2e-5, atol_grad=1e-4)


def test_bfloat16_inputs_keep_their_dtype():
    inputs = _inputs(1, 2, 40, 4, 2, 16, [0, 4], [3, 0], dtype=jnp.bfloat16)
    _assert_same(*inputs, block=16, atol_out=3e-2, atol_grad=3e-2, rtol=2e-2)
    grads = jax.grad(lambda q: jnp.sum(causal_attention(q, *inputs[1:4]).astype(jnp.float32)))(
        inputs[0]
    )
    assert grads.dtype == jnp.bfloat16


def test_query_block_policy():
    """64 up to 512 tokens, then at most 8 blocks."""
    assert [query_block(n) for n in (1, 144, 512, 513, 4096)] == [64, 64, 64, 65, 512]


def test_bad_block_is_a_clear_error():
    inputs = _inputs(0, 1, 8, 2, 1, 4, [0], [0])
    with pytest.raises(ValueError, match="query block must be >= 1, got 0"):
        causal_attention(*inputs[:4], block=0)
