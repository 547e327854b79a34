"""The continuous-batching driver: queueing, slot reuse, groups, stop strings, errors.

Expected values come from independent computations: greedy continuations from a naive loop that
reruns the full forward pass of the model on prompt + generated ids at every step (no cache, no
engine); stop-string cuts from plain string search on the decoded text of an uncut run (and, for
the tail-window check, on every prefix); batched sampling from each request run alone through the
engine's single-prompt ``prefill`` and ``insert_group`` with the documented keys. The model
is a tiny random Qwen3 (width 32, 1 layer) over a tiny trained tokenizer (512 ids), initialised
with a large weight scale so greedy choices are far from ties.
"""

from __future__ import annotations

import random

import jax
import numpy as np
import pytest
from flax import nnx

from arlarena_jax.models.config import QwenConfig
from arlarena_jax.models.qwen import QwenForCausalLM
from arlarena_jax.sampler import GREEDY, Engine, EngineConfig, Request, SamplingParams, generate
from arlarena_jax.sampler.driver import cut_at_stop_tail
from arlarena_jax.tokenization import train_tiny

CORPUS = ["go to shelf 1, take cd 2, use desklamp 1. <think>plan</think><action>up</action>"] * 20
PROMPTS = [[5, 17, 3], [9, 8, 7, 6, 5, 4], [200, 1, 77, 31], [42] * 10, [300, 301]]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tiny(CORPUS, vocab_size=512)


@pytest.fixture(scope="module")
def model(tokenizer):
    config = QwenConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
    )
    model = QwenForCausalLM(config, rngs=nnx.Rngs(0))
    # Scale the weights up (initializer range ~0.1 instead of 0.02): greedy gaps far above rounding.
    matrices = nnx.state(model, nnx.Param)
    nnx.update(model, jax.tree.map(lambda x: x * 5.0 if x.ndim == 2 else x, matrices))
    return model


@pytest.fixture(scope="module")
def engine(model):
    config = EngineConfig(
        max_concurrent_decodes=2,
        max_prefill_length=16,
        max_new_tokens=8,
        min_prefill_bucket=16,
        steps_per_call=2,
    )
    return Engine(model, config, sampling=GREEDY)


WIDTH = 32  # the naive loop's fixed row width (right padding never affects earlier positions)


@jax.jit
def _last_logits(graphdef, state, ids, length):
    logits = nnx.merge(graphdef, state)(ids[None])[0]
    return jax.lax.dynamic_index_in_dim(logits, length - 1, keepdims=False)


def naive_greedy(model: QwenForCausalLM, prompt: list[int], n_new: int) -> list[int]:
    """Argmax continuation by the full (cache-free) forward pass over prompt + generated ids."""
    graphdef, state = nnx.split(model)
    ids = list(prompt)
    for _ in range(n_new):
        row = np.zeros(WIDTH, np.int32)
        row[: len(ids)] = ids
        ids.append(int(np.argmax(_last_logits(graphdef, state, row, len(ids)))))
    return ids[len(prompt) :]


def test_more_samples_than_slots_reuse_slots_and_keep_request_order(model, engine):
    """Five greedy requests (one with n=2) through two slots: every slot is reused."""
    requests = [
        Request(p, n=2 if i == 1 else 1, max_new_tokens=4 + i) for i, p in enumerate(PROMPTS)
    ]
    results = generate(engine, requests)
    assert [len(r) for r in results] == [1, 2, 1, 1, 1]
    for i, (request, completions) in enumerate(zip(requests, results, strict=True)):
        expected = naive_greedy(model, list(request.prompt_ids), 4 + i)
        for c in completions:
            assert c.prompt_ids == list(request.prompt_ids)
            assert c.token_ids == expected
            assert len(c.log_probs) == len(expected)
            assert all(lp <= 0.0 for lp in c.log_probs)
            assert c.finish_reason == "length"


def test_group_members_differ_and_runs_are_reproducible(engine):
    sampling = SamplingParams(temperature=1.0)
    requests = [Request(PROMPTS[0], n=2, max_new_tokens=8, seed=7)]
    first = generate(engine, requests, sampling=sampling)[0]
    again = generate(engine, requests, sampling=sampling, seed=123)[0]  # explicit seed wins
    # Two 8-token samples over ~500 ids at temperature 1 coincide with negligible probability.
    assert first[0].token_ids != first[1].token_ids
    assert [c.token_ids for c in again] == [c.token_ids for c in first]
    other = generate(
        engine, [Request(PROMPTS[0], n=2, max_new_tokens=8, seed=8)], sampling=sampling
    )
    assert [c.token_ids for c in other[0]] != [c.token_ids for c in first]


def test_stop_strings_cut_exactly(engine, tokenizer):
    request = Request(PROMPTS[2], max_new_tokens=8)
    full = generate(engine, [request], tokenizer=tokenizer)[0][0]
    text = tokenizer.decode(full.token_ids, skip_special_tokens=True)
    assert full.text == text and len(text) >= 4, text
    stop = text[2:4]  # starts inside the text, possibly mid-token
    start = text.find(stop)
    # The fewest tokens whose text contains the stop string.
    n_cut = next(
        n
        for n in range(1, len(full.token_ids) + 1)
        if stop in tokenizer.decode(full.token_ids[:n], skip_special_tokens=True)
    )
    cut = generate(engine, [request], tokenizer=tokenizer, stop_strings=["\x00never", stop])[0][0]
    assert cut.finish_reason == "stop_string"
    assert cut.token_ids == full.token_ids[:n_cut]
    assert cut.log_probs == full.log_probs[:n_cut]
    assert cut.text == text[: start + len(stop)]
    kept_out = generate(
        engine, [request], tokenizer=tokenizer, stop_strings=[stop], include_stop_string=False
    )[0][0]
    assert kept_out.text == text[:start]
    assert kept_out.token_ids == full.token_ids[:n_cut]


# Mixed lengths (both prefill buckets of 8 and 16), groups of 1 to 4, explicit and derived seeds.
MIXED = [
    Request([5, 17, 3], n=2, max_new_tokens=8),
    Request(list(range(100, 113)), n=1, max_new_tokens=5),
    Request([200, 1, 77, 31], n=4, max_new_tokens=7, seed=11),
    Request([42] * 10, n=3, max_new_tokens=8),
    Request([300, 301], n=1, max_new_tokens=3, seed=2**31 + 5),  # past int32: the slow key path
    Request([9, 8, 7, 6, 5, 4], n=4, max_new_tokens=6),
    Request(list(range(7, 23)), n=2, max_new_tokens=8),
    Request([1], n=1, max_new_tokens=4),
]
SAMPLED = SamplingParams(temperature=1.0, top_k=50)


def engine_with(model, **overrides) -> Engine:
    config = dict(
        max_concurrent_decodes=4,
        max_prefill_length=16,
        max_new_tokens=8,
        min_prefill_bucket=8,
        steps_per_call=2,
    )
    return Engine(model, EngineConfig(**(config | overrides)), sampling=GREEDY)


def one_at_a_time(engine: Engine, requests, seed: int, sampling):
    """The unbatched semantics, through the engine API: request i alone, prefilled by ``prefill``
    and put into slots 0..n-1 by ``insert_group`` with keys ``split(fold_in(key(seed), i), n)``
    (``split(key(request.seed), n)`` where given)."""
    params = engine.load_params()
    out = []
    for i, r in enumerate(requests):
        base = jax.random.fold_in(jax.random.key(seed), i) if r.seed is None else None
        keys = jax.random.split(jax.random.key(r.seed) if base is None else base, r.n)
        padded = np.zeros(engine.bucket_for(len(r.prompt_ids)), np.int32)
        padded[: len(r.prompt_ids)] = r.prompt_ids
        prefix = engine.prefill(params, padded, len(r.prompt_ids))
        state = engine.insert_group(
            prefix,
            engine.init_decode_state(),
            list(range(r.n)),
            keys,
            max_new_tokens=r.max_new_tokens,
            sampling=sampling,
        )
        tokens, log_probs = [[] for _ in range(r.n)], [[] for _ in range(r.n)]
        while True:
            state, result = engine.generate(params, state, sampling=sampling)
            t, valid, lp, done = jax.device_get(
                (result.tokens, result.valid, result.log_probs, result.done)
            )
            for m in range(r.n):
                tokens[m] += t[m][valid[m]].tolist()
                log_probs[m] += lp[m][valid[m]].tolist()
            if done[: r.n].all():
                break
        out.append((tokens, log_probs))
    return out


@pytest.fixture(scope="module")
def four_slots(model):
    """Four slots, prefill buckets 8 and 16, two decode steps per call."""
    return engine_with(model)


def test_batching_does_not_change_samples(model, four_slots):
    """Same requests and seed, whatever the slot count and prefill batching: the samples of the
    unbatched engine-API run (tokens identical, log-probs within 1e-5: differently shaped
    programs round differently)."""
    expected = one_at_a_time(four_slots, MIXED, 3, SAMPLED)
    for engine in (
        four_slots,  # n=4 requests wait for a free engine or fill slots as they free up
        engine_with(model, max_concurrent_decodes=16),  # all eight in one prefill batch
        # Prefill batches of one row (bucket 16 only), slots freed at other steps.
        engine_with(model, min_prefill_bucket=16, steps_per_call=3, prefill_batch_tokens=16),
        # Four buckets per octave: 4, 5, 6, 7, 8, 10, 12, 14, 16 (other paddings, batches)
        engine_with(model, min_prefill_bucket=4, prefill_buckets_per_octave=4),
        # Shortest prompt first: other batches, other slots, the n=4 requests later
        engine_with(model, prefill_shortest_first=True),
        engine_with(model, max_concurrent_decodes=16, prefill_shortest_first=True),
    ):
        results = generate(engine, MIXED, sampling=SAMPLED, seed=3)
        for i, (completions, (tokens, log_probs)) in enumerate(zip(results, expected, strict=True)):
            assert [c.token_ids for c in completions] == tokens, (engine.config, i)
            for c, lp in zip(completions, log_probs, strict=True):
                np.testing.assert_allclose(c.log_probs, lp, atol=1e-5)
    # Groups are not copies of one sample (temperature 1 over ~500 ids).
    assert len({tuple(t) for t in expected[2][0]}) == 4


def test_batched_prefill_compilations_are_bounded(four_slots):
    """Prefill compiles once per (bucket, power-of-two batch), insert per (bucket, batch, padded
    slot count): here 2 buckets x {1, 2, 4} rows and 2 x 6 (rows <= slots), whatever the load."""
    rng = np.random.default_rng(0)
    for _ in range(3):
        requests = [
            Request(rng.integers(1, 400, int(rng.integers(1, 17))).tolist(), n=int(n))
            for n in rng.integers(1, 5, 12)
        ]
        generate(four_slots, requests, sampling=SAMPLED, seed=int(rng.integers(100)))
    traces = four_slots.traces
    assert traces["prefill_batch"] <= 6 and traces["insert_batch"] <= 12, traces
    assert traces["generate"] == 1, traces


def _brute_force_cut(tokens, decode, stops):
    return next(
        (n for n in range(1, len(tokens) + 1) if any(s in decode(tokens[:n]) for s in stops)), None
    )


BYTES = [bytes([b]) for b in b"ab<>/x "] + ["é".encode(), "é".encode()[:1], "é".encode()[1:]]
WORDS = ["a", "b", "<", ">", "/", "x", "", "", "</", "x>", "ab", " "]  # "": skipped special ids


@pytest.mark.parametrize(
    ("decode", "vocab", "stops"),
    [
        (
            lambda ids: b"".join(BYTES[i] for i in ids).decode("utf-8", "replace"),
            BYTES,
            ["é>", "</x>"],
        ),
        (lambda ids: "".join(WORDS[i] for i in ids), WORDS, ["</x>", "b<a"]),
    ],
    ids=["utf8-bytes", "empty-tokens"],
)
def test_tail_window_stop_check_equals_full_decode(decode, vocab, stops):
    """Fed in chunks as the driver does, the tail-window check cuts exactly where searching the
    full decoded text does (tokens of partial characters or of no text at all included)."""
    rng = random.Random(0)
    hits = 0
    for _ in range(400):
        weights = [1] * len(vocab)
        weights[rng.randrange(len(vocab))] = 8  # runs of one token: long empty or byte stretches
        tokens = rng.choices(range(len(vocab)), weights, k=rng.randrange(1, 60))
        expected = _brute_force_cut(tokens, decode, stops)
        seen, checked, cut = [], 0, None
        while len(seen) < len(tokens) and cut is None:
            seen += tokens[len(seen) : len(seen) + rng.randrange(1, 9)]
            cut = cut_at_stop_tail(seen, checked, decode, stops)
            checked = len(seen)
        assert cut == expected, (tokens, seen)
        hits += cut is not None
    assert 50 < hits < 350  # both outcomes well represented


def test_stop_token_ends_the_sample(model):
    expected = naive_greedy(model, PROMPTS[1], 8)
    stop_id = expected[2]
    config = EngineConfig(
        max_concurrent_decodes=2,
        max_prefill_length=16,
        max_new_tokens=8,
        min_prefill_bucket=16,
        stop_token_ids=(stop_id,),
    )
    engine = Engine(model, config, sampling=GREEDY)
    (completion,) = generate(engine, [Request(PROMPTS[1])])[0]
    first = expected.index(stop_id)
    assert completion.token_ids == expected[: first + 1]
    assert completion.finish_reason == "stop"


def test_long_prompts_error_or_truncate(model, engine):
    long_prompt = list(range(1, 21))  # 20 tokens > max_prefill_length 16
    with pytest.raises(ValueError, match=r"request 1: prompt of 20 tokens exceeds max_prefill_len"):
        generate(engine, [Request(PROMPTS[0], max_new_tokens=2), Request(long_prompt)])
    (completion,) = generate(
        engine, [Request(long_prompt, max_new_tokens=3)], truncate_prompts=True
    )[0]
    assert completion.prompt_ids == long_prompt[-16:]
    assert completion.token_ids == naive_greedy(model, long_prompt[-16:], 3)


@pytest.mark.parametrize(
    ("kwargs", "requests", "match"),
    [
        ({}, [Request(PROMPTS[0], n=3)], r"request 0: n=3 samples, the engine has 2 slots"),
        ({}, [Request([])], r"request 0 has an empty prompt"),
        ({"stop_strings": ["x"]}, [Request(PROMPTS[0])], r"stop_strings need a tokenizer"),
        (
            {},
            [Request(PROMPTS[0], max_new_tokens=9)],
            r"max_new_tokens 9 outside 1\.\.max_new_tokens 8",
        ),
    ],
)
def test_usage_errors(engine, kwargs, requests, match):
    with pytest.raises(ValueError, match=match):
        generate(engine, requests, **kwargs)


def test_progress_bar_counts_samples(engine, capsys):
    generate(engine, [Request(PROMPTS[0], n=2, max_new_tokens=2)], progress=True)
    assert "2/2" in capsys.readouterr().err


def test_tokens_carry_the_engine_version_of_their_decode_call(engine):
    """Asynchronous RL: each token is stamped with the engine's ``params_version`` of the decode
    call that produced it; ``before_decode`` runs before every call of a run on the engine's own
    parameters (the partial-rollout safe point) and not when parameters are passed explicitly."""
    calls = []

    def bump():
        calls.append(len(calls))
        engine.params_version = len(calls) - 1  # call 1: version 0, call 2: version 1, ...

    requests = [Request(PROMPTS[0], max_new_tokens=8), Request(PROMPTS[1], max_new_tokens=8)]
    engine.before_decode = bump
    try:
        (a,), (b,) = generate(engine, requests, seed=0)
        own = jax.tree.map(lambda x: x, engine.load_params())  # the same arrays, passed
        explicit = generate(engine, requests, params=own, seed=0)
    finally:
        engine.before_decode, engine.params_version = None, 0
    for c in (a, b):
        assert len(c.versions) == len(c.token_ids)
        assert c.versions == sorted(c.versions) and c.versions[0] == 0
    longest = max((a, b), key=lambda c: len(c.token_ids))
    assert len(longest.token_ids) > 2 and longest.versions[-1] >= 1  # 2 steps per call
    assert len(calls) >= 2
    assert all(set(c.versions) == {len(calls) - 1} for (c,) in explicit)  # no hook: fixed
