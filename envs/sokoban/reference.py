"""NumPy/pure-Python Sokoban, run the way the original ARLArena code runs it
(docs/environments.md §3).

One environment at a time: each room is generated inside :func:`set_seed`, which seeds Python's
``random`` and the global ``np.random`` with the same seed (and restores both afterwards). The
random draws are made in the same order, with the same calls, as gym-sokoban 0.0.6's
``room_utils.py`` as ARLArena adapts it, so a seed gives the same room as the original:

- topology (docs/environments.md §3.3 step 1): ``random.sample`` for directions and masks,
  ``random.randint`` for the start, ``random.random`` for the 0.35 direction change;
- placement (step 2): ``np.random.randint`` over the floor cells (row-major) for the player, then
  for each box target;
- reverse play (step 3): a deterministic DFS over pull-only moves (no draws);
- extra player walk (step 5): ``random.random`` and ``random.choice``.

The DFS follows ARLArena's copy: a child inherits the *updated* last-pulled box, so ``box_swaps``
counts changes of the pulled box (gym-sokoban 0.0.6 passed the parent's, counting every pull).
States are keyed by (player, boxes with their 3/4 codes), the same information as the original's
``marshal.dumps(room_state)`` key, held in tuples instead of arrays for speed.

Retry seed (docs/environments.md §3.3): the original uses ``abs(hash(str(seed))) % 2**32``, which
depends on the per-process string-hash salt (``PYTHONHASHSEED``). Here :func:`retry_seed` replaces
``hash`` by a stable one (the first 8 bytes of SHA-256 of ``str(seed)``, read as a signed
little-endian int), so retries are deterministic across processes. Seeds 0..199 never retry
(docs/environments.md §3.3).
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np

from envs.base import Observation
from envs.sokoban.render import (
    BOX,
    BOX_ON_TARGET,
    MOVES,
    PLAYER,
    PLAYER_ON_TARGET,
    TARGET,
    render_text,
)

Pos = tuple[int, int]
_DIRECTIONS = [(1, 0), (0, 1), (-1, 0), (0, -1)]  # topology walk order (gym-sokoban)
# The five 3x3 masks, row by row: horizontal bar, vertical bar, L, 2x2 block, mirrored L.
_MASKS = [
    np.array([int(x) for x in m]).reshape(3, 3)
    for m in ("000111000", "010010010", "000110010", "000110110", "000011010")
]
_MAX_EXPLORED = 300_000
_PULLED, _UNPULLED = 3, 4  # box codes during reverse play (gym-sokoban room_state)


@contextlib.contextmanager
def set_seed(seed: int | None) -> Iterator[None]:
    """Seed ``random`` and global ``np.random`` with ``seed``; restore both on exit
    (docs/environments.md §3.1)."""
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        random.seed(seed)
        np.random.seed(seed)
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


def retry_seed(seed: int) -> int:
    """The seed of the next try after a failed room (docs/environments.md §3.3), with a
    process-stable hash."""
    digest = hashlib.sha256(str(seed).encode()).digest()[:8]
    return abs(int.from_bytes(digest, "little", signed=True)) % 2**32


def room_topology(dim: tuple[int, int], p_change: float, num_steps: int) -> np.ndarray:
    """Floor (1) / wall (0) layout from a random walk stamping 3x3 masks
    (docs/environments.md §3.3 step 1)."""
    dx, dy = dim
    direction = random.sample(_DIRECTIONS, 1)[0]
    pos = [random.randint(1, dx - 1), random.randint(1, dy - 1)]
    level = np.zeros(dim, dtype=int)
    for _ in range(num_steps):
        if random.random() < p_change:
            direction = random.sample(_DIRECTIONS, 1)[0]
        pos = [max(min(p + d, n - 2), 1) for p, d, n in zip(pos, direction, dim, strict=True)]
        mask = random.sample(_MASKS, 1)[0]
        level[pos[0] - 1 : pos[0] + 2, pos[1] - 1 : pos[1] + 2] += mask
    level[level > 0] = 1
    level[:, [0, dy - 1]] = 0
    level[[0, dx - 1], :] = 0
    return level


def place_player_and_targets(room: np.ndarray, num_boxes: int) -> np.ndarray:
    """Player (5) then ``num_boxes`` targets (2) on random floor cells
    (docs/environments.md §3.3 step 2), in place."""
    rows, cols = np.where(room == 1)
    if len(rows) <= num_boxes + 1:
        raise RuntimeError(f"{len(rows)} floor cells for 1 player and {num_boxes} boxes")
    i = np.random.randint(len(rows))
    room[rows[i], cols[i]] = PLAYER
    for _ in range(num_boxes):
        rows, cols = np.where(room == 1)
        i = np.random.randint(len(rows))
        room[rows[i], cols[i]] = 2
    return room


def reverse_play(
    structure: np.ndarray, player: Pos, search_depth: int
) -> tuple[Pos, dict[Pos, int], dict[Pos, Pos], int]:
    """Pull-only DFS from boxes on their targets (docs/environments.md §3.3 step 3): best (player,
    boxes, mapping, score)."""
    free = {tuple(p) for p in np.argwhere(structure > 0).tolist()}  # floor or target
    targets = [tuple(p) for p in np.argwhere(structure == 2).tolist()]  # row-major, like np.where
    num_boxes = len(targets)
    explored: set[tuple[Pos, frozenset]] = set()
    start_boxes = {t: _UNPULLED for t in targets}
    best: list[Any] = [-1, player, start_boxes, {t: t for t in targets}]

    def dfs(player: Pos, boxes: dict, mapping: dict, swaps: int, last: Any, ttl: int) -> None:
        ttl -= 1
        if ttl <= 0 or len(explored) >= _MAX_EXPLORED:
            return
        key = (player, frozenset(boxes.items()))
        if key in explored:
            return
        empty = sum(t not in boxes and t != player for t in targets)
        score = 0
        if empty == num_boxes:
            score = swaps * displacement(mapping)
        if score > best[0]:
            best[:] = [score, player, boxes, mapping]
        explored.add(key)
        for dr, dc in MOVES:  # pull up, down, left, right
            nxt = (player[0] + dr, player[1] + dc)
            if nxt not in free or nxt in boxes:
                continue  # the player cannot move: the same, already explored state
            behind = (player[0] - dr, player[1] - dc)
            new_boxes, new_mapping, new_last = boxes, mapping, last
            if behind in boxes:
                new_boxes = dict(boxes)
                del new_boxes[behind]
                new_boxes[player] = _PULLED
                new_mapping = dict(mapping)
                for t, b in mapping.items():
                    if b == behind:
                        new_mapping[t] = player
                        new_last = t
            dfs(nxt, new_boxes, new_mapping, swaps + (new_last != last), new_last, ttl)

    dfs(player, start_boxes, {t: t for t in targets}, 0, (-1, -1), search_depth)
    _, best_player, best_boxes, best_mapping = best
    return best_player, best_boxes, best_mapping, best[0]


def displacement(mapping: dict[Pos, Pos]) -> int:
    """Σ Manhattan distance between each box and its origin target
    (docs/environments.md §3.3 step 3)."""
    return sum(abs(b[0] - t[0]) + abs(b[1] - t[1]) for t, b in mapping.items())


def random_player_walk(state: np.ndarray, structure: np.ndarray, move_prob: float) -> None:
    """Extra walk of 1–3 steps onto unvisited free cells, continuing w.p. 0.5
    (docs/environments.md §3.3 step 5), in place."""
    if random.random() > move_prob:
        return
    r, c = (int(x) for x in np.argwhere(state == PLAYER)[0])
    visited = [(r, c)]
    for step in range(1, 4):
        options = [
            (r + dr, c + dc)
            for dr, dc in MOVES
            if state[r + dr, c + dc] in (1, 2) and (r + dr, c + dc) not in visited
        ]
        if not options:
            return
        nxt = random.choice(options)
        state[r, c] = structure[r, c]
        state[nxt] = PLAYER
        r, c = nxt
        visited.append(nxt)
        if step >= 3 or random.random() > 0.5:
            return


def generate_room(
    seed: int,
    dim: tuple[int, int] = (6, 6),
    num_boxes: int = 1,
    num_steps: int = 20,
    search_depth: int = 30,
    p_change: float = 0.35,
    tries: int = 4,
    max_retries: int = 100,
) -> tuple[np.ndarray, np.ndarray, dict[Pos, Pos]]:
    """(room_fixed, room_state, box_mapping) of the room of ``seed`` (docs/environments.md §3.3).

    ``room_fixed`` holds 0 wall / 1 floor / 2 target; ``room_state`` holds 0, 1, 2, 4 box and
    5 player (gym-sokoban encoding). A failed room (RuntimeError / RuntimeWarning) is retried with
    :func:`retry_seed`; after ``max_retries`` retries the RuntimeError propagates.
    """
    for _ in range(max_retries + 1):
        try:
            with set_seed(seed):
                return _generate_once(dim, num_boxes, num_steps, search_depth, p_change, tries)
        except (RuntimeError, RuntimeWarning):
            seed = retry_seed(seed)
    raise RuntimeError(f"no Sokoban room after {max_retries} retries")


def _generate_once(
    dim: tuple[int, int], num_boxes: int, num_steps: int, depth: int, p_change: float, tries: int
) -> tuple[np.ndarray, np.ndarray, dict[Pos, Pos]]:
    """One seeded attempt (up to ``tries`` layouts); raises RuntimeError / RuntimeWarning."""
    for _ in range(tries):
        room = place_player_and_targets(room_topology(dim, p_change, num_steps), num_boxes)
        structure = room.copy()
        structure[structure == PLAYER] = 1
        player = tuple(int(x) for x in np.argwhere(room == PLAYER)[0])
        player, boxes, mapping, _ = reverse_play(structure, player, depth)
        if displacement(mapping) > 0:
            break
    if displacement(mapping) == 0:
        raise RuntimeWarning("generated a room with displacement score 0")
    state = structure.copy()
    for b in boxes:
        state[b] = BOX
    state[player] = PLAYER
    random_player_walk(state, structure, 0.8 if displacement(mapping) == 1 else 0.5)
    return structure, state, mapping


class SokobanTextEnv:
    """One text-mode Sokoban environment (docs/environments.md §3.1), implementing
    ``envs.base.TextEnv``.

    Actions: 0 still/invalid (−0.1, not counted, done False), 1–4 up/down/left/right push-or-move.
    Stepping after the episode ended returns the same observation, reward 0, done True and the
    last ``won``, without changing the state.
    """

    def __init__(self, dim: tuple[int, int] = (6, 6), num_boxes: int = 1, max_steps: int = 15,
                 num_gen_steps: int | None = None, search_depth: int = 30) -> None:  # fmt: skip
        self.dim, self.num_boxes, self.max_steps = dim, num_boxes, max_steps
        self.num_gen_steps = num_gen_steps or int(1.7 * (dim[0] + dim[1]))
        self.search_depth = search_depth
        self.room_fixed = self.room_state = np.zeros(dim, dtype=int)
        self.num_env_steps, self.boxes_on_target, self.done, self.won = 0, 0, True, False

    @property
    def grid(self) -> np.ndarray:
        """Current grid in render codes 0..6 (box on target 3, player on target 6).

        With several boxes, a box never pulled during generation starts on its target; gym-sokoban
        renders it ``X`` until pushed, here it is ``√`` (1 box, the spec setting: no difference).
        """
        g = self.room_state.copy()
        on_target = self.room_fixed == 2
        g[(g == BOX) & on_target] = BOX_ON_TARGET
        g[(g == PLAYER) & on_target] = PLAYER_ON_TARGET
        return g

    def observation(self) -> Observation:
        """The text observation of the current grid (gym-sokoban ``tiny_rgb_array``)."""
        return Observation(text=render_text(self.grid))

    def reset(self, seed: int) -> Observation:
        """Generate the room of ``seed`` (docs/environments.md §3.3) and start an episode."""
        self.room_fixed, self.room_state, _ = generate_room(
            seed, self.dim, self.num_boxes, self.num_gen_steps, self.search_depth
        )
        self.num_env_steps, self.boxes_on_target, self.done, self.won = 0, 0, False, False
        return self.observation()

    def step(self, action: int) -> tuple[Observation, float, bool, dict[str, Any]]:
        """Apply one action (docs/environments.md §3.1, §3.2): (observation, reward, done, {won,
        action_is_effective})."""
        if self.done:
            return self.observation(), 0.0, True, {"won": self.won, "action_is_effective": False}
        action = int(action)
        if action == 0:
            return self.observation(), -0.1, False, {"won": False, "action_is_effective": False}
        if not 1 <= action <= 4:
            raise ValueError(f"a Sokoban action is 0..4, got {action}")
        moved = self._push_or_move(MOVES[action - 1])
        self.num_env_steps += 1
        reward = -0.1
        covered = self.num_boxes - int(np.isin(self.grid, (TARGET, PLAYER_ON_TARGET)).sum())
        if covered > self.boxes_on_target:
            reward += 1.0
        elif covered < self.boxes_on_target:
            reward -= 1.0
        self.boxes_on_target = covered
        self.won = covered == self.num_boxes
        if self.won:
            reward += 10.0
        self.done = self.won or self.num_env_steps == self.max_steps
        info = {"won": self.won, "action_is_effective": moved}
        return self.observation(), reward, self.done, info

    def _push_or_move(self, delta: Pos) -> bool:
        """Push the box ahead if the cell beyond is free, else move into a free cell."""
        state, rows, cols = self.room_state, *self.room_state.shape
        r, c = (int(x) for x in np.argwhere(state == PLAYER)[0])
        ahead = (r + delta[0], c + delta[1])
        beyond = (r + 2 * delta[0], c + 2 * delta[1])
        inside = 0 <= beyond[0] < rows and 0 <= beyond[1] < cols
        if state[ahead] == BOX and inside and state[beyond] in (1, 2):
            state[beyond] = BOX
            state[ahead], state[r, c] = PLAYER, self.room_fixed[r, c]
            return True
        if state[ahead] in (1, 2):
            state[ahead], state[r, c] = PLAYER, self.room_fixed[r, c]
            return True
        return False
