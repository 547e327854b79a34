"""``arlarena train`` as several ``jax.distributed`` processes on localhost (issue 65), and the law
that the number of processes does not change the result: the shrunk main job
(tests/helpers/process_runs.py, which states what "plays the same" means and its tolerance) as
1 process with 4 devices, 2 with 2 and 4 with 1. Each process plays its block of the groups and of
the evaluation's episodes and decodes on its own devices; environment seeds and sampling keys
follow the global episode.

Covered here: cloning (``arlarena sft``) as 1 and 2 processes; RL from that start as 1 and 2
processes with the on-device rollout (4: test_processes_faults.py continues a run as 4 processes
and compares it with one process), as 1 and 2 with the host rollout, k = 1 asynchronous RL as
2; ``arlarena eval`` and ``arlarena export`` of a two-process run as two processes; processes
started with different configs, or a batch that does not split into whole groups per process,
refused in one line (exit 2). Faults and changes of process count: test_processes_faults.py.
"""

from __future__ import annotations

import json
import math

import pytest

from arlarena_jax.train.metrics import read_scalars
from tests.helpers.process_runs import (
    arlarena,
    assert_same_run,
    clone,
    command,
    copy_run,
    held_out,
    train,
)
from tests.helpers.processes import finish, free_port, run, start, tail


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, cloned):
    run_dir = tmp_path_factory.mktemp("one") / "run"
    train(run_dir, 1, cloned)
    return run_dir


def test_cloning_as_two_processes_gives_the_start_one_process_gives(cloned, tmp_path):
    """Each process writes the expert demonstrations of its block of the seeds; the gathered
    set, the cloning steps and the start's evaluation are the single process's."""
    assert_same_run(cloned, clone(tmp_path / "run", processes=2))


def test_two_processes_train_to_the_end_with_one_writer(two_processes):
    run_dir, outputs = two_processes
    assert json.loads((run_dir / "final.json").read_text())["complete"]
    assert (run_dir / "hf" / "model.safetensors").is_file()
    assert len(list((run_dir / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert "held-out success after RL" in outputs[0]
    assert "held-out success after RL" not in outputs[1]  # process 0 alone reports


def test_two_processes_play_what_one_plays(one_process, two_processes):
    assert_same_run(one_process, two_processes[0])


def test_the_host_rollout_as_two_processes_plays_what_one_plays(tmp_path):
    """The host turn loop (``env.device_rollout: false``: environments stepped in Python, the
    sampler's continuous batching deciding from each process's own prompts), same law; the
    processes' environment steps (``process/<i>/env_steps``) add up to the one process's. (Its
    own start: a start's evaluation is played the way its config says.)"""
    host = "env.device_rollout=false"
    cloned = clone(tmp_path / "start", 2, host)
    one, two = tmp_path / "one", tmp_path / "two"
    train(one, 1, cloned, host)
    train(two, 2, cloned, host)
    assert_same_run(one, two)
    steps = [read_scalars(run / "tensorboard") for run in (one, two)]
    alone = [v for _, v in steps[0]["process/0/env_steps"]]
    shares = [[v for _, v in steps[1][f"process/{i}/env_steps"]] for i in range(2)]
    assert all(alone) and [a + b for a, b in zip(*shares, strict=True)] == alone


def test_asynchronous_rl_as_two_processes(cloned, tmp_path):
    """k = 1: each process's producer thread plays its share one update behind, gathering
    through the thread-safe exchange while the main thread updates (taking turns on the devices:
    arlarena_jax/device_turn.py)."""
    run_dir = tmp_path / "run"
    train(run_dir, 2, cloned, "trainer.max_staleness=1")
    scalars = read_scalars(run_dir / "tensorboard")
    assert [s for s, _ in scalars["async/staleness_max"]] == [1, 2]
    assert all(v <= 1 for _, v in scalars["async/staleness_max"])
    assert json.loads((run_dir / "final.json").read_text())["complete"]


def test_eval_and_export_of_a_two_process_run_as_two_processes(
    one_process, two_processes, cloned, tmp_path
):
    """``arlarena eval`` (each process plays its block of the held-out episodes; process 0
    reports and writes) and ``arlarena export`` (process 0 writes the gathered parameters) as two
    processes: the episodes are the training run's final evaluation, and the export equals the
    one the single-process run wrote for the same checkpoint up to the update's tolerance."""
    from safetensors.numpy import load_file

    run_dir = copy_run(two_processes[0], tmp_path / "run")  # the session's run stays as it was
    episodes = tmp_path / "episodes.jsonl"
    argv = [*command("eval", run_dir, f"sft.init_from={cloned}"), "--episodes-out", str(episodes)]
    arlarena(argv, 2, timeout=600)
    kept = held_out(run_dir)
    final = kept[max(kept)]  # the last step's file
    assert [json.loads(line) for line in episodes.open()] == final
    out = tmp_path / "hf"
    arlarena(["export", str(run_dir), "--out", str(out)], 2, timeout=600)
    ours = load_file(out / "model.safetensors")
    theirs = load_file(one_process / "hf" / "model.safetensors")
    assert set(ours) == set(theirs)
    for name, value in theirs.items():
        assert math.isclose(float(abs(ours[name] - value).max()), 0.0, abs_tol=1e-4), name


def test_processes_started_with_different_configs_are_refused_in_one_line(tmp_path):
    procs, port = [], free_port()
    for index, lr in enumerate(("1e-6", "2e-6")):  # each its own config
        argv = command("train", tmp_path, f"optim.lr={lr}")
        procs += start(argv, 2, devices=2, port=port, ids=[index])
    results = finish(procs, 300)
    lines = [ln for _, out in results for ln in out.splitlines() if "started with other" in ln]
    assert lines and all(code == 2 for code, _ in results), tail([o for _, o in results])
    assert "process 1 was started with other config than process 0" in lines[0]


def test_a_batch_that_does_not_split_into_whole_groups_is_one_line(tmp_path):
    results = run(command("train", tmp_path, "env.train_batch_size=3"), 2, devices=2, timeout=300)
    for code, out in results:
        assert code == 2, out[-2000:]
        assert "'env.train_batch_size' (3 groups) does not split" in out
