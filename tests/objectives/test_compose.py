"""Composition: chain() rules, a new algorithm built from parts, and the paper's presets.

Preset checks use totals assembled from the spec's own vectors (TV-2a–f, TV-4): e.g. a preset's
loss on TV-2's batch = its pg_loss from TV-2 + 0.01·KL_k3 − 0.001·entropy from TV-2f.
Tolerance 1e-5 (spec precision, float32) unless stated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arlarena_jax import objectives as obj
from arlarena_jax.cli import synthetic_group
from envs import registry
from tests.helpers.spec_vectors import (
    TV2_ENTROPY,
    TV2_LP,
    TV4_LENGTHS,
    TV4_MASK,
    tv2_batch,
    tv4_batch,
)

ATOL = 1e-5
KL_TM, KL_SMTM = 0.061293, 0.050905  # TV-2f
ENT_TM, ENT_SMTM = 1.5, 1.486111  # TV-2f
TV4_EMPG = [0.720192, 1.064564, -0.657871, -1.131426, -0.926305, 0.918584, -1.277764]
TV4_EMPG += [0.511876, 0.178313, 0.240514, 0.359323]
TV4_GIGPO_STD = [1.445264, 1.619957, -2.060348, -0.924982, -1.613892, 1.534, -2.943495]
TV4_GIGPO_STD += [0.447204, 1.024544, 0.447204, 1.024544]
TV4_GIGPO_MEAN = [8.016667, 10.016667, -11.483333, -5.083333, -9.983333, 8.516667, -0.146667]
TV4_GIGPO_MEAN += [0.02, 0.053333, 0.02, 0.053333]


def test_a_new_algorithm_in_a_few_lines():
    """GSPO clipping + EMPG advantages + seq-mean-token-sum: never run by the paper."""
    mine = obj.chain(
        obj.rewards.invalid_action_penalty(0.1),
        obj.advantage.empg(k=1.0, k_f=1.0, zeta=0.05),
        obj.ratio.gspo(clip_low=3e-3, clip_high=4e-3),
        obj.aggregate.seq_mean_token_sum(),
    )
    batch, _, _ = jax.jit(mine.prepare)(tv4_batch())
    expected_adv = np.asarray(TV4_EMPG)[:, None] * TV4_MASK
    np.testing.assert_allclose(np.asarray(batch.advantages), expected_adv, atol=ATOL)
    # On-policy (lp = lp_old) every s_i = 1 sits inside the clip range, so L = −A_i on each
    # token and seq-mean-token-sum gives −Σ_i |y_i|·A_i / 11, with gradient −A_i/11 per token.
    lp = batch.old_log_probs
    (loss, metrics), grad = jax.jit(
        jax.value_and_grad(lambda x: mine.loss(x, batch), has_aux=True)
    )(lp)
    np.testing.assert_allclose(float(loss), -np.dot(TV4_LENGTHS, TV4_EMPG) / 11, atol=ATOL)
    np.testing.assert_allclose(np.asarray(grad), -expected_adv / 11, atol=ATOL)
    assert float(metrics["pg_clipfrac"]) == 0.0


class TestChainRules:
    def test_needs_exactly_one_estimator_and_one_loss(self):
        with pytest.raises(ValueError, match="needs one AdvantageEstimator"):
            obj.chain(obj.ratio.vanilla())
        with pytest.raises(ValueError, match="needs one PolicyLoss"):
            obj.chain(obj.advantage.grpo())
        with pytest.raises(ValueError, match="two PolicyLoss components: vanilla and sapo"):
            obj.chain(obj.advantage.grpo(), obj.ratio.vanilla(), obj.ratio.sapo())

    def test_rejects_what_is_not_a_component(self):
        with pytest.raises(TypeError, match="not an objective component"):
            obj.chain(obj.advantage.grpo(), obj.ratio.vanilla(), "token-mean")

    def test_loss_before_prepare_fails_clearly(self):
        objective = obj.chain(obj.advantage.grpo(), obj.ratio.vanilla())
        with pytest.raises(ValueError, match=r"call Objective\.prepare"):
            objective.loss(TV2_LP, tv2_batch()._replace(advantages=None))

    def test_default_aggregation_is_token_mean(self):
        objective = obj.chain(obj.advantage.grpo(), obj.ratio.vanilla())
        assert objective.aggregation.name == "token-mean"
        assert objective.group_filter is None


# WebShop's release scripts differ from the presets (ALFWorld's scripts) in some settings; the
# WebShop registration carries them (EnvSpec.method_settings, docs/algorithms.md §8).
def recipe(name: str, env: str) -> dict:
    return dict(registry.get(env).method_settings.get(name, {}))


def test_webshop_recipe_is_the_release_scripts():
    """docs/algorithms.md §8 "Differences between ALFWorld and WebShop", one entry each."""
    smtm = "seq-mean-token-mean"
    assert dict(registry.get("webshop").method_settings) == {
        "sapo": {"use_seq_mask": True},
        "cispo": {"use_seq_mask": True},
        "gspo": {"clip_low": 3e-2, "clip_high": 4e-2, "regularizer_agg_mode": smtm},
        "sampo": {"gigpo_mode": "mean_norm", "cold_start_steps": 5},
        "dapo_grpo": {"cold_start_steps": 0},
        "dapo_gigpo": {"cold_start_steps": 5},
    }
    assert dict(registry.get("alfworld").method_settings) == {}


def test_webshop_gspo_aggregates_every_term_seq_mean_token_mean():
    resolved = obj.presets.settings("gspo", **recipe("gspo", "webshop"))
    assert resolved.loss_agg_mode == resolved.regularizer_agg_mode == "seq-mean-token-mean"
    assert (resolved.clip_low, resolved.clip_high) == (3e-2, 4e-2)
    on_alfworld = obj.presets.settings("gspo", **recipe("gspo", "alfworld"))
    assert on_alfworld.regularizer_agg_mode == "token-mean"


def preset_loss_on_tv2(name: str, env: str = "alfworld") -> float:
    """A preset's micro-batch loss on TV-2's batch (its advantages given, ref = lp_old)."""
    objective = obj.presets.build(name, **recipe(name, env))
    loss, _ = objective.loss(TV2_LP, tv2_batch(), TV2_ENTROPY)
    return float(loss)


@pytest.mark.parametrize(
    ("name", "env", "expected"),
    [
        ("grpo", "alfworld", -0.088491 + 0.01 * KL_TM - 0.001 * ENT_TM),
        ("grpo_st", "alfworld", 0.054434 + 0.01 * KL_SMTM - 0.001 * ENT_SMTM),
        ("grpo_sm", "alfworld", -0.245004 + 0.01 * KL_TM - 0.001 * ENT_TM),
        ("sapo", "alfworld", -0.255618 + 0.01 * KL_TM - 0.001 * ENT_TM),
        ("sapo", "webshop", -0.585184 + 0.01 * KL_TM - 0.001 * ENT_TM),  # the script has SM
        ("sapo_sm", "alfworld", -0.585184 + 0.01 * KL_TM - 0.001 * ENT_TM),
        ("cispo", "alfworld", 0.042478 + 0.01 * KL_TM - 0.001 * ENT_TM),
        ("cispo", "webshop", 0.278991 + 0.01 * KL_TM - 0.001 * ENT_TM),
        ("cispo_sm", "alfworld", 0.278991 + 0.01 * KL_TM - 0.001 * ENT_TM),
        ("gspo", "alfworld", 0.093772 + 0.01 * KL_TM - 0.001 * ENT_TM),
        ("sampo", "alfworld", 0.092795),  # TV-2f's SAMPO-style total
        ("sampo", "webshop", 0.092795),
        # Dr.GRPO: TV-2a's seq-mean-token-sum / 500, no KL, entropy Σ H / 6 = 25.5 / 6.
        ("dr_grpo", "alfworld", -0.250724 / 500 - 0.001 * 25.5 / 6),
    ],
)
def test_preset_losses_match_spec_totals(name, env, expected):
    np.testing.assert_allclose(preset_loss_on_tv2(name, env), expected, atol=ATOL)


@pytest.mark.parametrize(
    ("env", "expected", "cold_start"),
    [("alfworld", TV4_GIGPO_STD, 15), ("webshop", TV4_GIGPO_MEAN, 5)],
)
def test_sampo_advantages_and_filter(env, expected, cold_start):
    """SAMPO = GiGPO (mean_std_norm on ALFWorld, mean_norm on WebShop) + filter
    (docs/algorithms.md §8)."""
    sampo = obj.presets.build("SAMPO", **recipe("sampo", env))
    batch, _, _ = sampo.prepare(tv4_batch())
    np.testing.assert_allclose(
        np.asarray(batch.advantages), np.asarray(expected)[:, None] * TV4_MASK, atol=ATOL
    )
    assert sampo.group_filter == obj.GroupFilter(max_num_gen_batches=3, cold_start_steps=cold_start)
    assert not sampo.group_filter.is_active(cold_start)
    assert sampo.group_filter.is_active(cold_start + 1)
    assert sampo.policy_loss.name == "gspo"
    assert sampo.aggregation.name == "seq-mean-token-mean"
    assert [r.name for r in sampo.regularizers] == ["kl_k3", "entropy"]


def test_dapo_presets_filter_settings():
    assert obj.presets.build("dapo_grpo").group_filter == obj.GroupFilter(2, 15)
    assert obj.presets.build("dapo_grpo", cold_start_steps=0).group_filter == obj.GroupFilter(2, 0)
    assert obj.presets.build("DAPO_GiGPO").group_filter == obj.GroupFilter(3, 15)
    names = [s.name for s in obj.presets.build("dapo_grpo").shapers]
    assert names == ["dapo_overlong", "invalid_action_penalty"]


@pytest.fixture(scope="module")
def rollout_batch():
    rng = np.random.default_rng(0)
    turns = [
        turn
        for task in range(3)
        for trajectory in synthetic_group(rng, task, 4)
        for turn in trajectory
    ]
    return obj.host.collate(turns, num_rows=64, num_tokens=16)


@pytest.mark.parametrize("name", sorted(obj.presets.PRESETS))
def test_every_preset_runs_on_a_rollout_batch(name, rollout_batch):
    """prepare → loss → gradient: finite, zero on padding, and non-trivial."""
    objective = obj.presets.build(name)
    batch, _, _ = objective.prepare(rollout_batch)
    noise = jax.random.normal(jax.random.key(1), batch.old_log_probs.shape) * 0.05
    lp = batch.old_log_probs + noise
    (loss, metrics), grad = jax.value_and_grad(
        lambda x: objective.loss(x, batch, batch.old_entropy), has_aux=True
    )(lp)
    assert np.isfinite(float(loss))
    assert all(np.isfinite(float(v)) for v in metrics.values())
    mask = np.asarray(batch.response_mask)
    assert np.all(np.asarray(grad)[mask == 0] == 0.0)
    assert float(jnp.abs(grad).sum()) > 0.0


def test_unknown_preset_or_setting():
    with pytest.raises(ValueError, match="unknown method preset 'ppo2'"):
        obj.presets.build("ppo2")
    with pytest.raises(ValueError, match="method 'grpo' does not read gamma"):
        obj.presets.build("grpo", gamma=0.9)
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1"):
        obj.presets.build("grpo", clip_ratio_c=0.5)
    assert obj.presets.build("Dr.GRPO").policy_loss.name == "dr_grpo"


OLD, REF = obj.Input.OLD_LOG_PROBS, obj.Input.REF_LOG_PROBS


@pytest.mark.parametrize(
    ("component", "needs"),
    [
        (obj.rewards.invalid_action_penalty(), set()),
        (obj.rewards.dapo_overlong(512), set()),
        (obj.rewards.kl_in_reward(), {OLD, REF}),
        (obj.advantage.grpo(), set()),
        (obj.advantage.gigpo(), set()),
        (obj.advantage.gae(), {obj.Input.VALUES}),
        (obj.advantage.empg(), {obj.Input.OLD_ENTROPY}),
        (obj.ratio.sequence_mask(), {OLD}),
        (obj.ratio.vanilla(), {OLD}),
        (obj.ratio.gspo(), {OLD}),
        (obj.ratio.cispo(), {OLD}),
        (obj.ratio.truncated_is(2.0), {OLD, obj.Input.ROLLOUT_LOG_PROBS}),
        (obj.regularize.kl(), {REF}),
        (obj.regularize.entropy(), {obj.Input.ENTROPY}),
    ],
    ids=lambda x: getattr(x, "name", None),
)
def test_each_component_declares_what_it_reads(component, needs):
    assert component.needs == needs


def test_requirements_are_the_union_and_the_check_names_the_component():
    objective = obj.chain(
        obj.advantage.empg(),
        obj.ratio.vanilla(),
        obj.ratio.truncated_is(2.0),
        obj.regularize.kl(),
        obj.regularize.entropy(),
    )
    assert objective.requirements == set(obj.Input) - {obj.Input.VALUES}
    obj.check_requirements(objective, objective.requirements)  # all available: no error
    with pytest.raises(ValueError) as info:
        obj.check_requirements(objective, objective.requirements - {REF})
    assert str(info.value) == (
        "component 'kl_k3' needs reference log-probs, which this trainer cannot provide"
    )
    ppo_like = obj.chain(obj.advantage.gae(), obj.ratio.vanilla())
    with pytest.raises(ValueError, match=r"^component 'gae' needs critic values, which") as info:
        obj.check_requirements(ppo_like, set(obj.Input) - {obj.Input.VALUES})
    assert "\n" not in str(info.value)


def test_the_trainer_provides_every_preset_ppo_included():
    from arlarena_jax.train.update import TRAINER_INPUTS

    for name in obj.presets.PRESETS:
        obj.check_requirements(obj.presets.build(name), TRAINER_INPUTS)
    assert obj.Input.VALUES in obj.presets.build("ppo").requirements


@pytest.mark.parametrize("name", sorted(obj.presets.PRESETS))
def test_every_emitted_metric_is_declared(name, rollout_batch):
    """prepare's and loss's metric keys all carry a declared reduction (MEAN for every key the
    paper's methods emit, as the reference spec's metric rules gave them)."""
    objective = obj.presets.build(name)
    batch = rollout_batch
    if obj.Input.VALUES in objective.requirements:
        batch = batch._replace(values=jnp.zeros_like(batch.old_log_probs))
    if REF in objective.requirements:
        batch = batch._replace(ref_log_probs=batch.old_log_probs - 0.1)
    batch, _, prepare_metrics = objective.prepare(batch)
    _, metrics = objective.loss(batch.old_log_probs, batch, batch.old_entropy)
    declared = objective.metric_reductions
    assert set(prepare_metrics) | set(metrics) <= set(declared)
    assert all(declared[key] is obj.Reduction.MEAN for key in (*prepare_metrics, *metrics))


def test_chain_refuses_two_reductions_for_one_metric():
    def reg(name, reduction):
        return obj.Regularizer(
            name, lambda *_: (0.0, {"x": jnp.zeros(())}), reductions=(("x", reduction),)
        )

    base = (obj.advantage.grpo(), obj.ratio.vanilla())
    obj.chain(*base, reg("a", obj.Reduction.MAX), reg("b", obj.Reduction.MAX))
    with pytest.raises(ValueError, match="metric 'x' is declared max by 'a' and min by 'b'"):
        obj.chain(*base, reg("a", obj.Reduction.MAX), reg("b", obj.Reduction.MIN))
