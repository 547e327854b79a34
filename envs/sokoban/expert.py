"""The Sokoban expert: optimal replies from the BFS solver, read off the prompt itself.

The expert sees what the policy sees: the prompt text. The current grid is the last block of
consecutive grid lines in it (docs/environments.md §3.4 rendering; history observations come earlier
in the prompt and the template's own lines never look like grid rows). Its reply has the format
the projection expects (docs/environments.md §1.5):
``<think>plan</think><action>direction</action>``. It serves as a scripted policy in rollouts and as
the source of behaviour-cloning demonstrations.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from envs.sokoban.render import ACTION_NAMES, SYMBOLS, parse_text
from envs.sokoban.solver import solve
from envs.text import Expert, ScriptedPolicy

_CELL = "[" + re.escape("".join(SYMBOLS)) + "]"
_GRID_LINE = re.compile(f"^(?: {_CELL} \t)+$")  # the spec's rendering
_COMPACT_LINE = re.compile(f"^{_CELL}{{3,}}$")  # one character per cell


def current_grid(prompt: str) -> np.ndarray | None:
    """The grid of the last block of grid lines in ``prompt`` (None if there is none).

    Grid lines are either the spec's rendering (`` # \t`` cells) or one symbol per cell (the
    compact prompt); a block is a run of consecutive lines of one kind.
    """
    blocks: list[tuple[str, list[str]]] = []
    previous = None
    for line in prompt.split("\n"):
        kind = (
            "spec" if _GRID_LINE.match(line) else "compact" if _COMPACT_LINE.match(line) else None
        )
        if kind is not None and kind == previous:
            blocks[-1][1].append(line)
        elif kind is not None:
            blocks.append((kind, [line]))
        previous = kind
    if not blocks:
        return None
    kind, rows = blocks[-1]
    if len({len(r) for r in rows}) != 1 or len(rows) < 3:
        return None
    if kind == "compact":
        code = {s: i for i, s in enumerate(SYMBOLS)}
        return np.asarray([[code[c] for c in row] for row in rows], np.int8)
    return parse_text("\n".join(rows))


def expert_plan(grid: np.ndarray) -> list[int]:
    """An optimal action sequence (1..4) for ``grid``; [] when solved or unsolvable."""
    return solve(grid) or []


def expert_reply(grid: np.ndarray | None, *, think: bool = True) -> str:
    """``<think>…</think><action>…</action>`` with the first move of an optimal plan.

    ``think=False`` leaves the reasoning empty (``<think></think>``), the short reply of tiny CPU
    policies. A grid that cannot be read, is already solved or cannot be solved gets the valid
    no-op ``still`` (docs/environments.md §1.5: "still" is a valid action).
    """
    plan = [] if grid is None else expert_plan(grid)
    action = ACTION_NAMES[plan[0]] if plan else "still"
    if not think:
        thought = ""
    elif plan:
        moves = ", ".join(ACTION_NAMES[a] for a in plan)
        thought = f"The shortest plan that puts the box on its target is: {moves}."
    else:
        thought = "No move improves the position."
    return f"<think>{thought}</think><action>{action}</action>"


def expert_replies(prompts: list[str]) -> list[str]:
    """One expert reply per prompt (the function behind a scripted expert policy)."""
    return [expert_reply(current_grid(p)) for p in prompts]


def short_expert_replies(prompts: list[str]) -> list[str]:
    """Expert replies with empty reasoning, ``<think></think><action>move</action>``."""
    return [expert_reply(current_grid(p), think=False) for p in prompts]


def bfs_expert(
    replies: Callable[[list[str]], Sequence[str]] = expert_replies, *, batch_size: int = 64
) -> Expert:
    """Demonstrations by the BFS expert: ``replies`` (``expert_replies``, or
    ``short_expert_replies`` for empty reasoning) as a scripted policy, one room per seed."""
    policy = ScriptedPolicy(replies)
    return Expert(policy_for=lambda seeds: policy, batch_size=batch_size)
