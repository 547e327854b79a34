"""ARLArena's policy-optimisation components as pure JAX functions, composed optax-style.

    from arlarena_jax import objectives as obj

    sampo = obj.chain(
        obj.advantage.gigpo(gamma=0.95, step_weight=1.0, mode="mean_std_norm"),
        obj.ratio.gspo(clip_low=3e-3, clip_high=4e-3),
        obj.aggregate.seq_mean_token_mean(),
        obj.rewards.invalid_action_penalty(0.1),
        obj.regularize.kl("k3", coef=0.01),
        obj.regularize.entropy(coef=1e-3),
        obj.GroupFilter(max_num_gen_batches=3, cold_start_steps=15),
    )
    batch, state, _ = sampo.prepare(batch)          # advantages over the whole batch
    loss, metrics = sampo.loss(log_probs, batch, entropy)   # one micro-batch
    sampo.requirements      # {Input.OLD_LOG_PROBS, Input.REF_LOG_PROBS, Input.ENTROPY}
    obj.check_requirements(sampo, available)        # one-line ValueError if one is missing

Modules (sections of docs/algorithms.md): ``aggregate`` (§5), ``ratio`` (§4), ``regularize``
and ``kl`` (§6), ``advantage`` (§3), ``rewards`` (§2, KL in reward), ``dynamic_sampling`` (§7,
host), ``host`` (ids and collation, host; §1.2), ``presets`` (§8: the paper's methods),
``declare`` (the inputs and metric reductions every component declares).
"""

from arlarena_jax.objectives import (
    advantage,
    aggregate,
    declare,
    dynamic_sampling,
    host,
    kl,
    presets,
    ratio,
    regularize,
    rewards,
    stats,
)
from arlarena_jax.objectives.batch import TurnBatch, make_batch, validate_batch
from arlarena_jax.objectives.compose import (
    AdvantageEstimator,
    GroupFilter,
    LossWeight,
    MaskTransform,
    Objective,
    PolicyLoss,
    Regularizer,
    RewardShaper,
    chain,
    check_requirements,
)
from arlarena_jax.objectives.declare import Input, Reduction

__all__ = [
    "AdvantageEstimator",
    "GroupFilter",
    "Input",
    "LossWeight",
    "MaskTransform",
    "Objective",
    "PolicyLoss",
    "Reduction",
    "Regularizer",
    "RewardShaper",
    "TurnBatch",
    "advantage",
    "aggregate",
    "chain",
    "check_requirements",
    "declare",
    "dynamic_sampling",
    "host",
    "kl",
    "make_batch",
    "presets",
    "ratio",
    "regularize",
    "rewards",
    "stats",
    "validate_batch",
]
