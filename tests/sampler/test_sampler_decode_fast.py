"""The decode step's fast paths against the general ones they replace.

* Decode windows: ``generate(window=W)`` attends over the cache's first W indices only; it must
  emit the same tokens as the whole-cache ``generate`` (log-probs within 1e-6: the same float32
  sums over fewer masked zeros) and leave the same cache, and the driver must return the same
  samples with windows on and off.
* ``attention_cached`` (scores as k·qᵀ) against ``attention_kv_major`` (q·kᵀ): same formula,
  1e-6 absolute.
* ``first_argmax`` against ``jnp.argmax`` (ties, NaN), ``categorical`` against
  ``jax.random.categorical`` (identical draws for the same keys), ``greedy_sample``'s log-prob
  against a float64 log-softmax (1e-6).

Models are tiny (vocabulary 256, width 64, 2 layers).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding

from arlarena_jax.models.config import QwenConfig
from arlarena_jax.models.qwen import (
    QwenForCausalLM,
    attention_cached,
    attention_kv_major,
    cache_mask,
)
from arlarena_jax.models.sharding import make_mesh
from arlarena_jax.sampler import GREEDY, Engine, EngineConfig, Request, SamplingParams, generate
from arlarena_jax.sampler.engine import KV_CACHE_SPEC
from arlarena_jax.sampler.sampling import categorical, first_argmax, greedy_sample

SAMPLED = SamplingParams(temperature=1.0)
PROMPTS = [[5, 17, 3], list(range(40, 53)), [200, 1, 77, 31, 4, 4, 90], list(range(100, 131))]


@pytest.fixture(scope="module")
def model() -> QwenForCausalLM:
    config = QwenConfig("qwen3", 256, 64, 128, 2, 4, 2, 16, max_position_embeddings=512)
    return QwenForCausalLM(config, rngs=nnx.Rngs(0))


def engine(model, **overrides) -> Engine:
    config = dict(
        max_concurrent_decodes=4,
        max_prefill_length=32,
        max_new_tokens=96,
        steps_per_call=4,
        min_prefill_bucket=8,
        min_decode_window=16,
    )
    config.update(overrides)
    return Engine(model, EngineConfig(**config), sampling=SAMPLED)


def filled_state(eng: Engine):
    """Every prompt of PROMPTS in its slot (first tokens sampled), budgets 96."""
    params, state = eng.load_params(), eng.init_decode_state()
    keys = jax.random.split(jax.random.key(7), len(PROMPTS))
    for slot, prompt in enumerate(PROMPTS):
        tokens = np.zeros(eng.bucket_for(len(prompt)), np.int32)
        tokens[: len(prompt)] = prompt
        prefix = eng.prefill(params, tokens, len(prompt))
        state = eng.insert_group(prefix, state, [slot], keys[slot : slot + 1])
    return params, state


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_windowed_generate_equals_whole_cache_generate(model, sampling):
    eng = engine(model)
    params, state = filled_state(eng)
    _, reference = filled_state(eng)
    lengths = np.array([len(p) for p in PROMPTS])
    windows = set()
    for call in range(10):
        window = eng.decode_window(int(lengths.max()) + call * eng.config.steps_per_call)
        windows.add(window)
        state, got = eng.generate(params, state, sampling=sampling, window=window)
        reference, want = eng.generate(params, reference, sampling=sampling)
        np.testing.assert_array_equal(got.tokens, want.tokens)
        np.testing.assert_array_equal(got.valid, want.valid)
        np.testing.assert_allclose(got.log_probs, want.log_probs, atol=1e-6)
    assert windows == {64, 128}  # the longest prompt (31) + 4 steps, growing
    for name in ("lengths", "pending", "generated", "done"):
        np.testing.assert_array_equal(getattr(state, name), getattr(reference, name))
    used = int(np.asarray(state.lengths).max())
    for a, b in zip(jax.tree.leaves(state.cache), jax.tree.leaves(reference.cache), strict=True):
        np.testing.assert_allclose(a[:, :, :used], b[:, :, :used], atol=1e-6)


def test_decode_window_buckets(model):
    eng = engine(model)  # cache 128, 4 steps per call, min window 16
    assert [eng.decode_window(n) for n in (0, 3, 12, 13, 60, 61, 124, 127)] == [
        16,
        16,
        16,
        32,
        64,
        128,
        128,
        128,
    ]
    assert engine(model, min_decode_window=0).decode_window(3) == 128  # off
    assert engine(model, min_decode_window=1000).decode_window(3) == 128  # capped


def test_driver_samples_do_not_depend_on_windows(model):
    requests = [Request(p, n=2, max_new_tokens=40 + 7 * i) for i, p in enumerate(PROMPTS)]
    windowed, whole = engine(model), engine(model, min_decode_window=0)
    got = generate(windowed, requests, sampling=SAMPLED, seed=3)
    want = generate(whole, requests, sampling=SAMPLED, seed=3)
    for a, b in zip(got, want, strict=True):
        assert [c.token_ids for c in a] == [c.token_ids for c in b]
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(x.log_probs, y.log_probs, atol=1e-6)
    assert windowed.traces["generate"] > 1 and whole.traces["generate"] == 1


def test_window_errors(model):
    with pytest.raises(ValueError, match=r"^engine min_decode_window must be an int >= 0"):
        engine(model, min_decode_window=-1)
    with pytest.raises(ValueError, match=r"^engine min_decode_window must be an int >= 0"):
        engine(model, min_decode_window=1.5)
    eng = engine(model)
    params, state = filled_state(eng)
    with pytest.raises(ValueError, match=r"generate window 129 outside 1\.\.cache_length 128"):
        eng.generate(params, state, window=129)


@pytest.mark.parametrize(("g", "length"), [(1, 7), (2, 33), (4, 128)])
def test_attention_cached_equals_attention_kv_major(g, length):
    b, kv, d = 3, 2, 16
    rng = np.random.default_rng(g)
    q = jnp.asarray(rng.normal(size=(b, 1, kv * g, d)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(b, kv, length, d)), jnp.float32) for _ in range(2))
    allowed = cache_mask(jnp.asarray([0, length // 2, length - 1]), 1, length)
    got = jax.jit(attention_cached)(q, k, v, allowed)
    want = jax.jit(attention_kv_major)(q, k, v, allowed)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_first_argmax_is_argmax():
    rng = np.random.default_rng(0)
    z = rng.integers(-3, 3, size=(64, 50)).astype(np.float32)  # many ties
    z[5, 7] = z[9, 0] = z[9, 30] = np.nan  # NaN wins, first NaN first
    z[11] = -np.inf
    index, top = jax.jit(first_argmax)(jnp.asarray(z))
    np.testing.assert_array_equal(index, np.asarray(jnp.argmax(jnp.asarray(z), axis=-1)))
    np.testing.assert_array_equal(top, np.max(z, axis=-1))


def test_categorical_equals_jax_random_categorical():
    rng = np.random.default_rng(1)
    scores = jnp.asarray(rng.normal(size=(256, 40)) * 3, jnp.float32)
    scores = scores.at[:, 5].set(-jnp.inf)  # filtered candidates are never drawn
    keys = jax.random.split(jax.random.key(3), 256)
    got = jax.jit(categorical)(keys, scores)
    want = jax.jit(jax.vmap(jax.random.categorical))(keys, scores)
    np.testing.assert_array_equal(got, want)
    assert not np.any(np.asarray(got) == 5)


def test_greedy_sample_log_prob():
    rng = np.random.default_rng(2)
    z = rng.normal(size=(16, 300)) * 4
    tokens, log_probs = jax.jit(greedy_sample)(jnp.asarray(z, jnp.float32))
    shifted = z - z.max(-1, keepdims=True)
    want = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    np.testing.assert_array_equal(tokens, z.argmax(-1))
    np.testing.assert_allclose(log_probs, want[np.arange(16), z.argmax(-1)], atol=1e-6)


def test_sharded_windowed_generate_equals_unsharded(model):
    """On a 2×2×2 mesh (slots over data × fsdp, KV heads over tensor) the windowed step emits the
    unsharded whole-cache step's tokens, and the cache keeps its sharding."""
    mesh = make_mesh(2, 2, 2)
    sharded = Engine(
        model,
        EngineConfig(
            max_concurrent_decodes=8,
            max_prefill_length=32,
            max_new_tokens=96,
            steps_per_call=4,
            min_prefill_bucket=8,
            min_decode_window=16,
        ),
        sampling=SAMPLED,
        mesh=mesh,
    )
    whole = engine(model, max_concurrent_decodes=8, min_decode_window=0)
    params, state = filled_state(sharded)
    reference_params, reference = filled_state(whole)
    for call in range(3):
        window = sharded.decode_window(31 + call * 4)
        state, got = sharded.generate(params, state, window=window)
        reference, want = whole.generate(reference_params, reference)
        np.testing.assert_array_equal(got.tokens[:4], want.tokens[:4])
        np.testing.assert_allclose(got.log_probs[:4], want.log_probs[:4], atol=1e-5)
    for cache in (state.cache.k[0], state.cache.v[-1]):
        assert cache.sharding.is_equivalent_to(NamedSharding(mesh, KV_CACHE_SPEC), cache.ndim)
