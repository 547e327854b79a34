"""Faults and changes of process count in a multi-process ``arlarena train`` (issue 65), on the
shrunk main job of tests/helpers/process_runs.py (which states what "plays the same" means and
its tolerance), all from one cloned start:

- a run saved by 2 processes after 2 steps, continued to step 6 by 4 processes, plays and logs
  what one process playing the 6 steps uninterrupted does (2 continuing 2's run: below);
- one run of 6 steps as 2 processes, interrupted three times, each once a new checkpoint is
  saved, and started again after each:
  SIGTERM to process 1 (both stop at the same safe point after saving, exit 75, one line);
  SIGKILL of process 1 (process 0 notices its pulse stopped and ends in one line, exit 75,
  within the heartbeat timeout, 10 s here, + 30 s allowed); SIGKILL of process 0, the
  coordinator (process 1's JAX client ends it at once, JAX's own message: see
  ``train.liveness``). Each start resumes from the last checkpoint, nothing is corrupted, and the
  run completes with the held-out episodes of the uninterrupted one.
"""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest

from tests.helpers.process_runs import (
    assert_same_run,
    command,
    copy_run,
    held_out,
    saved_steps,
    train,
)
from tests.helpers.processes import finish, signal_when, start, tail

HEARTBEAT_S = 10
STEPS = 6  # room for three interruptions, each after a new checkpoint


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, cloned):
    """One process, all the RL steps from the start."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    train(run_dir, 1, cloned, f"trainer.total_steps={STEPS}")
    return run_dir


def test_a_run_saved_by_two_processes_resumes_as_four(
    cloned, uninterrupted, two_processes, tmp_path
):
    saved, _ = two_processes  # 2 steps as 2 processes (tests/e2e/conftest.py)
    assert saved_steps(saved)[-1] == 2
    resumed = copy_run(saved, tmp_path / "resumed")
    train(resumed, 4, cloned, f"trainer.total_steps={STEPS}")
    assert saved_steps(resumed)[-1] == STEPS
    assert_same_run(uninterrupted, resumed)


def _interrupted(run_dir, cloned, which: int, sig: signal.Signals):
    """Start the run as 2 processes; send ``sig`` to process ``which`` once a checkpoint newer
    than those there before is saved; each process's (exit code, output, seconds from the signal
    to its end)."""
    before = max(saved_steps(run_dir), default=0)
    argv = command("train", run_dir, f"sft.init_from={cloned}", f"trainer.total_steps={STEPS}")
    procs = start(argv, 2, devices=2, extra={"ARLARENA_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_S)})
    sent: list[float] = []

    def send() -> None:
        signal_when(procs, which, sig, lambda: max(saved_steps(run_dir), default=0) > before)
        sent.append(time.monotonic())

    waiter = threading.Thread(target=send)
    waiter.start()
    results, ended = [], []
    for proc in procs:  # each one's end time, to bound how long the others took
        results += finish([proc], 900)
        ended.append(time.monotonic())
    waiter.join()
    assert sent, tail([out for _, out in results])  # the run reached the step before ending
    return [(code, out, end - sent[0]) for (code, out), end in zip(results, ended, strict=True)]


def _last_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def test_sigterm_sigkill_of_either_process_each_resume_to_the_uninterrupted_run(
    cloned, uninterrupted, tmp_path
):
    run_dir = tmp_path / "run"
    (a, b) = _interrupted(run_dir, cloned, 1, signal.SIGTERM)
    assert (a[0], b[0]) == (75, 75), tail([a[1], b[1]])
    assert "resume" in a[1].lower(), tail([a[1]])

    (survivor, killed) = _interrupted(run_dir, cloned, 1, signal.SIGKILL)
    assert killed[0] == -signal.SIGKILL
    assert survivor[0] == 75, tail([survivor[1]])
    line = _last_line(survivor[1])
    assert line.startswith("arlarena: process 1 stopped answering"), tail([survivor[1]])
    assert line.endswith("run the same command to resume")
    assert survivor[2] < HEARTBEAT_S + 30, survivor[2]

    (killed, survivor) = _interrupted(run_dir, cloned, 0, signal.SIGKILL)
    assert killed[0] == -signal.SIGKILL
    assert survivor[0] != 0 and survivor[2] < HEARTBEAT_S + 30, (survivor[0], survivor[2])

    train(run_dir, 2, cloned, f"trainer.total_steps={STEPS}")
    assert json.loads((run_dir / "final.json").read_text())["complete"]
    assert saved_steps(run_dir)[-1] == STEPS
    assert held_out(run_dir) == held_out(uninterrupted)
