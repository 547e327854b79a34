"""The contract of an environment that runs whole episodes on device, and text tools for it.

A JAX-native environment (Sokoban) can declare :attr:`envs.registry.EnvSpec.device_env`: a
factory that returns a :class:`DeviceEnv` for a prompt format whose tokens can be rendered from
the state on device. The on-device rollout (:mod:`arlarena_jax.rollout.device`) then plays the
episode batch as one jitted program: render the prompt tokens, generate, project the reply onto an
action, step, repeat.

Replies are read as bytes: a token's bytes come from a table (``[vocab, width]`` plus lengths,
built on the host from the tokenizer), appended to a per-row byte buffer as tokens are sampled.
Text rules that look for ASCII markers (``<action>``, ``</action>``, keywords) give the same
answers on UTF-8 bytes as on the decoded string: an ASCII byte never occurs inside a multi-byte
character, and undecodable bytes become U+FFFD, which is not ASCII either.

:class:`PromptEncoder` is how an environment's factory sees the tokenizer without importing the
trainer: ``prompt(content)`` gives the chat-templated prompt ids the host rollout would send,
``text(s)`` the plain ids of ``s``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


class PromptEncoder(NamedTuple):
    """The host's prompt encoding, as functions (see module doc)."""

    prompt: Callable[[str], list[int]]  # user-message content → chat-templated prompt ids
    text: Callable[[str], list[int]]  # plain text → ids, no special tokens
    max_prompt_tokens: int  # the engine's max_prefill_length


class DeviceEnv(NamedTuple):
    """One environment as device functions (single environment; the rollout vmaps them).

    * ``reset(seed)`` → state; ``step(state, action)`` → ``(state, reward, done, won,
      effective)`` with the host batch's semantics (a finished episode stays finished, reward 0).
    * ``observe(state)`` → the observation array the prompt is rendered from (host rows render
      it to text with ``anchor_text``).
    * ``prompt(observation, step, last_action)`` → ``(ids [prompt_width], length)``: the exact
      prompt ids the host rollout sends; ``step`` is the 1-based step shown, ``last_action`` −1
      for none.
    * ``project(text_bytes, length)`` → ``(action, action_valid)``: the format's projection of
      the reply's first ``length`` bytes (``[width]`` uint8).
    * host side: ``anchor_text(observation)`` is the text observation and
      ``prompt_text(observation, step, last_action)`` the user message the prompt ids encode.
    * ``shared_prefix``: how many leading prompt ids depend on the step shown only (not on the
      observation or the last action), fewer than any prompt's length. Every episode of a turn
      is shown the same step, so the rollout prefills these ids once per turn. 0: none.
    """

    reset: Callable[[Array], Any]
    step: Callable[[Any, Array], tuple[Any, Array, Array, Array, Array]]
    observe: Callable[[Any], Array]
    prompt: Callable[[Array, Array, Array], tuple[Array, Array]]
    project: Callable[[Array, Array], tuple[Array, Array]]
    anchor_text: Callable[[np.ndarray], str]
    prompt_text: Callable[[np.ndarray, int, int], str]
    prompt_width: int
    shared_prefix: int = 0


def pattern_array(pattern: bytes) -> np.ndarray:
    """A byte string as a uint8 array."""
    return np.frombuffer(pattern, np.uint8).copy()


def find_first(text: Array, length: Array, pattern: bytes, start: Array | int = 0) -> Array:
    """The first index i ≥ ``start`` with ``text[i : i + len(pattern)] == pattern`` inside the
    first ``length`` bytes, or −1 (``text`` [W] uint8; ``pattern`` non-empty)."""
    width, m = text.shape[0], len(pattern)
    if m > width:
        return jnp.int32(-1)
    p = jnp.asarray(pattern_array(pattern))
    windows = jnp.stack([text[k : width - m + 1 + k] for k in range(m)], axis=1)
    index = jnp.arange(width - m + 1, dtype=jnp.int32)
    hit = jnp.all(windows == p, axis=1) & (index >= start) & (index + m <= length)
    return jnp.where(hit.any(), jnp.argmax(hit).astype(jnp.int32), jnp.int32(-1))


def ascii_lower(text: Array) -> Array:
    """``text`` with the bytes A–Z lowered (Python's ``str.lower`` on ASCII)."""
    upper = (text >= ord("A")) & (text <= ord("Z"))
    return jnp.where(upper, text + 32, text).astype(text.dtype)


def pad_rows(rows: Sequence[Sequence[int]], fill: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Variable-length int rows as ``([len(rows), longest] int32, lengths [len(rows)] int32)``."""
    width = max([1, *(len(r) for r in rows)])
    out = np.full((len(rows), width), fill, np.int32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out, np.asarray([len(r) for r in rows], np.int32)


def pack_segments(pieces: Sequence[tuple[Array, Array]], width: int) -> tuple[Array, Array]:
    """Concatenate ``(tokens [k_i], valid [k_i])`` pieces, keeping only the valid entries, into
    ``([width] int32, length)``: each valid token goes to its rank among the valid ones."""
    tokens = jnp.concatenate([t for t, _ in pieces]).astype(jnp.int32)
    valid = jnp.concatenate([v for _, v in pieces])
    position = jnp.where(valid, jnp.cumsum(valid) - 1, width)
    out = jnp.zeros(width, jnp.int32).at[position].set(tokens, mode="drop")
    return out, jnp.sum(valid, dtype=jnp.int32)
