"""A sampling engine with JetStream's contract over the Flax Qwen policy.

JetStream's ``Engine`` API, implemented here (google-jetstream is not a dependency):
``load_params``, ``init_decode_state``, ``prefill(params, padded_tokens, true_length) -> Prefix``,
``insert(prefix, decode_state, slot)``, ``generate(params, decode_state) -> (decode_state,
ResultTokens)`` and the properties ``max_concurrent_decodes``, ``max_prefill_length``,
``samples_per_slot``, ``mesh``. What RL adds: per-token behaviour log-probs, one prefill inserted
into n slots with one key each (:meth:`Engine.insert_group`), stop token ids, a max new-token
budget per slot, several decode steps per call and :meth:`Engine.update_params`.

Batched prefill keeps the same prefill-then-insert shape: :meth:`Engine.prefill_batch` runs B
right-padded prompts ``[B, P]`` in one call and returns a :class:`Prefix` whose fields carry a
leading batch dimension; :meth:`Engine.insert_batch` then fills any number of slots from its rows
(slot ``slots[j]`` gets row ``rows[j]``, so a GRPO group of n samples is n slots naming one row),
each slot drawing its first token with its own key exactly as :meth:`Engine.insert_group` does.
Host-side arguments are NumPy, never eager device operations: an insert costs one dispatch.

Slot life: ``insert`` copies the prompt's keys/values into the slot's cache rows ``0 … P−1`` and
leaves a *pending* token (the first sampled one). Each decode step emits every active slot's
pending token with its log-prob, stops the slot if that token is a stop id or its budget or the
cache is used up, feeds the token through the model and samples the next pending token. A slot
that is done emits nothing (``valid`` False) until something is inserted into it again.

Every function is jitted once per static shape: prefill per prompt bucket, insert per bucket (and
group size), prefill_batch per (batch, bucket), insert_batch per (batch, bucket, slot count rounded
up to a power of two), generate once per (sampling setting, decode window). Parameters are an
argument, never a closure constant, so ``update_params`` with the same shapes, dtypes and
shardings recompiles nothing.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from arlarena_jax.models.decode import KVCache, empty_cache, forward_cached, hidden_cached
from arlarena_jax.models.qwen import QwenForCausalLM
from arlarena_jax.models.sharding import check_divisible, parameter_shardings
from arlarena_jax.sampler.sampling import SamplingParams, sample

Array = jax.Array

# Decode-state cache [slots, kv_heads, L, head_dim]: slots over data × fsdp, KV heads over tensor.
KV_CACHE_SPEC = PartitionSpec(("data", "fsdp"), "tensor", None, None)
SLOT_SPEC = PartitionSpec(("data", "fsdp"))


class Prefix(NamedTuple):
    """A prefilled prompt: its cache ``[1, kv_heads, P, d]``, last logits and first token.

    From :meth:`Engine.prefill_batch` every field has a leading batch dimension B (one row per
    prompt): cache ``[B, kv_heads, P, d]`` per layer, logits ``[B, vocab]``, token, log_prob and
    true_length ``[B]``.
    """

    cache: KVCache
    logits: Array  # [vocab] float32, at the last real prompt token ([B, vocab] batched)
    token: Array  # [] int32, sampled from logits ([B] batched)
    log_prob: Array  # [] float32 ([B] batched)
    true_length: Array  # [] int32 ([B] batched)


class DecodeState(NamedTuple):
    cache: KVCache  # per layer [slots, kv_heads, L, head_dim]
    lengths: Array  # [slots] tokens in the cache (= rotary position of the pending token)
    pending: Array  # [slots] next token to emit and feed
    pending_log_prob: Array  # [slots]
    generated: Array  # [slots] tokens emitted since insert
    budget: Array  # [slots] max new tokens of the slot's request
    done: Array  # [slots] bool: free or finished
    keys: Array  # [slots] PRNG keys


class ResultTokens(NamedTuple):
    """What one ``generate`` call produced, per slot and step."""

    tokens: Array  # [slots, steps] int32
    valid: Array  # [slots, steps] bool: an active slot emitted this token
    log_probs: Array  # [slots, steps] float32 behaviour log-probs
    lengths: Array  # [slots] tokens emitted since insert, after this call
    done: Array  # [slots] bool: finished (or free) after this call


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """Static engine settings (a change means a new engine); also the trainer config's
    ``sampler`` keys. :func:`invalid_engine` is their one validator."""

    max_concurrent_decodes: int = 128  # decode slots
    max_prefill_length: int = 2048  # longest prompt (data.max_prompt_length)
    max_new_tokens: int = 512  # longest response per request (data.max_response_length)
    stop_token_ids: tuple[int, ...] = ()  # the trainer adds the tokenizer's end-of-turn ids
    steps_per_call: int = 8  # decode steps per generate() call
    cache_dtype: Literal["float32", "bfloat16"] = "float32"
    min_prefill_bucket: int = 128  # smallest prefill length (capped at max_prefill_length)
    # Prefill buckets per doubling of the length (1: powers of two). k > 1 splits each octave
    # [s, 2s) into k equal steps, so a prompt pads by less than 1/k of its length (powers of two:
    # up to 2×), at the cost of ~k times as many prefill shapes to compile (prefill_buckets).
    prefill_buckets_per_octave: int = 1
    # Waiting requests taken shortest prompt first (ties in arrival order) instead of in arrival
    # order: prefill batches of similar lengths pad less. The samples are the same (a request's
    # keys follow its index, not its place), up to the float rounding of other batch shapes.
    prefill_shortest_first: bool = False
    # The driver's cap on one prefill_batch: padded prompts × bucket length (a lone prompt always
    # runs). It bounds prefill activations (attention scores grow with batch × bucket²); on CPU,
    # 16-32 prompts of 128 tokens ran faster than 128 at once (cache-sized activations).
    prefill_batch_tokens: int = 4096
    # Decode windows: generate(window=W) attends over cache indices 0 … W − 1 only. The driver
    # picks W as the power of two >= the longest live sequence + steps_per_call, at least this
    # (0: off, every step reads the whole cache); one compilation of generate per W used.
    min_decode_window: int = 64

    @property
    def cache_length(self) -> int:
        return self.max_prefill_length + self.max_new_tokens

    @property
    def prefill_buckets(self) -> tuple[int, ...]:
        """Powers of two s from ``min_prefill_bucket``, each octave [s, 2s) cut into
        k = ``prefill_buckets_per_octave`` steps of ⌈s / k⌉ (s, s + ⌈s/k⌉, …), capped by (and
        ending at) the max length. A length L above the first bucket pads to less than
        L + ⌈L / k⌉."""
        buckets, octave = [], min(self.min_prefill_bucket, self.max_prefill_length)
        while octave < self.max_prefill_length:
            step = -(-octave // self.prefill_buckets_per_octave)
            buckets += range(octave, min(2 * octave, self.max_prefill_length), step)
            octave *= 2
        return (*buckets, self.max_prefill_length)


def invalid_engine(config: EngineConfig) -> Iterator[tuple[str, str]]:
    """``(field, message)`` for every setting out of range."""
    for name in (
        "max_concurrent_decodes",
        "max_prefill_length",
        "max_new_tokens",
        "steps_per_call",
        "min_prefill_bucket",
        "prefill_buckets_per_octave",
        "prefill_batch_tokens",
    ):
        if not getattr(config, name) >= 1:
            yield name, f"must be >= 1, got {getattr(config, name)!r}"
    if isinstance(config.min_decode_window, bool) or not (
        isinstance(config.min_decode_window, int) and config.min_decode_window >= 0
    ):
        yield (
            "min_decode_window",
            f"must be an int >= 0 (0 = off), got {config.min_decode_window!r}",
        )
    if config.cache_dtype not in ("float32", "bfloat16"):
        yield "cache_dtype", f"must be float32 or bfloat16, got {config.cache_dtype!r}"
    if any(not t >= 0 for t in config.stop_token_ids):
        yield "stop_token_ids", f"must be token ids >= 0, got {list(config.stop_token_ids)}"


class Engine:
    """The JetStream-contract engine around a :class:`QwenForCausalLM` (see module doc)."""

    samples_per_slot = 1

    def __init__(
        self,
        model: QwenForCausalLM,
        config: EngineConfig | None = None,
        *,
        sampling: SamplingParams | None = None,
        mesh: Mesh | None = None,
    ):
        self.config = EngineConfig() if config is None else config
        for field, message in invalid_engine(self.config):
            raise ValueError(f"engine {field} {message}")
        self.sampling = SamplingParams() if sampling is None else sampling
        self._mesh = mesh
        self.model_config = model.config
        self.graphdef, params = nnx.split(model)
        if mesh is not None:
            params = jax.device_put(params, parameter_shardings(model, mesh))
            self._check_cache_shardable(mesh)
        else:
            # Commit each array to its device: jit keys its compiled code on whether an argument
            # is committed, and update_params' device_put commits, so uncommitted initial
            # parameters would make the first call after an update compile everything again.
            params = jax.tree.map(lambda x: jax.device_put(x, x.sharding), params)
        self.params = params
        # every leaf's shape, dtype and sharding: update_params keeps them (see placement)
        self.param_layout = param_layout(params)
        # Asynchronous RL: the policy version of ``params`` (updates applied to them), stamped on
        # every decoded token by the driver; ``before_decode`` (if set) runs before each decode
        # call of a driver run on the engine's own parameters (partial rollouts switch there).
        self.params_version = 0
        self.before_decode: Callable[[], None] | None = None
        self.traces: Counter[str] = Counter()  # how often each function was traced (compiled)
        self._default_key = jax.random.key(0)  # made once: a key per call is an eager dispatch
        self._prefill = jax.jit(self._prefill_impl, static_argnames=("sampling",))
        self._prefill_batch = jax.jit(self._prefill_batch_impl, static_argnames=("sampling",))
        self._insert = jax.jit(self._insert_impl, donate_argnums=(1,))
        self._insert_group = jax.jit(
            self._insert_group_impl, static_argnames=("sampling",), donate_argnums=(1,)
        )
        self._insert_batch = jax.jit(
            self._insert_batch_impl, static_argnames=("sampling",), donate_argnums=(1,)
        )
        self._generate = jax.jit(
            self._generate_impl, static_argnames=("sampling", "window"), donate_argnums=(1,)
        )

    # ---- contract properties -------------------------------------------------------------
    @property
    def max_concurrent_decodes(self) -> int:
        return self.config.max_concurrent_decodes

    @property
    def max_prefill_length(self) -> int:
        return self.config.max_prefill_length

    @property
    def mesh(self) -> Mesh | None:
        return self._mesh

    # ---- parameters ------------------------------------------------------------------------
    def load_params(self):
        """The parameter state the engine was built with (an ``nnx.State``)."""
        return self.params

    def update_params(self, new_params) -> None:
        """Take the trainer's parameters in place: cast to the engine's dtypes and placed on its
        shardings, so the compiled functions are reused (no save/load, no recompilation).

        On a mesh of this process's devices while the trainer spans several processes, pass
        :func:`~arlarena_jax.sampler.placement.replica_params`' result: an array of other
        processes is refused here (a ``device_put`` across meshes is not supported)."""
        old_paths, treedef = jax.tree_util.tree_flatten_with_path(self.params)
        new_leaves = jax.tree.leaves(new_params)
        if len(new_leaves) != len(old_paths):
            raise ValueError(
                f"update_params: got {len(new_leaves)} parameter arrays, the engine has "
                f"{len(old_paths)}"
            )
        for new, (path, old) in zip(new_leaves, old_paths, strict=True):  # all checks first
            name = jax.tree_util.keystr(path, simple=True, separator=".").removesuffix(".value")
            if tuple(new.shape) != tuple(old.shape):
                raise ValueError(
                    f"update_params: parameter {name} has shape {tuple(new.shape)}, expected "
                    f"{tuple(old.shape)}"
                )
            if old.is_fully_addressable and not getattr(new, "is_fully_addressable", True):
                raise ValueError(
                    f"update_params: parameter {name} spans other processes' devices; place it "
                    "with sampler.placement.replica_params first"
                )
        placed = [
            jax.device_put(jnp.asarray(new, old.dtype), old.sharding)
            for new, (_, old) in zip(new_leaves, old_paths, strict=True)
        ]
        self.params = jax.tree.unflatten(treedef, placed)

    # ---- decode state ------------------------------------------------------------------------
    def _check_cache_shardable(self, mesh: Mesh) -> None:
        check_cache_shardable(self.model_config, self.config, mesh)

    def free_slots(self, slots: int, seed: int = 0) -> DecodeState:
        """A decode state of ``slots`` free slots with this engine's cache length and dtype
        (unsharded; :meth:`init_decode_state` places it on the mesh)."""
        dtype = jnp.dtype(self.config.cache_dtype)

        def zeros():  # distinct buffers: the state is donated to insert/generate
            return jnp.zeros((slots,), jnp.int32)

        return DecodeState(
            cache=empty_cache(self.model_config, slots, self.config.cache_length, dtype),
            lengths=zeros(),
            pending=zeros(),
            pending_log_prob=jnp.zeros((slots,), jnp.float32),
            generated=zeros(),
            budget=zeros(),
            done=jnp.ones((slots,), bool),
            keys=jax.random.split(jax.random.key(seed), slots),
        )

    def init_decode_state(self, seed: int = 0) -> DecodeState:
        """All slots free; caches of ``max_prefill_length + max_new_tokens`` tokens."""
        state = self.free_slots(self.config.max_concurrent_decodes, seed)
        if self._mesh is None:
            return state
        cache_sharding = NamedSharding(self._mesh, KV_CACHE_SPEC)
        slot_sharding = NamedSharding(self._mesh, SLOT_SPEC)
        shardings = DecodeState(
            KVCache(*(tuple(cache_sharding for _ in c) for c in state.cache)),
            *(slot_sharding for _ in state[1:]),
        )
        return jax.device_put(state, shardings)

    # ---- prefill ------------------------------------------------------------------------------
    def bucket_for(self, length: int) -> int:
        """The smallest prefill bucket holding ``length`` tokens."""
        if length > self.config.max_prefill_length:
            raise ValueError(
                f"prompt of {length} tokens exceeds max_prefill_length "
                f"{self.config.max_prefill_length}"
            )
        return next(b for b in self.config.prefill_buckets if b >= length)

    def _model(self, params) -> QwenForCausalLM:
        return nnx.merge(self.graphdef, params)

    def _prefill_rows(
        self,
        params,
        tokens,
        true_lengths,
        keys,
        sampling,
        shared: KVCache | None = None,
        start: int = 0,
    ) -> Prefix:
        """Right-padded prompts ``[B, P]`` through the model into a fresh ``[B, kv, P, d]`` cache.

        :func:`~arlarena_jax.models.decode.forward_cached` with every row written at index 0,
        except that only each row's last real position is projected onto the vocabulary (the
        ``[B, P, vocab]`` logits of every position are never built). Rows are independent: causal
        attention keeps a row's padding out of its real positions.

        With ``shared`` (:meth:`_shared_cache` of the ``start`` leading ids every row has in
        common, ``start`` < every true length), only columns ``start … P − 1`` run through the
        model, attending to the shared keys/values: the same cache and logits up to float
        rounding, for (P − start) / P of the work.
        """
        model = self._model(params)
        b, p = tokens.shape
        if shared is None:
            cache = empty_cache(self.model_config, b, p, jnp.dtype(self.config.cache_dtype))
        else:
            cache = jax.tree.map(lambda c: jnp.broadcast_to(c, (b, *c.shape[1:])), shared)
        positions = jnp.broadcast_to(jnp.arange(start, p, dtype=jnp.int32), (b, p - start))
        write_at = jnp.full(b, start, jnp.int32)
        hidden, cache = hidden_cached(model, tokens[:, start:], positions, cache, write_at)
        at = (true_lengths - 1 - start)[:, None, None]
        last = model.logits(jnp.take_along_axis(hidden, at, axis=1))[:, 0]  # [B, vocab]
        token, log_prob = sample(last, keys, sampling)
        return Prefix(cache, last, token, log_prob, true_lengths)

    def _shared_cache(self, params, ids: Array, width: int) -> KVCache:
        """The ``[1, kv, width, d]`` cache of one row holding ``ids`` ``[S]`` at indices
        0 … S − 1 (the rest zero): the leading ids a batch of prompts has in common, prefilled
        once for :meth:`_prefill_rows`."""
        cache = empty_cache(self.model_config, 1, width, jnp.dtype(self.config.cache_dtype))
        positions = jnp.arange(ids.shape[0], dtype=jnp.int32)[None]
        _, cache = hidden_cached(
            self._model(params), ids[None], positions, cache, jnp.zeros(1, jnp.int32)
        )
        return cache

    def _prefill_impl(self, params, tokens, true_length, key, sampling):
        self.traces["prefill"] += 1
        prefix = self._prefill_rows(params, tokens[None], true_length[None], key[None], sampling)
        return prefix._replace(
            logits=prefix.logits[0],
            token=prefix.token[0],
            log_prob=prefix.log_prob[0],
            true_length=prefix.true_length[0],
        )

    def prefill(
        self,
        params,
        padded_tokens,
        true_length: int,
        *,
        key: Array | None = None,
        sampling: SamplingParams | None = None,
    ) -> Prefix:
        """Run the prompt ``padded_tokens[:true_length]`` (right-padded to a bucket length)."""
        padded_tokens = _int32(padded_tokens)
        if padded_tokens.ndim != 1:
            raise ValueError(f"prefill expects 1-D padded tokens, got shape {padded_tokens.shape}")
        if not 1 <= true_length <= padded_tokens.shape[0]:
            raise ValueError(
                f"prefill true_length {true_length} outside 1..{padded_tokens.shape[0]}"
            )
        self.bucket_for(padded_tokens.shape[0])  # length check with a clear error
        key = self._default_key if key is None else key
        return self._prefill(
            params, padded_tokens, np.int32(true_length), key, sampling=sampling or self.sampling
        )

    def _prefill_batch_impl(self, params, tokens, true_lengths, keys, sampling):
        self.traces["prefill_batch"] += 1
        if keys.ndim == 0:  # one key for every row
            keys = jnp.broadcast_to(keys, tokens.shape[:1])
        return self._prefill_rows(params, tokens, true_lengths, keys, sampling)

    def prefill_batch(
        self,
        params,
        padded_tokens,
        true_lengths,
        *,
        keys: Array | None = None,
        sampling: SamplingParams | None = None,
    ) -> Prefix:
        """Prefill B prompts at once: row b is ``padded_tokens[b, :true_lengths[b]]``, right-padded
        to a common length P (a bucket, at most ``max_prefill_length``).

        Returns a batched :class:`Prefix` (cache ``[B, kv_heads, P, d]`` per layer, logits
        ``[B, vocab]`` at each row's last real token, token / log_prob / true_length ``[B]``). Rows
        are independent: row b equals ``prefill(padded_tokens[b], true_lengths[b])``. Each row's
        token is drawn with ``keys[b]`` (default: the key :meth:`prefill` uses, for every row);
        :meth:`insert_batch` draws its slots' first tokens itself. Compiles once per (B, P).
        """
        tokens = _int32(padded_tokens)
        if tokens.ndim != 2 or 0 in tokens.shape:
            raise ValueError(
                f"prefill_batch expects padded tokens [batch, length], got shape {tokens.shape}"
            )
        b, p = tokens.shape
        lengths = np.asarray(true_lengths, np.int32)
        if lengths.shape != (b,):
            raise ValueError(
                f"prefill_batch got true_lengths of shape {lengths.shape} for {b} prompts"
            )
        bad = np.flatnonzero((lengths < 1) | (lengths > p))
        if bad.size:
            row = int(bad[0])
            raise ValueError(
                f"prefill_batch true_length {lengths[row]} of row {row} outside 1..{p}"
            )
        self.bucket_for(p)  # length check with a clear error
        if keys is None:
            keys = self._default_key
        elif keys.shape != (b,):
            raise ValueError(f"prefill_batch got {keys.shape[0]} keys for {b} prompts")
        return self._prefill_batch(
            params, tokens, lengths, keys, sampling=sampling or self.sampling
        )

    # ---- insert -------------------------------------------------------------------------------
    def _insert_impl(self, prefix: Prefix, state: DecodeState, slot, budget, key):
        self.traces["insert"] += 1
        slots = slot[None]
        token, log_prob, length = prefix.token, prefix.log_prob, prefix.true_length
        rows = jnp.zeros_like(slots)
        return fill_slots(state, slots, prefix.cache, rows, length, token, log_prob, budget, key)

    def insert(
        self,
        prefix: Prefix,
        decode_state: DecodeState,
        slot: int,
        *,
        max_new_tokens: int | None = None,
        key: Array | None = None,
    ) -> DecodeState:
        """Put a prefilled prompt into ``slot``; its first token is the prefix's sampled one.
        ``key`` (optional) reseeds the slot's sampling stream."""
        self._check_slot(slot)
        budget = self._budget(max_new_tokens)
        return self._insert(prefix, decode_state, np.int32(slot), budget, key)

    @staticmethod
    def _split_first(keys: Array) -> tuple[Array, Array]:
        """Each slot key → (its first-token key, the slot's stream key)."""
        first_keys, slot_keys = jnp.moveaxis(jax.vmap(jax.random.split)(keys), 1, 0)
        return first_keys, slot_keys

    def _insert_group_impl(self, prefix: Prefix, state: DecodeState, slots, keys, budget, sampling):
        self.traces["insert_group"] += 1
        logits = jnp.broadcast_to(prefix.logits, (slots.shape[0], prefix.logits.shape[-1]))
        rows = jnp.zeros_like(slots)
        return self._insert_sampled(
            state, prefix.cache, slots, rows, logits, prefix.true_length, keys, budget, sampling
        )

    def _insert_sampled(
        self, state, prefix_cache, slots, rows, logits, lengths, keys, budget, sampling
    ) -> DecodeState:
        """Slot ``slots[j]`` draws its first token from ``logits[j]`` with the first half of
        ``keys[j]`` (the second half is its stream key) and takes prefix row ``rows[j]``."""
        first_keys, slot_keys = self._split_first(keys)
        tokens, log_probs = sample(logits, first_keys, sampling)
        return fill_slots(
            state, slots, prefix_cache, rows, lengths, tokens, log_probs, budget, slot_keys
        )

    def insert_group(
        self,
        prefix: Prefix,
        decode_state: DecodeState,
        slots,
        keys: Array,
        *,
        max_new_tokens=None,
        sampling: SamplingParams | None = None,
    ) -> DecodeState:
        """One prefill into ``len(slots)`` slots (a GRPO group); slot i samples its first token
        and everything after it with ``keys[i]`` (equal keys give identical samples)."""
        slots = self._check_slots("insert_group", slots)
        if keys.shape[0] != len(slots):
            raise ValueError(f"insert_group got {keys.shape[0]} keys for {len(slots)} slots")
        return self._insert_group(
            prefix,
            decode_state,
            slots,
            keys,
            self._budget(max_new_tokens),
            sampling=sampling or self.sampling,
        )

    def _insert_batch_impl(
        self, prefix: Prefix, state: DecodeState, slots, rows, keys, budget, sampling
    ):
        self.traces["insert_batch"] += 1
        if not jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key):
            keys = jax.random.wrap_key_data(keys)  # raw key data from the host
        logits, lengths = prefix.logits[rows], prefix.true_length[rows]
        return self._insert_sampled(
            state, prefix.cache, slots, rows, logits, lengths, keys, budget, sampling
        )

    def insert_batch(
        self,
        prefix: Prefix,
        decode_state: DecodeState,
        slots,
        rows,
        keys,
        *,
        max_new_tokens=None,
        sampling: SamplingParams | None = None,
    ) -> DecodeState:
        """Fill ``len(slots)`` slots from a :meth:`prefill_batch` prefix: slot ``slots[j]`` gets
        row ``rows[j]`` (n slots naming one row: a GRPO group) and samples its first token and
        everything after it with ``keys[j]``, exactly as :meth:`insert_group` does.

        ``keys`` are PRNG keys ``[S]`` or their raw ``jax.random.key_data`` (a NumPy array costs
        no device dispatch); ``max_new_tokens`` is one budget or one per slot. The slot count is
        padded to a power of two (the padding writes nothing), so this compiles once per (B, P,
        padded S).
        """
        if prefix.logits.ndim != 2:
            raise ValueError("insert_batch needs a batched prefix (from prefill_batch)")
        batch = prefix.logits.shape[0]
        slots = self._check_slots("insert_batch", slots)
        s = slots.shape[0]
        rows = np.asarray(rows, np.int32)
        if rows.shape != (s,):
            raise ValueError(f"insert_batch got {rows.size} rows for {s} slots")
        bad = np.flatnonzero((rows < 0) | (rows >= batch))
        if bad.size:
            raise ValueError(f"insert_batch row {rows[bad[0]]} outside 0..{batch - 1}")
        if keys.shape[0] != s:
            raise ValueError(f"insert_batch got {keys.shape[0]} keys for {s} slots")
        budget = self._slot_budgets(max_new_tokens, s)
        slots, rows, keys, budget = self._pad_slots(slots, rows, keys, budget)
        return self._insert_batch(
            prefix, decode_state, slots, rows, keys, budget, sampling=sampling or self.sampling
        )

    def _slot_budgets(self, max_new_tokens, s: int) -> np.ndarray:
        """``[s]`` int32 budgets from one budget (or None: the max) or one per slot, checked."""
        if max_new_tokens is None or np.ndim(max_new_tokens) == 0:
            return np.full(s, self._budget(max_new_tokens), np.int32)
        budget = np.asarray(max_new_tokens, np.int32)
        if budget.shape != (s,):
            raise ValueError(f"insert_batch got {budget.size} budgets for {s} slots")
        for b in np.unique(budget):
            self._budget(int(b))
        return budget

    def _pad_slots(self, slots, rows, keys, budget):
        """Slots, rows, keys and budgets padded to a power of two: padding slots index past the
        last slot (their scatters are dropped) and repeat the first key."""
        s = slots.shape[0]
        pad = pow2(s) - s
        if not pad:
            return slots, rows, keys, budget
        past = np.full(pad, self.config.max_concurrent_decodes, np.int32)
        slots = np.concatenate([slots, past])
        rows = np.concatenate([rows, np.zeros(pad, np.int32)])
        budget = np.concatenate([budget, np.ones(pad, np.int32)])
        if isinstance(keys, np.ndarray):
            keys = np.concatenate([keys, np.repeat(keys[:1], pad, axis=0)])
        else:
            keys = keys[np.concatenate([np.arange(s), np.zeros(pad, int)])]
        return slots, rows, keys, budget

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.config.max_concurrent_decodes:
            raise ValueError(f"slot {slot} outside 0..{self.config.max_concurrent_decodes - 1}")

    def _check_slots(self, name: str, slots) -> np.ndarray:
        """Slots as int32 NumPy after range and distinctness checks."""
        slots = np.asarray(slots, np.int32).reshape(-1)
        for slot in slots:
            self._check_slot(int(slot))
        if slots.size == 0:
            raise ValueError(f"{name} needs at least one slot")
        if np.unique(slots).size != slots.size:
            raise ValueError(f"{name} slots must be distinct, got {slots.tolist()}")
        return slots

    def _budget(self, max_new_tokens) -> np.int32:
        budget = self.config.max_new_tokens if max_new_tokens is None else max_new_tokens
        if not 1 <= budget <= self.config.max_new_tokens:
            raise ValueError(
                f"max_new_tokens {budget} outside 1..max_new_tokens {self.config.max_new_tokens}"
            )
        return np.int32(budget)

    # ---- generate ----------------------------------------------------------------------------
    def _decode_step(self, model, state: DecodeState, sampling: SamplingParams):
        """One decode step of every slot (see the module doc): attention over the whole cache
        of ``state`` (a windowed cache in :meth:`_generate_windowed`)."""
        token, log_prob = state.pending, state.pending_log_prob
        valid = ~state.done
        generated = state.generated + valid
        stop_ids = jnp.asarray(self.config.stop_token_ids or (-1,), jnp.int32)
        stopped = jnp.isin(token, stop_ids)
        cache_full = state.lengths + 1 >= self.config.cache_length
        done = state.done | (valid & (stopped | (generated >= state.budget) | cache_full))
        logits, cache = forward_cached(
            model, token[:, None], state.lengths[:, None], state.cache, state.lengths
        )
        split = jax.vmap(jax.random.split)(state.keys)
        step_keys, keys = split[:, 0], split[:, 1]
        nxt, nxt_lp = sample(logits[:, 0], step_keys, sampling)
        new_state = DecodeState(
            cache=cache,
            lengths=state.lengths + valid,
            pending=jnp.where(valid, nxt, state.pending),
            pending_log_prob=jnp.where(valid, nxt_lp, state.pending_log_prob),
            generated=generated,
            budget=state.budget,
            done=done,
            keys=keys,
        )
        return new_state, (token, valid, log_prob)

    def _generate_impl(
        self, params, state: DecodeState, sampling: SamplingParams, window: int | None
    ):
        self.traces["generate"] += 1
        model = self._model(params)
        if window is None:

            def step(s, _):
                return self._decode_step(model, s, sampling)

            state, (tokens, valid, log_probs) = jax.lax.scan(
                step, state, None, length=self.config.steps_per_call
            )
        else:
            state, (tokens, valid, log_probs) = self._generate_windowed(
                model, state, sampling, window
            )
        result = ResultTokens(
            tokens=tokens.T,
            valid=valid.T,
            log_probs=log_probs.T,
            lengths=state.generated,
            done=state.done,
        )
        return state, result

    def _generate_windowed(self, model, state: DecodeState, sampling: SamplingParams, window: int):
        """The decode steps over a window: the cache's first ``window`` indices are copied once
        per call into a ``[slots, kv, window, d]`` cache that the steps write and attend over, and
        copied back into the whole cache after the last step. Attention reads W instead of L
        indices per step, for two W-sized copies per call. A slot past the window writes at its
        last index (its output is unused, see :meth:`generate`). On a mesh both caches keep the
        decode state's sharding (:data:`KV_CACHE_SPEC`)."""

        def step(s, _):
            return self._decode_step(model, s, sampling)

        def cut(c):
            return self._keep_cache_sharding(window_of(c, window, flat=self._mesh is None))

        def put(c, w):
            return self._keep_cache_sharding(put_window(c, w, flat=self._mesh is None))

        small = KVCache(*(tuple(map(cut, part)) for part in state.cache))
        new, outs = jax.lax.scan(
            step, state._replace(cache=small), None, length=self.config.steps_per_call
        )
        cache = KVCache(
            *(tuple(map(put, f, w)) for f, w in zip(state.cache, new.cache, strict=True))
        )
        return new._replace(cache=cache), outs

    def _keep_cache_sharding(self, cache: Array) -> Array:
        """``cache`` constrained to the decode state's KV-cache sharding (no-op without a mesh)."""
        if self._mesh is None:
            return cache
        return jax.lax.with_sharding_constraint(cache, NamedSharding(self._mesh, KV_CACHE_SPEC))

    def generate(
        self,
        params,
        decode_state: DecodeState,
        *,
        sampling: SamplingParams | None = None,
        window: int | None = None,
    ) -> tuple[DecodeState, ResultTokens]:
        """Run ``steps_per_call`` decode steps over all slots.

        ``window`` (from :meth:`decode_window`; default the whole cache): attention reads only
        cache indices ``0 … window − 1``. Every active slot must fit, i.e. its length plus
        ``steps_per_call`` is at most ``window``; the output of a slot that does not (a done
        slot, or one the caller no longer reads) is not meaningful. Compiles once per window.
        """
        if window is not None:
            if not 1 <= window <= self.config.cache_length:
                raise ValueError(
                    f"generate window {window} outside 1..cache_length {self.config.cache_length}"
                )
            window = None if window == self.config.cache_length else int(window)
        return self._generate(
            params, decode_state, sampling=sampling or self.sampling, window=window
        )

    def decode_window(self, longest: int) -> int:
        """The decode window for the next :meth:`generate` call: the smallest power of two W >=
        ``longest + steps_per_call`` and >= ``min_decode_window``, capped at the cache length
        (which it also is when windows are off). ``longest``: the largest cache length (prompt +
        emitted tokens) of any slot whose output is read."""
        config = self.config
        if not config.min_decode_window:
            return config.cache_length
        need = max(int(longest) + config.steps_per_call, config.min_decode_window, 1)
        return min(pow2(need), config.cache_length)


def check_cache_shardable(model_config, config: EngineConfig, mesh: Mesh) -> None:
    """A ValueError naming the dimension unless the decode state's KV cache ``[slots, kv_heads,
    L, head_dim]`` splits over ``mesh`` by :data:`KV_CACHE_SPEC`."""
    shape = (
        config.max_concurrent_decodes,
        model_config.num_key_value_heads,
        config.cache_length,
        model_config.head_dim,
    )
    check_divisible("decode-state kv cache", shape, KV_CACHE_SPEC, mesh)


def param_layout(params, shardings=None):
    """``jax.ShapeDtypeStruct`` per leaf of ``params`` with its sharding (or ``shardings``')."""

    def spec(x, sharding=None):
        return jax.ShapeDtypeStruct(
            x.shape, x.dtype, sharding=x.sharding if sharding is None else sharding
        )

    if shardings is None:
        return jax.tree.map(spec, params)
    return jax.tree.map(spec, params, shardings)


def fill_slots(
    state: DecodeState,
    slots: Array,
    prefix_cache: KVCache,
    rows: Array,
    lengths: Array,
    tokens: Array,
    log_probs: Array,
    budget: Array,
    keys: Array | None,
) -> DecodeState:
    """The one slot scatter of every insert: slot ``slots[j]`` gets cache rows ``0 … P−1`` from
    ``prefix_cache`` row ``rows[j]`` (``[B, kv, P, d]`` per layer), its length, pending token and
    log-prob, budget and (unless ``keys`` is None) PRNG key; ``generated`` 0, ``done`` False.

    Slots past the last one (padding) are dropped; scalar fields broadcast over the slots.
    """

    def put(c, p):  # c [slots, kv, L, d], p [B, kv, P, d]
        return c.at[slots, :, : p.shape[2]].set(p[rows].astype(c.dtype), mode="drop")

    def set_(x, values):
        return x.at[slots].set(values, mode="drop")

    cache = KVCache(
        tuple(put(c, p) for c, p in zip(state.cache.k, prefix_cache.k, strict=True)),
        tuple(put(c, p) for c, p in zip(state.cache.v, prefix_cache.v, strict=True)),
    )
    return state._replace(
        cache=cache,
        lengths=set_(state.lengths, lengths),
        pending=set_(state.pending, tokens),
        pending_log_prob=set_(state.pending_log_prob, log_probs),
        generated=set_(state.generated, 0),
        budget=set_(state.budget, budget),
        done=set_(state.done, False),
        keys=state.keys if keys is None else set_(state.keys, keys),
    )


def window_of(cache: Array, window: int, *, flat: bool = True) -> Array:
    """``cache[:, :, :window]`` of a ``[B, kv, L, d]`` cache. ``flat``: sliced as the 2-D view
    ``[B·kv, L·d]`` (a bitcast), which XLA:CPU copies several times faster than the 4-D slice;
    not on a mesh, where merging the slot and head axes would lose their sharding."""
    if not flat:
        return cache[:, :, :window]
    b, kv, length, d = cache.shape
    return cache.reshape(b * kv, length * d)[:, : window * d].reshape(b, kv, window, d)


def put_window(cache: Array, window: Array, *, flat: bool = True) -> Array:
    """``cache`` with ``cache[:, :, :W] = window`` (the inverse of :func:`window_of`), in place
    when ``cache`` is donated."""
    window = window.astype(cache.dtype)
    if not flat:
        return jax.lax.dynamic_update_slice(cache, window, (0, 0, 0, 0))
    b, kv, length, d = cache.shape
    flat_cache = cache.reshape(b * kv, length * d)
    out = jax.lax.dynamic_update_slice(flat_cache, window.reshape(b * kv, -1), (0, 0))
    return out.reshape(cache.shape)


def _int32(x):
    """Token ids for a jitted call: a device array as it is, anything else as int32 NumPy."""
    if isinstance(x, jax.Array):
        return x if x.dtype == jnp.int32 else x.astype(jnp.int32)
    return np.asarray(x, np.int32)


def pow2(n: int) -> int:
    """The smallest power of two >= n (n >= 1)."""
    return 1 << (n - 1).bit_length()
