"""KL estimators (TV-3), KL and entropy terms and totals (TV-2f), and the critic loss
(docs/algorithms.md §6, §3.7).

Tolerance: 1e-5 absolute (spec precision, float32).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from arlarena_jax.objectives import aggregate as agg
from arlarena_jax.objectives import kl, ratio, regularize
from arlarena_jax.objectives.compose import AdvantageEstimator, chain
from arlarena_jax.objectives.value import clipped_value_loss
from tests.helpers.spec_vectors import TV2_ENTROPY, TV2_LP, TV2_MASK, TV2_OLD, ragged, tv2_batch

ATOL = 1e-5
GIVEN = AdvantageEstimator("given", lambda b: (b.advantages, b.advantages))
TV3_LP = jnp.array([-1.0, -0.5, -2.0])
TV3_REF = jnp.array([-1.2, -0.5, -1.0])


class TV3Test(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(
        ("k1", "k1", [0.2, 0.0, -1.0]),
        ("abs", "abs", [0.2, 0.0, 1.0]),
        ("k2", "k2", [0.02, 0.0, 0.5]),
        ("k3", "k3", [0.018731, 0.0, 0.718282]),
        ("low_var_kl_alias", "low_var_kl", [0.018731, 0.0, 0.718282]),
    )
    def test_values(self, kind, expected):
        got = self.variant(kl.estimator(kind))(TV3_LP, TV3_REF)
        np.testing.assert_allclose(got, expected, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    def test_k3_gradient(self):
        grad = self.variant(jax.grad(lambda lp: jnp.sum(kl.k3(lp, TV3_REF))))(TV3_LP)
        np.testing.assert_allclose(grad, [0.181269, 0.0, -1.718282], atol=ATOL)

    def test_k3_clamps(self):
        # κ = ref − lp = 30 is clamped to 20, and e^20 − 21 is clamped to 10.
        np.testing.assert_allclose(kl.k3(jnp.array(-30.0), jnp.array(0.0)), 10.0)

    def test_unknown_kind(self):
        with pytest.raises(ValueError, match="unknown KL estimator 'k1\\+'"):
            kl.estimator("k1+")


def run(variant, *components, entropy=TV2_ENTROPY):
    objective = chain(GIVEN, *components)
    batch = tv2_batch()

    def f(lp):
        return jax.value_and_grad(lambda x: objective.loss(x, batch, entropy), has_aux=True)(lp)

    (value, metrics), grad = variant(f)(TV2_LP)
    return float(value), {k: float(v) for k, v in metrics.items()}, np.asarray(grad)


class TV2fTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_k3_matrix(self):
        expected = ragged(
            [
                [0, 0.040818, 0.005171],
                [0.723130, 0.091825, 0.004837, 0],
                [0.001271, 0.000201],
                [0.004837, 0.028801, 0.049859, 0.001229],
                [0.049859],
                [0.018731, 0.021403, 0],
            ]
        )
        got = self.variant(kl.k3)(TV2_LP, TV2_OLD) * TV2_MASK
        np.testing.assert_allclose(got, expected, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(
        ("token_mean", agg.token_mean(), 0.061293, 1.5),
        ("seq_mean_token_mean", agg.seq_mean_token_mean(), 0.050905, 1.486111),
    )
    def test_kl_and_entropy_terms(self, aggregation, kl_value, entropy_value):
        _, metrics, _ = run(
            self.variant,
            ratio.vanilla(),
            aggregation,
            regularize.kl("k3", 0.01),
            regularize.entropy(1e-3),
        )
        np.testing.assert_allclose(metrics["kl_loss"], kl_value, atol=ATOL)
        np.testing.assert_allclose(metrics["entropy"], entropy_value, atol=ATOL)
        np.testing.assert_allclose(metrics["kl_coef"], 0.01, atol=1e-9)

    @chex.variants(with_jit=True, without_jit=True)
    def test_kl_gradient_token_mean(self):
        batch = tv2_batch()._replace(advantages=jnp.zeros((6, 4)))
        objective = chain(GIVEN, ratio.vanilla(), regularize.kl("k3", 1.0))
        grad = self.variant(jax.grad(lambda lp: objective.loss(lp, batch)[0]))(TV2_LP)
        expected_row1 = [0.045698, -0.028931, 0.005598, 0.0]  # (1 − exp(ref − lp))/17
        np.testing.assert_allclose(np.asarray(grad)[1], expected_row1, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    def test_total_vanilla(self):
        value, metrics, _ = run(
            self.variant, ratio.vanilla(), regularize.kl("k3", 0.01), regularize.entropy(1e-3)
        )
        np.testing.assert_allclose(value, -0.089378, atol=ATOL)
        np.testing.assert_allclose(metrics["pg_loss"], -0.088491, atol=ATOL)
        np.testing.assert_allclose(metrics["loss"], value, atol=1e-7)

    @chex.variants(with_jit=True, without_jit=True)
    def test_total_sampo_style(self):
        value, _, _ = run(
            self.variant,
            ratio.gspo(3e-3, 4e-3),
            agg.seq_mean_token_mean(),
            regularize.kl("k3", 0.01),
            regularize.entropy(1e-3),
        )
        np.testing.assert_allclose(value, 0.092795, atol=ATOL)

    @chex.variants(with_jit=True, without_jit=True)
    def test_regularizer_with_its_own_aggregation(self):
        # GSPO on ALFWorld: pg seq-mean-token-mean, KL/entropy token-mean (docs/algorithms.md §8).
        _, metrics, _ = run(
            self.variant,
            ratio.gspo(3e-3, 4e-3),
            agg.seq_mean_token_mean(),
            regularize.kl("k3", 0.01, aggregation=agg.token_mean()),
            regularize.entropy(1e-3, aggregation=agg.token_mean()),
        )
        np.testing.assert_allclose(metrics["kl_loss"], 0.061293, atol=ATOL)
        np.testing.assert_allclose(metrics["entropy"], 1.5, atol=ATOL)

    def test_kl_uses_unmasked_response_mask_under_sequence_masking(self):
        _, metrics, _ = run(
            lambda f: f, ratio.sequence_mask(3e-3), ratio.vanilla(), regularize.kl("k3", 0.01)
        )
        self.assertEqual(metrics["num_masked_seqs"], 2.0)
        np.testing.assert_allclose(metrics["kl_loss"], 0.061293, atol=ATOL)

    def test_missing_inputs_fail_clearly(self):
        with pytest.raises(ValueError, match="needs token entropies"):
            run(lambda f: f, ratio.vanilla(), regularize.entropy(1e-3), entropy=None)
        objective = chain(GIVEN, ratio.vanilla(), regularize.kl())
        batch = tv2_batch()._replace(ref_log_probs=None)
        with pytest.raises(ValueError, match="ref_log_probs"):
            objective.loss(TV2_LP, batch)


def test_value_loss_hand_computed():
    v = jnp.array([[1.0, 2.0, 0.0]])
    v_old = jnp.array([[0.0, 2.2, 0.0]])
    ret = jnp.array([[0.0, 3.0, 5.0]])
    m = jnp.array([[1.0, 1.0, 0.0]])
    # token 0: unclipped (1−0)² = 1, clipped v → 0.5: 0.25, max 1, clipfrac no
    # token 1: unclipped 1, clipped v stays 2 (within 2.2 ± 0.5): 1, max 1
    loss, metrics = clipped_value_loss(v, v_old, ret, m, jnp.ones(1), clip=0.5)
    np.testing.assert_allclose(loss, 0.5, atol=1e-6)
    np.testing.assert_allclose(metrics["vf_clipfrac"], 0.0, atol=1e-6)
    # Returns 5 pull v = 1 toward a clipped 0.5 → clipped sq 20.25 > 16: counted.
    loss, metrics = clipped_value_loss(
        v, v_old, jnp.array([[5.0, 3.0, 0.0]]), m, jnp.ones(1), clip=0.5
    )
    np.testing.assert_allclose(loss, 0.5 * (20.25 + 1.0) / 2, atol=1e-5)
    np.testing.assert_allclose(metrics["vf_clipfrac"], 0.5, atol=1e-6)
