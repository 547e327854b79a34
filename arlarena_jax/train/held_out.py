"""Per-episode held-out outcomes, and the paired change between two evaluations on the same seeds.

Every evaluation of a run plays the same held-out seeds (``eval_seeds``), so two evaluations (the
cloned start and the policy after RL, or two runs of one sweep) are paired: episode ``i`` is the
same game both times. The trainer writes each evaluation's outcomes on its split
(``trainer.eval_split``) to ``RUN_DIR/held_out/<split>/step_NNNNNN.jsonl``, one JSON object per
episode::

    {"seed": 1000017, "won": true, "return": 1.0, "length": 4, "failed": false}

The change in success between evaluations ``a`` and ``b`` is d̄ = mean_i (won_b,i − won_a,i) over
the seeds both played. Its paired standard error is SE = sqrt(mean_i (d_i − d̄)² / n): the
spread of the per-game differences, not of each success rate. Games both evaluations win (or
both lose) contribute nothing, so SE ≤ sqrt(SE_a² + SE_b²) when outcomes correlate, as they do
between a policy and its own fine-tuned successor.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

HELD_OUT_DIR = "held_out"


class PairedChange(NamedTuple):
    """``after − before`` in held-out success over ``n`` shared seeds, with its paired SE;
    ``gained`` / ``lost``: games won only after / only before."""

    n: int
    before: float
    after: float
    change: float
    se: float
    gained: int
    lost: int


def episode_records(trajectories: Sequence[Any], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """One record per evaluated episode: its seed (``seeds[trajectory.group]``: evaluation plays
    one episode per seed, group ``g`` being seed ``g``), won, return, length, failed."""
    return [
        {
            "seed": int(seeds[t.group]),
            "won": bool(t.won),
            "return": float(t.episode_return),
            "length": int(t.length),
            "failed": bool(t.failed),
        }
        for t in trajectories
    ]


def split_dir(run_dir: Path, split: str = "test") -> Path:
    """Where a run keeps its evaluations of ``split``: ``held_out/<split>/``. A run from before
    the splits existed kept them flat in ``held_out/``; those were evaluations on the test
    games, and are read as the test split's when ``held_out/test/`` does not exist."""
    folder = Path(run_dir) / HELD_OUT_DIR / split
    legacy = Path(run_dir) / HELD_OUT_DIR
    if split == "test" and not folder.is_dir() and any(legacy.glob("step_*.jsonl")):
        return legacy
    return folder


def held_out_path(run_dir: Path, step: int, split: str = "test") -> Path:
    """``held_out/<split>/step_NNNNNN.jsonl`` (see :func:`split_dir`)."""
    return split_dir(run_dir, split) / f"step_{step:06d}.jsonl"


def write_records(path: Path, records: Sequence[dict[str, Any]]) -> Path:
    """Write ``records`` as JSON lines to ``path``, atomically (a crash leaves the old file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    os.replace(tmp, path)
    return path


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def paired_change(before: Sequence[dict], after: Sequence[dict]) -> PairedChange | None:
    """The paired change in success from ``before`` to ``after`` over their shared seeds
    (episodes lost to an infrastructure failure in either are left out); None if none."""
    won_before = {r["seed"]: bool(r["won"]) for r in before if not r.get("failed")}
    won_after = {r["seed"]: bool(r["won"]) for r in after if not r.get("failed")}
    seeds = sorted(won_before.keys() & won_after.keys())
    if not seeds:
        return None
    n = len(seeds)
    diffs = [int(won_after[s]) - int(won_before[s]) for s in seeds]
    mean = sum(diffs) / n
    se = math.sqrt(sum((d - mean) ** 2 for d in diffs) / n / n)
    return PairedChange(
        n,
        sum(won_before[s] for s in seeds) / n,
        sum(won_after[s] for s in seeds) / n,
        mean,
        se,
        gained=diffs.count(1),
        lost=diffs.count(-1),
    )


def evaluated_steps(run_dir: Path, split: str = "test") -> list[int]:
    """The steps whose per-game outcomes on ``split`` the run kept, ascending."""
    steps = []
    for path in split_dir(run_dir, split).glob("step_*.jsonl"):
        digits = path.stem.removeprefix("step_")
        if digits.isdigit():
            steps.append(int(digits))
    return sorted(steps)


def run_change(run_dir: Path, split: str = "test") -> PairedChange | None:
    """The paired change on ``split`` from a run's step-0 evaluation to its last one; None
    without both."""
    steps = evaluated_steps(run_dir, split)
    if not steps or steps[0] != 0 or steps[-1] == 0:
        return None
    first, last = held_out_path(run_dir, 0, split), held_out_path(run_dir, steps[-1], split)
    return paired_change(read_records(first), read_records(last))


def describe(change: PairedChange) -> str:
    """E.g. ``+14.1 ± 4.9 points (paired SE; 11 games gained, 2 lost, of 64)``."""
    return (
        f"{100 * change.change:+.1f} ± {100 * change.se:.1f} points (paired SE; "
        f"{change.gained} games gained, {change.lost} lost, of {change.n})"
    )
