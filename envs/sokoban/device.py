"""Sokoban as one on-device program with its compact prompt (:class:`envs.device.DeviceEnv`).

The compact prompt (``env.prompt: compact``) is rendered as token ids straight from the grid:

    ids = F0 + STEP[step] + F1 + WORD[last action] + F2 + ROW[r_0] + … + ROW[r_{d-1}] + F3

where the F's are the fixed stretches of the chat-templated prompt and ``ROW[r]`` the ids of a
grid row with its newline (``"#_OX_#\n"``), looked up by the row's inner cells as a base-7
number ``r`` (every room's border is wall, and walls never move). The row table therefore holds
the merges of any byte-level BPE: the tokenizer's own ids for each of the 7^(d−2) rows, however
it merges neighbouring cells (the real Qwen vocabulary merges runs of ``#``; the ``tiny-sokoban``
one learns merges such as ``##`` or ``#_``). This is exact when the tokenizer's pre-tokenizer
never joins text across the start of a row or after its newline, which holds for Qwen's and
GPT-2's split patterns (a row starts with ``#`` after a newline; a newline ends a piece). It is
checked, not assumed: every row is encoded in the context of a grid against the table, and whole
prompts of sample rooms against the renderer; a tokenizer that fails is one ConfigError line.

The step, word and fixed tables are cut from the host encoder's own output (common prefixes and
suffixes over every step number and every action word).

The projection is :func:`envs.sokoban.prompts.project_sokoban` on the reply's bytes: the first
``<action>`` and ``</action>`` of the lower-cased reply, the first keyword (up, down, left, right,
still, in that order) between them, and ``<think>``/``</think>`` presence for validity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from arlarena_base.errors import ConfigError
from envs.device import (
    DeviceEnv,
    PromptEncoder,
    ascii_lower,
    find_first,
    pack_segments,
    pad_rows,
)
from envs.sokoban.env import EnvParams, SokobanEnv
from envs.sokoban.prompts import SOKOBAN_ACTION_NAMES, SOKOBAN_COMPACT, SOKOBAN_KEYWORDS
from envs.sokoban.render import (
    BOX,
    BOX_ON_TARGET,
    PLAYER,
    PLAYER_ON_TARGET,
    SYMBOLS,
    TARGET,
    WALL,
)

WORDS = ("none", *SOKOBAN_ACTION_NAMES)  # index = last action + 1
Array = jax.Array


def compact_content(step: int, last_action: int, grid: np.ndarray) -> str:
    """The compact prompt's user message for a 1-based step, a last action (−1: none) and a grid
    of cell codes (the host's :func:`envs.sokoban.prompts.sokoban_compact_prompt`)."""
    rows = "\n".join("".join(SYMBOLS[c] for c in row) for row in np.asarray(grid).tolist())
    return SOKOBAN_COMPACT.format(current_step=step, last_action=WORDS[last_action + 1], grid=rows)


def _prefix(seqs: Sequence[list[int]]) -> int:
    """Length of the longest common prefix."""
    n = min(len(s) for s in seqs)
    return next((i for i in range(n) if len({s[i] for s in seqs}) > 1), n)


def _suffix(seqs: Sequence[list[int]], prefix: int) -> int:
    """Length of the longest common suffix that does not overlap ``prefix``."""
    n = min(len(s) for s in seqs) - prefix
    return next((i for i in range(n) if len({s[-1 - i] for s in seqs}) > 1), n)


def _middles(seqs: Sequence[list[int]]) -> tuple[int, list[list[int]], int]:
    """(common prefix length, the differing middles, common suffix length)."""
    p = _prefix(seqs)
    q = _suffix(seqs, p)
    return p, [s[p : len(s) - q] for s in seqs], q


def _find(seq: list[int], part: list[int]) -> int:
    """Index of the first occurrence of ``part`` in ``seq`` (−1: none)."""
    m = len(part)
    return next((i for i in range(len(seq) - m + 1) if seq[i : i + m] == part), -1)


KINDS = len(SYMBOLS)  # cell codes 0 … 6
MAX_ROW_TABLE = KINDS**6  # rows of up to 8 cells; 9x9 rooms and up use the host rollout


def row_key(inner: Sequence[int]) -> int:
    """A row's table index: its inner cells (border walls left out) as a base-7 number, the
    first inner cell most significant."""
    key = 0
    for code in inner:
        key = key * KINDS + int(code)
    return key


def row_text(key: int, dim: int) -> str:
    """The row of table index ``key`` in a ``dim``-wide room, with its newline."""
    inner = []
    for _ in range(dim - 2):
        key, code = divmod(key, KINDS)
        inner.append(code)
    wall = SYMBOLS[WALL]
    return wall + "".join(SYMBOLS[c] for c in reversed(inner)) + wall + "\n"


class PromptTables:
    """The renderer's id tables (see module doc), cut from the host encoder."""

    def __init__(self, encoder: PromptEncoder, max_turns: int, grid: np.ndarray):
        full = encoder.prompt
        self.dim = dim = int(np.asarray(grid).shape[0])
        if KINDS ** (dim - 2) > MAX_ROW_TABLE:
            raise ConfigError(
                f"env.sokoban.dim_room: the on-device prompt's row table holds 7^(dim-2) rows, "
                f"at most {MAX_ROW_TABLE} (8x8 rooms); {dim}x{dim} rooms need the host rollout "
                "(env.device_rollout=false)"
            )
        by_step = [full(compact_content(s, -1, grid)) for s in range(1, max_turns + 1)]
        p0, steps, _ = _middles(by_step) if max_turns > 1 else (0, [[]], 0)
        self.f0 = by_step[0][:p0]
        by_word = [full(compact_content(1, a, grid)) for a in range(-1, len(WORDS) - 1)]
        p1, words, q1 = _middles(by_word)
        self.f1 = by_word[0][len(self.f0) + len(steps[0]) : p1]
        self.rows = [encoder.text(row_text(k, dim)) for k in range(KINDS ** (dim - 2))]
        self.wall_key = row_key([WALL] * (dim - 2))  # the all-wall row (first and last)
        rest = by_word[0][len(by_word[0]) - q1 :]
        body = self.grid_ids(grid)
        at = _find(rest, body)
        if at < 0 or len(self.f0) + len(steps[0]) > p1:
            raise ConfigError(
                "env.device_rollout: the tokenizer does not encode the compact Sokoban prompt's "
                "grid row by row; use the host rollout (env.device_rollout=false)"
            )
        self.f2, self.f3 = rest[:at], rest[at + len(body) :]
        self.steps, self.words = steps, words

    def keys(self, grid: np.ndarray) -> list[int]:
        """Host: each row's table index."""
        return [row_key(row[1:-1]) for row in np.asarray(grid).tolist()]

    def grid_ids(self, grid: np.ndarray) -> list[int]:
        """Host: the grid's ids (newlines included) from the row table."""
        return [t for k in self.keys(grid) for t in self.rows[k]]

    def ids(self, step: int, last_action: int, grid: np.ndarray) -> list[int]:
        """Host: the renderer's ids, for checking against the encoder."""
        return (
            self.f0
            + self.steps[step - 1]
            + self.f1
            + self.words[last_action + 1]
            + self.f2
            + self.grid_ids(grid)
            + self.f3
        )

    def shared_prefix(self) -> int:
        """How many leading ids depend on the step only: a prompt shown step s starts with
        F0 + STEP[s] + F1, so its first len(F0) + min len(STEP) + len(F1) ids do."""
        return len(self.f0) + min(map(len, self.steps)) + len(self.f1)

    def longest(self, num_boxes: int) -> int:
        """The most ids a prompt can take: its two wall rows and the longest choice of inner
        rows holding at most one player, ``num_boxes`` boxes and ``num_boxes`` targets."""
        fixed = len(self.f0) + len(self.f1) + len(self.f2) + len(self.f3)
        fixed += max(map(len, self.steps)) + max(map(len, self.words))
        fixed += 2 * len(self.rows[self.wall_key])
        return fixed + _longest_rows(self.rows, self.dim, num_boxes)


def _row_counts(key: int, dim: int) -> tuple[int, int, int]:
    """(players, boxes, targets) in the row of table index ``key``."""
    text = row_text(key, dim)
    players = text.count(SYMBOLS[PLAYER]) + text.count(SYMBOLS[PLAYER_ON_TARGET])
    boxes = text.count(SYMBOLS[BOX]) + text.count(SYMBOLS[BOX_ON_TARGET])
    targets = text.count(SYMBOLS[TARGET]) + text.count(SYMBOLS[BOX_ON_TARGET])
    return players, boxes, targets + text.count(SYMBOLS[PLAYER_ON_TARGET])


def _longest_rows(rows: list[list[int]], dim: int, num_boxes: int) -> int:
    """The most ids ``dim − 2`` inner rows can take together under the room's limits (a dynamic
    programme over rows; the state is the players, boxes and targets used so far)."""
    best_by_counts: dict[tuple[int, int, int], int] = {}
    for key, ids in enumerate(rows):
        counts = _row_counts(key, dim)
        if counts[0] <= 1 and max(counts[1:]) <= num_boxes:
            best_by_counts[counts] = max(best_by_counts.get(counts, 0), len(ids))
    states = {(0, 0, 0): 0}
    for _ in range(dim - 2):
        after: dict[tuple[int, int, int], int] = {}
        for used, total in states.items():
            for counts, length in best_by_counts.items():
                p, b, t = (u + c for u, c in zip(used, counts, strict=True))
                if p <= 1 and b <= num_boxes and t <= num_boxes:
                    after[(p, b, t)] = max(after.get((p, b, t), 0), total + length)
        states = after
    return max(states.values())


def check_grids(dim: int, rooms: np.ndarray) -> list[np.ndarray]:
    """Grids for the renderer's check: the given rooms and one holding every cell kind."""
    every = np.ones((dim, dim), np.int8)
    every[0, :] = every[-1, :] = every[:, 0] = every[:, -1] = 0
    inner = [TARGET, BOX_ON_TARGET, BOX, PLAYER, PLAYER_ON_TARGET]
    for k, code in enumerate(inner):
        r, c = 1 + k // max(1, dim - 2), 1 + k % max(1, dim - 2)
        if r < dim - 1:
            every[r, c] = code
    return [*rooms, every]


def _refuse(what: str) -> ConfigError:
    return ConfigError(
        f"env.device_rollout: the tokenizer does not encode the compact Sokoban prompt row by "
        f"row ({what}); use the host rollout (env.device_rollout=false)"
    )


def verify(tables: PromptTables, encoder: PromptEncoder, max_turns: int, grids) -> None:
    """The renderer equals the host encoding: every table row in the middle of a walled grid,
    and whole prompts of every step, every word and every grid given."""
    dim = tables.dim
    walls, wall_ids = row_text(tables.wall_key, dim), tables.rows[tables.wall_key]
    for key, ids in enumerate(tables.rows):
        if encoder.text(walls + row_text(key, dim) + walls) != wall_ids + ids + wall_ids:
            raise _refuse(f"row {row_text(key, dim)[:-1]!r} in a grid")
    cases = [(s, -1, grids[0]) for s in range(1, max_turns + 1)]
    cases += [(max_turns, a, grids[0]) for a in range(-1, len(WORDS) - 1)]
    cases += [(1, -1, g) for g in grids] + [(2 if max_turns > 1 else 1, 1, g) for g in grids]
    for step, last, grid in cases:
        if tables.ids(step, last, grid) != encoder.prompt(compact_content(step, last, grid)):
            raise _refuse(f"step {step}, last action {WORDS[last + 1]}")


def render_fn(tables: PromptTables, width: int):
    """The device renderer ``(grid, step, last_action) → (ids [width], length)``."""
    const = {k: jnp.asarray(getattr(tables, k), jnp.int32) for k in ("f0", "f1", "f2", "f3")}
    steps, step_len = (jnp.asarray(a) for a in pad_rows(tables.steps))
    words, word_len = (jnp.asarray(a) for a in pad_rows(tables.words))
    rows, row_len = (jnp.asarray(a) for a in pad_rows(tables.rows))
    powers = jnp.asarray([KINDS**j for j in reversed(range(tables.dim - 2))], jnp.int32)

    def table_row(table, lengths, i):
        return table[i], jnp.arange(table.shape[1]) < lengths[i]

    def fixed(name):
        return const[name], jnp.ones(const[name].shape, bool)

    def render(grid: Array, step: Array, last_action: Array) -> tuple[Array, Array]:
        keys = grid[:, 1:-1].astype(jnp.int32) @ powers  # each row's table index
        grid_ids = rows[keys].reshape(-1)
        grid_ok = (jnp.arange(rows.shape[1]) < row_len[keys][:, None]).reshape(-1)
        pieces = [
            fixed("f0"),
            table_row(steps, step_len, step - 1),
            fixed("f1"),
            table_row(words, word_len, last_action + 1),
            fixed("f2"),
            (grid_ids, grid_ok),
            fixed("f3"),
        ]
        return pack_segments(pieces, width)

    return render


def project_bytes(text: Array, length: Array) -> tuple[Array, Array]:
    """:func:`envs.sokoban.prompts.project_sokoban` on a reply's bytes: (action, valid)."""
    lowered = ascii_lower(text)
    start, end = find_first(lowered, length, b"<action>"), find_first(lowered, length, b"</action>")
    inner_start = start + len(b"<action>")
    hit, action = jnp.bool_(False), jnp.int32(0)
    for word, code in reversed(SOKOBAN_KEYWORDS):  # the first keyword in test order wins
        at = find_first(lowered, end, word.encode(), inner_start)
        found = at >= 0
        hit, action = hit | found, jnp.where(found, code, action)
    tagged = (start >= 0) & (end >= 0)
    think = (find_first(text, length, b"<think>") >= 0) & (
        find_first(text, length, b"</think>") >= 0
    )
    action = jnp.where(tagged & hit, action, 0)
    return action.astype(jnp.int32), tagged & hit & think


def make_device_env(env: Any, encoder: PromptEncoder) -> DeviceEnv:
    """Sokoban with the compact prompt on device; another ``env.prompt`` is a one-line error."""
    from envs.sokoban.batch import SokobanBatch
    from envs.sokoban.render import render_text
    from envs.sokoban.spec import make_batch

    if env.prompt != "compact":
        raise ConfigError(
            f"env.device_rollout: Sokoban renders only env.prompt 'compact' on device, got "
            f"{env.prompt!r}"
        )
    batch: SokobanBatch = make_batch(env, 4, "train")  # type: ignore[assignment]
    params: EnvParams = batch.params
    batch.reset([0, 1, 2, 3])
    rooms = batch.grids()
    tables = PromptTables(encoder, env.max_turns, rooms[0])
    verify(tables, encoder, env.max_turns, check_grids(params.dim_room, rooms))
    longest = tables.longest(params.num_boxes)
    if longest > encoder.max_prompt_tokens:
        raise ConfigError(
            f"sampler.max_prefill_length: the compact Sokoban prompt can take {longest} tokens, "
            f"over max_prefill_length {encoder.max_prompt_tokens}"
        )
    return DeviceEnv(
        reset=_reset_fn(params),
        step=_step_fn(params),
        observe=lambda state: SokobanEnv().get_obs(state),
        prompt=render_fn(tables, longest),
        project=project_bytes,
        anchor_text=render_text,
        prompt_text=lambda grid, step, last: compact_content(step, last, grid),
        prompt_width=longest,  # no column every prompt leaves as padding
        shared_prefix=tables.shared_prefix(),
    )


def _reset_fn(params: EnvParams):
    env = SokobanEnv()

    def reset(seed: Array):
        """The room of ``key(seed)`` (as :class:`~envs.sokoban.batch.SokobanBatch.reset`)."""
        return env.reset_env(jax.random.key(seed), params)[1]

    return reset


def _step_fn(params: EnvParams):
    env = SokobanEnv()

    def step(state, action: Array):
        """One step without auto-reset (as :class:`~envs.sokoban.batch.SokobanBatch.step`)."""
        _, state, reward, _, info = env.step_env(jax.random.key(0), state, action, params)
        return state, reward, info["done"], info["won"], info["action_is_effective"]

    return step
