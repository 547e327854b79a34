"""Held-out episodes as readable transcripts: what the policy saw, said and did, turn by turn.

``arlarena eval CONFIG --transcripts-out FILE`` writes one JSON object per held-out episode, in
the evaluation's order: its outcome (as :func:`~arlarena_jax.train.held_out.episode_records`
writes it: seed, won, return, length, failed) and ``turns``, each::

    {"turn": 0, "observation": "...", "response": "<think></think><action>go to desk 1</action>",
     "action": "go to desk 1", "action_valid": true, "format_valid": true, "reward": 0.0}

``observation`` is the raw environment text the turn's prompt was built from (before the prompt
template and the history window), ``response`` the decoded model reply, ``action`` what the
projection sent to the environment. Under trajectory rows (``env.rows: trajectory``) an episode
is one row, so ``turns`` holds one entry whose ``response`` is the whole conversation after the
first observation. This is how to see which stage fails (format, admissible actions, the task
itself) when a success rate says only that it does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from arlarena_jax.rollout.loop import Rollout
from arlarena_jax.train.held_out import episode_records


def _plain(value: Any) -> Any:
    """``value`` as JSON can hold it: primitives as they are, NumPy scalars by ``item()``,
    anything else as its ``str``."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", 1) == 0:
        return item()
    return str(value)


def episode_transcripts(rollout: Rollout, seeds: Sequence[int]) -> list[dict[str, Any]]:
    """One record per episode of an evaluation's ``rollout`` (group ``g`` played seed
    ``seeds[g]``): its outcome and its turns in order (see the module docstring)."""
    rows = defaultdict(list)
    for row in rollout.rows:
        rows[row.trajectory].append(row)
    records = episode_records(rollout.trajectories, seeds)
    for record, trajectory in zip(records, rollout.trajectories, strict=True):
        record["turns"] = [
            {
                "turn": int(row.turn),
                "observation": row.anchor,
                "response": row.response,
                "action": _plain(row.action),
                "action_valid": bool(row.action_valid),
                "format_valid": bool(row.format_valid),
                "reward": float(row.reward),
            }
            for row in sorted(rows[trajectory.trajectory], key=lambda r: r.turn)
        ]
    return records
