"""Property tests for policy losses: laws of docs/algorithms.md §4, TV-8's on-policy identities,
invariances.

Random right-padded batches come from hypothesis; tolerances are stated per test (float32).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from arlarena_jax.objectives import aggregate as agg
from arlarena_jax.objectives import ratio
from arlarena_jax.objectives.batch import TurnBatch, make_batch
from arlarena_jax.objectives.compose import AdvantageEstimator, chain

GIVEN = AdvantageEstimator("given", lambda b: (b.advantages, b.advantages))
SETTINGS = settings(max_examples=20, deadline=None)

WIDE_PPO = chain(GIVEN, ratio.vanilla(clip_ratio=1e6, clip_ratio_c=1e9))
TOKEN_LEVEL = (ratio.vanilla(), ratio.sapo(1.0, 1.05), ratio.cispo(clip_ratio_low=1.0))
PLAIN = tuple(chain(GIVEN, loss) for loss in TOKEN_LEVEL)
HUGE_MASK = tuple(chain(GIVEN, ratio.sequence_mask(1e9), loss) for loss in TOKEN_LEVEL)
GSPO_SMTM = tuple(
    chain(GIVEN, loss, agg.seq_mean_token_mean())
    for loss in (ratio.gspo(3e-3, 4e-3), ratio.gspo_token(3e-3, 4e-3))
)
ZERO_MASK = chain(GIVEN, ratio.sequence_mask(0.0), ratio.vanilla())


ROWS, TOKENS = 6, 6  # fixed shapes: one compilation per objective; extra rows are padding


@st.composite
def batches(draw, min_rows: int = 1) -> tuple[TurnBatch, jnp.ndarray]:
    """(batch with row-constant advantages, current log-probs), padded to ROWS x TOKENS."""
    n, t = ROWS, TOKENS
    real = draw(st.integers(min_rows, n))
    lengths = draw(st.lists(st.integers(0, t), min_size=n, max_size=n))
    floats = st.floats(-1.0, 1.0, allow_nan=False, width=32)
    old = np.asarray(draw(st.lists(floats, min_size=n * t, max_size=n * t))).reshape(n, t) - 1.5
    delta = np.asarray(draw(st.lists(floats, min_size=n * t, max_size=n * t))).reshape(n, t)
    adv = np.asarray(draw(st.lists(floats, min_size=n, max_size=n))) * 2.0
    mask = (np.arange(t)[None, :] < np.asarray(lengths)[:, None]).astype(np.float32)
    row_mask = (np.arange(n) < real).astype(np.float32)
    batch = make_batch(mask, old, group_ids=np.zeros(n, np.int32), row_mask=row_mask)
    batch = batch._replace(advantages=jnp.asarray(adv[:, None] * mask, jnp.float32))
    return batch, jnp.asarray(old + delta, jnp.float32)


@functools.cache
def compiled(objective):
    """One jitted (loss, metrics), d loss / d lp per objective (objectives are hashable)."""
    return jax.jit(
        lambda lp, batch: jax.value_and_grad(lambda x: objective.loss(x, batch), has_aux=True)(lp)
    )


def loss_grad(objective, batch, lp):
    (value, metrics), grad = compiled(objective)(lp, batch)
    return float(value), metrics, np.asarray(grad)


def token_mean_weights(batch: TurnBatch) -> np.ndarray:
    m = np.asarray(batch.response_mask) * np.asarray(batch.row_mask)[:, None]
    return m / max(m.sum(), 1e-8)


@SETTINGS
@given(batches())
def test_wide_clip_ppo_is_reinforce_with_ratio(data):
    """εl, εh, c → ∞: L = −A·r and ∂/∂lp = −A·r/Σm under token-mean (atol 1e-5)."""
    batch, lp = data
    value, metrics, grad = loss_grad(WIDE_PPO, batch, lp)
    r = np.exp(np.clip(np.asarray(lp - batch.old_log_probs), -20, 20))
    adv, w = np.asarray(batch.advantages), token_mean_weights(batch)
    np.testing.assert_allclose(value, np.sum(-adv * r * w), atol=1e-5)
    np.testing.assert_allclose(grad, -adv * r * w, atol=1e-5)
    assert float(metrics["pg_clipfrac"]) == 0.0


@SETTINGS
@given(batches())
def test_huge_sequence_mask_delta_masks_nothing(data):
    """δ_SM → ∞ keeps every row: identical loss and gradient (exact)."""
    batch, lp = data
    for plain_objective, masked_objective in zip(PLAIN, HUGE_MASK, strict=True):
        plain = loss_grad(plain_objective, batch, lp)
        masked = loss_grad(masked_objective, batch, lp)
        assert float(masked[1]["num_masked_seqs"]) == 0.0
        np.testing.assert_array_equal(plain[0], masked[0])
        np.testing.assert_array_equal(plain[2], masked[2])


@SETTINGS
@given(batches())
def test_on_policy_gradients_tv8(data):
    """TV-8: with lp_old := lp every ratio is 1 and each loss's gradient is −A·w_agg (1e-6)."""
    batch, lp = data
    batch = batch._replace(old_log_probs=lp)
    adv = np.asarray(batch.advantages)
    w_tm = token_mean_weights(batch)
    m = np.asarray(batch.response_mask) * np.asarray(batch.row_mask)[:, None]
    for objective in PLAIN:
        _, _, grad = loss_grad(objective, batch, lp)
        np.testing.assert_allclose(grad, -adv * w_tm, atol=1e-6)
    lengths = m.sum(-1)
    nonempty = max((lengths > 0).sum(), 1)
    w_smtm = m / np.maximum(lengths, 1)[:, None] / nonempty
    for objective in GSPO_SMTM:
        _, _, grad = loss_grad(objective, batch, lp)
        np.testing.assert_allclose(grad, -adv * w_smtm, atol=1e-6)
    _, metrics, _ = loss_grad(ZERO_MASK, batch, lp)
    assert float(metrics["num_masked_seqs"]) == 0.0  # κ = 0 is never > δ


LOSSES = (
    ("vanilla", (ratio.vanilla(),), agg.token_mean()),
    ("sapo_sm", (ratio.sequence_mask(3e-3), ratio.sapo()), agg.token_mean()),
    ("cispo", (ratio.cispo(clip_ratio_low=1.0),), agg.seq_mean_token_sum()),
    ("gspo", (ratio.gspo(3e-3, 4e-3),), agg.seq_mean_token_mean()),
    ("gmpo", (ratio.gmpo(),), agg.seq_mean_token_mean()),
    ("dr_grpo", (ratio.dr_grpo(8),), agg.seq_mean_token_sum_norm(max_response_length=8)),
)
OBJECTIVES = tuple((name, chain(GIVEN, *parts, aggregation)) for name, parts, aggregation in LOSSES)


def pad(batch: TurnBatch, lp, extra_rows: int, extra_tokens: int):
    """Append padding rows (row_mask 0) and tokens (response_mask 0) holding NaN / ±inf."""

    def widen(x, fill):
        if x is None:
            return None
        x = jnp.concatenate([x, jnp.full((x.shape[0], extra_tokens), fill, x.dtype)], axis=1)
        return jnp.concatenate([x, jnp.full((extra_rows, x.shape[1]), fill, x.dtype)], axis=0)

    def rows(x, fill):
        return jnp.concatenate([x, jnp.full((extra_rows,), fill, x.dtype)])

    padded = batch._replace(
        response_mask=widen(batch.response_mask, 0.0).at[batch.num_rows :].set(1.0),
        old_log_probs=widen(batch.old_log_probs, jnp.nan),
        advantages=widen(batch.advantages, jnp.inf),
        row_mask=rows(batch.row_mask, 0.0),
        group_ids=rows(batch.group_ids, 0),
        traj_ids=rows(batch.traj_ids, 0),
        turn_ids=rows(batch.turn_ids, 0),
        anchor_ids=rows(batch.anchor_ids, 0),
        episode_returns=rows(batch.episode_returns, 9.0),
        step_rewards=rows(batch.step_rewards, 9.0),
        action_valid=rows(batch.action_valid, 0.0),
    )
    return padded, widen(lp, -jnp.inf)


@SETTINGS
@given(batches(), st.integers(1, 3), st.integers(1, 3))
def test_padding_rows_and_tokens_change_nothing(data, extra_rows, extra_tokens):
    """Garbage in padding rows and tokens never reaches the loss or the real gradient (1e-6)."""
    batch, lp = data
    padded, padded_lp = pad(batch, lp, extra_rows, extra_tokens)
    n, t = batch.response_mask.shape
    for name, objective in OBJECTIVES:
        value, metrics, grad = loss_grad(objective, batch, lp)
        cleaned, _, _ = objective.prepare(padded)  # prepare zeroes padding once per batch
        p_value, p_metrics, p_grad = loss_grad(objective, cleaned, padded_lp)
        np.testing.assert_allclose(p_value, value, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(p_grad[:n, :t], grad, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(p_grad[n:], 0.0, atol=0.0, err_msg=name)
        for key in ("pg_clipfrac", "ppo_kl", "num_masked_seqs"):
            np.testing.assert_allclose(p_metrics[key], metrics[key], atol=1e-6, err_msg=key)


@SETTINGS
@given(batches(min_rows=2), st.randoms(use_true_random=False))
def test_row_order_does_not_matter(data, rnd):
    """Permuting rows leaves the loss unchanged and permutes the gradient (1e-6)."""
    batch, lp = data
    perm = np.arange(batch.num_rows)
    rnd.shuffle(perm)
    permuted = jax.tree.map(lambda x: x[perm], batch)
    for _, objective in OBJECTIVES:
        value, _, grad = loss_grad(objective, batch, lp)
        p_value, _, p_grad = loss_grad(objective, permuted, lp[perm])
        np.testing.assert_allclose(p_value, value, atol=1e-6)
        np.testing.assert_allclose(p_grad, grad[perm], atol=1e-6)


@settings(max_examples=8, deadline=None)
@given(batches())
def test_jit_equals_eager(data):
    batch, lp = data
    for _, objective in OBJECTIVES:
        eager = objective.loss(lp, batch)
        jitted = jax.jit(objective.loss)(lp, batch)
        np.testing.assert_allclose(float(jitted[0]), float(eager[0]), atol=1e-6)
