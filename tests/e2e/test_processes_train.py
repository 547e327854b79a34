"""``arlarena train`` as several ``jax.distributed`` processes on localhost (issue 65), and the law
that the number of processes does not change the result. One config (the main job's Sokoban shrunk
to 2 RL steps of 4 groups of 2, its on-device rollout, a (data=2, fsdp=2) mesh over 4 devices) runs
as 1 process with 4 devices, 2 processes with 2 devices and 4 processes with 1 device, on one
shared run directory each. Each process plays its block of the groups and of the evaluation's
episodes and decodes on its own devices; environment seeds and sampling keys follow the global
episode. Expected, by that construction:

- the held-out episodes (seed, won, return, length) are equal, record for record;
- the training metrics that count or average what was played (``episode/…``, ``batch/…``, the
  scores) are equal: the same trajectories;
- the update's metrics (``actor/…``) agree within 1e-4 relative + 1e-6 absolute: the same
  program over the same 4-device mesh, its float32 reductions ordered by the collectives of one
  or several processes (the two-process update test measured ~1e-6);
- timings, throughput and compile counts are not compared, nor each process's share
  (``process/<i>/…``); the host rollout's environment steps, summed over the processes, are the
  one process's.

Faults and changes of shape, on copies of those runs (so they clone once): a run saved by 2
processes continued by 1 or by 4 plays the next step as the single-process run continued does;
SIGTERM to process 1 alone stops both at the same safe point after saving (exit 75) and the same
command resumes to the uninterrupted run's metrics; processes started with different configs, or
a batch that does not split into whole groups per process, are refused in one line (exit 2).
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import threading

import pytest

from arlarena_jax.train.metrics import read_scalars
from tests.helpers.processes import finish, free_port, run, signal_when, start, tail

CONFIG = "configs/sokoban/sampo_tiny.yaml"
SHRUNK = [
    "sft.num_episodes=16",
    "sft.steps=40",  # a policy that wins some games: outcomes to compare
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


def train(run_dir, processes: int, *extra: str, timeout: float = 900) -> list[str]:
    """The shrunk config in ``run_dir`` as ``processes`` processes over 4 devices in all."""
    argv = ["train", CONFIG, *SHRUNK, *extra, f"trainer.run_dir={run_dir}"]
    results = run(argv, processes, devices=4 // processes, timeout=timeout)
    outputs = [out for _, out in results]
    assert all(code == 0 for code, _ in results), tail(outputs)
    return outputs


def held_out(run_dir) -> dict[str, list[dict]]:
    return {
        path.relative_to(run_dir).as_posix(): [json.loads(line) for line in path.open()]
        for path in sorted((run_dir / "held_out").rglob("*.jsonl"))
    }


def compared(scalars: dict) -> dict:
    return {k: v for k, v in scalars.items() if not k.startswith(NOT_COMPARED)}


def assert_same_run(a, b) -> None:
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


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("one") / "run"
    train(run_dir, 1)
    return run_dir


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("two") / "run"
    outputs = train(run_dir, 2)
    return run_dir, outputs


def test_two_processes_train_to_the_end_with_one_writer(two_processes):
    run_dir, outputs = two_processes
    assert json.loads((run_dir / "final.json").read_text())["complete"]
    assert (run_dir / "hf" / "model.safetensors").is_file()
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert "held-out success after RL" in outputs[0]


def test_two_processes_play_what_one_plays(one_process, two_processes):
    assert_same_run(one_process, two_processes[0])


def test_four_processes_play_what_one_plays(one_process, tmp_path):
    train(tmp_path / "run", 4)
    assert_same_run(one_process, tmp_path / "run")


def test_the_host_rollout_as_two_processes_plays_what_one_plays(tmp_path):
    """The host turn loop (``env.device_rollout: false``: environments stepped in Python, the
    sampler's continuous batching deciding from each process's own prompts), same law."""
    one, two = tmp_path / "one", tmp_path / "two"
    train(one, 1, "env.device_rollout=false")
    train(two, 2, "env.device_rollout=false")
    assert_same_run(one, two)
    steps = [read_scalars(run / "tensorboard") for run in (one, two)]
    alone = [v for _, v in steps[0]["process/0/env_steps"]]
    shares = [[v for _, v in steps[1][f"process/{i}/env_steps"]] for i in range(2)]
    assert all(alone) and [a + b for a, b in zip(*shares, strict=True)] == alone


def test_asynchronous_rl_as_two_processes(tmp_path):
    """k = 1: each process's producer thread plays its share one update behind, gathering
    through the thread-safe exchange while the main thread updates."""
    run_dir = tmp_path / "run"
    train(run_dir, 2, "trainer.max_staleness=1", "trainer.total_steps=3")
    scalars = read_scalars(run_dir / "tensorboard")
    assert [s for s, _ in scalars["async/staleness_max"]] == [1, 2, 3]
    assert all(v <= 1 for _, v in scalars["async/staleness_max"])
    assert json.loads((run_dir / "final.json").read_text())["complete"]


def test_eval_and_export_of_a_two_process_run_as_two_processes(
    one_process, two_processes, tmp_path
):
    """``arlarena eval`` (each process plays its block of the held-out episodes; process 0
    reports and writes) and ``arlarena export`` (process 0 writes the gathered parameters) as two
    processes: the episodes are the training run's final evaluation, and the export equals the
    one the single-process run wrote for the same checkpoint up to the update's tolerance."""
    from safetensors.numpy import load_file

    run_dir, _ = two_processes
    episodes = tmp_path / "episodes.jsonl"
    argv = ["eval", CONFIG, *SHRUNK, f"trainer.run_dir={run_dir}", "--episodes-out", str(episodes)]
    results = run(argv, 2, devices=2, timeout=600)
    assert all(code == 0 for code, _ in results), tail([o for _, o in results])
    kept = held_out(run_dir)
    final = kept[max(kept)]  # the last step's file
    assert [json.loads(line) for line in episodes.open()] == final
    out = tmp_path / "hf"
    results = run(["export", str(run_dir), "--out", str(out)], 2, devices=2, timeout=600)
    assert all(code == 0 for code, _ in results), tail([o for _, o in results])
    ours = load_file(out / "model.safetensors")
    theirs = load_file(one_process / "hf" / "model.safetensors")
    assert set(ours) == set(theirs)
    for name, value in theirs.items():
        assert math.isclose(float(abs(ours[name] - value).max()), 0.0, abs_tol=1e-4), name


# ---- faults and changes of shape ----


def _steps(run_dir) -> list[int]:
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def _copy(run_dir, to):
    """A copy of a finished run, to continue (its export and final record left behind)."""
    shutil.copytree(run_dir, to, ignore=shutil.ignore_patterns("hf", "final.json", ".lock"))
    return to


def test_a_run_saved_by_two_processes_resumes_as_one_and_as_four(
    one_process, two_processes, tmp_path
):
    reference = _copy(one_process, tmp_path / "reference")
    train(reference, 1, "trainer.total_steps=3")
    for processes in (1, 4):
        resumed = _copy(two_processes[0], tmp_path / f"resumed_by_{processes}")
        train(resumed, processes, "trainer.total_steps=3")
        assert _steps(resumed)[-1] == 3
        assert_same_run(reference, resumed)


def test_sigterm_to_one_process_stops_all_at_one_safe_point_and_resumes(two_processes, tmp_path):
    stopped = tmp_path / "stopped"
    argv = ["train", CONFIG, *SHRUNK, f"trainer.run_dir={stopped}"]
    procs = start(argv, 2, devices=2)
    waiter = threading.Thread(
        target=signal_when, args=(procs, 1, signal.SIGTERM, lambda: 1 in _steps(stopped))
    )
    waiter.start()
    results = finish(procs, 900)
    waiter.join()
    outputs = [out for _, out in results]
    assert [code for code, _ in results] == [75, 75], tail(outputs)
    assert "stopped" in outputs[0].lower() and "resume" in outputs[0].lower(), tail(outputs)
    train(stopped, 2)
    assert_same_run(two_processes[0], stopped)


def test_processes_started_with_different_configs_are_refused_in_one_line(tmp_path):
    procs, port = [], free_port()
    for index, lr in enumerate(("1e-6", "2e-6")):  # each its own config
        argv = ["train", CONFIG, *SHRUNK, f"optim.lr={lr}", f"trainer.run_dir={tmp_path}"]
        procs += start(argv, 2, devices=2, port=port, ids=[index])
    results = finish(procs, 300)
    lines = [ln for _, out in results for ln in out.splitlines() if "started with other" in ln]
    assert lines and all(code == 2 for code, _ in results), tail([o for _, o in results])
    assert "process 1 was started with other config than process 0" in lines[0]


def test_a_batch_that_does_not_split_into_whole_groups_is_one_line(tmp_path):
    argv = ["train", CONFIG, *SHRUNK, "env.train_batch_size=3", f"trainer.run_dir={tmp_path}"]
    results = run(argv, 2, devices=2, timeout=300)
    for code, out in results:
        assert code == 2, out[-2000:]
        assert "'env.train_batch_size' (3 groups) does not split" in out
