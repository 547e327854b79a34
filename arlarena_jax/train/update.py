"""The RL update on device: old/reference log-probs, advantages, and the mini-batch step.

Order of the update (docs/architecture.md, "One RL step", item 5):

1. the batch of N turn rows is split sequentially, without shuffling, into mini-batches of
   ``mini_batch_size`` rows; each mini-batch into micro-batches of ``micro_batch_size``;
2. each micro-batch loss is ``Objective.loss`` (its aggregation) × 1/grad_accum, grad_accum =
   mini / micro; gradients are summed over the micro-batches (a ``lax.scan``); a micro-batch of
   padding rows only is skipped (a ``lax.cond``: no compute, no gradient, left out of the
   metrics), so rounding a batch up to whole mini-batches costs memory, not time; with
   ``prompt_widths`` > 1 each micro-batch runs on the last w of the batch's prompt columns, w
   the narrowest of those widths that holds its prompts (:func:`at_narrowest_width`: only
   left padding is cut, so the values are the same);
3. the global gradient norm (before clipping) is reported; a non-finite norm skips the update
   (parameters and optimizer state unchanged, ``skipped`` = 1), otherwise the optimizer (clipping
   and AdamW, from ``arlarena_jax.train.optim``) takes one step per mini-batch;
4. this repeats for ``ppo_epochs``.

``lp_old`` and the old entropy are recomputed by the trainer's parameters before the update (not
the sampler's log-probs, which go to ``rollout_log_probs`` for truncated importance sampling), and
``lp_ref`` by the frozen reference parameters when a component declares ``Input.REF_LOG_PROBS``.
Micro-batch metrics reduce by the reductions the components declare (``Objective.
metric_reductions``), never by their names. All functions are jitted once per static shape; the
trainer knows no algorithm by name, only the ``Objective`` and what it declares.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from arlarena_jax.models.logprobs import response_log_probs
from arlarena_jax.models.lora import join_trainable, split_trainable
from arlarena_jax.models.sharding import BATCH, put_rows, tree_shardings
from arlarena_jax.objectives.batch import TurnBatch
from arlarena_jax.objectives.compose import Objective
from arlarena_jax.objectives.declare import (
    Input,
    MetricTable,
    Reduction,
    means,
    merge_tables,
    reduce_stacked,
)
from arlarena_jax.row_chunks import map_row_chunks
from arlarena_jax.train.sequences import Sequences, narrower_widths

Array = jax.Array


TRAINER_INPUTS: frozenset[Input] = frozenset(
    {
        Input.OLD_LOG_PROBS,  # recomputed by the trainer's parameters before the update
        Input.OLD_ENTROPY,  # from the same pass
        Input.ENTROPY,  # from the micro-batch forward pass
        Input.ROLLOUT_LOG_PROBS,  # reported by the sampler
        Input.REF_LOG_PROBS,  # from frozen reference parameters, kept when declared
        Input.VALUES,  # from the critic (train/critic.py), built when declared
    }
)  # what this trainer can compute: every declared input
STEP_METRICS: MetricTable = means("grad_norm", "skipped")  # added by the update step


def step_metric_reductions(objective: Objective) -> dict[str, Reduction]:
    """The declared reduction of every metric an update step returns (objective + step)."""
    declared = tuple(objective.metric_reductions.items())
    return merge_tables([("objective", declared), ("update step", STEP_METRICS)])


def mesh_jit(
    fn: Callable,
    mesh: Mesh | None,
    *,
    state_args: int,
    row_outputs: bool,
    donate: bool = False,
    state_outputs: int | None = None,
) -> Callable:
    """``jax.jit(fn)``; with ``mesh``, in/out shardings over it, derived from the first call's
    trees (so it compiles on that call). The first ``state_args`` arguments (parameters,
    optimizer state) follow the partition rules; the other arguments are row batches split over
    ``data`` × ``fsdp``. Outputs: rows split the same way (``row_outputs``), or the shardings of
    the first ``state_outputs`` state arguments (default: all of them) followed by replicated
    metrics. ``donate`` donates those returned state arguments (an extra state argument, e.g.
    the policy's parameters read by the critic's step, is only read). Each call runs under
    ``jax.set_mesh(mesh)``, so the program is traced with the mesh in context (the embedding
    lookup's layout, :func:`~arlarena_jax.models.sharding.table_for_lookup`). Shared by the RL
    update, the critic's update, the log-prob and value passes and the SFT step."""
    returned = state_args if state_outputs is None else state_outputs
    donate_argnums = tuple(range(returned)) if donate else ()
    if mesh is None:
        return jax.jit(fn, donate_argnums=donate_argnums)
    compiled: list[Callable] = []
    rows = NamedSharding(mesh, BATCH)

    def call(*args):
        if not compiled:
            state = tuple(tree_shardings(a, mesh) for a in args[:state_args])
            kept = state[:returned]
            out = rows if row_outputs else (*kept, NamedSharding(mesh, PartitionSpec()))
            compiled.append(
                jax.jit(
                    fn,
                    in_shardings=(*state, *(rows,) * (len(args) - state_args)),
                    out_shardings=out,
                    donate_argnums=donate_argnums,
                )
            )
        with jax.set_mesh(mesh):  # traced under it: models.sharding.table_for_lookup
            return compiled[0](*args[:state_args], *host_rows(args[state_args:], mesh))

    return call


def host_rows(trees: tuple, mesh: Mesh) -> tuple:
    """Row batches as the jitted call takes them: on several processes, NumPy leaves (the same
    whole host batch on every process) and arrays on this process's devices become global
    arrays split over ``data`` × ``fsdp`` (``put_rows``: each process keeps its devices' rows);
    global arrays pass as they are. One process passes them to jit directly (it places them)."""
    if jax.process_count() == 1:
        return trees

    def place(leaf):
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            return leaf
        return put_rows(np.asarray(leaf), mesh)

    return jax.tree.map(place, trees)


def unless_padding(real: Array, fn: Callable, *args):
    """``fn(*args)`` if ``real``, else zeros of its output shapes, without running ``fn`` (a
    ``lax.cond``): a micro-batch of padding rows only does no work."""

    def padding(*args):
        shapes = jax.eval_shape(fn, *args)
        return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    return jax.lax.cond(real, fn, padding, *args)


def width_index(widths: tuple[int, ...], mask: Array, prompt_length: int) -> Array:
    """Index in ``widths`` (widest first) of the narrowest prompt width that holds every row's
    prompt: rows are left-padded, so a prompt of n tokens fills the last n of the
    ``prompt_length`` prompt columns, and a width w holds it when n ≤ w."""
    need = jnp.max(jnp.sum(mask[:, :prompt_length] > 0, axis=1))
    return jnp.sum(jnp.asarray(widths) >= need) - 1


def at_narrowest_width(fn: Callable, widths: tuple[int, ...], prompt_length: int) -> Callable:
    """``call(ids, mask, *rest)``: ``fn(ids, mask, width, *rest)`` on the columns from
    ``prompt_length − width`` on, at the narrowest of ``widths`` (widest first, the first being
    ``prompt_length``) that holds the micro-batch's prompts. A ``lax.switch``: every width
    compiles, only the chosen one runs. The columns cut are left padding only; positions come
    from the mask and padded keys are masked out, so each width computes the same values."""
    if widths == (prompt_length,):
        return lambda ids, mask, *rest: fn(ids, mask, prompt_length, *rest)

    def branch(width: int) -> Callable:
        cut = prompt_length - width
        return lambda ids, mask, *rest: fn(ids[:, cut:], mask[:, cut:], width, *rest)

    branches = [branch(w) for w in widths]

    def call(ids, mask, *rest):
        index = width_index(widths, mask, prompt_length)
        return jax.lax.switch(index, branches, ids, mask, *rest)

    return call


class GuardedUpdate(NamedTuple):
    """One optimizer step behind the non-finite guard."""

    params: Any
    opt_state: Any
    grad_norm: Array  # ‖g‖₂ before clipping
    finite: Array  # bool: the step was applied
    proposed_opt_state: Any  # the state the step produced (kept only if finite)


def guarded_update(
    optimizer: optax.GradientTransformation,
    grads: Any,
    opt_state: Any,
    params: Any,
    finite: Array | bool = True,
) -> GuardedUpdate:
    """Apply ``optimizer`` unless ‖g‖₂ (or the extra ``finite`` flag, e.g. the loss's) is not
    finite; a skipped step keeps parameters and optimizer state. The optimizer sees
    where(ok, g, 0), so non-finite values never enter its arithmetic."""
    grad_norm = optax.tree.norm(grads)  # = optax.global_norm
    ok = jnp.isfinite(grad_norm) & finite
    safe_grads = jax.tree.map(lambda g: jnp.where(ok, g, 0.0), grads)
    updates, proposed = optimizer.update(safe_grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)

    def keep_if_ok(new, old):
        return jnp.where(ok, new, old)

    params = jax.tree.map(keep_if_ok, new_params, params)
    kept = jax.tree.map(keep_if_ok, proposed, opt_state)
    return GuardedUpdate(params, kept, grad_norm, ok, proposed)


def make_log_prob_fn(
    graphdef: nnx.GraphDef,
    *,
    prompt_length: int,
    micro_batch_size: int,
    temperature: float = 1.0,
    chunk_size: int = 128,
    mesh: Mesh | None = None,
    prompt_widths: int = 1,
) -> Callable[[Any, Sequences], tuple[Array, Array]]:
    """A jitted ``fn(params, sequences) -> (log_probs, entropy)`` ``[N, T]`` over micro-batches of
    ``micro_batch_size`` rows (a ``lax.map``, so peak memory is one micro-batch's). A micro-batch
    of padding rows only (no attended token) is not run: its values are 0. ``prompt_widths`` > 1:
    each micro-batch runs at the narrowest of that many widths that holds its prompts
    (:func:`at_narrowest_width`)."""

    def run(ids, mask, width, params):
        model = nnx.merge(graphdef, params)
        stats = response_log_probs(
            model, ids, mask, width, chunk_size=chunk_size, temperature=temperature
        )
        return stats.log_probs, stats.entropy

    widths = narrower_widths(prompt_length, prompt_widths)
    narrowest = at_narrowest_width(run, widths, prompt_length)

    def fn(params, sequences: Sequences) -> tuple[Array, Array]:
        return map_micro_batches(
            lambda ids, mask: narrowest(ids, mask, params), sequences, micro_batch_size
        )

    return mesh_jit(fn, mesh, state_args=1, row_outputs=True)


def map_micro_batches(fn: Callable, sequences: Sequences, micro_batch_size: int):
    """``fn(ids, mask)`` over consecutive micro-batches of ``micro_batch_size`` rows (a
    ``lax.map``, so peak memory is one micro-batch's), its ``[rows, ...]`` outputs joined back to
    ``[N, ...]``. A micro-batch of padding rows only (no attended token) is not run: zeros."""

    def one(ids, mask):
        return unless_padding(jnp.any(mask > 0), fn, ids, mask)

    arrays = (sequences.input_ids, sequences.attention_mask)
    return map_row_chunks(one, arrays, micro_batch_size)


def make_prepare_fn(objective: Objective) -> Callable:
    """A jitted ``fn(batch, state) -> (batch, state, metrics)``: shaped rewards and advantages
    over the whole batch (``Objective.prepare``)."""
    return jax.jit(objective.prepare)


class UpdateStep(NamedTuple):
    """The jitted mini-batch step and its static sizes."""

    step: Callable
    mini_batch_size: int
    micro_batch_size: int


def _micro_grad_fn(
    graphdef: nnx.GraphDef,
    objective: Objective,
    *,
    prompt_length: int,
    grad_accum: int,
    temperature: float,
    chunk_size: int,
    widths: tuple[int, ...],
) -> Callable:
    """``fn(trainable, frozen, ids, mask, batch) -> ((loss / grad_accum, metrics), grads)`` of
    one micro-batch, the gradient of the trainable part only (:func:`split_trainable`: the LoRA
    adapters, or every parameter without LoRA), at the narrowest of ``widths`` that holds its
    prompts. The current entropies go to the loss only if a component declares
    ``Input.ENTROPY`` (otherwise they are left unused and compiled away)."""
    use_entropy = Input.ENTROPY in objective.requirements

    def at_width(ids, mask, width: int, trainable, frozen, batch: TurnBatch):
        def micro_loss(trainable):
            model = nnx.merge(graphdef, join_trainable(trainable, frozen))
            stats = response_log_probs(
                model, ids, mask, width, chunk_size=chunk_size, temperature=temperature
            )
            entropy = stats.entropy if use_entropy else None
            loss, metrics = objective.loss(stats.log_probs, batch, entropy)
            return loss / grad_accum, metrics

        return jax.value_and_grad(micro_loss, has_aux=True)(trainable)

    narrowest = at_narrowest_width(at_width, widths, prompt_length)
    return lambda trainable, frozen, ids, mask, batch: narrowest(
        ids, mask, trainable, frozen, batch
    )


def accumulate_gradients(grad_fn: Callable, params, micro, reductions: dict[str, Reduction]):
    """Σ of the micro-batch gradients (a ``lax.scan``; padding-only micro-batches skipped) and
    the micro-batch metrics reduced by their declared reductions over the real ones."""

    def compute(data):
        (_, metrics), grads = grad_fn(params, *data)
        return grads, metrics

    def body(acc, data):
        real = jnp.any(data[2].row_mask > 0)
        grads, metrics = unless_padding(real, compute, data)
        return jax.tree.map(jnp.add, acc, grads), (metrics, real)

    zeros = jax.tree.map(jnp.zeros_like, params)
    grads, (stacked, real) = jax.lax.scan(body, zeros, micro)
    return grads, reduce_stacked(stacked, reductions, real)


def make_update_step(
    graphdef: nnx.GraphDef,
    objective: Objective,
    optimizer: optax.GradientTransformation,
    *,
    prompt_length: int,
    mini_batch_size: int,
    micro_batch_size: int,
    temperature: float = 1.0,
    chunk_size: int = 128,
    donate: bool = True,
    mesh: Mesh | None = None,
    prompt_widths: int = 1,
) -> UpdateStep:
    """``step(params, opt_state, sequences, batch) -> (params, opt_state, metrics)`` on one
    mini-batch of ``mini_batch_size`` rows (see module doc). Under LoRA only the adapters get
    gradients and optimizer steps (``opt_state`` is the optimizer's state of
    :func:`~arlarena_jax.models.lora.trainable_part`); the frozen base passes through.
    ``batch`` is the matching slice of the prepared :class:`TurnBatch` (advantages filled).
    ``prompt_widths`` > 1: each micro-batch runs at the narrowest of that many prompt widths
    that holds its prompts (:func:`at_narrowest_width`; the same rows, the same values)."""
    if mini_batch_size % micro_batch_size:
        raise ValueError(
            f"mini_batch_size {mini_batch_size} is not a multiple of micro_batch_size "
            f"{micro_batch_size}"
        )
    grad_accum = mini_batch_size // micro_batch_size
    grad_fn = _micro_grad_fn(
        graphdef,
        objective,
        prompt_length=prompt_length,
        grad_accum=grad_accum,
        temperature=temperature,
        chunk_size=chunk_size,
        widths=narrower_widths(prompt_length, prompt_widths),
    )
    reductions = objective.metric_reductions

    def step(params, opt_state, sequences: Sequences, batch: TurnBatch):
        def split(x):
            return x.reshape(grad_accum, micro_batch_size, *x.shape[1:])

        micro = jax.tree.map(split, (sequences.input_ids, sequences.attention_mask, batch))
        trainable, frozen = split_trainable(params)
        bound = lambda t, *data: grad_fn(t, frozen, *data)  # noqa: E731
        grads, metrics = accumulate_gradients(bound, trainable, micro, reductions)
        guarded = guarded_update(optimizer, grads, opt_state, trainable)
        metrics["grad_norm"] = guarded.grad_norm
        metrics["skipped"] = (~guarded.finite).astype(jnp.float32)
        return join_trainable(guarded.params, frozen), guarded.opt_state, metrics

    jitted = mesh_jit(step, mesh, state_args=2, row_outputs=False, donate=donate)
    return UpdateStep(jitted, mini_batch_size, micro_batch_size)


def slice_rows(tree, start: int, size: int):
    """Rows ``start … start + size − 1`` of every array leaf (leading axis)."""
    return jax.tree.map(lambda x: x[start : start + size], tree)


def run_update(
    update: UpdateStep,
    params,
    opt_state,
    sequences: Sequences,
    batch: TurnBatch,
    *,
    ppo_epochs: int = 1,
    place: Callable[[Any], Any] | None = None,
) -> tuple[Any, Any, list[dict[str, Array]]]:
    """All mini-batches of all epochs, in order (module docstring); per-step metrics.
    ``place`` (optional) moves each mini-batch slice onto the devices (e.g. ``put_rows``)."""
    n = sequences.input_ids.shape[0]
    if n % update.mini_batch_size:
        raise ValueError(f"{n} rows are not a multiple of mini_batch_size {update.mini_batch_size}")
    history = []
    for _ in range(ppo_epochs):
        for start in range(0, n, update.mini_batch_size):
            seq = slice_rows(sequences, start, update.mini_batch_size)
            mini = slice_rows(batch, start, update.mini_batch_size)
            if place is not None:
                seq, mini = place((seq, mini))
            params, opt_state, metrics = update.step(params, opt_state, seq, mini)
            history.append(metrics)
    return params, opt_state, history
