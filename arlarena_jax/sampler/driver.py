"""In-process continuous batching over an :class:`~arlarena_jax.sampler.engine.Engine`.

Requests wait in a queue. Whenever slots are free, the waiting requests whose samples fit in them
(taken in order: a request never overtakes an earlier one; with
``EngineConfig.prefill_shortest_first`` the queue is ordered by prompt length first, ties in
arrival order) are prefilled together in one
:meth:`~Engine.prefill_batch` call and all their samples are placed by one
:meth:`~Engine.insert_batch` call: the n samples of a request (a GRPO group) are n slots reading
the same prefill row. The batch is padded to a power of two with 1-token dummy prompts (never
inserted) and to the prompt bucket of its longest prompt, so prefill compiles at most once per
(bucket, power of two up to the slot count); ``EngineConfig.prefill_batch_tokens`` caps padded
batch × bucket. A request with more samples than free slots is prefilled alone and its samples
take slots as they free up. Slots decode together; a slot is freed as soon as its sample ends (a
stop token, a stop string, its token budget, or a full cache) and the next waiting sample takes
it. Each sample comes back with its token ids, per-token behaviour log-probs, text and finish
reason.

Sample j of request i draws from ``split(fold_in(key(seed), i), n)[j]`` (or ``split(key(
request.seed), n)[j]``), whatever the slot count or batching, so results do not depend on how
requests were grouped (up to float rounding of differently shaped programs).

Each ``generate`` call attends over a decode window (:meth:`~Engine.decode_window`): the cache's
first W indices, W a power of two holding the longest running sample's prompt and tokens plus
the call's steps, so short sequences in a long preallocated cache read only what they need.

Stop strings are checked on the host after each ``generate`` call. The sample is cut after the
first token whose text completes a stop string; the text is cut exactly at the end of the stop
string (``include_stop_string=True``, the default, so the text is what the tokens say) or at its
start. Only a tail window of each sample is decoded per call (the new tokens and enough earlier
text to hold a stop string that ends in them); the exact cut is searched on a hit.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import deque
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from arlarena_jax.device_turn import in_turn
from arlarena_jax.sampler.engine import Engine, Prefix, pow2
from arlarena_jax.sampler.sampling import GREEDY, SamplingParams


@dataclasses.dataclass(frozen=True)
class Request:
    """A prompt (token ids) and how many samples to draw from it."""

    prompt_ids: Sequence[int]
    n: int = 1
    max_new_tokens: int | None = None
    seed: int | None = None  # default: derived from the driver seed and the request index


@dataclasses.dataclass
class Completion:
    prompt_ids: list[int]
    token_ids: list[int]
    log_probs: list[float]  # behaviour log-probs, one per token
    text: str
    finish_reason: str  # "stop" (stop token), "stop_string", or "length"
    # the engine's ``params_version`` each token was decoded under, one per token
    versions: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Sample:
    request: int
    member: int
    tokens: list[int] = dataclasses.field(default_factory=list)
    log_probs: list[float] = dataclasses.field(default_factory=list)
    versions: list[int] = dataclasses.field(default_factory=list)
    checked: int = 0  # leading tokens already searched for stop strings


def _prompt_ids(request: Request, index: int, limit: int, truncate: bool) -> list[int]:
    ids = [int(t) for t in request.prompt_ids]
    if not ids:
        raise ValueError(f"request {index} has an empty prompt")
    if len(ids) > limit:
        if not truncate:
            raise ValueError(
                f"request {index}: prompt of {len(ids)} tokens exceeds max_prefill_length "
                f"{limit} (set truncate_prompts=True to keep its last {limit} tokens)"
            )
        ids = ids[-limit:]
    return ids


def find_stop(text: str, stop_strings: Sequence[str]) -> tuple[int, int] | None:
    """(start, end) of the earliest stop string in ``text``, or None."""
    hits = [(i, i + len(s)) for s in stop_strings if (i := text.find(s)) >= 0]
    return min(hits) if hits else None


def cut_at_stop(tokens: list[int], decode, stop_strings: Sequence[str]) -> int | None:
    """Number of tokens up to the one that completes the first stop string (None if none)."""
    if find_stop(decode(tokens), stop_strings) is None:
        return None
    lo, hi = 1, len(tokens)  # text grows with the prefix: binary search the first hit
    while lo < hi:
        mid = (lo + hi) // 2
        if find_stop(decode(tokens[:mid]), stop_strings) is None:
            lo = mid + 1
        else:
            hi = mid
    return lo


# Characters of slack before a tail window's new text: a window that starts inside a multi-byte
# character decodes its first bytes as replacement characters (at most 3), and a SentencePiece
# window loses its leading space.
_WINDOW_SLACK = 4


def cut_at_stop_tail(
    tokens: list[int], checked: int, decode, stop_strings: Sequence[str]
) -> int | None:
    """:func:`cut_at_stop` for tokens whose first ``checked`` hold no stop string.

    A stop string completed by the new tokens ``tokens[checked:]`` starts at most its length − 1
    characters before their text. So only a tail window is decoded: the new tokens and, before
    them, enough tokens to decode to at least the longest stop string plus a few characters of
    slack (counted on the decoded text, so tokens that decode to nothing — skipped special tokens,
    partial characters — only widen the window). A hit in the window is confirmed and located
    exactly by :func:`cut_at_stop` on the whole sample.
    """
    if checked >= len(tokens):
        return None
    need = max(map(len, stop_strings)) + _WINDOW_SLACK
    back = need
    while True:
        start = max(0, checked - back)
        if start == 0 or len(decode(tokens[start:checked])) >= need:
            break
        back *= 2
    if start > 0 and find_stop(decode(tokens[start:]), stop_strings) is None:
        return None
    return cut_at_stop(tokens, decode, stop_strings)


_INT32 = (-(2**31), 2**31)


@functools.partial(jax.jit, static_argnames=("n",))
def _member_key_data(base_key, indices, seeds, explicit, n: int):
    """Raw key data ``[R, n, …]``: row r holds ``split(fold_in(base_key, indices[r]), n)``, or
    ``split(key(seeds[r]), n)`` where ``explicit[r]``."""

    def one(index, seed, own):
        derived = jax.random.key_data(jax.random.fold_in(base_key, index))
        given = jax.random.key_data(jax.random.key(seed))
        key = jax.random.wrap_key_data(jnp.where(own, given, derived))
        return jax.random.key_data(jax.random.split(key, n))

    return jax.vmap(one)(indices, seeds, explicit)


def member_keys(requests: Sequence[Request], seed: int) -> list[np.ndarray]:
    """Each request's ``n`` sampling keys as host key data ``[n, …]``: ``split(fold_in(key(seed),
    i), n)`` for request i, or ``split(key(request.seed), n)``. One jitted call per distinct n
    (requests padded to a power of two), not a dispatch per request."""
    base_key = jax.random.key(seed)
    out: list[np.ndarray | None] = [None] * len(requests)
    by_n: dict[int, list[int]] = {}
    for i, r in enumerate(requests):
        if r.seed is not None and not _INT32[0] <= r.seed < _INT32[1]:  # jitted seeds: int32
            out[i] = np.asarray(jax.random.key_data(jax.random.split(jax.random.key(r.seed), r.n)))
        else:
            by_n.setdefault(r.n, []).append(i)
    for n, members in by_n.items():
        size = pow2(len(members))
        indices, seeds = np.zeros(size, np.int32), np.zeros(size, np.int32)
        explicit = np.zeros(size, bool)
        indices[: len(members)] = members
        for row, i in enumerate(members):
            if requests[i].seed is not None:
                seeds[row], explicit[row] = requests[i].seed, True
        data = np.asarray(_member_key_data(base_key, indices, seeds, explicit, n))
        for row, i in enumerate(members):
            out[i] = data[row]
    return out  # type: ignore[return-value]


def generate(
    engine: Engine,
    requests: Sequence[Request],
    *,
    tokenizer=None,
    params=None,
    sampling: SamplingParams | None = None,
    stop_strings: Sequence[str] = (),
    include_stop_string: bool = True,
    truncate_prompts: bool = False,
    seed: int = 0,
    progress: bool = False,
) -> list[list[Completion]]:
    """Samples for every request: ``result[i][j]`` is sample j of request i (see module doc)."""
    if stop_strings and tokenizer is None:
        raise ValueError("stop_strings need a tokenizer to read the generated text")
    budgets = _request_budgets(
        requests, engine.max_concurrent_decodes, engine.config.max_new_tokens
    )
    prompts = [
        _prompt_ids(r, i, engine.max_prefill_length, truncate_prompts)
        for i, r in enumerate(requests)
    ]
    run = _Run(
        engine,
        requests,
        prompts,
        budgets,
        tokenizer=tokenizer,
        params=engine.load_params() if params is None else params,
        sampling=sampling,
        stop_strings=stop_strings,
        include_stop_string=include_stop_string,
        seed=seed,
        progress=progress,
    )
    return run.loop()


def _request_budgets(requests: Sequence[Request], slots: int, max_decode: int) -> list[int]:
    """Each request's max new tokens, after checking its sample count and budget."""
    budgets = []
    for i, r in enumerate(requests):
        if not 1 <= r.n <= slots:
            raise ValueError(f"request {i}: n={r.n} samples, the engine has {slots} slots")
        budget = max_decode if r.max_new_tokens is None else r.max_new_tokens
        if not 1 <= budget <= max_decode:
            raise ValueError(
                f"request {i}: max_new_tokens {budget} outside 1..max_new_tokens {max_decode}"
            )
        budgets.append(budget)
    return budgets


class _Run:
    """One :func:`generate` call's host state: the waiting queue, free slots, running samples,
    the decode state and the results."""

    def __init__(
        self,
        engine: Engine,
        requests: Sequence[Request],
        prompts: list[list[int]],
        budgets: list[int],
        *,
        tokenizer,
        params,
        sampling: SamplingParams | None,
        stop_strings: Sequence[str],
        include_stop_string: bool,
        seed: int,
        progress: bool,
    ):
        self.engine, self.requests, self.prompts, self.budgets = engine, requests, prompts, budgets
        self.tokenizer, self.params, self.sampling = tokenizer, params, sampling
        self.follows_engine = params is engine.load_params()  # may switch between decode calls
        self.version = getattr(engine, "params_version", 0)
        self.stop_strings, self.include_stop_string = stop_strings, include_stop_string
        self.results: list[list[Completion | None]] = [[None] * r.n for r in requests]
        self.keys = member_keys(requests, seed) if requests else []
        order = range(len(requests))
        if engine.config.prefill_shortest_first:
            order = sorted(order, key=lambda i: len(prompts[i]))
        self.waiting = deque(order)
        self.lone: tuple[Prefix, deque] | None = None  # a request prefilled alone, members left
        self.free = deque(range(engine.max_concurrent_decodes))
        self.running: dict[int, _Sample] = {}
        self.state = engine.init_decode_state(seed)
        self.bar = _progress_bar(sum(r.n for r in requests)) if progress else None

    def decode(self, ids) -> str:
        if self.tokenizer is None:
            return ""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def loop(self) -> list[list[Completion]]:
        """Fill free slots, decode, collect; until every sample is finished."""
        while self.waiting or self.lone or self.running:
            self.refresh()
            self.fill_free_slots()
            self.state, result = in_turn(
                self.engine.generate,
                self.params,
                self.state,
                sampling=self.sampling,
                window=self.window(),
            )
            self.collect(result)
        if self.bar is not None:
            self.bar.close()
        return self.results  # type: ignore[return-value]

    def refresh(self) -> None:
        """The safe point of partial rollouts: before each decode call (and the prefills of
        that round), run the engine's ``before_decode`` hook (it may swap the engine's
        parameters) and take the engine's parameters and version. Tokens emitted by the next
        call carry that version; KV entries written before stay (docs/architecture.md)."""
        hook = getattr(self.engine, "before_decode", None)
        if hook is None or not self.follows_engine:
            return
        hook()
        self.params = self.engine.load_params()
        self.version = getattr(self.engine, "params_version", 0)

    def window(self) -> int:
        """The engine's decode window for the running samples (cache length of a slot: its
        prompt plus the tokens it emitted; freed slots still decoding are not read)."""
        longest = max(
            (len(self.prompts[s.request]) + len(s.tokens) for s in self.running.values()),
            default=0,
        )
        return self.engine.decode_window(longest)

    def fill_free_slots(self) -> None:
        """Insert waiting samples while slots are free: a lone request's remaining members first,
        else a request with more samples than free slots (prefilled alone), else a batch."""
        requests = self.requests
        while self.free and (self.lone or self.waiting):
            if self.lone is None and requests[self.waiting[0]].n > len(self.free):
                index = self.waiting.popleft()
                members = deque((0, index, m) for m in range(requests[index].n))
                self.lone = (self.prefill([index]), members)
            if self.lone is not None:
                prefix, members = self.lone
                take = min(len(self.free), len(members))
                self.insert(prefix, [members.popleft() for _ in range(take)])
                self.lone = self.lone if members else None
                continue
            batch = self.next_batch()
            picks = [(row, i, m) for row, i in enumerate(batch) for m in range(requests[i].n)]
            self.insert(self.prefill(batch), picks)

    def prefill(self, batch: list[int]) -> Prefix:
        """The batch's prompts in one call: rows padded to a power of two with 1-token dummies,
        columns to the bucket of the longest prompt. The prefix's own first tokens are unused
        (insert_batch draws each slot's), so they are drawn greedily: one compilation for every
        sampling setting."""
        prompts = self.prompts
        width = self.engine.bucket_for(max(len(prompts[i]) for i in batch))
        tokens = np.zeros((pow2(len(batch)), width), np.int32)
        lengths = np.ones(tokens.shape[0], np.int32)
        for row, i in enumerate(batch):
            tokens[row, : len(prompts[i])] = prompts[i]
            lengths[row] = len(prompts[i])
        return in_turn(self.engine.prefill_batch, self.params, tokens, lengths, sampling=GREEDY)

    def insert(self, prefix: Prefix, picks: list[tuple[int, int, int]]) -> None:
        """(prefix row, request, member) per pick, each into the next free slot."""
        chosen = [self.free.popleft() for _ in picks]
        self.state = in_turn(
            self.engine.insert_batch,
            prefix,
            self.state,
            chosen,
            [row for row, _, _ in picks],
            np.stack([self.keys[i][m] for _, i, m in picks]),
            max_new_tokens=[self.budgets[i] for _, i, _ in picks],
            sampling=self.sampling,
        )
        for slot, (_, i, m) in zip(chosen, picks, strict=True):
            self.running[slot] = _Sample(i, m)

    def next_batch(self) -> list[int]:
        """Waiting requests, in order, while their samples fit in the free slots and the padded
        batch × bucket stays within the engine's prefill_batch_tokens."""
        engine, requests, prompts, waiting = self.engine, self.requests, self.prompts, self.waiting
        batch, samples, longest = [], 0, 0
        while waiting and samples + requests[waiting[0]].n <= len(self.free):
            i = waiting[0]
            width = engine.bucket_for(max(longest, len(prompts[i])))
            if batch and pow2(len(batch) + 1) * width > engine.config.prefill_batch_tokens:
                break
            batch.append(waiting.popleft())
            samples += requests[i].n
            longest = max(longest, len(prompts[i]))
        return batch

    def collect(self, result) -> None:
        """Append each running slot's new tokens; finish the slots that stopped."""
        tokens, valid, log_probs, done = jax.device_get(
            (result.tokens, result.valid, result.log_probs, result.done)
        )
        for slot, sample in list(self.running.items()):
            keep = valid[slot]
            sample.tokens += tokens[slot][keep].tolist()
            sample.log_probs += log_probs[slot][keep].tolist()
            sample.versions += [self.version] * int(np.count_nonzero(keep))
            if self.stop_strings and self.cut_stop_string(slot, sample):
                continue
            if done[slot]:
                stopped = sample.tokens and sample.tokens[-1] in self.engine.config.stop_token_ids
                self.finish(slot, sample, "stop" if stopped else "length")

    def cut_stop_string(self, slot: int, sample: _Sample) -> bool:
        """Cut the sample after its first stop string and finish it; whether one was found."""
        stops = self.stop_strings
        n_cut = cut_at_stop_tail(sample.tokens, sample.checked, self.decode, stops)
        sample.checked = len(sample.tokens)
        if n_cut is None:
            return False
        del sample.tokens[n_cut:], sample.log_probs[n_cut:], sample.versions[n_cut:]
        text = self.decode(sample.tokens)
        start, end = find_stop(text, stops)
        self.finish(slot, sample, "stop_string", text[: end if self.include_stop_string else start])
        return True

    def finish(self, slot: int, sample: _Sample, reason: str, text: str | None = None) -> None:
        prompt = self.prompts[sample.request]
        text = self.decode(sample.tokens) if text is None else text
        self.results[sample.request][sample.member] = Completion(
            prompt, sample.tokens, sample.log_probs, text, reason, sample.versions
        )
        del self.running[slot]
        self.free.append(slot)
        if self.bar is not None:
            self.bar.update(1)


def _progress_bar(total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="sampling", unit="sample")
