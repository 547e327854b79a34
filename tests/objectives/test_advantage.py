"""Advantage estimators against spec §12 TV-4 and TV-5, invariances and property laws
(docs/algorithms.md §3).

Tolerance: 1e-5 absolute (ATOL) for every spec number: the vectors are printed with 6 decimals
(vanilla_grpo's "0.57733" with 5, whose rounding error is 3e-7) and float32 arithmetic on
values up to ~10 adds ~1e-6. Invariance checks compare two float32 runs of the same estimator
(2e-5, summation order may change under a permutation). Property laws use 1e-4 as the brief asks.
Each numeric check runs with and without jit (chex.variants).
"""

from __future__ import annotations

from collections.abc import Callable

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized
from hypothesis import given, settings
from hypothesis import strategies as st

from arlarena_jax.objectives import advantage as adv
from arlarena_jax.objectives.batch import TurnBatch, make_batch
from arlarena_jax.objectives.compose import (
    AdvantageEstimator,
    Objective,
    PolicyLoss,
    RewardShaper,
)
from arlarena_jax.objectives.rewards import invalid_action_penalty
from tests.helpers.spec_vectors import TV4_INVALID, TV4_MASK, tv4_batch

ATOL = 1e-5
INVARIANCE_ATOL = 2e-5
LAW_ATOL = 1e-4
SETTINGS = settings(max_examples=40, deadline=None)

UNUSED_LOSS = PolicyLoss("unused", lambda lp, b, m: (jnp.zeros_like(lp), {}))
PENALTY = invalid_action_penalty(0.1)


def prepare(
    variant: Callable,
    estimator: AdvantageEstimator,
    batch: TurnBatch,
    shapers: tuple[RewardShaper, ...] = (PENALTY,),
) -> TurnBatch:
    """Run ``Objective.prepare`` for one estimator (``variant`` = jit or identity)."""
    objective = Objective(advantage=estimator, policy_loss=UNUSED_LOSS, shapers=shapers)
    out, _, _ = variant(lambda b: objective.prepare(b))(batch)
    return out


# ---------------------------------------------------------------------------------------------
# TV-4: 11 turn rows, T = 3, penalty c = 0.1, γ = 0.95 (its batch: tests/helpers/spec_vectors.py).
# ---------------------------------------------------------------------------------------------


TV4_SCORES = [10, 10, 0, -0.1, 0, 10, -0.1, 0, 0, 0, 0]
TV4_GRPO = [0.912851, 0.912851, -0.906785, -0.924982, -0.906785, 0.912851]
TV4_GRPO += [-1.788814, 0.447204, 0.447204, 0.447204, 0.447204]
TV4_VANILLA = [0.57735, 0.57735, -1.148946, -1.166209, -1.148946, 0.57735, -2.886651]
TV4_VANILLA += [0.57733] * 4
TV4_DRGRPO = [5.016667, 5.016667, -4.983333, -5.083333, -4.983333, 5.016667, -0.08]
TV4_DRGRPO += [0.02] * 4
TV4_RLOO = [6.02, 6.02, -5.98, -6.1, -5.98, 6.02, -0.1, 0.025, 0.025, 0.025, 0.025]
TV4_RFPP_BASELINE = [1.322924, 1.322924, -1.312806, -1.339163, -1.312806, 1.322924, -0.020419]
TV4_RFPP_BASELINE += [0.005938] * 4
TV4_STEP_RETURNS = [9.5, 10, 0, -0.1, 0, 10, -0.1, 0, 0, 0, 0]
TV4_GIGPO_STD_STEP = [0.532414, 0.707107, -1.153563, 0, -0.707107, 0.621149, -1.154681, 0]
TV4_GIGPO_STD_STEP += [0.57734, 0, 0.57734]
TV4_GIGPO_STD = [1.445264, 1.619957, -2.060348, -0.924982, -1.613892, 1.534, -2.943495]
TV4_GIGPO_STD += [0.447204, 1.024544, 0.447204, 1.024544]
TV4_GIGPO_MEAN_STEP = [3, 5, -6.5, 0, -5, 3.5, -0.066667, 0, 0.033333, 0, 0.033333]
TV4_GIGPO_MEAN = [8.016667, 10.016667, -11.483333, -5.083333, -9.983333, 8.516667, -0.146667]
TV4_GIGPO_MEAN += [0.02, 0.053333, 0.02, 0.053333]
TV4_GIGPO = {  # mode: (A_ep, A_step, A with ω = 1)
    "mean_std_norm": (TV4_GRPO, TV4_GIGPO_STD_STEP, TV4_GIGPO_STD),
    "mean_norm": (TV4_DRGRPO, TV4_GIGPO_MEAN_STEP, TV4_GIGPO_MEAN),
}
TV4_EMPG_H = [0.5, 0.125, 1, 0.375, 0.625, 0.25, 0.875, 0, 0.75, 0.5, 0.25]
TV4_EMPG_G = [0.935372, 1.360958, 0.567332, 1.059915, 0.825463, 1.201041, 0.642871, 1.542167]
TV4_EMPG_G += [0.728468, 0.935372, 1.201041]
TV4_EMPG_NEXT_ROWS = [0, 2, 3, 6, 8]
TV4_EMPG_MEAN = 0.177788
TV4_EMPG = [0.720192, 1.064564, -0.657871, -1.131426, -0.926305, 0.918584, -1.277764]
TV4_EMPG += [0.511876, 0.178313, 0.240514, 0.359323]


def assert_rows(out: TurnBatch, expected, mask=TV4_MASK, atol: float = ATOL) -> None:
    """advantages == expected row values broadcast over the valid tokens (0 elsewhere)."""
    expected = np.asarray(expected, np.float64)[:, None] * mask
    np.testing.assert_allclose(np.asarray(out.advantages), expected, atol=atol)


class TV4Test(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_row_scores_after_penalty(self):
        out = prepare(self.variant, adv.grpo(), tv4_batch())
        np.testing.assert_allclose(adv.row_scores(out), TV4_SCORES, atol=ATOL)
        np.testing.assert_allclose(out.step_reward_adjust, -0.1 * TV4_INVALID, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(
        ("grpo", adv.grpo(), TV4_GRPO),
        ("vanilla_grpo", adv.vanilla_grpo(), TV4_VANILLA),
        ("drgrpo", adv.drgrpo(), TV4_DRGRPO),
        ("grpo_no_std", adv.grpo(norm_by_std=False), TV4_DRGRPO),
        ("rloo", adv.rloo(), TV4_RLOO),
        ("rf_pp_baseline", adv.reinforce_plus_plus_baseline(), TV4_RFPP_BASELINE),
        ("empg", adv.empg(), TV4_EMPG),
    )
    def test_outcome_estimators(self, estimator, expected):
        out = prepare(self.variant, estimator, tv4_batch())
        assert_rows(out, expected)
        # Every outcome estimator returns its advantages as returns.
        np.testing.assert_allclose(out.returns, out.advantages, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    def test_gigpo_step_returns(self):
        out = prepare(self.variant, adv.grpo(), tv4_batch())
        g = self.variant(lambda b: adv.step_returns(b, 0.95))(out)
        np.testing.assert_allclose(g, TV4_STEP_RETURNS, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters("mean_std_norm", "mean_norm")
    def test_gigpo(self, mode):
        episode, step, total = TV4_GIGPO[mode]
        batch = tv4_batch()
        # ω = 0 isolates A_ep, ω = 1 gives A, ω = 2 checks that A_step enters linearly.
        out0 = prepare(self.variant, adv.gigpo(0.95, 0.0, mode), batch)
        out1 = prepare(self.variant, adv.gigpo(0.95, 1.0, mode), batch)
        out2 = prepare(self.variant, adv.gigpo(0.95, 2.0, mode), batch)
        assert_rows(out0, episode)
        assert_rows(out1, total)
        a_step = np.asarray(out1.advantages - out0.advantages)
        np.testing.assert_allclose(a_step, np.asarray(step)[:, None] * TV4_MASK, atol=ATOL)
        expected2 = (np.asarray(episode) + 2.0 * np.asarray(step))[:, None] * TV4_MASK
        np.testing.assert_allclose(out2.advantages, expected2, atol=2 * ATOL)
        np.testing.assert_allclose(out1.returns, out1.advantages, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    def test_empg_intermediates(self):
        batch = tv4_batch()
        h = self.variant(adv.normalized_row_entropy)(
            batch.old_entropy, batch.response_mask, batch.row_mask
        )
        np.testing.assert_allclose(h, TV4_EMPG_H, atol=ATOL)
        e = np.exp(-np.asarray(h, np.float64))
        np.testing.assert_allclose(e / (e.mean() + 1e-8), TV4_EMPG_G, atol=ATOL)
        f_next, has_next = self.variant(adv.next_turn_value)(
            jnp.exp(-h), batch.traj_ids, batch.turn_ids, batch.row_mask
        )
        np.testing.assert_array_equal(np.flatnonzero(np.asarray(has_next)), TV4_EMPG_NEXT_ROWS)
        next_row = {0: 1, 2: 3, 3: 4, 6: 7, 8: 9}
        expected_f = [np.exp(-TV4_EMPG_H[next_row[i]]) if i in next_row else 0 for i in range(11)]
        np.testing.assert_allclose(f_next, expected_f, atol=ATOL)
        # The subtracted batch-wide scalar: (g·A_GRPO + ζ·f_next)[:, 0] − A_EMPG[:, 0].
        grpo_rows = np.asarray(prepare(self.variant, adv.grpo(), batch).advantages[:, 0])
        empg_rows = np.asarray(prepare(self.variant, adv.empg(), batch).advantages[:, 0])
        shifted = np.asarray(TV4_EMPG_G) * grpo_rows + 0.05 * np.asarray(f_next)
        np.testing.assert_allclose(shifted - empg_rows, TV4_EMPG_MEAN, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    def test_pass_at_k_on_tied_groups_is_zero(self):
        # Both TV-4 groups have a tied maximum (10, 10, 10 and 0 ×4), so r_max − r_2nd = 0.
        out = prepare(self.variant, adv.pass_at_k(), tv4_batch())
        assert_rows(out, np.zeros(11))


# ---------------------------------------------------------------------------------------------
# TV-5: GAE, REINFORCE++ without baseline, pass@k.
# ---------------------------------------------------------------------------------------------


def numpy_whiten(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Independent reference of the masked token whitening of docs/algorithms.md §3.5 (float64)."""
    valid = x[mask > 0]
    return (x - valid.mean()) / np.sqrt(valid.var(ddof=1) + 1e-8) * mask


class TV5Test(chex.TestCase):
    GAE_MASK = np.array([[1, 1, 1, 0]], np.float32)

    def gae_batch(self) -> TurnBatch:
        # The episode return 1 lands on the last valid token: r = [0, 0, 1, 0].
        return make_batch(
            self.GAE_MASK,
            np.zeros((1, 4)),
            group_ids=[0],
            episode_returns=[1.0],
            values=[[0.5, 0.6, 0.7, 0.0]],
        )

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(
        (1.0, 1.0, [0.5, 0.4, 0.3, 0.0], [1.0, 1.0, 1.0, 0.0]),
        (0.9, 0.8, [0.21712, 0.246, 0.3, 0.0], [0.71712, 0.846, 1.0, 0.0]),
    )
    def test_gae(self, gamma, lam, raw, returns):
        out = prepare(self.variant, adv.gae(gamma, lam), self.gae_batch(), shapers=())
        np.testing.assert_allclose(out.returns, [returns], atol=ATOL)
        raw_from_returns = out.returns - out.values * self.GAE_MASK
        np.testing.assert_allclose(raw_from_returns, [raw], atol=ATOL)
        expected = numpy_whiten(np.asarray([raw], np.float64), self.GAE_MASK)
        np.testing.assert_allclose(out.advantages, expected, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(
        (1.0, [1.0, 1.0, 1.0, 0.0], [[0.730297] * 3 + [0.0], [-1.095445] * 2 + [0.0] * 2]),
        (
            0.95,
            [0.9025, 0.95, 1.0, 0.0],
            [[0.636097, 0.727105, 0.822903, 0.0], [-1.093053, -1.093053, 0.0, 0.0]],
        ),
    )
    def test_reinforce_plus_plus(self, gamma, returns0, advantages):
        batch = make_batch(
            [[1, 1, 1, 0], [1, 1, 0, 0]],
            np.zeros((2, 4)),
            group_ids=[0, 0],
            episode_returns=[1.0, 0.0],
        )
        out = prepare(self.variant, adv.reinforce_plus_plus(gamma), batch, shapers=())
        np.testing.assert_allclose(out.token_rewards, [[0, 0, 1, 0], [0, 0, 0, 0]], atol=ATOL)
        np.testing.assert_allclose(out.returns, [returns0, [0.0] * 4], atol=ATOL)
        np.testing.assert_allclose(out.advantages, advantages, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(
        ("std", True, [1.0, 0.0, 0.0, 1.414214, 0.0]),
        ("no_std", False, [0.5, 0.0, 0.0, 0.8, 0.0]),
    )
    def test_pass_at_k(self, norm_by_std, expected):
        # Groups [1, 0, 0.5] and [1, 0.2]; only each group's best row is nonzero.
        batch = make_batch(
            np.ones((5, 2)),
            np.zeros((5, 2)),
            group_ids=[0, 0, 0, 1, 1],
            episode_returns=[1.0, 0.0, 0.5, 1.0, 0.2],
        )
        out = prepare(self.variant, adv.pass_at_k(norm_by_std), batch, shapers=())
        assert_rows(out, expected, mask=np.ones((5, 2)))

    @chex.variants(with_jit=True, without_jit=True)
    def test_pass_at_k_singleton_and_ties(self):
        # Group 0 ties at the max (→ 0), group 1 is a singleton (→ 0: documented deviation).
        batch = make_batch(
            np.ones((4, 2)),
            np.zeros((4, 2)),
            group_ids=[0, 0, 0, 1],
            episode_returns=[1.0, 1.0, 0.0, 5.0],
        )
        out = prepare(self.variant, adv.pass_at_k(), batch, shapers=())
        assert_rows(out, np.zeros(4), mask=np.ones((4, 2)))


# ---------------------------------------------------------------------------------------------
# Invariances: padding rows, padding tokens, row permutations.
# ---------------------------------------------------------------------------------------------

ALL_ESTIMATORS = (
    ("grpo", adv.grpo()),
    ("grpo_no_std", adv.grpo(norm_by_std=False)),
    ("vanilla_grpo", adv.vanilla_grpo()),
    ("drgrpo", adv.drgrpo()),
    ("rloo", adv.rloo()),
    ("rf_pp_baseline", adv.reinforce_plus_plus_baseline()),
    ("rf_pp", adv.reinforce_plus_plus(0.95)),
    ("gae", adv.gae(0.95, 0.9)),
    ("pass_at_k", adv.pass_at_k()),
    ("gigpo_mean_norm", adv.gigpo(0.95, 1.0, "mean_norm")),
    ("gigpo_mean_std_norm", adv.gigpo(0.95, 1.0, "mean_std_norm")),
    ("empg", adv.empg()),
)
INT_FIELDS = ("group_ids", "traj_ids", "turn_ids", "anchor_ids")


def pad_batch(batch: TurnBatch, extra_rows: int, extra_tokens: int, seed: int) -> TurnBatch:
    """Append garbage padding rows (row_mask 0) and padding tokens (response_mask 0)."""
    rng = np.random.default_rng(seed)
    n, t = batch.response_mask.shape
    n2, t2 = n + extra_rows, t + extra_tokens
    fields = {}
    for name, value in batch._asdict().items():
        if value is None:
            continue
        value = np.asarray(value)
        if value.ndim == 2:
            if name == "response_mask":
                padded = rng.integers(0, 2, (n2, t2)).astype(np.float32)
                padded[:n] = 0.0
            else:
                padded = rng.uniform(-30.0, 30.0, (n2, t2)).astype(np.float32)
        elif name == "row_mask":
            padded = np.zeros(n2, np.float32)
        elif name in INT_FIELDS:
            padded = rng.integers(0, n2, n2).astype(np.int32)
        else:
            padded = rng.uniform(-30.0, 30.0, n2).astype(np.float32)
        padded[tuple(slice(0, s) for s in value.shape)] = value
        fields[name] = jnp.asarray(padded)
    return TurnBatch(**fields)


def permute_batch(batch: TurnBatch, perm: np.ndarray) -> TurnBatch:
    """Reorder the rows of every field; ids keep their values (they are labels)."""
    return TurnBatch(**{k: None if v is None else v[perm] for k, v in batch._asdict().items()})


class InvarianceTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(*ALL_ESTIMATORS)
    def test_padding_rows_and_tokens(self, estimator):
        batch = tv4_batch()
        reference = prepare(self.variant, estimator, batch)
        for extra_rows, extra_tokens, seed in ((3, 0, 0), (0, 2, 1), (5, 3, 2)):
            out = prepare(self.variant, estimator, pad_batch(batch, extra_rows, extra_tokens, seed))
            np.testing.assert_allclose(
                out.advantages[:11, :3], reference.advantages, atol=INVARIANCE_ATOL
            )
            np.testing.assert_allclose(
                out.returns[:11, :3], reference.returns, atol=INVARIANCE_ATOL
            )
            np.testing.assert_array_equal(out.advantages[11:], 0.0)
            np.testing.assert_array_equal(out.advantages[:, 3:], 0.0)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(*ALL_ESTIMATORS)
    def test_padding_rows_that_mimic_real_rows(self, estimator):
        # Padding rows sharing real group/traj/anchor ids, at the next turn (they would be EMPG's
        # next-turn rows and GiGPO's later steps if they counted) or at the same turn.
        batch = tv4_batch()
        reference = prepare(self.variant, estimator, batch)
        padded = pad_batch(batch, 11, 0, seed=3)
        padded = padded._replace(
            group_ids=jnp.tile(batch.group_ids, 2),
            traj_ids=jnp.tile(batch.traj_ids, 2),
            anchor_ids=jnp.tile(batch.anchor_ids, 2),
            turn_ids=jnp.concatenate([batch.turn_ids, batch.turn_ids + jnp.arange(11) % 2]),
        )
        out = prepare(self.variant, estimator, padded)
        np.testing.assert_allclose(out.advantages[:11], reference.advantages, atol=INVARIANCE_ATOL)
        np.testing.assert_array_equal(out.advantages[11:], 0.0)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(*ALL_ESTIMATORS)
    def test_row_permutation(self, estimator):
        batch = tv4_batch()
        reference = prepare(self.variant, estimator, batch)
        for seed in (0, 1):
            perm = np.random.default_rng(seed).permutation(11)
            out = prepare(self.variant, estimator, permute_batch(batch, perm))
            np.testing.assert_allclose(
                out.advantages, reference.advantages[perm], atol=INVARIANCE_ATOL
            )

    @chex.variants(with_jit=True, without_jit=True)
    def test_empg_duplicated_row_finds_next_turn(self):
        # adjust_batch duplicates rows (same traj and turn); both copies see the next turn.
        values = jnp.arange(4.0) + 1.0
        f_next, has_next = self.variant(adv.next_turn_value)(
            values,
            jnp.array([0, 0, 0, 1]),
            jnp.array([0, 0, 1, 0]),
            jnp.ones(4),
        )
        np.testing.assert_array_equal(has_next, [True, True, False, False])
        np.testing.assert_allclose(f_next, [3.0, 3.0, 0.0, 0.0], atol=ATOL)


# ---------------------------------------------------------------------------------------------
# Construction-time and call-time validation.
# ---------------------------------------------------------------------------------------------


def test_gigpo_validates_mode_and_threshold():
    with pytest.raises(ValueError, match="mode"):
        adv.gigpo(mode="std_norm")
    with pytest.raises(ValueError, match="similarity_threshold"):
        adv.gigpo(similarity_threshold=0.0)
    with pytest.raises(ValueError, match="similarity_threshold"):
        adv.gigpo(similarity_threshold=1.5)
    assert adv.gigpo(similarity_threshold=0.95).anchor_similarity == 0.95
    assert adv.gigpo().anchor_similarity is None


def test_discount_factors_are_validated():
    with pytest.raises(ValueError, match="gamma"):
        adv.reinforce_plus_plus(gamma=1.5)
    with pytest.raises(ValueError, match="lam"):
        adv.gae(lam=-0.1)


def test_missing_inputs_raise_clear_errors():
    batch = tv4_batch()
    with pytest.raises(ValueError, match="values"):
        prepare(lambda f: f, adv.gae(), batch._replace(values=None))
    with pytest.raises(ValueError, match="old_entropy"):
        prepare(lambda f: f, adv.empg(), batch._replace(old_entropy=None))
    with pytest.raises(ValueError, match="token_rewards"):
        adv.grpo().fn(batch)


# ---------------------------------------------------------------------------------------------
# Property laws (hypothesis). Shapes are fixed (N = 10, T = 2) so each jitted prepare compiles
# once; padding rows carry garbage.
# ---------------------------------------------------------------------------------------------

N_ROWS = 10


def _jitted(estimator: AdvantageEstimator) -> Callable[[TurnBatch], TurnBatch]:
    objective = Objective(advantage=estimator, policy_loss=UNUSED_LOSS)
    return jax.jit(lambda b: objective.prepare(b)[0])


PREPARE_GRPO = _jitted(adv.grpo())
PREPARE_VANILLA = _jitted(adv.vanilla_grpo())
PREPARE_DRGRPO = _jitted(adv.drgrpo())
PREPARE_RLOO = _jitted(adv.rloo())
PREPARE_RFPP_BASELINE = _jitted(adv.reinforce_plus_plus_baseline())


@st.composite
def group_batches(draw) -> tuple[TurnBatch, np.ndarray, np.ndarray, np.ndarray]:
    """(batch, scores, group ids, real-row mask): one row per trajectory, garbage padding."""
    n_real = draw(st.integers(1, N_ROWS))
    groups = np.asarray(draw(st.lists(st.integers(0, 3), min_size=N_ROWS, max_size=N_ROWS)))
    scores = np.asarray(
        draw(st.lists(st.integers(-5, 5), min_size=N_ROWS, max_size=N_ROWS)), np.float32
    )
    lengths = np.asarray(draw(st.lists(st.integers(1, 2), min_size=N_ROWS, max_size=N_ROWS)))
    real = np.arange(N_ROWS) < n_real
    scores = np.where(real, scores, 1e3)  # garbage on padding rows
    mask = (np.arange(2)[None, :] < lengths[:, None]).astype(np.float32)
    batch = make_batch(
        mask,
        np.zeros((N_ROWS, 2)),
        group_ids=groups,
        episode_returns=scores,
        row_mask=real.astype(np.float32),
    )
    return batch, scores, groups, real


def _row_values(out: TurnBatch) -> np.ndarray:
    return np.asarray(out.advantages[:, 0], np.float64)


@SETTINGS
@given(group_batches())
def test_grpo_groups_have_zero_mean_unit_std(case):
    batch, scores, groups, real = case
    a = _row_values(PREPARE_GRPO(batch))
    assert np.all(a[~real] == 0.0)
    for g in np.unique(groups[real]):
        members = real & (groups == g)
        s, ag = scores[members], a[members]
        if members.sum() == 1:
            np.testing.assert_allclose(ag, s / (1.0 + 1e-6), atol=LAW_ATOL)  # μ = 0, σ = 1
        elif np.unique(s).size == 1:
            np.testing.assert_allclose(ag, 0.0, atol=LAW_ATOL)
        else:
            np.testing.assert_allclose(ag.mean(), 0.0, atol=LAW_ATOL)
            np.testing.assert_allclose(ag.std(ddof=1), 1.0, atol=LAW_ATOL)


@SETTINGS
@given(group_batches())
def test_rloo_is_scaled_drgrpo(case):
    batch, scores, groups, real = case
    rloo_rows = _row_values(PREPARE_RLOO(batch))
    dr_rows = _row_values(PREPARE_DRGRPO(batch))
    counts = np.array([np.sum(real & (groups == g)) for g in groups])
    expected = np.where(counts > 1, counts / np.maximum(counts - 1, 1) * dr_rows, scores)
    np.testing.assert_allclose(rloo_rows, np.where(real, expected, 0.0), atol=LAW_ATOL)


@SETTINGS
@given(group_batches())
def test_vanilla_grpo_equals_grpo_for_one_turn_trajectories(case):
    batch, _, _, _ = case  # make_batch's default: every row is its own trajectory
    np.testing.assert_allclose(
        _row_values(PREPARE_VANILLA(batch)), _row_values(PREPARE_GRPO(batch)), atol=LAW_ATOL
    )


@SETTINGS
@given(group_batches())
def test_rf_pp_baseline_tokens_are_whitened(case):
    batch, scores, groups, real = case
    out = PREPARE_RFPP_BASELINE(batch)
    mask = np.asarray(out.response_mask) * real[:, None]
    tokens = np.asarray(out.advantages, np.float64)[mask > 0]
    sizes = np.array([np.sum(real & (groups == g)) for g in groups])
    means = np.array(
        [scores[real & (groups == g)].mean() if real[i] else 0.0 for i, g in enumerate(groups)]
    )
    centred = scores - np.where(sizes > 1, means, 0.0)  # singleton groups: μ = 0
    if mask.sum() < 2 or np.ptp(centred[real]) == 0:
        np.testing.assert_allclose(tokens, 0.0, atol=LAW_ATOL)
    else:
        np.testing.assert_allclose(tokens.mean(), 0.0, atol=LAW_ATOL)
        np.testing.assert_allclose(tokens.std(ddof=1), 1.0, atol=LAW_ATOL)
