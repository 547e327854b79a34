"""Sokoban grids and their text rendering (docs/environments.md §3.1 encoding, §3.4 rendering).

Cell codes: 0 wall, 1 floor, 2 target, 3 box on target, 4 box, 5 player, 6 player on target.
Text (gym-sokoban ``tiny_rgb_array``): each cell is a symbol between a space and a space-tab
(`` # \\t``), cells concatenated, rows joined by ``\\n`` (no trailing newline).
"""

from __future__ import annotations

import numpy as np

WALL, FLOOR, TARGET, BOX_ON_TARGET, BOX, PLAYER, PLAYER_ON_TARGET = range(7)
SYMBOLS = ("#", "_", "O", "√", "X", "P", "S")
ACTION_NAMES = ("still", "up", "down", "left", "right")
# Action k in 1..4 moves by MOVES[k - 1] (row, column): up, down, left, right.
MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))


def render_text(grid: np.ndarray) -> str:
    """The text observation of a grid of cell codes ``[rows, cols]``."""
    grid = np.asarray(grid)
    if grid.ndim != 2 or grid.min() < 0 or grid.max() > 6:
        raise ValueError(f"a Sokoban grid is 2-D with codes 0..6, got shape {grid.shape}")
    return "\n".join("".join(f" {SYMBOLS[c]} \t" for c in row) for row in grid.tolist())


def parse_text(text: str) -> np.ndarray:
    """The grid of a text observation (inverse of :func:`render_text`)."""
    code = {s: i for i, s in enumerate(SYMBOLS)}
    rows = [[code[cell.strip()] for cell in line.split("\t")[:-1]] for line in text.split("\n")]
    return np.asarray(rows, np.int8)
