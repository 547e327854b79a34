"""Rollout correction for the sampler/trainer mismatch: TIS, Seq-TIS, Seq-MIS and Geo-RS
(docs/algorithms.md §4.9-4.12).

Hand values come from Δ = lp_old − lp_rollout chosen below and exp/log by hand (float64 reference,
float32 kernels: relative tolerance 1e-5). The hypothesis laws use fixed 6 × 6 shapes, so every
component compiles once.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from arlarena_jax.errors import ConfigError
from arlarena_jax.objectives import presets, ratio
from arlarena_jax.objectives.batch import TurnBatch, make_batch
from arlarena_jax.objectives.compose import AdvantageEstimator, chain
from arlarena_jax.train.config_io import apply_overrides, load_config

RTOL = 1e-5
GIVEN = AdvantageEstimator("given", lambda b: (b.advantages, b.advantages))
SETTINGS = settings(max_examples=25, deadline=None)
NAN = float("nan")

# Δ per token; the 4th row is a padding row. Padding tokens hold garbage (inf, NaN, 1e30).
DELTA = np.array(
    [
        [0.1, 0.2, -0.05, 0.0],  # Σ = 0.25, mean 0.25/3
        [0.5, 0.4, 0.3, 0.2],  # Σ = 1.4, mean 0.35
        [-0.6, -0.5, 0.0, 0.0],  # Σ = −1.1, mean −0.55
        [3.0, 3.0, 3.0, 3.0],  # padding row
    ]
)
MASK = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1]], np.float32)
ROW_MASK = np.array([1, 1, 1, 0], np.float32)
ADV = np.array([1.0, -1.0, 0.5, 0.0])  # row-constant advantages
OLD = np.full((4, 4), -1.0)
SEQ_RHO = np.exp([0.25, 1.4, -1.1])  # 1.284025, 4.055200, 0.332871
GEO_RHO = np.exp([0.25 / 3, 0.35, -0.55])  # 1.086904, 1.419068, 0.576950


def hand_batch(garbage: bool = True) -> TurnBatch:
    """The rows above; ``garbage`` puts inf / NaN / 1e30 on the padding tokens of lp_rollout."""
    rollout = OLD - DELTA
    if garbage:
        rollout = np.where(MASK > 0, rollout, np.array([[NAN], [0.0], [-np.inf], [1e30]]))
    batch = make_batch(
        MASK * ROW_MASK[:, None],
        OLD,
        group_ids=np.zeros(4, np.int32),
        row_mask=ROW_MASK,
        rollout_log_probs=rollout,
    )
    return batch._replace(advantages=jnp.asarray(ADV[:, None] * MASK, jnp.float32))


def weight_of(component, batch: TurnBatch):
    weight, metrics = jax.jit(component.fn)(batch.old_log_probs, batch)
    return np.asarray(weight), {k: float(v) for k, v in metrics.items()}


def keep_of(component, batch: TurnBatch, mask=None):
    mask = batch.response_mask if mask is None else mask
    out, metrics = jax.jit(component.fn)(batch.old_log_probs, batch, mask)
    return np.asarray(out), {k: float(v) for k, v in metrics.items()}


# ---------------------------------------------------------------------------------------------
# Hand-computed values
# ---------------------------------------------------------------------------------------------


def test_seq_tis_hand_values_broadcast_and_metrics():
    weight, metrics = weight_of(ratio.sequence_truncated_is(2.0), hand_batch())
    expected = np.minimum(SEQ_RHO, 2.0)  # 1.284025, 2 (capped), 0.332871
    np.testing.assert_allclose(weight[:3], np.broadcast_to(expected[:, None], (3, 4)), rtol=RTOL)
    assert np.all(np.isfinite(weight))
    np.testing.assert_allclose(metrics["seq_tis_weight_mean"], expected.mean(), rtol=RTOL)
    np.testing.assert_allclose(metrics["seq_tis_capped_frac"], 1 / 3, rtol=RTOL)


def test_token_tis_hand_values_and_metrics():
    weight, metrics = weight_of(ratio.truncated_is(1.5), hand_batch())
    expected = np.minimum(np.exp(DELTA[:3]), 1.5)  # only e^0.5 = 1.6487 > 1.5 is capped
    np.testing.assert_allclose(weight[:3] * MASK[:3], expected * MASK[:3], rtol=RTOL)
    m = MASK[:3]
    np.testing.assert_allclose(metrics["tis_weight_mean"], (expected * m).sum() / 9, rtol=RTOL)
    np.testing.assert_allclose(metrics["tis_capped_frac"], 1 / 9, rtol=RTOL)


def test_sequence_and_geometric_rejection_hand_values():
    """Window [0.5, 2]: the product ratio rejects rows 1 (4.06, high) and 2 (0.33, low); the
    geometric mean (1.42, 0.58) keeps both: the per-token mean does not grow with length."""
    kept, metrics = keep_of(ratio.sequence_rejection(2.0), hand_batch())
    np.testing.assert_array_equal(kept[:3], MASK[:3] * np.array([1, 0, 0])[:, None])
    np.testing.assert_allclose(metrics["seq_rs_rejected_frac"], 2 / 3, rtol=RTOL)
    np.testing.assert_allclose(metrics["seq_rs_high_frac"], 1 / 3, rtol=RTOL)
    kept, metrics = keep_of(ratio.geometric_rejection(2.0), hand_batch())
    np.testing.assert_array_equal(kept[:3], MASK[:3])
    assert metrics["geo_rs_rejected_frac"] == 0.0
    # Window [1/1.1, 1.1]: row 0 (1.087) stays, rows 1 (1.419) and 2 (0.577) go.
    kept, metrics = keep_of(ratio.geometric_rejection(1.1), hand_batch())
    np.testing.assert_array_equal(kept[:3], MASK[:3] * np.array([1, 0, 0])[:, None])
    np.testing.assert_allclose(metrics["geo_rs_rejected_frac"], 2 / 3, rtol=RTOL)
    # An explicit lower bound: [0.5, 1.5] keeps rows 0, 1 and 2 for the geometric mean.
    kept, _ = keep_of(ratio.geometric_rejection(1.5, 0.5), hand_batch())
    np.testing.assert_array_equal(kept[:3], MASK[:3])


def test_seq_mis_end_to_end_loss_and_gradient():
    """vanilla at lp = lp_old (r = 1) gives L = −A. Seq-MIS (Seq-TIS cap 2 + rejection outside
    [0.5, 2]) keeps row 0 only: pg_loss = 3·(−1)·1.284025 / 3 and d/dlp = −1·1.284025/3 on
    row 0's tokens. Seq-TIS alone keeps all 9 tokens:
    (3·(−1)·1.284025 + 4·(1)·2 + 2·(−0.5)·0.332871) / 9 = 0.423895."""
    batch = hand_batch(garbage=False)
    lp = batch.old_log_probs
    seq_mis = chain(
        GIVEN, ratio.vanilla(), ratio.sequence_truncated_is(2.0), ratio.sequence_rejection(2.0)
    )
    (_, metrics), grad = jax.value_and_grad(lambda x: seq_mis.loss(x, batch), has_aux=True)(lp)
    np.testing.assert_allclose(float(metrics["pg_loss"]), -SEQ_RHO[0], rtol=RTOL)
    expected_grad = np.zeros((4, 4))
    expected_grad[0, :3] = -SEQ_RHO[0] / 3
    np.testing.assert_allclose(np.asarray(grad), expected_grad, rtol=RTOL, atol=1e-7)
    np.testing.assert_allclose(float(metrics["seq_rs_rejected_frac"]), 2 / 3, rtol=RTOL)
    seq_tis = chain(GIVEN, ratio.vanilla(), ratio.sequence_truncated_is(2.0))
    _, metrics = seq_tis.loss(lp, batch)
    expected = (-3 * SEQ_RHO[0] + 4 * 2.0 - 2 * 0.5 * SEQ_RHO[2]) / 9
    np.testing.assert_allclose(float(metrics["pg_loss"]), expected, rtol=RTOL)


def test_long_sequences_do_not_overflow():
    """Σ Δ = ±1200 over 4 tokens: exp would overflow float32; log space and the ±20 clamp keep
    the Seq-TIS weight at the cap (or e^−20), and the rejections decide on log ρ exactly."""
    delta = np.array([[300.0] * 4, [-300.0] * 4])
    batch = make_batch(
        np.ones((2, 4)), np.zeros((2, 4)), group_ids=np.zeros(2, np.int32), rollout_log_probs=-delta
    )
    weight, metrics = weight_of(ratio.sequence_truncated_is(3.0), batch)
    np.testing.assert_allclose(weight[:, 0], [3.0, math.exp(-20.0)], rtol=RTOL)
    assert all(np.isfinite(v) for v in metrics.values())
    for component in (ratio.sequence_rejection(2.0), ratio.geometric_rejection(1.001)):
        kept, metrics = keep_of(component, batch)
        np.testing.assert_array_equal(kept, np.zeros((2, 4)))
        key = next(k for k in metrics if k.endswith("high_frac"))
        np.testing.assert_allclose(metrics[key], 0.5, rtol=RTOL)


def test_components_declare_inputs_and_metrics():
    inputs = ratio.ROLLOUT_INPUTS
    for component in (
        ratio.truncated_is(2.0),
        ratio.sequence_truncated_is(),
        ratio.sequence_rejection(),
        ratio.geometric_rejection(),
    ):
        assert component.needs == inputs
        assert component.reductions
    objective = chain(
        GIVEN, ratio.vanilla(), ratio.sequence_truncated_is(), ratio.sequence_rejection()
    )
    assert {"seq_tis_weight_mean", "seq_rs_rejected_frac"} <= set(objective.metric_reductions)


def test_missing_rollout_log_probs_and_bad_bounds_are_one_line():
    batch = hand_batch()._replace(rollout_log_probs=None)
    with pytest.raises(ValueError, match="rollout_log_probs"):
        weight_of(ratio.sequence_truncated_is(2.0), batch)
    for make, pattern in (
        (lambda: ratio.sequence_truncated_is(0.0), "rollout_is_threshold must be > 0"),
        (lambda: ratio.sequence_rejection(1.0), "rollout_rs_threshold must be > 1"),
        (lambda: ratio.geometric_rejection(1.1, 1.2), "rollout_rs_threshold_lower"),
    ):
        with pytest.raises(ValueError, match=pattern):
            make()


# ---------------------------------------------------------------------------------------------
# Property laws
# ---------------------------------------------------------------------------------------------

N, T = 6, 6
SEQ_TIS = ratio.sequence_truncated_is(2.0)
SEQ_TIS_INF = ratio.sequence_truncated_is(1e30)  # |Σ Δ| ≤ 6 here: never capped, never clamped
TOKEN_TIS = ratio.truncated_is(2.0)
SEQ_RS = ratio.sequence_rejection(2.0)
GEO_RS = ratio.geometric_rejection(1.05, 0.9)


@functools.cache
def jitted(fn):
    return jax.jit(fn)


@st.composite
def mismatch(draw) -> tuple[TurnBatch, np.ndarray]:
    """(batch with lp_rollout = lp_old − Δ, Δ), Δ in [−1, 1], ragged rows, some padding rows."""
    floats = st.floats(-1.0, 1.0, allow_nan=False, width=32)
    lengths = draw(st.lists(st.integers(0, T), min_size=N, max_size=N))
    real = draw(st.integers(1, N))
    delta = np.asarray(draw(st.lists(floats, min_size=N * T, max_size=N * T))).reshape(N, T)
    old = np.asarray(draw(st.lists(floats, min_size=N * T, max_size=N * T))).reshape(N, T) - 2
    row_mask = (np.arange(N) < real).astype(np.float32)
    mask = (np.arange(T)[None, :] < np.asarray(lengths)[:, None]) * row_mask[:, None]
    batch = make_batch(
        mask,
        old,
        group_ids=np.zeros(N, np.int32),
        row_mask=row_mask,
        rollout_log_probs=(old - delta).astype(np.float32),
    )
    return batch, np.where(mask > 0, delta.astype(np.float32), 0.0)


def _weights(component, batch):
    return np.asarray(jitted(component.fn)(batch.old_log_probs, batch)[0])


def _kept(component, batch, mask=None):
    mask = batch.response_mask if mask is None else mask
    return np.asarray(jitted(component.fn)(batch.old_log_probs, batch, mask)[0])


@SETTINGS
@given(mismatch())
def test_seq_tis_is_the_capped_product_of_token_ratios_constant_per_row(case):
    batch, delta = case
    product = np.prod(np.exp(delta.astype(np.float64)), axis=-1)
    weight = _weights(SEQ_TIS, batch)
    np.testing.assert_allclose(weight, np.repeat(weight[:, :1], T, axis=1), rtol=0)
    np.testing.assert_allclose(weight[:, 0], np.minimum(product, 2.0), rtol=RTOL)
    np.testing.assert_allclose(_weights(SEQ_TIS_INF, batch)[:, 0], product, rtol=RTOL)


@SETTINGS
@given(
    st.lists(st.floats(-0.3, 0.3, allow_nan=False), min_size=N, max_size=N),
    st.lists(st.integers(1, T), min_size=N, max_size=N),
)
def test_geo_rs_keeps_a_row_of_equal_ratios_iff_inside_the_window(log_r, lengths):
    """Every token of row i has ratio r_i: kept iff 0.9 ≤ r_i ≤ 1.05 (whatever the length)."""
    log_r = np.asarray(log_r)
    assume(np.all(np.abs(log_r - math.log(1.05)) > 1e-4))
    assume(np.all(np.abs(log_r - math.log(0.9)) > 1e-4))
    mask = (np.arange(T)[None, :] < np.asarray(lengths)[:, None]).astype(np.float32)
    old = np.full((N, T), -1.0)
    batch = make_batch(
        mask,
        old,
        group_ids=np.zeros(N, np.int32),
        rollout_log_probs=old - log_r[:, None] * np.ones((1, T)),
    )
    r = np.exp(log_r)
    expected = ((r >= 0.9) & (r <= 1.05)).astype(np.float32)
    np.testing.assert_array_equal(_kept(GEO_RS, batch), mask * expected[:, None])


@SETTINGS
@given(mismatch(), st.lists(st.floats(-3.0, 3.0, allow_nan=False), min_size=N * T, max_size=N * T))
def test_rejection_only_removes_whole_rows_and_never_adds_loss(case, values):
    """m_pg is m or 0 per row, so for any loss matrix Σ|m_pg·L| ≤ Σ|m·L| (per token). The
    aggregated |pg_loss| under token-mean can still grow: the denominator shrinks too."""
    batch, _ = case
    loss = np.asarray(values).reshape(N, T)
    m = np.asarray(batch.response_mask)
    for component in (SEQ_RS, GEO_RS):
        kept = _kept(component, batch)
        row_kept = kept.sum(-1) == m.sum(-1)
        assert np.all((kept == m) | (kept == 0))
        np.testing.assert_array_equal(kept, m * row_kept[:, None])
        assert np.abs(kept * loss).sum() <= np.abs(m * loss).sum()
        # A transform applied after another one only removes more.
        half = m * (np.arange(N) % 2 == 0)[:, None]
        assert np.all(_kept(component, batch, jnp.asarray(half)) <= half)


@SETTINGS
@given(
    mismatch(),
    st.lists(
        st.sampled_from([NAN, np.inf, -np.inf, 1e30, -1e30, 7.0]), min_size=N * T, max_size=N * T
    ),
)
def test_padding_tokens_never_change_a_rows_weight(case, garbage):
    batch, _ = case
    m = np.asarray(batch.response_mask) > 0
    junk = np.asarray(garbage, np.float32).reshape(N, T)
    dirty = batch._replace(
        old_log_probs=jnp.where(m, batch.old_log_probs, junk),
        rollout_log_probs=jnp.where(m, batch.rollout_log_probs, -junk),
    )
    for component in (SEQ_TIS, TOKEN_TIS):
        np.testing.assert_array_equal(
            _weights(component, dirty) * m, _weights(component, batch) * m
        )
        assert np.all(np.isfinite(_weights(SEQ_TIS, dirty)))
    for component in (SEQ_RS, GEO_RS):
        np.testing.assert_array_equal(_kept(component, dirty), _kept(component, batch))


@SETTINGS
@given(mismatch())
def test_on_policy_sampler_changes_nothing(case):
    """lp_rollout = lp_old: every weight is 1 (cap ≥ 1), no row is rejected, and the composed
    loss equals the plain loss."""
    batch, _ = case
    batch = batch._replace(rollout_log_probs=batch.old_log_probs)
    m = np.asarray(batch.response_mask)
    for component in (SEQ_TIS, TOKEN_TIS):
        np.testing.assert_array_equal(_weights(component, batch) * m, m)
    for component in (SEQ_RS, GEO_RS):
        np.testing.assert_array_equal(_kept(component, batch), m)
    adv = jnp.asarray(m * np.linspace(-1, 1, N)[:, None], jnp.float32)
    batch = batch._replace(advantages=adv)
    lp = batch.old_log_probs + 0.1 * batch.response_mask
    plain = chain(GIVEN, ratio.vanilla())
    corrected = chain(GIVEN, ratio.vanilla(), SEQ_TIS, TOKEN_TIS, SEQ_RS, GEO_RS)
    _, expected = jitted(plain.loss)(lp, batch)
    _, got = jitted(corrected.loss)(lp, batch)
    np.testing.assert_allclose(float(got["pg_loss"]), float(expected["pg_loss"]), rtol=RTOL)
    assert float(got["seq_rs_rejected_frac"]) == float(got["geo_rs_rejected_frac"]) == 0.0
    np.testing.assert_allclose(float(got["seq_tis_weight_mean"]), 1.0, rtol=RTOL)


# ---------------------------------------------------------------------------------------------
# Settings: presets and config keys
# ---------------------------------------------------------------------------------------------


def _names(objective) -> list[str]:
    return [c.name for c in objective.components]


def test_presets_compose_the_chosen_corrections():
    assert "sequence_truncated_is" not in _names(presets.build("grpo"))
    seq_tis = presets.build("gspo", rollout_is="sequence", rollout_is_threshold=3.0)
    assert "sequence_truncated_is" in _names(seq_tis)
    tis = presets.build("sapo", rollout_is="token")
    assert "truncated_is" in _names(tis)
    seq_mis = presets.build("grpo", rollout_is="sequence", rollout_rs="sequence")
    assert {"sequence_truncated_is", "sequence_rejection"} <= set(_names(seq_mis))
    geo = presets.build("sampo", rollout_rs="geometric")
    assert "geometric_rejection" in _names(geo)
    # Geo-RS's default window is verl's [1/1.001, 1.001]: a geometric mean of 1.0011 is out.
    batch = make_batch(
        np.ones((2, 3)),
        np.zeros((2, 3)),
        group_ids=np.zeros(2, np.int32),
        rollout_log_probs=-np.log([[1.0011] * 3, [1.0009] * 3]),
    )
    (reject,) = geo.mask_transforms
    np.testing.assert_array_equal(_kept(reject, batch)[:, 0], [0.0, 1.0])


TINY = Path(__file__).resolve().parents[2] / "configs" / "sokoban" / "base_tiny.yaml"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm.rollout_rs=geo"], "'algorithm.rollout_rs': expected one of 'sequence'"),
        (["algorithm.rollout_is=seq"], "'algorithm.rollout_is': expected one of 'token'"),
        (["algorithm.rollout_is_threshold=0"], "'algorithm.rollout_is_threshold': must be > 0"),
        (["algorithm.rollout_rs_threshold=0.9"], "'algorithm.rollout_rs_threshold': must be > 1"),
        (["algorithm.rollout_rs_threshold_lower=1.5"], "'algorithm.rollout_rs_threshold_lower'"),
    ],
)
def test_bad_settings_are_one_config_error_line(overrides, message):
    with pytest.raises(ConfigError) as info:
        apply_overrides(load_config(TINY), overrides)
    assert "\n" not in str(info.value) and message in str(info.value), str(info.value)


def test_settings_are_config_keys():
    config = apply_overrides(
        load_config(TINY), ["algorithm.rollout_is=sequence", "algorithm.rollout_rs=geometric"]
    )
    assert (config.algorithm.rollout_is, config.algorithm.rollout_rs) == ("sequence", "geometric")


@pytest.mark.parametrize(
    ("overrides", "rollout_is", "component"),
    [
        ([], None, None),  # synchronous: the method's loss alone
        (["trainer.max_staleness=1"], "token", "truncated_is"),  # async: TIS by default
        (["trainer.max_staleness=2", "algorithm.rollout_is_threshold=3"], "token", "truncated_is"),
        (
            ["trainer.max_staleness=1", "algorithm.rollout_is=sequence"],
            "sequence",
            "sequence_truncated_is",
        ),
        (["trainer.max_staleness=1", "algorithm.rollout_is=disabled"], "disabled", None),
        (["algorithm.rollout_is=disabled"], "disabled", None),
    ],
)
def test_asynchronous_runs_default_to_truncated_is(overrides, rollout_is, component):
    """trainer.max_staleness > 0 with algorithm.rollout_is left null weights the loss by token
    TIS at rollout_is_threshold (docs/algorithms.md §4.13); a correction set explicitly, or
    ``disabled``, stands; a synchronous run is unchanged."""
    from arlarena_jax.train.resolution import resolve_run

    config = apply_overrides(load_config(TINY), overrides)
    settings_ = resolve_run(config).method
    assert settings_.rollout_is == rollout_is
    names = _names(presets.PRESETS[presets.preset_key("grpo")].build(settings_))
    corrections = {"truncated_is", "sequence_truncated_is"} & set(names)
    assert corrections == ({component} if component else set())
    threshold = 3.0 if "algorithm.rollout_is_threshold=3" in overrides else 2.0
    assert settings_.rollout_is_threshold == threshold


def test_the_update_step_applies_the_corrections():
    """Through the trainer's update step (tiny model, 4 rows, micro-batches of 2): Δ = 0.5 on
    every token of rows 0-1 puts their geometric ratio at e^0.5 > 1.001, so Geo-RS rejects half
    the rows (micro-batch fractions 1 and 0, mean 0.5); Δ = 0.5 everywhere rejects every row, and
    with no KL or entropy term nothing is left to move the parameters."""
    import optax
    from flax import nnx

    from arlarena_jax.models import QwenForCausalLM
    from arlarena_jax.train.update import make_log_prob_fn, make_prepare_fn, make_update_step
    from tests.helpers.turn_rows import TINY_CONFIG, VOCAB, random_turn_rows

    graphdef, params = nnx.split(QwenForCausalLM(TINY_CONFIG, rngs=nnx.Rngs(0)))
    objective = presets.build(
        "grpo",
        use_kl_loss=False,
        entropy_coef=0.0,
        rollout_is="sequence",
        rollout_rs="geometric",
    )
    sequences, batch = random_turn_rows(
        np.random.default_rng(3), 4, vocab=VOCAB, group_size=2, prompt_length=6, response_length=5
    )
    sequences = jax.tree.map(jnp.asarray, sequences)
    batch = jax.tree.map(jnp.asarray, batch)
    lp, ent = make_log_prob_fn(graphdef, prompt_length=6, micro_batch_size=2)(params, sequences)
    batch = batch._replace(old_log_probs=lp * batch.response_mask, old_entropy=ent)
    batch, _, _ = make_prepare_fn(objective)(batch, None)
    update = make_update_step(
        graphdef,
        objective,
        optax.sgd(1.0),
        prompt_length=6,
        mini_batch_size=4,
        micro_batch_size=2,
        donate=False,
    )
    mask = batch.response_mask
    for stale_rows, rejected in ((np.array([1, 1, 0, 0]), 0.5), (np.ones(4), 1.0)):
        delta = 0.5 * jnp.asarray(stale_rows, jnp.float32)[:, None] * mask
        stale = batch._replace(rollout_log_probs=batch.old_log_probs - delta)
        new_params, _, metrics = update.step(params, optax.sgd(1.0).init(params), sequences, stale)
        np.testing.assert_allclose(float(metrics["geo_rs_rejected_frac"]), rejected, rtol=RTOL)
        assert np.isfinite(float(metrics["seq_tis_weight_mean"]))
        same = jax.tree.map(lambda a, b: bool(jnp.all(a == b)), params, new_params)
        assert all(jax.tree.leaves(same)) == (rejected == 1.0)
