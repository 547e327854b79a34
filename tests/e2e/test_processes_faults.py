"""A multi-process run's faults and changes of shape (issue 65): resumed by another number of
processes, stopped by SIGTERM to one process, one process killed, and refused when its processes
are started with different configs or a batch that does not split into whole groups.

The runs are tests/e2e/test_processes_train.py's shrunk config. Expected:

- a run saved by 2 processes and continued by 1 (or the reverse) plays the step after the
  checkpoint as an uninterrupted run does (the law: episodes and counts equal, the update's
  metrics within 1e-4 relative);
- SIGTERM to process 1 alone: both processes stop at the same safe point after saving, exit 75,
  and the same command resumes to the uninterrupted run's metrics;
- SIGKILL of process 1: process 0 ends within the bounded waits (process timeout 20 s, heartbeat
  10 s here; 90 s allowed) with one line and no hang, the checkpoints stay readable, and the next
  start resumes and finishes.
"""

from __future__ import annotations

import json
import signal
import threading

from tests.e2e.test_processes_train import CONFIG, SHRUNK, assert_same_run, held_out
from tests.e2e.test_processes_train import train as train_run
from tests.helpers.processes import finish, free_port, run, signal_when, start, tail


def _steps(run_dir) -> list[int]:
    folder = run_dir / "checkpoints"
    return (
        sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []
    )


def test_a_run_saved_by_two_processes_resumes_as_one_and_as_four(tmp_path):
    reference = tmp_path / "reference"
    train_run(reference, 1, "trainer.total_steps=3")
    for processes in (1, 4):
        resumed = tmp_path / f"resumed_by_{processes}"
        train_run(resumed, 2, "trainer.total_steps=2")
        train_run(resumed, processes, "trainer.total_steps=3")
        assert_same_run(reference, resumed)


def test_sigterm_to_one_process_stops_all_at_one_safe_point_and_resumes(tmp_path):
    uninterrupted, stopped = tmp_path / "uninterrupted", tmp_path / "stopped"
    train_run(uninterrupted, 2)
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
    train_run(stopped, 2)
    assert_same_run(uninterrupted, stopped)


def test_sigkill_of_one_process_ends_the_others_in_one_line_and_the_run_resumes(tmp_path):
    run_dir = tmp_path / "run"
    argv = ["train", CONFIG, *SHRUNK, "trainer.total_steps=3", f"trainer.run_dir={run_dir}"]
    bounded = {"ARLARENA_PROCESS_TIMEOUT_S": "20", "ARLARENA_HEARTBEAT_TIMEOUT_S": "10"}
    procs = start(argv, 2, devices=2, extra=bounded)
    signal_when(procs, 1, signal.SIGKILL, lambda: 1 in _steps(run_dir))
    (code, out), _ = finish(procs, 240)
    assert code != 0
    last = [line for line in out.splitlines() if line.startswith("arlarena:")]
    assert last and "process" in last[-1], out[-3000:]
    results = run(argv, 2, devices=2, timeout=900)
    assert all(code == 0 for code, _ in results), tail([o for _, o in results])
    assert json.loads((run_dir / "final.json").read_text())["complete"]
    assert held_out(run_dir)


def test_processes_started_with_different_configs_are_refused_in_one_line(tmp_path):
    procs, port = [], free_port()
    for index, lr in enumerate(("1e-6", "2e-6")):  # each its own config
        argv = ["train", CONFIG, *SHRUNK, f"optim.lr={lr}", f"trainer.run_dir={tmp_path}"]
        procs += start(argv, 2, devices=2, port=port, ids=[index])
    results = finish(procs, 300)
    lines = [
        line for _, out in results for line in out.splitlines() if "started with other" in line
    ]
    assert lines and all(code == 2 for code, _ in results), tail([o for _, o in results])
    assert "process 1 was started with other config than process 0" in lines[0]


def test_a_batch_that_does_not_split_into_whole_groups_is_one_line(tmp_path):
    argv = ["train", CONFIG, *SHRUNK, "env.train_batch_size=3", f"trainer.run_dir={tmp_path}"]
    results = run(argv, 2, devices=2, timeout=300)
    for code, out in results:
        assert code == 2, out[-2000:]
        assert "'env.train_batch_size' (3 groups) does not split" in out
