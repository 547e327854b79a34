"""Host-side packing of turn rows into static-shaped arrays for the update
(docs/algorithms.md §1.2).

verl's layout: each row is its prompt left-padded to ``P`` tokens followed by its response
right-padded to ``T`` tokens, so every response starts at column ``P`` and the response mask is a
plain ``[N, T]`` prefix mask. The model derives positions from the attention mask, so left padding
does not shift a prompt's rotary positions.

The row count is padded to a multiple of the mini-batch size with all-zero rows (``row_mask`` 0),
instead of verl's duplication of random rows: padding rows carry no loss and do not enter group
statistics (a documented difference; duplicated rows would count twice in their group).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from arlarena_jax.objectives.batch import TurnBatch
from arlarena_jax.objectives.host import collate

if TYPE_CHECKING:
    from arlarena_jax.rollout.loop import Rollout

Array = jax.Array


class Sequences(NamedTuple):
    """Model inputs ``[N, P + T]`` (prompt left-padded to P, response right-padded to T)."""

    input_ids: Array
    attention_mask: Array


def padded_row_count(num_rows: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` ≥ ``num_rows`` (at least one multiple)."""
    return max(1, math.ceil(num_rows / multiple)) * multiple


def bucket_length(length: int, minimum: int = 16) -> int:
    """``length`` rounded up to a quarter-octave step: a multiple of max(``minimum``, 2^⌊log2
    length⌋ / 4). At most four widths per doubling, so few shapes compile, and at most 25 %
    padding (65 → 80, 700 → 768)."""
    if length <= minimum:
        return minimum
    step = _bucket_step(length, minimum)
    return step * math.ceil(length / step)


def _bucket_step(length: int, minimum: int) -> int:
    """The bucket step around ``length``: max(``minimum``, 2^⌊log2 length⌋ / 4)."""
    return max(minimum, 2 ** (length.bit_length() - 1) // 4)


def narrower_widths(width: int, count: int, minimum: int = 16) -> tuple[int, ...]:
    """``width`` and up to ``count`` − 1 :func:`bucket_length` widths below it, widest first
    (640, 4 → 640, 512, 448, 384); fewer where ``minimum`` is reached."""
    widths = [width]
    while len(widths) < count and widths[-1] > minimum:
        below = widths[-1] - 1
        step = _bucket_step(below, minimum)
        widths.append(max(minimum, below // step * step))
    return tuple(widths)


def pack_rows(
    prompt_ids: Sequence[Sequence[int]],
    response_ids: Sequence[Sequence[int]],
    *,
    num_rows: int,
    prompt_length: int,
    response_length: int,
    pad_id: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """``(input_ids, attention_mask)`` ``[num_rows, P + T]`` int32 (see module doc).

    Raises a one-line ``ValueError`` naming the row if a prompt or response does not fit.
    """
    if len(prompt_ids) != len(response_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(response_ids)} responses")
    if len(prompt_ids) > num_rows:
        raise ValueError(f"{len(prompt_ids)} rows do not fit num_rows={num_rows}")
    width = prompt_length + response_length
    ids = np.full((num_rows, width), pad_id, np.int32)
    mask = np.zeros((num_rows, width), np.int32)
    for i, (prompt, response) in enumerate(zip(prompt_ids, response_ids, strict=True)):
        if not 1 <= len(prompt) <= prompt_length:
            raise ValueError(f"row {i}: prompt of {len(prompt)} tokens, limit {prompt_length}")
        if len(response) > response_length:
            raise ValueError(
                f"row {i}: response of {len(response)} tokens, limit {response_length}"
            )
        ids[i, prompt_length - len(prompt) : prompt_length] = prompt
        mask[i, prompt_length - len(prompt) : prompt_length] = 1
        ids[i, prompt_length : prompt_length + len(response)] = response
        mask[i, prompt_length : prompt_length + len(response)] = 1
    return ids, mask


def rollout_batch(
    rollout: Rollout,
    *,
    mini_batch_size: int,
    prompt_length: int,
    response_length: int,
    pad_id: int = 0,
    similarity_threshold: float | None = None,
) -> tuple[Sequences, TurnBatch]:
    """The rows of a rollout as padded model inputs and a :class:`TurnBatch`.

    N = the row count rounded up to a multiple of ``mini_batch_size`` (padding rows are zero). The
    sampler's behaviour log-probs fill both ``old_log_probs`` (until the trainer recomputes them)
    and ``rollout_log_probs`` (truncated importance sampling, docs/algorithms.md §4.9). A row
    with an empty response (the policy emitted nothing) keeps its place with an all-zero response
    mask.
    """
    rows = rollout.rows
    n = padded_row_count(len(rows), mini_batch_size)
    ids, mask = pack_rows(
        [r.prompt_ids for r in rows],
        [r.response_ids for r in rows],
        num_rows=n,
        prompt_length=prompt_length,
        response_length=response_length,
        pad_id=pad_id,
    )
    batch = collate(
        rollout.to_host_turns(),
        num_rows=n,
        num_tokens=response_length,
        similarity_threshold=similarity_threshold,
    )
    return Sequences(jnp.asarray(ids), jnp.asarray(mask)), batch
