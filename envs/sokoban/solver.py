"""Optimal Sokoban solver: breadth-first search over (player, boxes) states.

Moves follow docs/environments.md §3.1: action k in 1..4 = up, down, left, right; the player
pushes a box when the cell beyond it is free (floor or target), otherwise moves into a free cell,
otherwise stays. BFS returns a shortest action sequence that puts every box on a target. The
state space of a 6×6 room with one box is at most 16·15 states, so this is instant.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from envs.sokoban.render import (
    BOX,
    BOX_ON_TARGET,
    MOVES,
    PLAYER,
    PLAYER_ON_TARGET,
    TARGET,
    WALL,
)

State = tuple[tuple[int, int], frozenset[tuple[int, int]]]


def split_grid(grid: np.ndarray) -> tuple[np.ndarray, tuple[int, int], frozenset, frozenset]:
    """(walls mask, player, boxes, targets) of a grid of cell codes."""
    grid = np.asarray(grid)
    players = np.argwhere((grid == PLAYER) | (grid == PLAYER_ON_TARGET))
    if len(players) != 1:
        raise ValueError(f"a Sokoban grid needs exactly one player, found {len(players)}")
    cells = lambda *codes: frozenset(map(tuple, np.argwhere(np.isin(grid, codes)).tolist()))  # noqa: E731
    boxes = cells(BOX, BOX_ON_TARGET)
    targets = cells(TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET)
    return grid == WALL, tuple(players[0].tolist()), boxes, targets


def successors(walls: np.ndarray, state: State):
    """(action, next state) for the four moves that change the state."""
    (r, c), boxes = state
    rows, cols = walls.shape

    def free(p):
        return 0 <= p[0] < rows and 0 <= p[1] < cols and not walls[p] and p not in boxes

    for action, (dr, dc) in enumerate(MOVES, start=1):
        step = (r + dr, c + dc)
        if step in boxes:
            beyond = (r + 2 * dr, c + 2 * dc)
            if free(beyond):
                yield action, (step, (boxes - {step}) | {beyond})
        elif free(step):
            yield action, (step, boxes)


def solve(grid: np.ndarray, max_states: int = 1_000_000) -> list[int] | None:
    """A shortest list of actions (1..4) that solves ``grid``, [] if solved, None if unsolvable."""
    walls, player, boxes, targets = split_grid(grid)
    start: State = (player, boxes)
    if boxes <= targets:
        return []
    parent: dict[State, tuple[State, int] | None] = {start: None}
    queue = deque([start])
    while queue and len(parent) < max_states:
        state = queue.popleft()
        for action, nxt in successors(walls, state):
            if nxt in parent:
                continue
            parent[nxt] = (state, action)
            if nxt[1] <= targets:
                path = []
                while parent[nxt] is not None:
                    nxt, action = parent[nxt]
                    path.append(action)
                return path[::-1]
            queue.append(nxt)
    return None
