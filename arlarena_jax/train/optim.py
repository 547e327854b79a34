"""The shared optimizer: global-norm clipping, then AdamW with a warm-up schedule (all optax).

SFT recipe (verl ``sft_trainer.yaml``): AdamW lr 1e-5, β = (0.9, 0.95),
weight decay 0.01, cosine schedule with 10 % warm-up, gradient clip 1.0. The RL actor uses the
same chain with its own settings (verl's actor default β₂ = 0.999, :class:`OptimConfig`'s default;
cloning uses :data:`SFT_OPTIM`).

Schedule over ``total_steps`` = T optimizer updates with W = ⌊T · warmup_ratio⌋ warm-up steps
(verl's ``int(total_steps * warmup_steps_ratio)``); the learning rate of update k (0-based) is

    lr(k) = peak · k / W                                   for k < W
    lr(k) = peak · ½ (1 + cos(π · (k − W) / (T − W)))      for W ≤ k ≤ T   ("cosine", end value 0)
    lr(k) = peak                                           for k ≥ W       ("constant")

which is verl's ``get_cosine_schedule_with_warmup`` (min_lr_ratio 0, half a cycle) and
``optax.warmup_cosine_decay_schedule(0, peak, W, T)``; past T the cosine stays at 0.

Update: g ← g · min(1, c / ‖g‖₂) (``optax.clip_by_global_norm``), then decoupled AdamW
(``optax.adamw``; the decay applies to every parameter, as torch's AdamW over
``model.parameters()`` in verl). AdamW is wrapped in ``optax.inject_hyperparams``, so the rate
used by the last update is stored in the optimizer state: :func:`current_learning_rate` reads it
(inside or outside jit) and :func:`make_schedule` gives the same schedule as a function of the
step for logging ahead of time. The gradient norm before clipping is not part of the state; the
train step reports ``optax.tree.norm(grads)`` (optax.global_norm, now deprecated) itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Literal

import jax
import jax.numpy as jnp
import optax

SCHEDULES = ("cosine", "constant")
Schedule = Literal["constant", "cosine"]


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """The optimizer's settings (the config's ``optim`` and ``sft.optim`` sections)."""

    lr: float = 1e-6  # peak learning rate
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    warmup_ratio: float = 0.0
    schedule: Schedule = "constant"
    grad_clip: float | None = 1.0  # null: no clipping


# The cloning recipe (verl sft_trainer.yaml).
SFT_OPTIM = OptimConfig(lr=1e-5, betas=(0.9, 0.95), warmup_ratio=0.1, schedule="cosine")


def invalid_optim(o: OptimConfig) -> Iterator[tuple[str, str]]:
    """``(field, message)`` for every setting out of range (NaN fails every rule)."""
    if not o.lr > 0:
        yield "lr", f"must be > 0, got {o.lr!r}"
    if not o.weight_decay >= 0:
        yield "weight_decay", f"must be >= 0, got {o.weight_decay!r}"
    if not all(0 <= b < 1 for b in o.betas):
        yield "betas", f"each must lie in [0, 1), got {list(o.betas)}"
    if not o.eps > 0:
        yield "eps", f"must be > 0, got {o.eps!r}"
    if not 0 <= o.warmup_ratio < 1:
        yield "warmup_ratio", f"must lie in [0, 1), got {o.warmup_ratio!r}"
    if o.grad_clip is not None and not o.grad_clip > 0:
        yield "grad_clip", f"must be > 0 or null, got {o.grad_clip!r}"


def warmup_steps(total_steps: int, warmup_ratio: float) -> int:
    """W = ⌊total_steps · warmup_ratio⌋ (verl's rounding)."""
    return int(total_steps * warmup_ratio)


def make_schedule(
    *,
    learning_rate: float,
    total_steps: int,
    warmup_ratio: float = 0.1,
    schedule: str = "cosine",
) -> optax.Schedule:
    """The learning rate as a function of the update index (see module doc)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; expected one of {SCHEDULES}")
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    if not 0.0 <= warmup_ratio < 1.0:
        raise ValueError(f"warmup_ratio must lie in [0, 1), got {warmup_ratio}")
    warm = warmup_steps(total_steps, warmup_ratio)
    if schedule == "cosine":
        return optax.warmup_cosine_decay_schedule(0.0, learning_rate, warm, total_steps, 0.0)
    if warm == 0:
        return optax.constant_schedule(learning_rate)
    return optax.join_schedules(
        [optax.linear_schedule(0.0, learning_rate, warm), optax.constant_schedule(learning_rate)],
        [warm],
    )


def make_optimizer(settings: OptimConfig, total_steps: int) -> optax.GradientTransformation:
    """``chain(clip_by_global_norm(grad_clip), inject_hyperparams(adamw)(schedule, …))`` over
    ``total_steps`` updates. ``grad_clip=None`` disables clipping (an identity stage keeps the
    state layout)."""
    for field, message in invalid_optim(settings):
        raise ValueError(f"optimizer {field} {message}")
    lr = make_schedule(
        learning_rate=settings.lr,
        total_steps=total_steps,
        warmup_ratio=settings.warmup_ratio,
        schedule=settings.schedule,
    )
    clip = settings.grad_clip
    clip_stage = optax.clip_by_global_norm(clip) if clip is not None else optax.identity()
    b1, b2 = settings.betas
    adamw = optax.inject_hyperparams(optax.adamw)(
        learning_rate=lr, b1=b1, b2=b2, eps=settings.eps, weight_decay=settings.weight_decay
    )
    return optax.chain(clip_stage, in_float32(adamw))


def _to_float32(tree):
    """Floating leaves as float32 (others unchanged)."""
    return jax.tree.map(
        lambda x: x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree
    )


def in_float32(inner: optax.GradientTransformation) -> optax.GradientTransformation:
    """``inner`` run in float32: its state (AdamW's moments) is built from float32 copies of the
    parameters, it sees float32 gradients and parameters, and its updates are cast back to the
    gradients' dtypes. For float32 parameters this is ``inner`` itself. For bfloat16 ones it is
    what keeps the second moment alive: in bfloat16, β₂ = 0.999 rounds to 1, so the bias
    correction 1 − β₂ᵗ is 0 and the first update is 0/0 in every weight."""

    def init(params):
        return inner.init(_to_float32(params))

    def update(updates, state, params=None):
        params32 = None if params is None else _to_float32(params)
        new, state = inner.update(_to_float32(updates), state, params32)
        return jax.tree.map(lambda n, u: n.astype(u.dtype), new, updates), state

    return optax.GradientTransformation(init, update)


def current_learning_rate(opt_state: optax.OptState) -> jax.Array:
    """The learning rate the last update used (schedule(0) right after ``init``).

    Read from the ``inject_hyperparams`` state of :func:`make_optimizer`'s chain.
    """
    states = opt_state if isinstance(opt_state, tuple) else (opt_state,)
    for state in states:
        hyperparams = getattr(state, "hyperparams", None)
        if isinstance(hyperparams, dict) and "learning_rate" in hyperparams:
            return jnp.asarray(hyperparams["learning_rate"], jnp.float32)
    raise ValueError("optimizer state has no injected learning_rate; use make_optimizer()")
