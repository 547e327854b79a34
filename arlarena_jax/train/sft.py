"""Behaviour cloning (SFT) on per-turn samples (docs/environments.md §5.2, §1.4).

Sample → tokens (:func:`encode_example`): ``ids = chat_prompt_ids(prompt) + encode(reply) +
[<|im_end|>]``, the RL prompt exactly as the policy sees it (one user message, generation prompt,
thinking switch as in RL, docs/environments.md §1.4) followed by what the policy must generate. Loss
mask m_t = 1 on the reply tokens and the closing ``<|im_end|>`` (the stop token), 0 on the prompt
(verl: "all assistant tokens except the generation prompt"). The ids are built by concatenation
rather than by rendering an assistant message through the template, because the template rewrites
the reply: Qwen3's puts the reasoning between newlines (``<think>\\nplan\\n</think>\\n\\n``) and,
for a reply without ``</think>``, inserts an empty ``<think>\\n\\n</think>\\n\\n``; it also appends
a ``\\n`` the policy never generates. Cloning those tokens would teach a format RL never samples.

Loss of one batch (token mean over the batch, lp_{b,t} = log p(x_{b,t} | x_{b,<t})):

    L = − Σ_{b,t} m_{b,t} · lp_{b,t} / max(1, Σ_{b,t} m_{b,t})

Batches (:class:`SFTBatcher`) have fixed shapes: each example goes to the smallest bucket length
≥ its length, batches are drawn within one bucket, right-padded (attention mask 0), and a short
last batch is filled with empty rows (all masks 0). The order is a deterministic function of
(seed, epoch). The step (:func:`make_sft_step`) is one ``jax.jit``: gradient, global norm before
clipping, optax update, and a non-finite guard that keeps params and optimizer state and reports
``skipped = 1`` (the schedule does not advance on a skipped step).

Cloning resumes exactly: :class:`SFTJob` continues from any :class:`CloneState` (parameters,
optimizer state, steps done; the step count alone fixes the position in the batch stream), so a
run stopped after step k and continued equals the uninterrupted one (the trainer saves the state
when it is stopped and every ``sft.save_every_s`` seconds, ``arlarena_jax.train.run``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh

from arlarena_jax.models.logprobs import token_log_probs
from arlarena_jax.models.lora import join_trainable, split_trainable, trainable_part
from arlarena_jax.rollout.policy import chat_prompt_ids
from arlarena_jax.train.optim import SFT_OPTIM, OptimConfig, current_learning_rate, make_optimizer
from arlarena_jax.train.update import guarded_update, mesh_jit

END_OF_TURN = "<|im_end|>"


class Example(NamedTuple):
    """One tokenized sample: ids and loss mask, int32 arrays of one length."""

    ids: np.ndarray
    loss_mask: np.ndarray


class SFTBatch(NamedTuple):
    """``[B, S]`` int32 arrays: tokens (padding id 0), attention mask, loss mask."""

    input_ids: Any
    attention_mask: Any
    loss_mask: Any


def encode_example(
    tokenizer: Any, prompt: str, reply: str, *, enable_thinking: bool | None = None
) -> Example:
    """(ids, loss_mask) of one (prompt, reply) sample (see module doc)."""
    prompt_ids = chat_prompt_ids(tokenizer, prompt, enable_thinking)
    end = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    if end is None or end == tokenizer.unk_token_id:
        raise ValueError(f"tokenizer has no {END_OF_TURN} token")
    reply_ids = [*tokenizer(reply, add_special_tokens=False)["input_ids"], int(end)]
    ids = np.asarray(prompt_ids + reply_ids, np.int32)
    mask = np.zeros(len(ids), np.int32)
    mask[len(prompt_ids) :] = 1
    return Example(ids, mask)


def buckets_for(lengths: Sequence[int], count: int = 4, multiple: int = 32) -> tuple[int, ...]:
    """Up to ``count`` bucket lengths: length quantiles (q = 1/count … 1) rounded up to
    ``multiple``; the longest covers every example."""
    qs = np.quantile(np.asarray(lengths), np.arange(1, count + 1) / count, method="higher")
    return tuple(sorted({int(math.ceil(q / multiple) * multiple) for q in qs}))


@dataclasses.dataclass
class SFTBatcher:
    """Fixed-shape, bucketed, deterministically shuffled batches (see module doc).

    An example longer than the longest bucket raises (``on_overflow="error"``) or is left out
    (``"drop"``; :attr:`dropped` lists the indices).
    """

    examples: Sequence[Example]
    batch_size: int
    buckets: Sequence[int]
    seed: int = 0
    on_overflow: str = "error"

    def __post_init__(self) -> None:
        if self.batch_size < 1 or not self.buckets:
            raise ValueError("batch_size must be >= 1 and buckets non-empty")
        if self.on_overflow not in ("error", "drop"):
            raise ValueError(f"on_overflow must be 'error' or 'drop', got {self.on_overflow!r}")
        self.buckets = tuple(sorted(int(b) for b in self.buckets))
        self.dropped: list[int] = []
        self.members: dict[int, list[int]] = {b: [] for b in self.buckets}
        for i, ex in enumerate(self.examples):
            fit = [b for b in self.buckets if b >= len(ex.ids)]
            if fit:
                self.members[fit[0]].append(i)
            elif self.on_overflow == "drop":
                self.dropped.append(i)
            else:
                longest = self.buckets[-1]
                raise ValueError(
                    f"example {i} has {len(ex.ids)} tokens, over the longest bucket {longest}"
                )

    def num_batches(self) -> int:
        """Batches per epoch."""
        return sum(-(-len(m) // self.batch_size) for m in self.members.values())

    def epoch(self, epoch: int) -> list[SFTBatch]:
        """All batches of epoch ``epoch``, shuffled by ``(seed, epoch)``."""
        rng = np.random.default_rng([self.seed, epoch])
        plan = []
        for length, members in self.members.items():
            order = rng.permutation(np.asarray(members, np.int64))
            plan += [
                (length, order[i : i + self.batch_size])
                for i in range(0, len(order), self.batch_size)
            ]
        return [self.pack(plan[k][1], plan[k][0]) for k in rng.permutation(len(plan))]

    def pack(self, indices: Sequence[int], length: int) -> SFTBatch:
        """Right-pad the examples ``indices`` to ``[batch_size, length]``."""
        ids = np.zeros((self.batch_size, length), np.int32)
        attn, loss = np.zeros_like(ids), np.zeros_like(ids)
        for row, i in enumerate(indices):
            ex = self.examples[int(i)]
            n = len(ex.ids)
            ids[row, :n], attn[row, :n], loss[row, :n] = ex.ids, 1, ex.loss_mask
        return SFTBatch(ids, attn, loss)


def nll_sums(
    graphdef: nnx.GraphDef, params: Any, batch: SFTBatch, chunk_size: int
) -> tuple[jax.Array, jax.Array]:
    """(Σ m·(−lp), Σ m) over the batch, float32."""
    model = nnx.merge(graphdef, params)
    stats = token_log_probs(model, batch.input_ids, batch.attention_mask, chunk_size=chunk_size)
    mask = batch.loss_mask.astype(jnp.float32)
    return -jnp.sum(stats.log_probs * mask), jnp.sum(mask)


def nll_sums_and_grads(
    graphdef: nnx.GraphDef,
    trainable: Any,
    frozen: Any,
    batch: SFTBatch,
    chunk_size: int,
    micro_batch_size: int | None = None,
) -> tuple[jax.Array, jax.Array, Any]:
    """(Σ m·(−lp), Σ m, ∇_trainable Σ m·(−lp)) over the batch. With ``micro_batch_size`` below
    the batch's rows, the sums and gradients add up over consecutive micro-batches in a
    ``lax.scan`` (one micro-batch's activations live at a time); the sums are linear in the rows,
    so the result is the whole batch's up to float rounding."""

    def one(rows: SFTBatch) -> tuple[jax.Array, jax.Array, Any]:
        def nll(t):
            return nll_sums(graphdef, join_trainable(t, frozen), rows, chunk_size)

        (total, tokens), grads = jax.value_and_grad(nll, has_aux=True)(trainable)
        return total, tokens, grads

    n = batch.input_ids.shape[0]
    if micro_batch_size is None or micro_batch_size >= n:
        return one(batch)
    micro = jax.tree.map(lambda x: x.reshape(n // micro_batch_size, micro_batch_size, -1), batch)

    def add(carry, rows):
        parts = one(SFTBatch(*rows))
        return jax.tree.map(jnp.add, carry, parts), None

    zero = (jnp.zeros((), jnp.float32), jnp.zeros((), jnp.float32))
    start = (*zero, jax.tree.map(jnp.zeros_like, trainable))
    (total, tokens, grads), _ = jax.lax.scan(add, start, tuple(micro))
    return total, tokens, grads


def make_sft_step(
    graphdef: nnx.GraphDef,
    optimizer: optax.GradientTransformation,
    *,
    mesh: Mesh | None = None,
    chunk_size: int = 128,
    micro_batch_size: int | None = None,
) -> Callable[[Any, Any, SFTBatch], tuple[Any, Any, dict[str, jax.Array]]]:
    """The jitted ``step(params, opt_state, batch) -> (params, opt_state, metrics)``.

    ``params`` is the state of ``nnx.split(model)``; under LoRA only its adapters train
    (``opt_state`` is of :func:`~arlarena_jax.models.lora.trainable_part`). Metrics: loss,
    grad_norm (before clipping), lr (of this update), tokens (Σ m), skipped (1 when loss or
    gradient is non-finite). Params and opt_state are donated. With ``mesh``, parameters and
    optimizer moments follow the partition rules and the batch is split over
    ``('data', 'fsdp')``; shardings are derived from the first call's trees, so the function
    compiles on that call. ``micro_batch_size``: gradients accumulated over micro-batches of
    that many rows (:func:`nll_sums_and_grads`).
    """

    def loss_and_grads(trainable, frozen, batch):
        if micro_batch_size is not None and micro_batch_size < batch.input_ids.shape[0]:
            nll, tokens, nll_grads = nll_sums_and_grads(
                graphdef, trainable, frozen, batch, chunk_size, micro_batch_size
            )
            scale = 1.0 / jnp.maximum(tokens, 1.0)  # loss = Σ nll / Σ m, so is its gradient
            return (nll * scale, tokens), jax.tree.map(lambda g: g * scale, nll_grads)

        def loss_fn(t):
            nll, tokens = nll_sums(graphdef, join_trainable(t, frozen), batch, chunk_size)
            return nll / jnp.maximum(tokens, 1.0), tokens

        return jax.value_and_grad(loss_fn, has_aux=True)(trainable)

    def step(params, opt_state, batch):
        trainable, frozen = split_trainable(params)
        (loss, tokens), grads = loss_and_grads(trainable, frozen, batch)
        guarded = guarded_update(optimizer, grads, opt_state, trainable, jnp.isfinite(loss))
        metrics = {
            "loss": loss,
            "grad_norm": guarded.grad_norm,
            "lr": current_learning_rate(guarded.proposed_opt_state),
            "tokens": tokens,
            "skipped": 1 - guarded.finite.astype(jnp.int32),
        }
        return join_trainable(guarded.params, frozen), guarded.opt_state, metrics

    return mesh_jit(step, mesh, state_args=2, row_outputs=False, donate=True)


class CloneState(NamedTuple):
    """Where cloning stands: parameters, optimizer state and the steps done. The batch stream is
    a function of (seed, epoch), so ``step`` alone fixes where it continues: epoch
    ``step // batches per epoch``, batch ``step % batches per epoch``."""

    params: Any
    opt_state: Any
    step: int = 0


@dataclasses.dataclass
class SFTJob:
    """A prepared cloning run (:func:`prepare_sft`): the batcher, the number of steps, the
    optimizer and its jitted step. :meth:`run` goes from any :class:`CloneState` to the end, so a
    run stopped after step k and continued from its state equals the uninterrupted run."""

    batcher: SFTBatcher
    total: int
    optimizer: optax.GradientTransformation
    step_fn: Callable[[Any, Any, SFTBatch], tuple[Any, Any, dict[str, jax.Array]]]

    @property
    def num_batches(self) -> int:
        """Batches per epoch."""
        return self.batcher.num_batches()

    def start(self, params: Any) -> CloneState:
        """The state before the first step."""
        return CloneState(params, self.optimizer.init(trainable_part(params)), 0)

    def position(self, step: int) -> tuple[int, int]:
        """(epoch, batch within the epoch) of the batch that step ``step`` (0-based) trains on."""
        return divmod(step, self.num_batches)

    def batches(self, step: int) -> Iterator[SFTBatch]:
        """The batch stream from step ``step`` on (the batcher's epochs in order)."""
        epoch, skip = self.position(step)
        stream = (batch for e in itertools.count(epoch) for batch in self.batcher.epoch(e))
        return itertools.islice(stream, skip, None)

    def run(
        self,
        state: CloneState,
        *,
        log_fn: Callable[[int, dict[str, float]], None] | None = None,
        after_step: Callable[[CloneState], None] | None = None,
    ) -> tuple[CloneState, list[dict[str, float]]]:
        """Steps ``state.step`` … ``total - 1``; the final state and one history row per step
        run. ``after_step(state)`` sees the state after each step (it may save it and raise to
        stop); ``params`` and ``opt_state`` are donated to the next step."""
        history: list[dict[str, float]] = []
        params, opt_state = state.params, state.opt_state
        stream = self.batches(state.step)
        for step in range(state.step, self.total):
            params, opt_state, metrics = self.step_fn(params, opt_state, next(stream))
            row = {k: float(v) for k, v in jax.device_get(metrics).items()}
            history.append({"step": float(step), **row})
            if log_fn is not None:
                log_fn(step, row)
            if after_step is not None:
                after_step(CloneState(params, opt_state, step + 1))
        return CloneState(params, opt_state, max(state.step, self.total)), history


def prepare_sft(
    model: nnx.Module,
    tokenizer: Any,
    examples: Sequence[tuple[str, str]],
    *,
    steps: int | None = None,
    epochs: float | None = None,
    batch_size: int = 8,
    micro_batch_size: int | None = None,
    buckets: Sequence[int] | None = None,
    optim: OptimConfig = SFT_OPTIM,
    seed: int = 0,
    enable_thinking: bool | None = None,
    chunk_size: int = 128,
    mesh: Mesh | None = None,
) -> SFTJob:
    """The :class:`SFTJob` of cloning ``examples`` into ``model`` (arguments as :func:`run_sft`)."""
    encoded = [
        encode_example(tokenizer, p, r, enable_thinking=enable_thinking) for p, r in examples
    ]
    buckets = buckets or buckets_for([len(e.ids) for e in encoded])
    batcher = SFTBatcher(encoded, batch_size, buckets, seed)
    if (steps is None) == (epochs is None):
        raise ValueError("give exactly one of steps and epochs")
    if not batcher.num_batches():
        raise ValueError("no examples to train on")
    total = steps if steps is not None else max(1, round(epochs * batcher.num_batches()))
    optimizer = make_optimizer(optim, total)
    graphdef, _ = nnx.split(model)
    step_fn = make_sft_step(
        graphdef, optimizer, mesh=mesh, chunk_size=chunk_size, micro_batch_size=micro_batch_size
    )
    return SFTJob(batcher, total, optimizer, step_fn)


def run_sft(
    model: nnx.Module,
    tokenizer: Any,
    examples: Sequence[tuple[str, str]],
    *,
    log_fn: Callable[[int, dict[str, float]], None] | None = None,
    **kw: Any,
) -> tuple[nnx.Module, list[dict[str, float]]]:
    """Clone ``examples`` ((prompt, reply) pairs, e.g. :class:`~.demos.Demonstration`) into
    ``model`` (updated in place and returned) for ``steps`` updates or ``epochs`` epochs
    with the optimizer ``optim`` (default :data:`~.optim.SFT_OPTIM`: AdamW 1e-5,
    β = (0.9, 0.95), wd 0.01, cosine, 10 % warm-up, clip 1.0); ``kw`` are the keywords of
    :func:`prepare_sft` (``steps``, ``epochs``, ``batch_size``, ``buckets``, ``optim``, ``seed``,
    ``enable_thinking``, ``chunk_size``, ``mesh``).

    History: one dict per step (``step`` plus the step's metrics as floats); ``log_fn(step,
    metrics)`` is called after each step. With ``mesh``, the model must already be sharded
    (:func:`arlarena_jax.models.shard_model`) and ``batch_size`` divisible by data × fsdp.
    """
    job = prepare_sft(model, tokenizer, examples, **kw)
    _, params = nnx.split(model)
    final, history = job.run(job.start(params), log_fn=log_fn)
    nnx.update(model, final.params)
    return model, history
