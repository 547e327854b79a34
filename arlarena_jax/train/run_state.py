"""A run's checkpointed state, typed: :class:`TrainState` on device (orbax) and
:class:`HostState` on the host (JSON beside it)."""

from __future__ import annotations

import dataclasses
from typing import Any

from arlarena_jax.models.lora import frozen_part, join_trainable, trainable_part
from arlarena_jax.train.critic import CriticState


@dataclasses.dataclass
class TrainState:
    """The checkpointed device state; ``ref_params`` only when the objective reads reference
    log-probs, the critic's parameters and optimizer state only when it reads values."""

    params: Any
    opt_state: Any
    objective_state: Any
    ref_params: Any = None
    critic_params: Any = None
    critic_opt_state: Any = None

    @property
    def critic(self) -> CriticState | None:
        if self.critic_params is None:
            return None
        return CriticState(self.critic_params, self.critic_opt_state)

    @critic.setter
    def critic(self, value: CriticState | None) -> None:
        self.critic_params, self.critic_opt_state = (None, None) if value is None else value

    def as_tree(self) -> dict[str, Any]:
        """The checkpoint's tree: a dict of the fields that are set; under LoRA the parameters'
        trainable part only (the adapters; the frozen base is rebuilt from ``model``)."""
        fields = (f.name for f in dataclasses.fields(self))
        tree = {name: getattr(self, name) for name in fields if getattr(self, name) is not None}
        for name in PARAMETER_FIELDS:
            if name in tree:
                tree[name] = trainable_part(tree[name])
        return tree

    def restored(self, tree: dict[str, Any]) -> TrainState:
        """The state of a checkpoint's ``tree`` (:meth:`as_tree`), its parameters joined with
        this state's frozen parts (under LoRA, the base model)."""
        tree = {f.name: None for f in dataclasses.fields(self)} | dict(tree)  # unset: None
        for name in PARAMETER_FIELDS:
            if tree[name] is not None:
                tree[name] = join_trainable(tree[name], frozen_part(getattr(self, name)))
        return TrainState(**tree)


PARAMETER_FIELDS = ("params", "ref_params", "critic_params")


@dataclasses.dataclass
class HostState:
    """The checkpointed host state: the step, the task-seed RNG, the sampler's call counter and
    the held-out success after cloning (and every ``val/…`` metric of that evaluation)."""

    step: int = 0
    rng: dict | None = None
    policy_calls: int = 0  # SamplerPolicy.calls: sample seeds drawn so far (one per batch)
    sft_success: float | None = None
    start_eval: dict[str, float] | None = None  # val/… of the starting policy (step 0)
