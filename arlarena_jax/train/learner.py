"""The learner: the policy (and critic) update on a batch, with the device state it owns.

:class:`Learner` builds the :class:`~arlarena_jax.train.run_state.TrainState` from the model's
parameters on first use (the critic's module with it, when the objective reads values), the jitted
update pieces once (:func:`update_setup`, one compile per packed prompt width), and updates the
state in place (:meth:`Learner.update`). :func:`roll_back` restores the last good checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from arlarena_jax.models.lora import sampler_params, trainable_part
from arlarena_jax.objectives.compose import Input
from arlarena_jax.sampler.placement import replica_params
from arlarena_jax.train import build
from arlarena_jax.train.checkpoint import abstract_like
from arlarena_jax.train.config import Config
from arlarena_jax.train.critic import (
    CriticSetup,
    CriticState,
    build_value_module,
    make_critic_step,
    make_values_fn,
    value_forward,
)
from arlarena_jax.train.metrics import Timer
from arlarena_jax.train.optim import current_learning_rate, make_optimizer
from arlarena_jax.train.rl import UpdateSetup, cached, update_policy
from arlarena_jax.train.run_state import TrainState
from arlarena_jax.train.update import make_log_prob_fn, make_prepare_fn, make_update_step


def optimizer_steps(config: Config) -> int:
    """Upper bound of optimizer steps (schedules count mini-batch updates): one row per turn, or
    one per trajectory under trajectory rows."""
    rows_per_trajectory = config.env.max_turns if build.row_layout(config) is None else 1
    rows = config.env.train_batch_size * config.env.group_size * rows_per_trajectory
    per_step = math.ceil(rows / config.trainer.mini_batch_size) * config.trainer.ppo_epochs
    return max(1, config.trainer.total_steps * per_step)


def rl_optimizer(config: Config):
    """The RL optimizer of ``config.optim`` over :func:`optimizer_steps` updates."""
    return make_optimizer(config.optim, optimizer_steps(config))


def critic_optimizer(config: Config):
    """The critic's optimizer of ``config.critic.optim``: one step per policy step."""
    return make_optimizer(config.critic.optim, optimizer_steps(config))


def roll_back(
    checkpointer,
    monitor,
    state: TrainState,
    engine,
    step: int,
    lora=None,
    place: Callable[[Any], Any] | None = None,
) -> dict[str, float]:
    """Restore ``state``'s parameters, optimizer and objective state from the newest good
    checkpoint (the step counter and the task RNG go on, so the run sees new tasks) and tell the
    monitor which step was restored, so it forgets what came after it. ``place``: the sampler's
    parameters onto the engine's devices (:meth:`Learner.for_sampler`)."""
    good = checkpointer.last_good_step()
    if good is None:
        return {}
    tree, _ = checkpointer.restore(abstract_like(state.as_tree()), good)
    restored = state.restored(tree)
    for name in tree:
        setattr(state, name, getattr(restored, name))
    params = sampler_params(state.params, lora)
    engine.update_params(params if place is None else place(params))
    monitor.rolled_back(good)
    print(f"step {step}: unstable, rolled back to the state of step {good}", flush=True)
    return {"stability/rolled_back_to": float(good)}


class Learner:
    """The update side of RL for ``config``: the optimizers, the device state, the update."""

    def __init__(
        self,
        config: Config,
        model,
        objective,
        tokenizer,
        mesh,
        sampler_layout: Callable[[], Any] | None = None,
    ) -> None:
        """``sampler_layout``: the sampler engine's ``param_layout`` (asked on each sync), where
        :meth:`sampler_params` places the parameters; None: they stay as they are."""
        self.config, self.model, self.objective = config, model, objective
        self.tokenizer, self.mesh = tokenizer, mesh
        self.sampler_layout = sampler_layout
        self.optimizer = rl_optimizer(config)
        # the critic: built (from the policy as it is then) when the objective needs values
        self.needs_critic = Input.VALUES in objective.requirements
        self.critic_optimizer = critic_optimizer(config) if self.needs_critic else None
        self.critic_module: Any = None
        self.state: TrainState | None = None
        self._setup: UpdateSetup | None = None

    def train_state(self) -> TrainState:
        """The device state, first built from the model's current parameters."""
        if self.state is None:
            _, params = nnx.split(self.model)
            reference = Input.REF_LOG_PROBS in self.objective.requirements
            self.state = TrainState(
                params,
                self.optimizer.init(trainable_part(params)),  # LoRA: the adapters' only
                self.objective.init_state(),
                jax.tree.map(jnp.copy, params) if reference else None,
            )
            if self.needs_critic:
                self.critic_module = build_value_module(self.config, self.model, self.mesh)
                _, critic_params = nnx.split(self.critic_module)
                opt_state = self.critic_optimizer.init(trainable_part(critic_params))
                self.state.critic = CriticState(critic_params, opt_state)
        return self.state

    def update_setup(self) -> UpdateSetup:
        """The jitted update pieces (built once; one compile per packed prompt width)."""
        if self._setup is None:
            c = self.config
            setup = update_setup(
                c, self.model, self.objective, self.optimizer, self.tokenizer, self.mesh
            )
            if self.needs_critic:
                self.train_state()  # the critic's module exists with the state
                forward = value_forward(self.critic_module, self.model)
                critic = critic_setup(c, forward, self.critic_optimizer, self.mesh)
                setup = dataclasses.replace(setup, critic=critic, critic_lr=current_learning_rate)
            self._setup = setup
        return self._setup

    def update(self, rollout, timer: Timer) -> dict[str, float]:
        """The policy update on ``rollout`` (the state updated in place); its metrics."""
        c, state = self.config, self.train_state()
        params, opt_state, objective_state, critic, metrics = update_policy(
            self.update_setup(),
            state.params,
            state.opt_state,
            state.objective_state,
            rollout,
            mini_batch_size=c.trainer.mini_batch_size,
            ref_params=state.ref_params,
            critic=state.critic,
            timer=timer,
        )
        state.params, state.opt_state, state.objective_state = params, opt_state, objective_state
        state.critic = critic
        metrics["actor/lr"] = float(current_learning_rate(state.opt_state))
        return metrics

    def sampler_params(self):
        """The parameters the sampler plays (under LoRA, merged), placed for it
        (:meth:`for_sampler`; with several processes a collective)."""
        return self.for_sampler(self._played())

    def sampler_copy(self):
        """The sampler's parameters as an on-device copy: the update donates ``state.params``,
        the producer's engine must never hold those buffers. Made in the main thread (with
        several processes a collective)."""
        return jax.block_until_ready(self.for_sampler(self._played(), copy=True))

    def _played(self):
        return sampler_params(self.train_state().params, self.config.model.lora)

    def for_sampler(self, params, *, copy: bool = False):
        """The sampler's ``params`` placed on the engine's devices
        (:func:`~arlarena_jax.sampler.placement.replica_params`): as they are (``copy``: a copy)
        when the engine runs on the training mesh; a replica on this process's devices when the
        trainer spans several processes (a collective: every process calls it at the same
        point)."""
        if self.sampler_layout is None:
            return jax.tree.map(jnp.copy, params) if copy else params
        return replica_params(params, self.mesh, self.sampler_layout(), copy=copy)


def update_setup(config: Config, model, objective, optimizer, tokenizer, mesh) -> UpdateSetup:
    """Jitted update step, log-prob function and advantage preparation for ``config``."""
    t = config.trainer
    graphdef, _ = nnx.split(model)
    # Behaviour log-probs are at the sampling temperature (τ = 1 for greedy, as the sampler).
    temperature = config.sampler.train.temperature or 1.0
    common = dict(
        micro_batch_size=t.micro_batch_size,
        temperature=temperature,
        mesh=mesh,
        prompt_widths=t.prompt_widths,
    )
    return UpdateSetup(
        objective,
        cached(
            lambda width: make_update_step(
                graphdef,
                objective,
                optimizer,
                prompt_length=width,
                mini_batch_size=t.mini_batch_size,
                **common,
            )
        ),
        cached(lambda width: make_log_prob_fn(graphdef, prompt_length=width, **common)),
        make_prepare_fn(objective),
        config.sampler.max_prefill_length,
        build.response_width(config),
        pad_id=int(tokenizer.pad_token_id or 0),
        ppo_epochs=t.ppo_epochs,
        mesh=mesh,
        use_rollout_log_probs=t.use_rollout_log_probs,
    )


def critic_setup(config: Config, forward, optimizer, mesh) -> CriticSetup:
    """The critic's jitted value pass and mini-batch step per packed prompt width."""
    t = config.trainer
    return CriticSetup(
        cached(
            lambda width: make_values_fn(
                forward,
                prompt_length=width,
                micro_batch_size=t.micro_batch_size,
                mesh=mesh,
                prompt_widths=t.prompt_widths,
            )
        ),
        cached(
            lambda width: make_critic_step(
                forward,
                optimizer,
                prompt_length=width,
                mini_batch_size=t.mini_batch_size,
                micro_batch_size=t.micro_batch_size,
                clip=config.critic.cliprange_value,
                mesh=mesh,
                prompt_widths=t.prompt_widths,
            )
        ),
        t.mini_batch_size,
        t.micro_batch_size,
    )
