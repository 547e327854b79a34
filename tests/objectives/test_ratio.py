"""Policy losses against spec §12 TV-2a–e: values, metrics, per-token losses and gradients.

Tolerance: 1e-5 absolute (the spec's vectors are printed to 6 decimals, float32 arithmetic).
Each check runs with and without jit (chex.variants).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized

from arlarena_jax.objectives import aggregate as agg
from arlarena_jax.objectives import ratio
from arlarena_jax.objectives.compose import AdvantageEstimator, chain
from tests.helpers.spec_vectors import TV2_DELTA, TV2_LP, TV2_MASK, TV2_OLD, ragged, tv2_batch

ATOL = 1e-5
GIVEN = AdvantageEstimator("given", lambda b: (b.advantages, b.advantages))


def loss_and_grad(variant, *components, batch=None, log_probs=TV2_LP):
    """(pg_loss, metrics, d pg_loss / d lp) of an objective on TV-2's batch."""
    batch = tv2_batch() if batch is None else batch
    objective = chain(GIVEN, *components)

    def run(lp):
        return jax.value_and_grad(lambda x: objective.loss(x, batch), has_aux=True)(lp)

    (value, metrics), grad = variant(run)(log_probs)
    return float(value), {k: float(v) for k, v in metrics.items()}, np.asarray(grad)


def per_token_loss(variant, loss):
    batch = tv2_batch()
    return np.asarray(variant(lambda lp: loss.fn(lp, batch, TV2_MASK)[0])(TV2_LP))


class VanillaTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(
        ("token_mean", agg.token_mean(), -0.088491),
        ("seq_mean_token_mean", agg.seq_mean_token_mean(), 0.054434),
        ("seq_mean_token_sum", agg.seq_mean_token_sum(), -0.250724),
        ("seq_mean_token_sum_norm", agg.seq_mean_token_sum_norm(), -0.376087),
    )
    def test_tv2a_values_and_metrics(self, aggregation, expected):
        value, metrics, _ = loss_and_grad(self.variant, ratio.vanilla(), aggregation)
        np.testing.assert_allclose(value, expected, atol=ATOL)
        np.testing.assert_allclose(metrics["pg_clipfrac"], 4 / 17, atol=ATOL)
        np.testing.assert_allclose(metrics["pg_clipfrac_lower"], 1 / 17, atol=ATOL)
        np.testing.assert_allclose(metrics["ppo_kl"], -1.13 / 17, atol=ATOL)
        self.assertEqual(metrics["num_masked_seqs"], 0.0)

    @chex.variants(with_jit=True, without_jit=True)
    def test_tv2a_dr_grpo(self):
        value, _, _ = loss_and_grad(self.variant, ratio.dr_grpo(4), agg.seq_mean_token_sum())
        np.testing.assert_allclose(value, -0.062681, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    def test_tv2a_per_token_loss_and_grad(self):
        expected_loss = ragged(
            [
                [-1, -1.2, -0.904837],
                [1.5, 0.4, 0.552585, 0.5],
                [0.475615, 0.490099],
                [-0.884137, -0.96, -0.592655, -0.841017],
                [0.96],
                [0, 0, 0],
            ]
        )
        got = per_token_loss(self.variant, ratio.vanilla()) * np.asarray(TV2_MASK)
        np.testing.assert_allclose(got, expected_loss, atol=ATOL)
        expected_grad = np.array(
            [
                [-0.058824, 0, -0.053226, 0],
                [0, 0, 0.032505, 0.029412],
                [0.027977, 0.028829, 0, 0],
                [-0.052008, 0, -0.034862, -0.049472],
                [0, 0, 0, 0],
                [0, 0, 0, 0],
            ]
        )
        _, _, grad = loss_and_grad(self.variant, ratio.vanilla())
        np.testing.assert_allclose(grad, expected_grad, atol=ATOL)
        # Token (3,2): A > 0 and r = 0.74 < 0.8 stays active (PPO does not clip that side).
        np.testing.assert_allclose(grad[3, 2], -0.8 * np.exp(-0.3) / 17, atol=1e-7)


class SequenceMaskTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(
        ("delta_3e-3", 3e-3, 2, -0.245004, 3 / 14, -0.107143, 0.071429),
        ("delta_0.223", 0.223, 1, -0.154022, 0.1875, -0.089375, 0.0625),
    )
    def test_tv2b(self, delta, masked, loss, clipfrac, ppo_kl, lower):
        value, metrics, _ = loss_and_grad(self.variant, ratio.sequence_mask(delta), ratio.vanilla())
        np.testing.assert_allclose(value, loss, atol=ATOL)
        self.assertEqual(metrics["num_masked_seqs"], masked)
        np.testing.assert_allclose(metrics["pg_clipfrac"], clipfrac, atol=ATOL)
        np.testing.assert_allclose(metrics["ppo_kl"], ppo_kl, atol=ATOL)
        np.testing.assert_allclose(metrics["pg_clipfrac_lower"], lower, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    def test_tv2b_grad_is_tv2a_rescaled_with_masked_rows_zero(self):
        _, _, plain = loss_and_grad(self.variant, ratio.vanilla())
        _, _, masked = loss_and_grad(self.variant, ratio.sequence_mask(3e-3), ratio.vanilla())
        expected = plain * 17 / 14
        expected[[2, 4]] = 0.0
        np.testing.assert_allclose(masked, expected, atol=ATOL)


class GSPOTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_tv2c_sampo_setting(self):
        value, metrics, grad = loss_and_grad(
            self.variant, ratio.gspo(3e-3, 4e-3), agg.seq_mean_token_mean()
        )
        np.testing.assert_allclose(value, 0.093772, atol=ATOL)
        np.testing.assert_allclose(metrics["pg_clipfrac"], 10 / 17, atol=ATOL)
        np.testing.assert_allclose(metrics["ppo_kl"], -0.066471, atol=ATOL)
        self.assertEqual(metrics["pg_clipfrac_lower"], 0.0)
        # Row 1 (A < 0, s = 1.35) is unclipped (no dual clip): grad 0.674929/24 per token.
        expected = np.zeros((6, 4))
        expected[1] = 0.674929 / 24
        np.testing.assert_allclose(grad, expected, atol=ATOL)
        row_loss = per_token_loss(self.variant, ratio.gspo(3e-3, 4e-3))[:, 0]
        np.testing.assert_allclose(
            row_loss, [-1.004, 0.674929, 0.4985, -0.8032, 1.1964, 0.0], atol=ATOL
        )

    @chex.variants(with_jit=True, without_jit=True)
    def test_tv2c_wide_clip(self):
        value, metrics, grad = loss_and_grad(
            self.variant, ratio.gspo(0.2, 0.2), agg.seq_mean_token_mean()
        )
        np.testing.assert_allclose(value, 0.038090, atol=ATOL)
        np.testing.assert_allclose(metrics["pg_clipfrac"], 1 / 17, atol=ATOL)
        per_row = [-1.068939 / 18, 0.028122, 0.482803 / 12, -0.820252 / 24, 0.0, 0.0]
        expected = np.asarray(per_row)[:, None] * np.asarray(TV2_MASK)
        np.testing.assert_allclose(grad, expected, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    def test_log_ratio_clamp_at_10_zeroes_the_gradient(self):
        lp = TV2_LP.at[0].set(TV2_OLD[0] + 12.0)  # row mean δ = 12 > 10
        batch = tv2_batch()
        loss = ratio.gspo(1e9, 1e9)  # nothing clips, so only the clamp can stop the gradient

        def value(x):
            return loss.fn(x, batch, TV2_MASK)[0][0, 0]

        v = self.variant(value)(lp)
        g = self.variant(jax.grad(value))(lp)
        np.testing.assert_allclose(v, -np.exp(10.0), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(g), 0.0, atol=0.0)

    @chex.variants(with_jit=True, without_jit=True)
    def test_gspo_token_equals_gspo_for_row_constant_advantages(self):
        for aggregation in (agg.seq_mean_token_mean(), agg.token_mean()):
            a = loss_and_grad(self.variant, ratio.gspo(0.2, 0.2), aggregation)
            b = loss_and_grad(self.variant, ratio.gspo_token(0.2, 0.2), aggregation)
            np.testing.assert_allclose(a[0], b[0], atol=1e-7)
            np.testing.assert_allclose(a[2], b[2], atol=1e-7)

    @chex.variants(with_jit=True, without_jit=True)
    def test_gspo_token_uses_token_advantages(self):
        # Row 0 with token advantages [2, 0, -1] (mean 1/3): wide clip, so L = −A·s per token.
        batch = tv2_batch()
        adv = batch.advantages.at[0, :3].set(jnp.array([2.0, 0.0, -1.0]))
        batch = batch._replace(advantages=adv)
        s0 = np.exp(float(jnp.sum(TV2_DELTA[0, :3])) / 3)
        token = per_token_loss_on(self.variant, ratio.gspo_token(1e3, 1e3), batch)
        seq = per_token_loss_on(self.variant, ratio.gspo(1e3, 1e3), batch)
        np.testing.assert_allclose(token[0, :3], [-2 * s0, 0.0, s0], rtol=1e-6)
        np.testing.assert_allclose(seq[0, :3], [-s0 / 3] * 3, rtol=1e-6)


def per_token_loss_on(variant, loss, batch):
    return np.asarray(variant(lambda lp: loss.fn(lp, batch, TV2_MASK)[0])(TV2_LP))


class SAPOTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_tv2d(self):
        value, metrics, grad = loss_and_grad(self.variant, ratio.sapo(1.0, 1.05))
        np.testing.assert_allclose(value, -0.255618, atol=ATOL)
        np.testing.assert_allclose(metrics["pg_clipfrac"], 0.235294, atol=ATOL)
        np.testing.assert_allclose(metrics["ppo_kl"], -0.066471, atol=ATOL)
        expected_grad = ragged(
            [
                [-0.058824, -0.077022, -0.053105],
                [0.012947, 0.019136, 0.032406, 0.029412],
                [0.027959, 0.028826],
                [-0.051864, -0.059222, -0.034283, -0.049439],
                [0.051337],
                [0, 0, 0],
            ]
        )
        np.testing.assert_allclose(grad, expected_grad, atol=ATOL)
        # Token (0,0) sits at r = 1: the gradient is exactly −A/17, as on-policy PPO.
        np.testing.assert_allclose(grad[0, 0], -1 / 17, atol=1e-7)

    @chex.variants(with_jit=True, without_jit=True)
    def test_tv2d_gate(self):
        expected_gate = ragged(
            [
                [2, 2.346333, 1.904909],
                [3.713560, 1.578335, 2.009826, 1.904762],
                [1.856002, 1.884961],
                [2.105074, 2.282131, 1.742259, 2.051260],
                [1.647168],
                [2.125173, 1.724038, 1.904762],
            ]
        )
        batch = tv2_batch()
        loss = per_token_loss(self.variant, ratio.sapo(1.0, 1.05))
        adv = np.asarray(batch.advantages)
        valid = adv != 0  # the gate is −L/A wherever A ≠ 0
        gate = np.where(valid, -loss / np.where(valid, adv, 1.0), 0.0)
        np.testing.assert_allclose(gate, np.where(valid, expected_gate, 0.0), atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    def test_tv2d_other_settings(self):
        value, metrics, _ = loss_and_grad(self.variant, ratio.sapo(2.0, 2.1))
        np.testing.assert_allclose(value, -0.150183, atol=ATOL)
        self.assertEqual(metrics["num_masked_seqs"], 0.0)
        value, metrics, grad = loss_and_grad(
            self.variant, ratio.sequence_mask(3e-3), ratio.sapo(1.0, 1.05)
        )
        np.testing.assert_allclose(value, -0.585184, atol=ATOL)
        self.assertEqual(metrics["num_masked_seqs"], 2.0)
        np.testing.assert_allclose(grad[[2, 4]], 0.0, atol=0.0)


class CISPOTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_tv2e_script_setting(self):
        loss = ratio.cispo(clip_ratio_low=1.0, clip_ratio_high=0.2)
        value, metrics, grad = loss_and_grad(self.variant, loss)
        np.testing.assert_allclose(value, 0.042478, atol=ATOL)
        np.testing.assert_allclose(metrics["pg_clipfrac"], 0.235294, atol=ATOL)
        np.testing.assert_allclose(metrics["ppo_kl"], -0.066471, atol=ATOL)
        expected_loss = ragged(
            [
                [1, 0.24, 1.900159],
                [0.48, -0.536256, -0.110517, -1.25],
                [-0.737203, -0.401881],
                [0.088414, 0.624, 1.007513, 0.462559],
                [-2.044658],
                [0, 0, 0],
            ]
        )
        got = per_token_loss(self.variant, loss) * np.asarray(TV2_MASK)
        np.testing.assert_allclose(got, expected_loss, atol=ATOL)
        expected_grad = ragged(
            [
                [-0.058824, -0.070588, -0.053226],
                [0.035294, 0.019715, 0.032505, 0.029412],
                [0.027977, 0.028829],
                [-0.052008, -0.056471, -0.034862, -0.049472],
                [0.052293],
                [0, 0, 0],
            ]
        )
        np.testing.assert_allclose(grad, expected_grad, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(
        ("seq_mask", True, 1.0, 0.278991, 0.285714, 2),
        ("low_0.2", False, 0.2, 0.031502, 0.411765, 0),
    )
    def test_tv2e_other_settings(self, masked, low, expected, clipfrac, num_masked):
        parts = (ratio.sequence_mask(3e-3),) if masked else ()
        loss = ratio.cispo(clip_ratio_low=low, clip_ratio_high=0.2)
        value, metrics, _ = loss_and_grad(self.variant, *parts, loss)
        np.testing.assert_allclose(value, expected, atol=ATOL)
        np.testing.assert_allclose(metrics["pg_clipfrac"], clipfrac, atol=ATOL)
        self.assertEqual(metrics["num_masked_seqs"], num_masked)


class GMPOTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_against_hand_computation(self):
        # Independent numpy evaluation of docs/algorithms.md §4.7 on TV-2's batch with ε = 0.2.
        delta = np.asarray(TV2_DELTA, np.float64)
        m = np.asarray(TV2_MASK, np.float64)
        adv = np.asarray(tv2_batch().advantages, np.float64)
        sign = np.sign(adv)
        tilde = sign * np.minimum(sign * delta, sign * np.clip(delta, -0.2, 0.2))
        length = m.sum(-1) + 1e-8
        rho = np.exp((tilde * m).sum(-1) / length)
        mean_adv = (adv * m).sum(-1) / length
        expected = np.mean(-mean_adv * rho)  # all rows non-empty, so the means agree
        value, metrics, grad = loss_and_grad(self.variant, ratio.gmpo(), agg.seq_mean_token_mean())
        np.testing.assert_allclose(value, expected, atol=ATOL)
        clipped = delta != np.clip(delta, -0.2, 0.2)
        np.testing.assert_allclose(
            metrics["pg_clipfrac"], ((clipped & (adv > 0)) * m).sum() / m.sum(), atol=ATOL
        )
        np.testing.assert_allclose(
            metrics["pg_clipfrac_lower"], ((clipped & (adv < 0)) * m).sum() / m.sum(), atol=ATOL
        )
        # d/dlp of −Ā_i ρ_i / 6 flows only through unclipped δ̃ entries: −Ā ρ /(6|y|).
        active = (tilde == delta) & (sign != 0)
        expected_grad = np.where(active, (-mean_adv * rho / length / 6)[:, None], 0.0) * m
        np.testing.assert_allclose(grad, expected_grad, atol=ATOL)


class TruncatedISTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_weights_loss_by_capped_ratio(self):
        rollout = TV2_OLD - 0.5 * TV2_MASK  # exp(lp_old − lp_rollout) = e^0.5 ≈ 1.6487
        batch = tv2_batch()._replace(rollout_log_probs=rollout)
        plain, _, plain_grad = loss_and_grad(self.variant, ratio.vanilla(), batch=batch)
        capped, _, capped_grad = loss_and_grad(
            self.variant, ratio.vanilla(), ratio.truncated_is(1.5), batch=batch
        )
        uncapped, _, _ = loss_and_grad(
            self.variant, ratio.vanilla(), ratio.truncated_is(5.0), batch=batch
        )
        np.testing.assert_allclose(capped, 1.5 * plain, atol=ATOL)
        np.testing.assert_allclose(uncapped, np.exp(0.5) * plain, atol=ATOL)
        np.testing.assert_allclose(capped_grad, 1.5 * plain_grad, atol=ATOL)

    def test_needs_rollout_log_probs(self):
        with self.assertRaisesRegex(ValueError, "rollout_log_probs"):
            loss_and_grad(lambda f: f, ratio.vanilla(), ratio.truncated_is(2.0))


class ValidationTest(chex.TestCase):
    def test_bad_knobs_fail_with_one_line(self):
        for make, pattern in (
            (lambda: ratio.vanilla(clip_ratio_c=1.0), "clip_ratio_c"),
            (lambda: ratio.vanilla(clip_ratio_low=-0.1), "clip ratios"),
            (lambda: ratio.sapo(0.0, 1.0), "SAPO temperatures"),
            (lambda: ratio.sequence_mask(-1.0), "seq_mask_delta"),
            (lambda: ratio.truncated_is(0.0), "tis_imp_ratio_cap"),
            (lambda: ratio.dr_grpo(0), "max_response_length"),
        ):
            with self.assertRaisesRegex(ValueError, pattern):
                make()
