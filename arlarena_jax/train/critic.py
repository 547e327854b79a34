"""PPO's critic in the trainer: the value pass, the critic's mini-batch step and its metrics
(docs/algorithms.md §3.7c).

The trainer builds a critic only because the objective declares ``Input.VALUES`` (GAE); nothing
here knows a method by name. Two value models (``critic.model``):

- ``separate``: verl's layout, a Qwen with a scalar head initialised from the policy
  (:class:`~arlarena_jax.models.value.QwenValueModel`), with its own parameters and optimizer;
- ``head``: a :class:`~arlarena_jax.models.value.ValueHead` on the policy's final hidden states,
  which are held constant (``stop_gradient``): only the head learns, no second trunk.

Either way a value forward is ``forward(critic_params, policy_params, ids, mask) -> [B, S]``.
Per RL step, before the policy's update: values V_old of the rollout's response tokens →
``TurnBatch.values`` → GAE (``Objective.prepare``) → the critic's mini-batch steps on the clipped
value loss against the returns, ``trainer.ppo_epochs`` times, with its own optimizer
(``critic.optim``) behind the same non-finite guard as the policy's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh

from arlarena_jax.errors import ConfigError
from arlarena_jax.models.lora import (
    LoRAConfig,
    LoRAParam,
    add_lora,
    has_lora,
    join_trainable,
    merged_model,
    split_trainable,
)
from arlarena_jax.models.qwen import QwenForCausalLM
from arlarena_jax.models.sharding import shard_model
from arlarena_jax.models.value import (
    QwenValueModel,
    ValueHead,
    load_value_pretrained,
    response_values,
    value_model_from_policy,
)
from arlarena_jax.objectives.batch import TurnBatch
from arlarena_jax.objectives.declare import merge_tables
from arlarena_jax.objectives.value import VALUE_METRICS, clipped_value_loss, explained_variance
from arlarena_jax.train.sequences import Sequences, narrower_widths
from arlarena_jax.train.update import (
    STEP_METRICS,
    UpdateStep,
    accumulate_gradients,
    at_narrowest_width,
    guarded_update,
    map_micro_batches,
    mesh_jit,
    run_update,
)

Array = jax.Array
ValueForward = Callable[[Any, Any, Array, Array], Array]  # (critic, policy, ids, mask) -> [B, S]


class CriticState(NamedTuple):
    """The critic's checkpointed state: its parameters and optimizer state."""

    params: Any
    opt_state: Any


def separate_forward(graphdef: nnx.GraphDef) -> ValueForward:
    """Values of a :class:`QwenValueModel` (``graphdef``); the policy's parameters are unused."""

    def forward(critic_params, policy_params, ids, mask):
        del policy_params
        return nnx.merge(graphdef, critic_params)(ids, mask)

    return forward


def head_forward(head_graphdef: nnx.GraphDef, policy_graphdef: nnx.GraphDef) -> ValueForward:
    """Values of a :class:`ValueHead` on the policy's hidden states, held constant."""

    def forward(critic_params, policy_params, ids, mask):
        policy = nnx.merge(policy_graphdef, jax.lax.stop_gradient(policy_params))
        hidden = jax.lax.stop_gradient(policy.hidden_states(ids, mask))
        return nnx.merge(head_graphdef, critic_params)(hidden)

    return forward


def _response_values(forward: ValueForward, prompt_length: int, prompt_widths: int = 1):
    """``forward`` cut to the response tokens: token t valued at position P + t − 1 of the P
    prompt columns run. ``prompt_widths`` > 1: each call runs at the narrowest of that many
    prompt widths that holds its prompts (:func:`~arlarena_jax.train.update.at_narrowest_width`;
    only left padding is cut, so the values are the same)."""

    def at_width(ids, mask, width: int, critic_params, policy_params):
        full = forward(critic_params, policy_params, ids, mask)
        return response_values(full, width, ids.shape[1] - width)

    widths = narrower_widths(prompt_length, prompt_widths)
    narrowest = at_narrowest_width(at_width, widths, prompt_length)

    def values(critic_params, policy_params, ids, mask):
        return narrowest(ids, mask, critic_params, policy_params)

    return values


def make_values_fn(
    forward: ValueForward,
    *,
    prompt_length: int,
    micro_batch_size: int,
    mesh: Mesh | None = None,
    prompt_widths: int = 1,
) -> Callable[[Any, Any, Sequences], Array]:
    """A jitted ``fn(critic_params, policy_params, sequences) -> values [N, T]`` over micro-batches
    (a ``lax.map``; padding-only micro-batches are not run and give 0), each at the narrowest of
    ``prompt_widths`` prompt widths that holds its prompts."""
    values = _response_values(forward, prompt_length, prompt_widths)

    def fn(critic_params, policy_params, sequences: Sequences) -> Array:
        def one(ids, mask):
            return values(critic_params, policy_params, ids, mask)

        return map_micro_batches(one, sequences, micro_batch_size)

    return mesh_jit(fn, mesh, state_args=2, row_outputs=True)


CRITIC_STEP_METRICS = dict(merge_tables([("value loss", VALUE_METRICS), ("step", STEP_METRICS)]))


def make_critic_step(
    forward: ValueForward,
    optimizer: optax.GradientTransformation,
    *,
    prompt_length: int,
    mini_batch_size: int,
    micro_batch_size: int,
    clip: float,
    mesh: Mesh | None = None,
    prompt_widths: int = 1,
) -> Callable:
    """``step(critic_params, opt_state, policy_params, sequences, batch) -> (critic_params,
    opt_state, metrics)`` on one mini-batch: Σ over micro-batches of ∇ clipped value loss /
    grad_accum (``batch.values`` = V_old, ``batch.returns`` = R), one guarded optimizer step.
    Under LoRA (a ``separate`` critic with adapters) only the adapters and the value head
    train; ``opt_state`` is of their part. ``prompt_widths`` > 1: each micro-batch runs at the
    narrowest of that many prompt widths that holds its prompts (the same values)."""
    if mini_batch_size % micro_batch_size:
        raise ValueError(
            f"mini_batch_size {mini_batch_size} is not a multiple of micro_batch_size "
            f"{micro_batch_size}"
        )
    grad_accum = mini_batch_size // micro_batch_size
    values = _response_values(forward, prompt_length, prompt_widths)

    def micro_loss(trainable, frozen, policy_params, ids, mask, batch: TurnBatch):
        critic_params = join_trainable(trainable, frozen)
        predicted = values(critic_params, policy_params, ids, mask)
        valid = batch.response_mask * batch.row_mask[:, None]
        out = clipped_value_loss(
            predicted, batch.values, batch.returns, valid, batch.row_mask, clip=clip
        )
        return out.loss / grad_accum, out.metrics

    grad_fn = jax.value_and_grad(micro_loss, has_aux=True)

    def step(critic_params, opt_state, policy_params, sequences: Sequences, batch: TurnBatch):
        def split(x):
            return x.reshape(grad_accum, micro_batch_size, *x.shape[1:])

        micro = jax.tree.map(split, (sequences.input_ids, sequences.attention_mask, batch))
        trainable, frozen = split_trainable(critic_params)

        def bound(t, *data):
            return grad_fn(t, frozen, policy_params, *data)

        grads, metrics = accumulate_gradients(bound, trainable, micro, CRITIC_STEP_METRICS)
        guarded = guarded_update(optimizer, grads, opt_state, trainable)
        metrics["grad_norm"] = guarded.grad_norm
        metrics["skipped"] = (~guarded.finite).astype(jnp.float32)
        return join_trainable(guarded.params, frozen), guarded.opt_state, metrics

    return mesh_jit(step, mesh, state_args=3, state_outputs=2, row_outputs=False, donate=True)


@dataclasses.dataclass(frozen=True)
class CriticSetup:
    """The critic's jitted pieces per packed prompt width P (cached by the caller)."""

    values: Callable[[int], Callable]  # P -> fn(critic_params, policy_params, sequences)
    step: Callable[[int], Callable]  # P -> make_critic_step(...)
    mini_batch_size: int
    micro_batch_size: int


def update_critic(
    setup: CriticSetup,
    prompt_length: int,
    state: CriticState,
    policy_params: Any,
    sequences: Sequences,
    batch: TurnBatch,
    *,
    ppo_epochs: int,
    place: Callable[[Any], Any] | None = None,
) -> tuple[CriticState, list[dict[str, Array]]]:
    """Every critic mini-batch step of every epoch, in the policy update's order."""
    jitted = setup.step(prompt_length)
    step = UpdateStep(
        lambda p, o, s, b: jitted(p, o, policy_params, s, b),
        setup.mini_batch_size,
        setup.micro_batch_size,
    )
    params, opt_state, history = run_update(
        step, state.params, state.opt_state, sequences, batch, ppo_epochs=ppo_epochs, place=place
    )
    return CriticState(params, opt_state), history


def critic_metrics(
    history: list[dict[str, Array]], batch: TurnBatch, learning_rate: float
) -> dict[str, float]:
    """``critic/…``: the value loss, clip fraction and predictions over the mini-batch steps,
    the largest gradient norm, the skipped steps, the learning rate, and V_old's statistics and
    explained variance of the returns over the batch's valid tokens."""
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *history)
    metrics = {
        f"critic/{key}": float(CRITIC_STEP_METRICS[key].reduce(stacked[key]))
        for key in ("vf_loss", "vf_clipfrac", "vpred_mean")
    }
    metrics["critic/grad_norm"] = float(jnp.max(stacked["grad_norm"]))
    metrics["critic/skipped_steps"] = float(jnp.sum(stacked["skipped"]))
    metrics["critic/lr"] = float(learning_rate)
    mask = batch.response_mask * batch.row_mask[:, None]
    values = np.asarray(batch.values)[np.asarray(mask) > 0]
    if values.size:
        metrics |= {
            "critic/values/mean": float(values.mean()),
            "critic/values/max": float(values.max()),
            "critic/values/min": float(values.min()),
        }
    metrics["critic/vf_explained_var"] = float(
        explained_variance(batch.returns, batch.values, mask)
    )
    return metrics


def build_value_module(config: Any, policy: QwenForCausalLM, mesh: Mesh | None) -> nnx.Module:
    """The critic's module for ``config.critic`` from the policy as it is now (so a critic built
    after cloning starts from the cloned policy): a :class:`QwenValueModel` (``separate``) or a
    :class:`ValueHead` (``head``), from ``critic.path`` when set, placed on ``mesh``."""
    c = config.critic
    if c.path is not None:
        loaded = _load(c.path, policy, config.model.remat)
        _check_fits(loaded.config, policy.config, c.path)
        module: nnx.Module = loaded.head if c.model == "head" else loaded
    elif c.model == "head":
        dtype = policy.model.embed_tokens.embedding.get_value().dtype
        module = ValueHead(policy.config.hidden_size, param_dtype=dtype, rngs=nnx.Rngs(c.seed))
    else:
        module = value_model_from_policy(policy, seed=c.seed, remat=config.model.remat)
    if isinstance(module, QwenValueModel) and config.model.lora is not None:
        add_critic_lora(module, config.model.lora, seed=c.seed)
    return shard_model(module, mesh) if mesh is not None else module


def add_critic_lora(module: QwenValueModel, lora: LoRAConfig, *, seed: int) -> QwenValueModel:
    """The ``separate`` critic under LoRA: fresh adapters of its own on the trunk (the trunk
    frozen) and a trainable value head (PEFT's ``modules_to_save``), in place."""
    add_lora(module.backbone, lora, seed=seed)
    score = module.head.score
    score.kernel = LoRAParam(score.kernel.get_value())
    score.bias = LoRAParam(score.bias.get_value())
    return module


def _load(path: str, policy: QwenForCausalLM, remat: str | None) -> QwenValueModel:
    """The value model in ``path`` in the policy's dtypes; a failure is one ConfigError line."""
    embed = policy.model.embed_tokens
    try:
        return load_value_pretrained(
            path, dtype=embed.dtype, param_dtype=embed.embedding.get_value().dtype, remat=remat
        )
    except (OSError, ValueError) as error:
        raise ConfigError(
            f"config key 'critic.path': cannot load the value model in {path}: {error}"
        ) from None


def _check_fits(critic: Any, policy: Any, path: str) -> None:
    """A loaded critic reads the policy's token ids and, as a head, its hidden states."""
    for field in ("hidden_size", "vocab_size"):
        if getattr(critic, field) != getattr(policy, field):
            raise ConfigError(
                f"config key 'critic.path': {path} has {field} {getattr(critic, field)}, the "
                f"policy {getattr(policy, field)}"
            )


def value_forward(module: nnx.Module, policy: QwenForCausalLM) -> ValueForward:
    """The forward of a module :func:`build_value_module` made."""
    graphdef, _ = nnx.split(module)
    if isinstance(module, ValueHead):
        return head_forward(graphdef, nnx.split(policy)[0])
    return separate_forward(graphdef)


def exportable_critic(module: nnx.Module, policy: QwenForCausalLM) -> QwenValueModel:
    """The critic as a whole value model: itself, or for a head the current policy's decoder
    with the head (the function the head computes)."""
    if isinstance(module, QwenValueModel):
        if not has_lora(nnx.state(module)):
            return module
        whole = nnx.clone(module)  # LoRA: the trunk's adapters merged
        whole.backbone = merged_model(module.backbone)
        return whole
    whole = value_model_from_policy(merged_model(policy), seed=0)
    nnx.update(whole.head, nnx.state(module, nnx.Param))
    return whole
