"""The sampling engine (KV-cache decode, slots, group insert, parameter updates, sharding).

Every expected value comes from an independent computation:

* greedy ids from a naive loop that reruns the full (cache-free) forward pass of
  :class:`QwenForCausalLM` over prompt + generated tokens at every step, and from Hugging Face
  ``transformers`` ``generate`` on the same random weights;
* behaviour log-probs from a teacher-forced pass, ``token_log_probs(model, ids, mask,
  temperature=τ)``.

Tolerances: log-probs 1e-4 absolute against another code path (float32 sums in another order, as
in ``test_model``'s logits); 1e-5 between the sharded and unsharded engine (the same program,
partitioned). Greedy ids must be identical: the models are initialised with a larger weight scale
(``initializer_range`` 0.1) so the top-2 logit gaps are far above float32 rounding.

Models are tiny (vocabulary 256, width 64, 2 layers) and engines are module-scoped and shared, so
each function compiles once per engine.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax.sharding import NamedSharding

from arlarena_jax.models.hf_io import load_pretrained
from arlarena_jax.models.qwen import QwenForCausalLM
from arlarena_jax.models.sharding import make_mesh
from arlarena_jax.sampler import GREEDY, Engine, EngineConfig
from arlarena_jax.sampler.engine import KV_CACHE_SPEC
from tests.helpers.sampler_reference import (
    BASE,
    BUDGETS,
    COMMON,
    PROMPTS,
    SAMPLED,
    SHORT,
    VOCAB,
    WIDTH,
    _full_logits,
    collect,
    hf_generate,
    naive_greedy,
    padded,
    run_slots,
    teacher_forced,
)

# ---- fixtures ----------------------------------------------------------------------------------


def hf_model(kind: str):
    torch.manual_seed(0 if kind == "qwen3" else 1)
    if kind == "qwen3":
        config = transformers.Qwen3Config(**COMMON, head_dim=16, tie_word_embeddings=False)
        model = transformers.Qwen3ForCausalLM(config)
    else:
        config = transformers.Qwen2Config(**COMMON, tie_word_embeddings=True)
        model = transformers.Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = None  # generate exactly max_new_tokens
    model.generation_config.pad_token_id = 0
    return model.eval()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """kind -> (transformers model, our model loaded from its save_pretrained directory)."""
    out = {}
    for kind in ("qwen3", "qwen2"):
        hf = hf_model(kind)
        directory = tmp_path_factory.mktemp(kind)
        hf.save_pretrained(directory, safe_serialization=True)
        out[kind] = (hf, load_pretrained(directory))
    return out


@pytest.fixture(scope="module")
def engine_for(models):
    """A cache of greedy engines: ``engine_for(kind, steps_per_call, **config_overrides)``."""
    cache: dict = {}

    def get(kind: str, steps: int = 1, mesh=None, **overrides) -> Engine:
        key = (kind, steps, mesh, tuple(sorted(overrides.items())))
        if key not in cache:
            config = EngineConfig(**(BASE | {"steps_per_call": steps} | overrides))
            cache[key] = Engine(models[kind][1], config, sampling=GREEDY, mesh=mesh)
        return cache[key]

    return get


@pytest.fixture(scope="module")
def greedy_reference(models):
    """kind -> naive greedy continuations (16 tokens) and their log-probs for PROMPTS."""
    return {kind: naive_greedy(models[kind][1], PROMPTS, 16) for kind in models}


# ---- 1. greedy = the naive full-forward loop ------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "steps", "overrides"),
    [("qwen3", 1, {}), ("qwen2", 3, {"min_prefill_bucket": 16})],
    ids=["qwen3-steps1", "qwen2-steps3"],
)
def test_greedy_equals_full_forward_loop(engine_for, greedy_reference, kind, steps, overrides):
    engine = engine_for(kind, steps, **overrides)
    # Four prompts of 3, 13, 7 and 16 tokens decode concurrently in four slots (qwen3: in both
    # prefill buckets, 8 and 16); slot 0 goes through the single-slot insert, the others through
    # insert_group. Budgets differ, so slots stop at different steps (qwen2: inside a 3-step call).
    # Qwen3 with several steps per call is checked against this loop in the sharded test.
    tokens, log_probs, _ = run_slots(engine, PROMPTS, BUDGETS, use_insert=True)
    expected, expected_lp = greedy_reference[kind]
    for slot, budget in enumerate(BUDGETS):
        assert tokens[slot] == expected[slot][:budget], f"slot {slot}"
        np.testing.assert_allclose(log_probs[slot], expected_lp[slot][:budget], atol=1e-4)


# ---- 2. greedy = transformers generate --------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "steps", "overrides"),
    [("qwen3", 1, {}), ("qwen2", 3, {"min_prefill_bucket": 16})],
    ids=["qwen3", "qwen2"],
)
def test_greedy_equals_transformers_generate(models, engine_for, kind, steps, overrides):
    hf = models[kind][0]
    n_new = 12
    tokens, _, _ = run_slots(engine_for(kind, steps, **overrides), PROMPTS, [n_new] * 4)
    assert tokens == hf_generate(hf, PROMPTS, n_new, batched=False)
    # One left-padded batch through transformers against our four slots.
    assert tokens == hf_generate(hf, PROMPTS, n_new, batched=True)


# ---- 3. behaviour log-probs = teacher-forced log-probs -------------------------------------------


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "tau0.7_topk_topp"])
def test_log_probs_equal_teacher_forced_pass(models, engine_for, sampling):
    model = models["qwen3"][1]
    tokens, log_probs, _ = run_slots(
        engine_for("qwen3"), SHORT, BUDGETS, sampling=sampling, seed=11
    )
    tau = 1.0 if sampling.greedy else sampling.temperature
    # The log-prob is under softmax(z/τ) over the whole vocabulary, top-k/top-p not applied.
    expected = teacher_forced(model, SHORT, tokens, tau)
    for slot, budget in enumerate(BUDGETS):
        assert len(tokens[slot]) == budget
        np.testing.assert_allclose(log_probs[slot], expected[slot], atol=1e-4)
    if not sampling.greedy:  # and every drawn token is among the 20 best teacher-forced logits
        graphdef, state = nnx.split(model)
        ids = np.zeros((8, WIDTH), np.int32)
        for b, (prompt, out) in enumerate(zip(SHORT, tokens, strict=True)):
            ids[b, : len(prompt) + len(out)] = prompt + out
        logits = np.asarray(_full_logits(graphdef, state, ids, np.ones_like(ids)))
        for b, (prompt, out) in enumerate(zip(SHORT, tokens, strict=True)):
            for i, token in enumerate(out):
                row = logits[b, len(prompt) + i - 1]
                assert (row > row[token]).sum() < sampling.top_k


# ---- 4. group insert -----------------------------------------------------------------------------


def test_group_insert_keys(engine_for):
    engine = engine_for("qwen3")
    params = engine.load_params()
    prompt = PROMPTS[2]
    prefix = engine.prefill(params, padded(prompt, engine), len(prompt))

    def group(keys):
        state = engine.init_decode_state()
        state = engine.insert_group(
            prefix, state, [0, 1, 2, 3], keys, max_new_tokens=8, sampling=SAMPLED
        )
        return collect(engine, params, state, 4, SAMPLED)[:2]

    tokens, _ = group(jax.random.split(jax.random.key(5), 4))
    assert len({tuple(t) for t in tokens}) == 4, tokens  # four keys, four different samples
    tokens, log_probs = group(jnp.stack([jax.random.key(6)] * 4))
    assert all(t == tokens[0] for t in tokens)  # one key four times: one sample four times
    for lp in log_probs:
        np.testing.assert_allclose(lp, log_probs[0], atol=1e-6)  # rows of one batched program


# ---- 4b. batched prefill and insert --------------------------------------------------------------


def padded_batch(prompts, width: int) -> tuple[np.ndarray, np.ndarray]:
    tokens = np.zeros((len(prompts), width), np.int32)
    for b, prompt in enumerate(prompts):
        tokens[b, : len(prompt)] = prompt
    return tokens, np.array([len(p) for p in prompts], np.int32)


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_prefill_batch_rows_equal_single_prefill(engine_for, sampling):
    engine = engine_for("qwen3")
    params = engine.load_params()
    # Four prompts of 3, 13, 7 and 16 tokens in one 16-wide batch; alone, 3 and 7 use bucket 8.
    tokens, lengths = padded_batch(PROMPTS, 16)
    keys = jax.random.split(jax.random.key(3), 4)
    batch = engine.prefill_batch(params, tokens, lengths, keys=keys, sampling=sampling)
    assert batch.logits.shape == (4, VOCAB) and batch.cache.k[0].shape == (4, 2, 16, 16)
    for b, prompt in enumerate(PROMPTS):
        n = len(prompt)
        single = engine.prefill(params, padded(prompt, engine), n, key=keys[b], sampling=sampling)
        np.testing.assert_allclose(batch.logits[b], single.logits, atol=1e-5)
        assert int(batch.token[b]) == int(single.token)
        np.testing.assert_allclose(batch.log_prob[b], single.log_prob, atol=1e-5)
        assert int(batch.true_length[b]) == n
        pairs = zip(batch.cache.k + batch.cache.v, single.cache.k + single.cache.v, strict=True)
        for ours, theirs in pairs:  # keys and values of every layer, up to the true length
            np.testing.assert_allclose(ours[b, :, :n], theirs[0, :, :n], atol=1e-5)


# The engine runs both prefills jitted; so does the law below (run eagerly, each of its examples
# compiled over a thousand single operations).
@functools.partial(jax.jit, static_argnames=("engine", "sampling", "start"))
def prefill_rows(engine, params, tokens, lengths, keys, sampling, shared=None, start=0):
    return engine._prefill_rows(params, tokens, lengths, keys, sampling, shared, start)


@functools.partial(jax.jit, static_argnames=("engine", "width"))
def shared_cache(engine, params, ids, width):
    return engine._shared_cache(params, ids, width)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    shared=st.integers(1, 10),
    tails=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_shared_prefix_prefill_equals_plain_prefill(engine_for, shared, tails, seed):
    """Prompts whose first ``shared`` ids agree, prefilled with those ids cached once
    (``_shared_cache`` + ``_prefill_rows(..., shared, start)``), give the plain prefill's last
    logits, first tokens and keys/values at every real position (tolerance 1e-5: float32 sums of
    differently shaped matmuls). A law over any split point and any tail lengths."""
    engine = engine_for("qwen3")
    params = engine.load_params()
    rng = np.random.default_rng(seed)
    head = rng.integers(0, VOCAB, shared).tolist()
    prompts = [head + rng.integers(0, VOCAB, n).tolist() for n in tails]
    tokens, lengths = padded_batch(prompts, 16)
    keys = jax.random.split(jax.random.key(seed), len(prompts))
    tokens, lengths = jnp.asarray(tokens), jnp.asarray(lengths)
    plain = prefill_rows(engine, params, tokens, lengths, keys, SAMPLED)
    cache = shared_cache(engine, params, tokens[0, :shared], tokens.shape[1])
    split = prefill_rows(engine, params, tokens, lengths, keys, SAMPLED, cache, shared)
    np.testing.assert_allclose(split.logits, plain.logits, atol=1e-5)
    np.testing.assert_array_equal(split.token, plain.token)
    layers = zip(split.cache.k + split.cache.v, plain.cache.k + plain.cache.v, strict=True)
    for ours, theirs in layers:
        for b, prompt in enumerate(prompts):
            n = len(prompt)
            np.testing.assert_allclose(ours[b, :, :n], theirs[b, :, :n], atol=1e-5)


def test_insert_batch_equals_insert_group(engine_for):
    """One row into n slots (a GRPO group) is insert_group with the same keys, whether the keys
    are typed or raw key data and whether the slot count needs padding (3 slots run as 4)."""
    engine = engine_for("qwen3")
    params = engine.load_params()
    prompt = PROMPTS[2]
    single = engine.prefill(params, padded(prompt, engine), len(prompt))
    batch = engine.prefill_batch(params, padded(prompt, engine)[None], [len(prompt)])
    keys = jax.random.split(jax.random.key(5), 4)

    def run(slots, how):
        k = keys[: len(slots)]
        state = engine.init_decode_state()
        if how == "group":
            state = engine.insert_group(single, state, slots, k, max_new_tokens=8, sampling=SAMPLED)
        else:
            k = np.asarray(jax.random.key_data(k)) if how == "raw" else k
            state = engine.insert_batch(
                batch, state, slots, [0] * len(slots), k, max_new_tokens=8, sampling=SAMPLED
            )
        inserted = jax.device_get(state)
        return inserted, *collect(engine, params, state, 4, SAMPLED)[:2]

    for slots in ([0, 1, 2, 3], [3, 1, 0]):
        expected_state, expected, expected_lp = run(slots, "group")
        for how in ("typed", "raw"):
            state, tokens, log_probs = run(slots, how)
            for name in ("lengths", "pending", "generated", "budget", "done"):
                np.testing.assert_array_equal(getattr(state, name), getattr(expected_state, name))
            np.testing.assert_allclose(state.pending_log_prob, expected_state.pending_log_prob)
            np.testing.assert_array_equal(
                jax.random.key_data(state.keys), jax.random.key_data(expected_state.keys)
            )
            for ours, theirs in zip(state.cache.k, expected_state.cache.k, strict=True):
                np.testing.assert_array_equal(ours[slots], theirs[slots])
            assert tokens == expected
            for a, b in zip(log_probs, expected_lp, strict=True):
                np.testing.assert_allclose(a, b, atol=1e-6)


def test_insert_batch_rows_and_groups_decode_like_single_prompts(engine_for, greedy_reference):
    engine = engine_for("qwen3")
    params = engine.load_params()
    expected, expected_lp = greedy_reference["qwen3"]
    # Four prompts in reversed slots with their own budgets.
    tokens, lengths = padded_batch(PROMPTS, 16)
    prefix = engine.prefill_batch(params, tokens, lengths)
    keys = jax.random.split(jax.random.key(0), 4)
    state = engine.insert_batch(
        prefix,
        engine.init_decode_state(),
        [3, 2, 1, 0],
        [0, 1, 2, 3],
        keys,
        max_new_tokens=BUDGETS,
    )
    out, log_probs, _ = collect(engine, params, state, 4)
    for row, slot in enumerate([3, 2, 1, 0]):
        assert out[slot] == expected[row][: BUDGETS[row]], f"row {row}"
        np.testing.assert_allclose(log_probs[slot], expected_lp[row][: BUDGETS[row]], atol=1e-4)
    # A group of three samples of prompt 2 and one of prompt 0, in one 8-token batch of two.
    tokens, lengths = padded_batch([PROMPTS[0], PROMPTS[2]], 8)
    prefix = engine.prefill_batch(params, tokens, lengths)
    state = engine.insert_batch(
        prefix,
        engine.init_decode_state(),
        [0, 1, 2, 3],
        [1, 0, 1, 1],
        keys,
        max_new_tokens=[5, 12, 5, 5],
    )
    out, _, _ = collect(engine, params, state, 4)
    assert out == [expected[2][:5], expected[0][:12], expected[2][:5], expected[2][:5]]


def test_batched_compilations_are_bounded(models):
    """prefill_batch compiles per (B, P); insert_batch per (B, P, slot count padded to 2^k)."""
    engine = Engine(models["qwen3"][1], EngineConfig(**BASE), sampling=GREEDY)
    params = engine.load_params()
    state = engine.init_decode_state()
    keys = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(0), 4)))
    for prompts in ([PROMPTS[0], PROMPTS[2]], [[1, 2], [3, 4, 5]]):  # (2, 8) twice
        prefix = engine.prefill_batch(params, *padded_batch(prompts, 8))
        for slots in ([0, 1, 2], [0, 1, 2, 3], [2, 3]):  # 3 and 4 slots: one program
            state = engine.insert_batch(prefix, state, slots, [0] * len(slots), keys[: len(slots)])
    assert dict(engine.traces) == {"prefill_batch": 1, "insert_batch": 2}


# ---- 5. update_params ----------------------------------------------------------------------------


@pytest.fixture
def compile_counter():
    """Counts XLA backend compilations per jitted function name while the test runs."""
    counts: Counter[str] = Counter()

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            counts[kwargs.get("fun_name", "?")] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    yield counts
    jax.monitoring.unregister_event_duration_listener(listener)


def test_update_params_changes_outputs_without_recompiling(models, engine_for, compile_counter):
    model = models["qwen3"][1]
    engine = engine_for("qwen3")
    original = engine.load_params()
    before, _, _ = run_slots(engine, PROMPTS, BUDGETS)  # warm: everything compiled
    traces = dict(engine.traces)
    # The trainer's new weights: every parameter moved by Gaussian noise (made on the host).
    rng = np.random.default_rng(0)
    graphdef, state = nnx.split(model)
    new = jax.tree.map(lambda x: jnp.asarray(x + rng.normal(0, 0.05, x.shape), x.dtype), state)
    compile_counter.clear()
    try:
        engine.update_params(new)
        after, _, _ = run_slots(engine, PROMPTS, BUDGETS)
    finally:
        engine.update_params(original)
    engine_compiles = {k: v for k, v in compile_counter.items() if "_impl" in k}
    assert engine_compiles == {}, engine_compiles  # no prefill/insert/generate compiled again
    assert dict(engine.traces) == traces
    assert after != before
    expected, _ = naive_greedy(nnx.merge(graphdef, new), PROMPTS, 16)
    assert after == [e[:b] for e, b in zip(expected, BUDGETS, strict=True)]
    restored, _, _ = run_slots(engine, PROMPTS, BUDGETS)
    assert restored == before


def test_update_params_rejects_other_shapes(models, engine_for):
    engine = engine_for("qwen3")
    config = dataclasses.replace(models["qwen3"][1].config, intermediate_size=96)
    narrow = nnx.eval_shape(lambda: QwenForCausalLM(config, rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError, match=r"mlp\.down_proj\.kernel has shape \(96, 64\)"):
        engine.update_params(nnx.state(narrow))
    with pytest.raises(ValueError, match="parameter arrays"):  # qwen2 has q/k/v biases
        engine.update_params(nnx.state(models["qwen2"][1]))


# ---- 6. sharded = unsharded ----------------------------------------------------------------------


@pytest.mark.parametrize("axes", [(2, 2, 2), (8, 1, 1)], ids=["data2_fsdp2_tensor2", "data8"])
def test_sharded_engine_equals_unsharded(models, engine_for, axes):
    prompts = [*PROMPTS, *SHORT[2:], [3] * 11, [42] * 16]
    budgets = [10] * 8
    reference = engine_for("qwen3")  # unsharded, four slots: two rounds
    tokens, log_probs = [], []
    for half in (slice(0, 4), slice(4, 8)):
        t, lp, _ = run_slots(reference, prompts[half], budgets[half])
        tokens += t
        log_probs += lp
    mesh = make_mesh(*axes)
    # Eight slots, two decode steps per call.
    engine = engine_for("qwen3", 2, mesh, max_concurrent_decodes=8, min_prefill_bucket=16)
    sharded_tokens, sharded_lp, state = run_slots(engine, prompts, budgets)
    assert sharded_tokens == tokens
    for a, b in zip(sharded_lp, log_probs, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    expected, _ = naive_greedy(models["qwen3"][1], prompts, 10)
    assert sharded_tokens == expected
    # The decode state's KV cache stays split: slots over data × fsdp, KV heads over tensor.
    data, fsdp, tensor = axes
    for cache in (state.cache.k[0], state.cache.v[-1]):
        assert cache.sharding.is_equivalent_to(NamedSharding(mesh, KV_CACHE_SPEC), cache.ndim)
        assert cache.sharding.shard_shape(cache.shape) == (8 // (data * fsdp), 2 // tensor, 32, 16)
        assert len({s.device for s in cache.addressable_shards}) == 8


# ---- bfloat16 KV cache ---------------------------------------------------------------------------


def test_bfloat16_cache_agrees_with_float32(engine_for, greedy_reference):
    engine = engine_for("qwen3", 4, cache_dtype="bfloat16", min_prefill_bucket=16)
    tokens, log_probs, state = run_slots(engine, PROMPTS, [4] * 4)
    assert state.cache.k[0].dtype == jnp.bfloat16
    expected, expected_lp = greedy_reference["qwen3"]  # float32, no cache
    # Keys and values rounded to bfloat16 (relative error ≤ 2^-9) move these logits by about
    # 1e-3, far below their top-2 gaps, so the first 4 greedy tokens agree; log-probs agree to
    # 2e-2 (an error bound for two layers of attention over rounded keys and values).
    assert tokens == [e[:4] for e in expected]
    for a, b in zip(log_probs, expected_lp, strict=True):
        np.testing.assert_allclose(a, b[:4], atol=2e-2)


# ---- 8. errors -----------------------------------------------------------------------------------


def test_engine_errors(engine_for, models):
    engine = engine_for("qwen3")
    params = engine.load_params()
    prefix = engine.prefill(params, padded(PROMPTS[0], engine), 3)
    state = engine.init_decode_state()
    for slot in (-1, 4):
        with pytest.raises(ValueError, match=rf"slot {slot} outside 0\.\.3"):
            engine.insert(prefix, state, slot)
    keys = jax.random.split(jax.random.key(0), 5)
    with pytest.raises(ValueError, match="slot 4 outside"):  # n = 5 > 4 slots
        engine.insert_group(prefix, state, [0, 1, 2, 3, 4], keys)
    with pytest.raises(ValueError, match="distinct"):
        engine.insert_group(prefix, state, [1, 1], keys[:2])
    with pytest.raises(ValueError, match="3 keys for 2 slots"):
        engine.insert_group(prefix, state, [0, 1], keys[:3])
    with pytest.raises(ValueError, match=r"max_new_tokens 17 outside 1\.\.max_new_tokens 16"):
        engine.insert(prefix, state, 0, max_new_tokens=17)
    with pytest.raises(ValueError, match="prompt of 17 tokens exceeds max_prefill_length 16"):
        engine.prefill(params, np.ones(17, np.int32), 17)
    with pytest.raises(ValueError, match=r"true_length 9 outside 1\.\.8"):
        engine.prefill(params, np.ones(8, np.int32), 9)
    model = models["qwen3"][1]
    with pytest.raises(ValueError, match="engine steps_per_call must be >= 1, got 0"):
        Engine(model, EngineConfig(**(BASE | {"steps_per_call": 0})))
    with pytest.raises(ValueError, match="engine cache_dtype must be float32 or bfloat16"):
        Engine(model, EngineConfig(**(BASE | {"cache_dtype": "float16"})))


def test_batched_prefill_and_insert_errors(engine_for):
    engine = engine_for("qwen3")
    params = engine.load_params()
    with pytest.raises(ValueError, match=r"padded tokens \[batch, length\], got shape \(8,\)"):
        engine.prefill_batch(params, np.ones(8, np.int32), [3])
    with pytest.raises(ValueError, match=r"true_lengths of shape \(3,\) for 2 prompts"):
        engine.prefill_batch(params, np.ones((2, 8), np.int32), [3, 3, 3])
    with pytest.raises(ValueError, match=r"true_length 9 of row 1 outside 1\.\.8"):
        engine.prefill_batch(params, np.ones((2, 8), np.int32), [3, 9])
    with pytest.raises(ValueError, match=r"true_length 0 of row 0 outside 1\.\.8"):
        engine.prefill_batch(params, np.ones((2, 8), np.int32), [0, 3])
    with pytest.raises(ValueError, match="prompt of 32 tokens exceeds max_prefill_length 16"):
        engine.prefill_batch(params, np.ones((2, 32), np.int32), [3, 3])
    keys = jax.random.split(jax.random.key(0), 5)
    with pytest.raises(ValueError, match="prefill_batch got 5 keys for 2 prompts"):
        engine.prefill_batch(params, np.ones((2, 8), np.int32), [3, 3], keys=keys)
    prefix = engine.prefill_batch(params, np.ones((2, 8), np.int32), [3, 5])
    state = engine.init_decode_state()
    with pytest.raises(ValueError, match="needs a batched prefix"):
        single = engine.prefill(params, np.ones(8, np.int32), 3)
        engine.insert_batch(single, state, [0], [0], keys[:1])
    with pytest.raises(ValueError, match="slot 4 outside"):
        engine.insert_batch(prefix, state, [0, 1, 2, 3, 4], [0] * 5, keys)
    with pytest.raises(ValueError, match="distinct"):
        engine.insert_batch(prefix, state, [1, 1], [0, 1], keys[:2])
    with pytest.raises(ValueError, match="insert_batch got 1 rows for 2 slots"):
        engine.insert_batch(prefix, state, [0, 1], [0], keys[:2])
    with pytest.raises(ValueError, match=r"insert_batch row 2 outside 0\.\.1"):
        engine.insert_batch(prefix, state, [0, 1], [0, 2], keys[:2])
    with pytest.raises(ValueError, match="insert_batch got 3 keys for 2 slots"):
        engine.insert_batch(prefix, state, [0, 1], [0, 1], keys[:3])
    with pytest.raises(ValueError, match="insert_batch got 3 budgets for 2 slots"):
        engine.insert_batch(prefix, state, [0, 1], [0, 1], keys[:2], max_new_tokens=[4, 4, 4])
    with pytest.raises(ValueError, match=r"max_new_tokens 17 outside 1\.\.max_new_tokens 16"):
        engine.insert_batch(prefix, state, [0, 1], [0, 1], keys[:2], max_new_tokens=[4, 17])


def test_unshardable_slots_fail_clearly(models):
    mesh = make_mesh(8, 1, 1)
    with pytest.raises(ValueError, match=r"decode-state kv cache.*dimension 4 is not divisible"):
        Engine(models["qwen3"][1], EngineConfig(**BASE), mesh=mesh)


def _powers_of_two(min_bucket: int, max_length: int) -> tuple[int, ...]:
    """The buckets of one bucket per octave, written out: min, 2 min, 4 min, … below the max
    length, then the max length."""
    sizes = [min(min_bucket, max_length)]
    while sizes[-1] * 2 < max_length:
        sizes.append(sizes[-1] * 2)
    return (*(s for s in sizes if s < max_length), max_length)


@given(st.integers(1, 300), st.integers(1, 5000), st.integers(1, 8))
def test_prefill_buckets_pad_a_prompt_by_less_than_a_kth_of_its_length(low, high, k):
    """k buckets per octave: sorted, distinct, from the smallest bucket to the max length, at
    most k in any octave [s, 2s) of the powers of two from the smallest (the max length aside);
    a prompt longer than the smallest bucket pads by less than ⌈L / k⌉ tokens (the worst L is
    one past a bucket). One per octave is the powers of two."""
    config = EngineConfig(
        max_prefill_length=high, min_prefill_bucket=low, prefill_buckets_per_octave=k
    )
    buckets = config.prefill_buckets
    assert list(buckets) == sorted(set(buckets))
    assert buckets[0] == min(low, high) and buckets[-1] == high
    for below, above in itertools.pairwise(buckets):
        worst = below + 1
        assert above - worst < -(-worst // k), (below, above)
    octave = buckets[0]
    while octave < high:
        assert sum(octave <= b < 2 * octave for b in buckets[:-1]) <= k  # the cap: besides
        octave *= 2
    if k == 1:
        assert buckets == _powers_of_two(low, high)


def test_finer_prefill_buckets_are_a_setting_with_its_range_checked():
    from arlarena_jax.sampler.engine import invalid_engine

    config = EngineConfig(max_prefill_length=1024, prefill_buckets_per_octave=4)
    assert config.prefill_buckets == (
        *(128, 160, 192, 224), *(256, 320, 384, 448), *(512, 640, 768, 896), 1024
    )  # fmt: skip
    bad = dict(invalid_engine(dataclasses.replace(config, prefill_buckets_per_octave=0)))
    assert bad == {"prefill_buckets_per_octave": "must be >= 1, got 0"}
