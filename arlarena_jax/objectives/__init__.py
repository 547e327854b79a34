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

Modules: ``aggregate`` (spec §2), ``ratio`` (§3), ``regularize`` and ``kl`` (§4), ``advantage``
(§5), ``rewards`` (§5.0, §6, KL in reward), ``dynamic_sampling`` (§7, host), ``host`` (ids and
collation, host), ``presets`` (§9: the paper's methods).
"""

from arlarena_jax.objectives import (
    advantage,
    aggregate,
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
)

__all__ = [
    "AdvantageEstimator",
    "GroupFilter",
    "LossWeight",
    "MaskTransform",
    "Objective",
    "PolicyLoss",
    "Regularizer",
    "RewardShaper",
    "TurnBatch",
    "advantage",
    "aggregate",
    "chain",
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
