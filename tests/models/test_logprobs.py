"""Chunked token log-probs and entropies equal a naive full-softmax computation.

Values: 1e-5 absolute (float32). Parameter gradients: 5e-5 absolute, since each is a float32 sum
over every token through four layers, whose rounding order differs between the two paths.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from arlarena_jax.models import QwenForCausalLM, preset
from arlarena_jax.models.logprobs import token_log_probs

IDS = jnp.array([[0, 0, 3, 9, 27, 4, 8, 15, 16], [5, 6, 7, 8, 9, 10, 11, 12, 13]])
MASK = jnp.array([[0, 0, 1, 1, 1, 1, 1, 1, 1], [1] * 9])


def naive(model, ids, mask, temperature):
    z = model(ids, mask)[:, :-1] / temperature
    logp = jax.nn.log_softmax(z, axis=-1)
    picked = jnp.take_along_axis(logp, ids[:, 1:, None], axis=-1)[..., 0]
    entropy = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    zero = jnp.zeros((ids.shape[0], 1))
    return jnp.concatenate([zero, picked], 1), jnp.concatenate([zero, entropy], 1)


@pytest.fixture(scope="module")
def model():
    return QwenForCausalLM(preset("tiny", vocab_size=61), rngs=nnx.Rngs(0))


@pytest.mark.parametrize(("chunk", "temperature"), [(1, 1.0), (3, 1.0), (8, 0.7), (64, 1.3)])
def test_values_match_full_softmax(model, chunk, temperature):
    got = token_log_probs(model, IDS, MASK, chunk_size=chunk, temperature=temperature)
    lp, ent = naive(model, IDS, MASK, temperature)
    np.testing.assert_allclose(np.asarray(got.log_probs), np.asarray(lp), atol=1e-5)
    np.testing.assert_allclose(np.asarray(got.entropy), np.asarray(ent), atol=1e-5)


def test_gradients_match_full_softmax(model):
    graphdef, params = nnx.split(model, nnx.Param)

    def loss(params, fn):
        stats = fn(nnx.merge(graphdef, params))
        return jnp.sum(stats[0] * MASK) + 0.1 * jnp.sum(stats[1] * MASK)

    chunked = jax.jit(jax.grad(loss, argnums=0), static_argnums=1)(
        params, lambda m: token_log_probs(m, IDS, MASK, chunk_size=3)
    )
    full = jax.grad(loss)(params, lambda m: naive(m, IDS, MASK, 1.0))
    for a, b in zip(jax.tree.leaves(chunked), jax.tree.leaves(full), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=5e-5)


def test_rejects_non_positive_temperature(model):
    with pytest.raises(ValueError, match="temperature must be > 0"):
        token_log_probs(model, IDS, MASK, temperature=0.0)


@pytest.mark.parametrize("policy", ["nothing_saveable", "dots_with_no_batch_dims_saveable"])
def test_remat_policies_give_the_same_gradients(model, policy):
    config = model.config
    plain = QwenForCausalLM(config, rngs=nnx.Rngs(0))
    remat = QwenForCausalLM(config, rngs=nnx.Rngs(0), remat=policy)

    def grads(m):
        graphdef, params = nnx.split(m, nnx.Param)

        def loss(p):
            stats = token_log_probs(nnx.merge(graphdef, p), IDS, MASK, chunk_size=4)
            return jnp.sum(stats.log_probs * MASK)

        return jax.tree.leaves(jax.jit(jax.grad(loss))(params))

    # Recomputation reorders float32 arithmetic in gradients of magnitude up to ~5:
    # atol 1e-5 (observed at most 6e-6); a real difference would be of the values' scale.
    for a, b in zip(grads(plain), grads(remat), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)


def test_unknown_remat_policy(model):
    with pytest.raises(ValueError, match="unknown remat policy 'everything'"):
        QwenForCausalLM(model.config, rngs=nnx.Rngs(0), remat="everything")
