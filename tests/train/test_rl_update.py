"""The RL update on device (docs/architecture.md, "One RL step") and the host packing of rows.

Expected values from independent reasoning: micro-batch accumulation of a per-row mean loss equals
the one-pass loss over the mini-batch when micro-batches are equal and full (so SGD steps match
within float32 rounding, 1e-6); a non-finite gradient leaves parameters unchanged; policy-gradient
steps raise the log-probability of a positive-advantage response and lower a negative one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from arlarena_jax.models import QwenForCausalLM, response_log_probs, token_log_probs
from arlarena_jax.objectives import advantage, ratio
from arlarena_jax.objectives import aggregate as agg
from arlarena_jax.objectives.compose import Regularizer, chain
from arlarena_jax.objectives.declare import Reduction, reduce_stacked
from arlarena_jax.rollout.loop import Rollout, TurnRow
from arlarena_jax.train.sequences import padded_row_count, rollout_batch
from arlarena_jax.train.update import (
    make_log_prob_fn,
    make_prepare_fn,
    make_update_step,
    step_metric_reductions,
)
from tests.helpers.rl_rows import P, T, grpo_steps, make_rows, prepared
from tests.helpers.turn_rows import TINY_CONFIG, rows_of_prompt_lengths


@pytest.fixture(scope="module")
def split_model():
    return nnx.split(QwenForCausalLM(TINY_CONFIG, rngs=nnx.Rngs(0)))


def test_response_log_probs_are_the_response_columns(split_model):
    graphdef, params = split_model
    sequences, _ = make_rows(np.random.default_rng(0), 4)
    model = nnx.merge(graphdef, params)
    full = token_log_probs(model, sequences.input_ids, sequences.attention_mask, temperature=0.7)
    part = response_log_probs(
        model, sequences.input_ids, sequences.attention_mask, P, temperature=0.7, chunk_size=2
    )
    np.testing.assert_allclose(part.log_probs, full.log_probs[:, P:], atol=1e-5)
    np.testing.assert_allclose(part.entropy, full.entropy[:, P:], atol=1e-5)


def test_micro_batch_accumulation_equals_one_pass(split_model):
    graphdef, params = split_model
    objective = chain(advantage.grpo(), ratio.vanilla(), agg.seq_mean_token_mean())
    sequences, batch = make_rows(np.random.default_rng(1), 4)
    batch = prepared(graphdef, params, sequences, batch, objective)
    results = []
    for micro in (1, 2, 4):
        update = make_update_step(
            graphdef,
            objective,
            optax.sgd(1.0),
            prompt_length=P,
            mini_batch_size=4,
            micro_batch_size=micro,
            donate=False,
        )
        opt_state = optax.sgd(1.0).init(params)
        new_params, _, metrics = update.step(params, opt_state, sequences, batch)
        results.append((new_params, float(metrics["grad_norm"])))
    for new_params, grad_norm in results[1:]:
        assert grad_norm == pytest.approx(results[0][1], rel=1e-5)
        jax.tree.map(
            lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), new_params, results[0][0]
        )
    assert results[0][1] > 0


def test_padding_micro_batches_add_nothing(split_model):
    """Two real rows, then two padding rows: the padded micro-batch is skipped, so the metrics
    equal the unpadded step's and the gradient is the same sum divided by grad_accum = 2."""
    graphdef, params = split_model
    objective = chain(advantage.grpo(), ratio.vanilla(), agg.seq_mean_token_mean())
    sequences, batch = make_rows(np.random.default_rng(4), 2)
    batch = prepared(graphdef, params, sequences, batch, objective)
    padded_seq = jax.tree.map(lambda x: jnp.pad(x, [(0, 2)] + [(0, 0)] * (x.ndim - 1)), sequences)
    padded_batch = jax.tree.map(lambda x: jnp.pad(x, [(0, 2)] + [(0, 0)] * (x.ndim - 1)), batch)
    results = []
    for rows, seq, b in ((2, sequences, batch), (4, padded_seq, padded_batch)):
        update = make_update_step(
            graphdef,
            objective,
            optax.sgd(1.0),
            prompt_length=P,
            mini_batch_size=rows,
            micro_batch_size=2,
            donate=False,
        )
        results.append(update.step(params, optax.sgd(1.0).init(params), seq, b)[2])
    plain, padded = results
    assert float(padded["grad_norm"]) == pytest.approx(float(plain["grad_norm"]) / 2, rel=1e-5)
    for key in plain:
        if key not in ("grad_norm", "skipped"):
            assert float(padded[key]) == pytest.approx(float(plain[key]), rel=1e-5, abs=1e-7), key
    lp, _ = make_log_prob_fn(graphdef, prompt_length=P, micro_batch_size=2)(params, padded_seq)
    np.testing.assert_array_equal(np.asarray(lp[2:]), 0.0)


def test_non_finite_gradient_skips_the_update(split_model):
    graphdef, params = split_model
    objective = chain(advantage.grpo(), ratio.vanilla())
    sequences, batch = make_rows(np.random.default_rng(2), 4)
    batch = prepared(graphdef, params, sequences, batch, objective)
    batch = batch._replace(advantages=batch.advantages.at[0, 0].set(jnp.nan))
    optimizer = optax.adamw(1e-2)
    update = make_update_step(
        graphdef,
        objective,
        optimizer,
        prompt_length=P,
        mini_batch_size=4,
        micro_batch_size=2,
        donate=False,
    )
    opt_state = optimizer.init(params)
    new_params, new_opt_state, metrics = update.step(params, opt_state, sequences, batch)
    assert float(metrics["skipped"]) == 1.0
    assert not np.isfinite(float(metrics["grad_norm"]))
    jax.tree.map(np.testing.assert_array_equal, new_params, params)
    jax.tree.map(np.testing.assert_array_equal, new_opt_state, opt_state)


def test_updates_follow_the_advantage_sign(split_model):
    graphdef, params = split_model
    batch, before, after, history = grpo_steps(graphdef, jax.tree.map(jnp.copy, params))
    assert len(history) == 6  # 2 mini-batches x 3 epochs
    adv = np.asarray(batch.advantages[:, 0])
    assert (adv[::2] > 0).all() and (adv[1::2] < 0).all()
    assert (after[::2] > before[::2]).all()  # winners' responses became likelier
    assert (after[1::2] < before[1::2]).all()
    assert float(history[0]["ppo_kl"]) == pytest.approx(0.0, abs=1e-6)  # first step on-policy


def test_step_metrics_reduce_by_declaration(split_model):
    """A regularizer emits the real-row count of each micro-batch under a key containing "max"
    but declares it a SUM: the step sums it over the real micro-batches (2 + 2 = 4; the padding
    micro-batch is left out), where a key-text rule would have taken the max (2)."""
    graphdef, params = split_model
    count_rows = Regularizer(
        "count_rows",
        lambda lp, ent, batch, agg_: (0.0, {"rows_max": jnp.sum(batch.row_mask)}),
        reductions=(("rows_max", Reduction.SUM),),
    )
    objective = chain(advantage.grpo(), ratio.vanilla(), count_rows)
    sequences, batch = make_rows(np.random.default_rng(5), 4)
    batch = prepared(graphdef, params, sequences, batch, objective)
    pad = lambda x: jnp.pad(x, [(0, 2)] + [(0, 0)] * (x.ndim - 1))  # noqa: E731
    sequences, batch = jax.tree.map(pad, sequences), jax.tree.map(pad, batch)
    update = make_update_step(
        graphdef,
        objective,
        optax.sgd(1.0),
        prompt_length=P,
        mini_batch_size=6,
        micro_batch_size=2,
        donate=False,
    )
    metrics = update.step(params, optax.sgd(1.0).init(params), sequences, batch)[2]
    assert float(metrics["rows_max"]) == 4.0
    table = step_metric_reductions(objective)
    assert table["rows_max"] is Reduction.SUM and table["grad_norm"] is Reduction.MEAN
    assert set(metrics) == set(table)  # every metric the step returns is declared


def test_reductions_mask_invalid_entries():
    values = jnp.array([1.0, 5.0, -2.0, 100.0])
    valid = jnp.array([True, True, True, False])
    reduced = {r: float(r.reduce(values, valid)) for r in Reduction}
    assert reduced == {
        Reduction.MEAN: pytest.approx(4.0 / 3.0),
        Reduction.SUM: 4.0,
        Reduction.MAX: 5.0,
        Reduction.MIN: -2.0,
    }
    none = jnp.zeros(4, bool)
    assert all(float(r.reduce(values, none)) == 0.0 for r in Reduction)
    with pytest.raises(ValueError, match="metric 'x' has no declared reduction"):
        reduce_stacked({"x": values}, {})


def row(i: int, prompt: list[int], response: list[int]) -> TurnRow:
    """One turn row of trajectory ``i`` with these token ids."""
    return TurnRow(
        prompt_ids=prompt,
        response_ids=response,
        log_probs=[-0.5] * len(response),
        prompt="p",
        response="r",
        group=0,
        trajectory=i,
        env_index=i,
        turn=0,
        anchor="a",
        action=0,
        reward=1.0,
        action_valid=True,
        format_valid=True,
        data_source="text",
        info={},
        episode_return=1.0,
        episode_length=1,
    )


def test_rollout_batch_layout():
    rollout = Rollout([row(0, [1, 2, 3], [4, 5]), row(1, [6], [])], [], 2, "sokoban")
    sequences, batch = rollout_batch(rollout, mini_batch_size=4, prompt_length=4, response_length=3)
    np.testing.assert_array_equal(
        sequences.input_ids[:2], [[0, 1, 2, 3, 4, 5, 0], [0, 0, 0, 6, 0, 0, 0]]
    )
    np.testing.assert_array_equal(
        sequences.attention_mask[:2], [[0, 1, 1, 1, 1, 1, 0], [0, 0, 0, 1, 0, 0, 0]]
    )
    assert sequences.input_ids.shape == (4, 7)
    np.testing.assert_array_equal(batch.row_mask, [1, 1, 0, 0])
    np.testing.assert_array_equal(batch.response_mask[:2], [[1, 1, 0], [0, 0, 0]])
    np.testing.assert_allclose(batch.rollout_log_probs[0], [-0.5, -0.5, 0.0])
    assert padded_row_count(0, 4) == 4 and padded_row_count(9, 4) == 12
    with pytest.raises(ValueError, match="row 0: prompt of 3 tokens, limit 2"):
        rollout_batch(rollout, mini_batch_size=4, prompt_length=2, response_length=3)


def test_bucket_lengths_step_by_quarter_octaves():
    from arlarena_jax.train.sequences import bucket_length

    # Multiples of max(16, 2^floor(log2 n) / 4): 65 -> step 16 -> 80; 700 -> step 128 -> 768.
    expected = {1: 16, 16: 16, 17: 32, 33: 48, 65: 80, 100: 112, 129: 160, 700: 768, 2000: 2048}
    assert {n: bucket_length(n) for n in expected} == expected
    assert all(bucket_length(n) >= n for n in range(1, 3000))
    assert all(bucket_length(n) <= 1.25 * n for n in range(64, 3000))  # step <= n / 4 from 64


def test_a_batch_is_packed_to_the_buckets_of_its_longest_prompt_and_response():
    """Widths from the longest row, each rounded up by bucket_length (prompt 65 -> 80, response
    20 -> 32, independently of which row holds them) and capped by the configured lengths."""
    from types import SimpleNamespace

    from arlarena_jax.train.rl import _pack

    rows = [row(0, [1] * 65, [2] * 3), row(1, [3] * 10, [4] * 20)]
    rollout = Rollout(rows, [], 2, "text")
    objective = SimpleNamespace(anchor_similarity=None)
    setup = SimpleNamespace(objective=objective, prompt_length=512, response_length=64, pad_id=0)
    sequences, _batch, width = _pack(setup, rollout, mini_batch_size=2)
    assert (width, sequences.input_ids.shape) == (80, (2, 80 + 32))
    capped = SimpleNamespace(objective=objective, prompt_length=72, response_length=24, pad_id=0)
    sequences, _batch, width = _pack(capped, rollout, mini_batch_size=2)
    assert (width, sequences.input_ids.shape) == (72, (2, 72 + 24))


@pytest.mark.parametrize("reuse", [False, True])
def test_old_log_probs_recomputed_or_taken_from_the_sampler(split_model, reuse):
    """trainer.use_rollout_log_probs: lp_old is the sampler's log-probs and no pass runs (the
    objective needs no old entropy); otherwise lp_old is recomputed and the disagreement with
    the sampler's is reported (here the 'sampler' log-probs are the recomputed ones + 0.25 on
    every real response token, so the mean and max absolute difference are 0.25)."""
    from types import SimpleNamespace

    from arlarena_jax.train.rl import _with_log_probs

    graphdef, params = split_model
    sequences, batch = make_rows(np.random.default_rng(3), 4)
    log_probs = make_log_prob_fn(graphdef, prompt_length=P, micro_batch_size=2)
    recomputed, _ = log_probs(params, sequences)
    mask = batch.response_mask
    batch = batch._replace(rollout_log_probs=(recomputed + 0.25) * mask)
    calls = []

    def counted(p, s):
        calls.append(1)
        return log_probs(p, s)

    setup = SimpleNamespace(
        objective=SimpleNamespace(requirements=frozenset()), use_rollout_log_probs=reuse
    )
    out, metrics = _with_log_probs(setup, counted, params, None, sequences, batch, lambda t: t)
    expected = (recomputed + 0.25) * mask if reuse else recomputed * mask
    np.testing.assert_allclose(out.old_log_probs, expected, atol=1e-6)
    assert len(calls) == (0 if reuse else 1)
    if reuse:
        assert metrics == {}
    else:
        assert metrics["actor/rollout_lp_abs_diff/mean"] == pytest.approx(0.25, abs=1e-5)
        assert metrics["actor/rollout_lp_abs_diff/max"] == pytest.approx(0.25, abs=1e-5)


def test_micro_batches_at_their_narrowest_prompt_width_compute_the_same(split_model):
    """Prompt width 64, micro-batches of 2 rows whose prompts are at most 14, 30 and 60 tokens:
    with 4 widths (64, 48, 32, 16) they run at 16, 32 and 64 columns of prompt. Cutting left
    padding changes no value (positions come from the mask, padded keys are masked), so the
    log-probs, the metrics and the SGD step equal the full-width ones within float32 rounding
    of differently sized reductions (1e-5)."""
    from arlarena_jax.train.sequences import narrower_widths
    from arlarena_jax.train.update import width_index

    graphdef, params = split_model
    wide = 64
    widths = narrower_widths(wide, 4)
    assert widths == (64, 48, 32, 16)
    sequences, batch = rows_of_prompt_lengths([10, 14, 25, 30, 50, 60], wide, T)
    sequences = jax.tree.map(jnp.asarray, sequences)
    chosen = [
        widths[int(width_index(widths, sequences.attention_mask[i : i + 2], wide))]
        for i in (0, 2, 4)
    ]
    assert chosen == [16, 32, 64]
    objective = chain(advantage.grpo(), ratio.vanilla(), agg.token_mean())
    results = []
    for count in (1, 4):
        log_probs = make_log_prob_fn(
            graphdef, prompt_length=wide, micro_batch_size=2, prompt_widths=count
        )
        lp, ent = log_probs(params, sequences)
        ready = batch._replace(old_log_probs=lp * batch.response_mask, old_entropy=ent)
        ready, _, _ = make_prepare_fn(objective)(ready, None)
        update = make_update_step(
            graphdef,
            objective,
            optax.sgd(1.0),
            prompt_length=wide,
            mini_batch_size=6,
            micro_batch_size=2,
            donate=False,
            prompt_widths=count,
        )
        new_params, _, metrics = update.step(params, optax.sgd(1.0).init(params), sequences, ready)
        results.append((lp, ent, new_params, metrics))
    (lp1, ent1, params1, metrics1), (lp4, ent4, params4, metrics4) = results
    # the narrow programs exist only with 4 widths: micro-batches of 16 + T columns
    narrow = f"i32[2,{16 + T}]"
    for count, present in ((1, False), (4, True)):
        fn = make_log_prob_fn(graphdef, prompt_length=wide, micro_batch_size=2, prompt_widths=count)
        assert (narrow in str(jax.make_jaxpr(fn)(params, sequences))) == present, count
    np.testing.assert_allclose(lp4, lp1, atol=1e-5)
    np.testing.assert_allclose(ent4, ent1, atol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), params4, params1)
    for key in metrics1:
        assert float(metrics4[key]) == pytest.approx(float(metrics1[key]), rel=1e-4, abs=1e-6)
    assert float(metrics1["grad_norm"]) > 0


def test_narrower_widths_step_down_the_buckets():
    from arlarena_jax.train.sequences import bucket_length, narrower_widths

    assert narrower_widths(640, 4) == (640, 512, 448, 384)
    assert narrower_widths(1024, 3) == (1024, 896, 768)
    assert narrower_widths(32, 5) == (32, 16)  # the minimum bucket ends it
    assert narrower_widths(700, 3) == (700, 640, 512)  # a capped width that is no bucket
    assert narrower_widths(640, 1) == (640,)
    for width in (48, 100, 640, 3000):
        below = narrower_widths(width, 6)[1:]
        assert all(bucket_length(w) == w for w in below)
        assert list(below) == sorted(below, reverse=True) and below[0] < width
