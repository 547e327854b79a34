"""The multi-turn rollout (docs/environments.md §1): the turn loop producing one row per active
turn, the history memory, the LLM policy, the sampling seeds of each episode's turns
(:mod:`arlarena_jax.rollout.keys`) and success metrics. The environments' prompt formats,
projections and the policy output type live in :mod:`envs` (``envs.text``, ``envs.projection``,
``envs/<name>/prompts.py``), looked up through :mod:`envs.registry`."""

from arlarena_jax.rollout.loop import Rollout, Trajectory, TurnRow, collect
from arlarena_jax.rollout.memory import SimpleMemory
from arlarena_jax.rollout.metrics import rollout_metrics, success_metrics
from arlarena_jax.rollout.policy import Policy, SamplerPolicy

__all__ = [
    "Policy",
    "Rollout",
    "SamplerPolicy",
    "SimpleMemory",
    "Trajectory",
    "TurnRow",
    "collect",
    "rollout_metrics",
    "success_metrics",
]
