"""Reward shapers: invalid-action penalty (docs/algorithms.md §2.1), DAPO overlong shaping (§2.2,
TV-7) and the KL penalty in the reward with fixed and adaptive controllers (§2.3).

Tolerance: 1e-5 absolute (ATOL); the expected numbers are either the spec's (printed with 6
decimals) or computed independently here in float64 numpy. Each numeric check runs with and
without jit (chex.variants).
"""

from __future__ import annotations

from collections.abc import Callable

import chex
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from arlarena_jax.objectives import advantage as adv
from arlarena_jax.objectives import rewards as rw
from arlarena_jax.objectives.batch import TurnBatch, make_batch
from arlarena_jax.objectives.compose import Objective, PolicyLoss, RewardShaper, State

ATOL = 1e-5
UNUSED_LOSS = PolicyLoss("unused", lambda lp, b, m: (jnp.zeros_like(lp), {}))


def prepare(
    variant: Callable,
    shapers: tuple[RewardShaper, ...],
    batch: TurnBatch,
    state: State | None = None,
) -> tuple[TurnBatch, State, dict]:
    """``Objective.prepare`` with GRPO and the given shapers (``variant`` = jit or identity)."""
    objective = Objective(advantage=adv.grpo(), policy_loss=UNUSED_LOSS, shapers=shapers)
    state = objective.init_state() if state is None else state
    out, new_state, metrics = variant(lambda b, s: objective.prepare(b, s))(batch, state)
    return out, new_state, {k: float(v) for k, v in metrics.items()}


def last_token(lengths: np.ndarray, width: int) -> np.ndarray:
    """One-hot of each row's last valid token (reference for the placement)."""
    onehot = np.zeros((len(lengths), width))
    onehot[np.arange(len(lengths)), lengths - 1] = 1.0
    return onehot


# ---------------------------------------------------------------------------------------------
# Invalid-action penalty.
# ---------------------------------------------------------------------------------------------


class InvalidActionPenaltyTest(chex.TestCase):
    LENGTHS = np.array([3, 2, 1, 3, 2])
    MASK = (np.arange(3)[None, :] < LENGTHS[:, None]).astype(np.float32)
    RETURNS = np.array([10.0, 0.0, 10.0, 0.0, 99.0])
    VALID = np.array([1.0, 0.0, 0.0, 1.0, 0.0])
    ROW_MASK = np.array([1.0, 1.0, 1.0, 1.0, 0.0])  # row 4 is padding with garbage

    def batch(self) -> TurnBatch:
        return make_batch(
            self.MASK,
            np.zeros((5, 3)),
            group_ids=[0, 0, 1, 1, 0],
            episode_returns=self.RETURNS,
            action_valid=self.VALID,
            row_mask=self.ROW_MASK,
        )

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(0.1, 0.5)
    def test_penalty_on_last_token_and_step_adjust(self, coef):
        out, _, metrics = prepare(self.variant, (rw.invalid_action_penalty(coef),), self.batch())
        penalty = coef * (1.0 - self.VALID) * self.ROW_MASK
        scores = (self.RETURNS - penalty) * self.ROW_MASK
        expected = scores[:, None] * last_token(self.LENGTHS, 3)
        np.testing.assert_allclose(out.token_rewards, expected, atol=ATOL)
        np.testing.assert_allclose(out.step_reward_adjust, -penalty, atol=ATOL)
        # valid over real rows only: rows 0..3 → 2/4 (the padding row is invalid and ignored).
        np.testing.assert_allclose(metrics["valid_action_ratio"], 0.5, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    def test_tv4_valid_ratio(self):
        invalid = np.array([0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0], np.float32)
        batch = make_batch(
            np.ones((11, 3)), np.zeros((11, 3)), group_ids=np.zeros(11), action_valid=1 - invalid
        )
        _, _, metrics = prepare(self.variant, (rw.invalid_action_penalty(0.1),), batch)
        np.testing.assert_allclose(metrics["valid_action_ratio"], 9 / 11, atol=ATOL)

    def test_negative_coef_is_rejected(self):
        with pytest.raises(ValueError, match="coef"):
            rw.invalid_action_penalty(-0.1)


# ---------------------------------------------------------------------------------------------
# DAPO overlong shaping (TV-7).
# ---------------------------------------------------------------------------------------------


class DapoOverlongTest(chex.TestCase):
    LENGTHS = np.array([300, 410, 461, 512, 512])
    R_OVER = np.array([0.0, 0.0, -0.05, -0.1])  # TV-7 with L_max = 512, B = 102
    RETURNS = np.array([1.0, 0.0, 1.0, 0.0, 5.0])
    ROW_MASK = np.array([1.0, 1.0, 1.0, 1.0, 0.0])  # a padding row of full length

    @chex.variants(with_jit=True, without_jit=True)
    def test_tv7(self):
        mask = (np.arange(512)[None, :] < self.LENGTHS[:, None]).astype(np.float32)
        batch = make_batch(
            mask,
            np.zeros((5, 512)),
            group_ids=[0, 0, 1, 1, 1],
            episode_returns=self.RETURNS,
            row_mask=self.ROW_MASK,
        )
        out, _, metrics = prepare(self.variant, (rw.dapo_overlong(512),), batch)
        scores = np.append(self.RETURNS[:4] + self.R_OVER, 0.0)
        expected = scores[:, None] * last_token(self.LENGTHS, 512)
        np.testing.assert_allclose(out.token_rewards, expected, atol=ATOL)
        np.testing.assert_allclose(adv.row_scores(out)[:4], self.RETURNS[:4] + self.R_OVER)
        # Outcome shaping only: GiGPO step returns are not adjusted.
        np.testing.assert_array_equal(out.step_reward_adjust, 0.0)
        np.testing.assert_allclose(metrics["overlong_ratio"], 0.5, atol=ATOL)
        np.testing.assert_allclose(metrics["overlong_reward_mean"], -0.0375, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    def test_reward_function(self):
        lengths = jnp.array([300.0, 410.0, 461.0, 512.0])
        r_over = self.variant(lambda x: rw.overlong_reward(x, 512, 102, 0.1))(lengths)
        np.testing.assert_allclose(r_over, self.R_OVER, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    def test_explicit_buffer_and_factor(self):
        # L_max = 8, B = 4, factor 1: expected = 4, so r_over = −(L − 4)/4 for L > 4.
        lengths = np.array([2, 5, 8])
        mask = (np.arange(8)[None, :] < lengths[:, None]).astype(np.float32)
        batch = make_batch(mask, np.zeros((3, 8)), group_ids=[0, 0, 0])
        shaper = rw.dapo_overlong(8, buffer=4, penalty_factor=1.0)
        out, _, _ = prepare(self.variant, (shaper,), batch)
        np.testing.assert_allclose(adv.row_scores(out), [0.0, -0.25, -1.0], atol=ATOL)

    def test_invalid_settings_are_rejected(self):
        with pytest.raises(ValueError, match="max_response_length"):
            rw.dapo_overlong(0)
        with pytest.raises(ValueError, match="buffer"):
            rw.dapo_overlong(4)  # int(4/5) = 0
        with pytest.raises(ValueError, match="buffer"):
            rw.dapo_overlong(512, buffer=600)
        with pytest.raises(ValueError, match="penalty_factor"):
            rw.dapo_overlong(512, penalty_factor=-1.0)


# ---------------------------------------------------------------------------------------------
# KL in the reward.
# ---------------------------------------------------------------------------------------------


class KLInRewardTest(chex.TestCase):
    LENGTHS = np.array([3, 1, 2, 3, 2])
    MASK = (np.arange(3)[None, :] < LENGTHS[:, None]).astype(np.float32)
    ROW_MASK = np.array([1.0, 1.0, 1.0, 1.0, 0.0])  # row 4: padding with garbage log-probs
    RETURNS = np.array([1.0, 0.0, 0.0, 1.0, 7.0])

    def batch(self, scale: float) -> TurnBatch:
        rng = np.random.default_rng(7)
        old = rng.normal(-1.0, 0.5, (5, 3))
        ref = old - scale * rng.uniform(0.0, 1.0, (5, 3))  # k1 ≥ 0, mean ≈ scale/2
        ref[4] = 40.0  # garbage on the padding row
        ref[self.MASK == 0] -= 25.0  # garbage on padding tokens
        return make_batch(
            self.MASK,
            old,
            group_ids=[0, 0, 1, 1, 1],
            episode_returns=self.RETURNS,
            row_mask=self.ROW_MASK,
            ref_log_probs=ref,
        )

    def expected(self, batch: TurnBatch, beta: float, kind: str) -> tuple[np.ndarray, float]:
        """Independent float64 reference: (token_rewards, KL) for a given β."""
        old = np.asarray(batch.old_log_probs, np.float64)
        ref = np.asarray(batch.ref_log_probs, np.float64)
        if kind == "k1":
            kld = old - ref
        else:  # k3
            kappa = np.clip(ref - old, -20, 20)
            kld = np.clip(np.exp(kappa) - kappa - 1, -10, 10)
        mask = self.MASK * self.ROW_MASK[:, None]
        scores = self.RETURNS * self.ROW_MASK
        rewards = scores[:, None] * last_token(self.LENGTHS, 3) - beta * kld * mask
        per_row = (kld * mask).sum(-1) / np.maximum(mask.sum(-1), 1)
        kl = per_row[:4].mean()  # the four real rows
        return rewards, kl

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters("k1", "k3")
    def test_fixed_controller(self, kind):
        batch = self.batch(scale=0.2)
        shaper = rw.kl_in_reward(kind, rw.fixed_kl_controller(0.05))
        out, state, metrics = prepare(self.variant, (shaper,), batch)
        rewards, kl = self.expected(batch, 0.05, kind)
        np.testing.assert_allclose(out.token_rewards, rewards, atol=ATOL)
        np.testing.assert_allclose(metrics["kl_reward_penalty"], kl, atol=ATOL)
        np.testing.assert_allclose(metrics["kl_reward_coef"], 0.05, atol=ATOL)
        np.testing.assert_allclose(state[0]["kl_reward_coef"], 0.05, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(
        ("clipped_up", 1.0),  # KL ≈ 0.5 ≫ target: the error clips at +0.2
        ("unclipped", 0.2),  # KL ≈ 0.1 ≈ target: the error is inside ±0.2
        ("clipped_down", 0.02),  # KL ≈ 0.01 ≪ target: the error clips at −0.2
    )
    def test_adaptive_controller_over_two_steps(self, scale):
        batch = self.batch(scale=scale)
        init, target, horizon = 0.05, 0.1, 10
        shaper = rw.kl_in_reward("k1", rw.adaptive_kl_controller(init, target, horizon))
        beta = init
        state = None
        for _ in range(2):
            out, state, metrics = prepare(self.variant, (shaper,), batch, state)
            rewards, kl = self.expected(batch, beta, "k1")
            np.testing.assert_allclose(out.token_rewards, rewards, atol=ATOL)
            np.testing.assert_allclose(metrics["kl_reward_penalty"], kl, atol=ATOL)
            np.testing.assert_allclose(metrics["kl_reward_coef"], beta, atol=ATOL)
            error = np.clip(kl / target - 1.0, -0.2, 0.2)
            beta = beta * (1.0 + error * 4 / horizon)  # n_rows = 4 real rows
            np.testing.assert_allclose(state[0]["kl_reward_coef"], beta, atol=ATOL)
        if scale == 1.0:
            np.testing.assert_allclose(beta, 0.05 * 1.08**2, atol=ATOL)
        if scale == 0.02:
            np.testing.assert_allclose(beta, 0.05 * 0.92**2, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    def test_shapers_compose_in_order(self):
        # Penalty then KL: the KL term is subtracted on top of the penalised outcome reward.
        batch = self.batch(scale=0.2)._replace(action_valid=jnp.array([1.0, 0.0, 1.0, 0.0, 0.0]))
        shapers = (rw.invalid_action_penalty(0.1), rw.kl_in_reward("k1"))
        out, state, _ = prepare(self.variant, shapers, batch)
        rewards, _ = self.expected(batch, 0.001, "k1")
        penalty = 0.1 * np.array([0.0, 1.0, 0.0, 1.0, 0.0])
        rewards = rewards - penalty[:, None] * last_token(self.LENGTHS, 3)
        np.testing.assert_allclose(out.token_rewards, rewards, atol=ATOL)
        assert state[0] == {}  # the penalty's own (empty) state, then the KL shaper's
        np.testing.assert_allclose(state[1]["kl_reward_coef"], 0.001, atol=1e-9)

    @chex.variants(with_jit=True, without_jit=True)
    def test_two_stateful_shapers_keep_separate_states(self):
        """Two adaptive KL-in-reward controllers: each β lives in its own state entry and
        follows its own controller over two steps (one merged dict would collide)."""
        batch = self.batch(scale=1.0)
        controllers = ((0.05, 0.1, 10), (0.02, 0.5, 20))  # (β₀, target, horizon)
        shapers = tuple(rw.kl_in_reward("k1", rw.adaptive_kl_controller(*c)) for c in controllers)
        betas = [c[0] for c in controllers]
        state = None
        for _ in range(2):
            out, state, _ = prepare(self.variant, shapers, batch, state)
            rewards, kl = self.expected(batch, sum(betas), "k1")  # both penalties subtract
            np.testing.assert_allclose(out.token_rewards, rewards, atol=ATOL)
            assert len(state) == 2
            for i, (_, target, horizon) in enumerate(controllers):
                error = np.clip(kl / target - 1.0, -0.2, 0.2)
                betas[i] = betas[i] * (1.0 + error * 4 / horizon)  # n_rows = 4 real rows
                np.testing.assert_allclose(state[i]["kl_reward_coef"], betas[i], atol=1e-7)
        assert abs(betas[0] - betas[1]) > 0.01  # the two coefficients really differ

    def test_init_state_and_validation(self):
        shaper = rw.kl_in_reward("k3", rw.adaptive_kl_controller(0.2))
        state = Objective(adv.grpo(), UNUSED_LOSS, shapers=(shaper,)).init_state()
        assert len(state) == 1 and set(state[0]) == {"kl_reward_coef"}
        assert state[0]["kl_reward_coef"].dtype == jnp.float32
        np.testing.assert_allclose(state[0]["kl_reward_coef"], 0.2)
        with pytest.raises(ValueError, match="unknown KL estimator"):
            rw.kl_in_reward("k9")
        with pytest.raises(ValueError, match="target_kl"):
            rw.adaptive_kl_controller(target_kl=0.0)
        with pytest.raises(ValueError, match="horizon"):
            rw.adaptive_kl_controller(horizon=0)
        with pytest.raises(ValueError, match="ref_log_probs"):
            prepare(lambda f: f, (shaper,), self.batch(0.2)._replace(ref_log_probs=None))
        with pytest.raises(ValueError, match="kl_reward_coef"):
            prepare(lambda f: f, (shaper,), self.batch(0.2), state=({},))
        with pytest.raises(ValueError, match="state of 0 entries for 1 reward shapers"):
            prepare(lambda f: f, (shaper,), self.batch(0.2), state=())
