"""The shrunk main job run as several ``jax.distributed`` processes on localhost, and how two such
runs are compared (tests/e2e/test_processes_*.py, issue 65).

One config (the main job's Sokoban shrunk to 2 RL steps of 4 groups of 2, its on-device rollout,
a (data=2, fsdp=2) mesh over 4 devices) runs as 1 process with 4 devices (no ``jax.distributed``:
one process has nothing to coordinate), 2 with 2 or 4 with 1, on one shared run directory each.
The runs start from one cloned policy (``arlarena sft``, then ``sft.init_from``), so each test
clones at most once. Two runs of the same config "play the same"
(:func:`assert_same_run`) when:

- the held-out episodes (seed, won, return, length) are equal, record for record;
- the metrics that count or average what was played (``episode/…``, ``batch/…``, the scores, the
  evaluations) are equal: the same trajectories;
- every other metric (the update's ``actor/…``, cloning's loss) agrees within 1e-4 relative +
  1e-6 absolute: the same program over the same 4-device mesh, its float32 reductions ordered by
  the collectives of one or several processes (the two-process update test measured ~1e-6);
- timings, throughput, compile counts and memory are not compared, nor each process's share
  (``process/<i>/…``).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from arlarena_jax.train.metrics import read_scalars
from tests.helpers.processes import run, tail

CONFIG = "configs/sokoban/sampo_tiny.yaml"
SHRUNK = [
    "sft.num_episodes=16",
    "sft.steps=40",
    "trainer.total_steps=2",
    "trainer.eval_episodes=6",  # blocks of 3, 3 (2 processes) and 2, 2, 1, 1 (4)
    "env.eval_batch_size=2",
    "env.train_batch_size=4",
    "env.group_size=2",
    "trainer.mini_batch_size=8",
    "trainer.micro_batch_size=4",
    "sampler.max_concurrent_decodes=4",
    "env.max_turns=3",
    "trainer.eval_every=1",
    "trainer.save_every=1",
    "mesh.data=2",
    "mesh.fsdp=2",
]
NOT_COMPARED = ("timing/", "perf/", "compile/", "memory/", "sft/timing", "process/")
EXACT = ("episode/", "batch/", "critic/score/", "val/", "validation/", "test/")


def command(name: str, run_dir: Path, *extra: str) -> list[str]:
    """``arlarena NAME`` of the shrunk config in ``run_dir``."""
    return [name, CONFIG, *SHRUNK, *extra, f"trainer.run_dir={run_dir}"]


def arlarena(argv: list[str], processes: int, timeout: float = 900, **kwargs) -> list[str]:
    """``argv`` as ``processes`` processes over 4 devices in all; their outputs once all exit 0."""
    results = run(argv, processes, devices=4 // processes, timeout=timeout, **kwargs)
    outputs = [out for _, out in results]
    assert all(code == 0 for code, _ in results), tail(outputs)
    return outputs


def clone(run_dir: Path, processes: int = 1, *extra: str) -> Path:
    """The cloned start (``arlarena sft``: cloning, its evaluation, checkpoint step 0)."""
    arlarena(command("sft", run_dir, *extra), processes)
    return run_dir


def train(run_dir: Path, processes: int, start: Path, *extra: str, **kwargs) -> list[str]:
    """RL from the cloned ``start`` in ``run_dir``."""
    argv = command("train", run_dir, f"sft.init_from={start}", *extra)
    return arlarena(argv, processes, **kwargs)


def held_out(run_dir: Path) -> dict[str, list[dict]]:
    return {
        path.relative_to(run_dir).as_posix(): [json.loads(line) for line in path.open()]
        for path in sorted((run_dir / "held_out").rglob("*.jsonl"))
    }


def compared(scalars: dict) -> dict:
    return {k: v for k, v in scalars.items() if not k.startswith(NOT_COMPARED)}


def assert_same_run(a: Path, b: Path) -> None:
    """``b`` played and logged what ``a`` did (module doc: exact or within the stated
    tolerance)."""
    assert held_out(a) == held_out(b)
    ours, theirs = (
        compared(read_scalars(a / "tensorboard")),
        compared(read_scalars(b / "tensorboard")),
    )
    assert set(ours) == set(theirs)
    for tag, points in ours.items():
        assert [s for s, _ in points] == [s for s, _ in theirs[tag]], tag
        for (step, x), (_, y) in zip(points, theirs[tag], strict=True):
            if tag.startswith(EXACT):
                assert x == y, (tag, step, x, y)
            else:
                assert math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-6), (tag, step, x, y)


def saved_steps(run_dir: Path) -> list[int]:
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def copy_run(run_dir: Path, to: Path) -> Path:
    """A copy of a finished run, to continue (its export and final record left behind)."""
    shutil.copytree(run_dir, to, ignore=shutil.ignore_patterns("hf", "final.json", ".lock"))
    return to
