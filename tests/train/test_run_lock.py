"""One owner per run directory (arlarena_jax/train/run_lock.py): a second holder is one line
naming the first, a lock left by a killed process is taken over, a failed start releases it, and
the CLI exits 2 on a held directory."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from arlarena_jax.train.run_lock import LOCK_FILE, RunDirInUse, RunDirLock, hold_run_dir

ROOT = Path(__file__).resolve().parents[2]


def holder(run_dir: Path) -> subprocess.Popen:
    """A process that takes the lock, says so, and sleeps until killed."""
    code = f"""
        import sys, time
        from arlarena_jax.train.run_lock import RunDirLock
        RunDirLock({str(run_dir)!r})
        print("held", flush=True)
        time.sleep(600)
        """
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_a_second_holder_is_one_line_naming_the_first(tmp_path):
    first = RunDirLock(tmp_path / "run")
    with pytest.raises(RunDirInUse) as error:
        RunDirLock(tmp_path / "run")
    message = str(error.value)
    assert message == (
        f"run directory {tmp_path / 'run'} is in use by process {os.getpid()} on host "
        f"{socket.gethostname()}"
    )
    first.release()
    first.release()  # idempotent
    assert (tmp_path / "run" / LOCK_FILE).read_text() == ""  # a clean release erases the owner
    RunDirLock(tmp_path / "run").release()


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path, capsys):
    child = holder(tmp_path / "run")
    try:
        with pytest.raises(RunDirInUse, match=f"in use by process {child.pid} on host"):
            RunDirLock(tmp_path / "run")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    lock = RunDirLock(tmp_path / "run")
    assert f"taking over the lock of process {child.pid}" in capsys.readouterr().err
    lock.release()


def test_only_process_0_of_a_multi_host_run_holds_it(tmp_path):
    assert hold_run_dir(tmp_path / "run", process_index=1) is None
    lock = hold_run_dir(tmp_path / "run", process_index=0)
    assert lock is not None
    lock.release()


def test_a_failed_start_releases_the_directory(tmp_path):
    from arlarena_jax.train.config_io import load_config
    from arlarena_jax.train.run import Run

    config = load_config(
        ROOT / "configs/sokoban/base_tiny.yaml",
        [
            f"trainer.run_dir={tmp_path / 'run'}",
            f"model.path={tmp_path / 'missing'}",
            "model.tokenizer=null",
        ],
    )
    for _ in range(2):  # the second start would be refused if the first had kept the lock
        with pytest.raises(FileNotFoundError, match="no tokenizer files"):
            Run(config, console=False)


def test_the_cli_refuses_a_held_directory_in_one_line(tmp_path):
    child = holder(tmp_path / "run")
    try:
        start = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "arlarena_jax",
                "eval",
                "--allow-untrained",  # the directory holds no checkpoint yet
                str(ROOT / "configs/sokoban/base_tiny.yaml"),
                f"trainer.run_dir={tmp_path / 'run'}",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"is in use by process {child.pid}" in lines[0], done.stderr
    assert time.monotonic() - start < 120  # refused at once, nothing built


def test_a_waiting_start_takes_the_directory_once_its_holder_lets_go(tmp_path, capsys):
    """What a sweep's second evaluation of one run does (arena/evaluate.py): the first holds
    the directory for a while and releases it; the second waits, then takes it."""
    code = f"""
        import time
        from arlarena_jax.train.run_lock import RunDirLock
        lock = RunDirLock({str(tmp_path / "run")!r})
        print("held", flush=True)
        time.sleep(1.0)
        lock.release()
        time.sleep(600)
        """
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        lock = RunDirLock(tmp_path / "run", wait_s=120, poll_s=0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    err = capsys.readouterr().err
    assert err == (
        f"arlarena: run directory {tmp_path / 'run'} is in use by process {child.pid} on host "
        f"{socket.gethostname()}; waiting up to 120 s for it\n"
    )  # one note; a clean release leaves no owner to take over
    lock.release()


def test_a_wait_that_runs_out_is_the_one_line_naming_the_holder(tmp_path):
    child = holder(tmp_path / "run")
    try:
        with pytest.raises(
            RunDirInUse, match=rf"in use by process {child.pid} .*\(waited 0.2 s\)$"
        ):
            RunDirLock(tmp_path / "run", wait_s=0.2, poll_s=0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)


def test_a_requeued_job_takes_over_the_lock_its_killed_predecessor_left(tmp_path, capsys):
    """SLURM's requeue path: the job's wrapper (arena/jobs.py) and its run were killed (SIGKILL
    after the grace time, or the node lost); the requeued job starts the same run directory. The
    kernel dropped the dead process's lock: the new run takes it at once and says whose it was."""
    child = holder(tmp_path / "run")
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    lock = hold_run_dir(tmp_path / "run", wait_s=0.0)  # no wait: it would raise if still held
    assert lock is not None
    assert f"taking over the lock of process {child.pid}" in capsys.readouterr().err
    lock.release()


def test_eval_run_waits_for_a_held_run_directory(monkeypatch, tmp_path):
    """A sweep's evaluations of one run start together once it is done: ``eval-run`` opens the
    run with a wait, so they take the directory one after another instead of failing."""
    from arlarena_jax.arena import evaluate
    from arlarena_jax.train import run as run_module

    seen = {}

    class Opened(Exception):
        pass

    def fake_run(config, **kwargs):
        seen.update(kwargs)
        raise Opened

    monkeypatch.setattr(evaluate, "evaluation_config", lambda *a: object())
    monkeypatch.setattr(run_module, "Run", fake_run)
    with pytest.raises(Opened):
        evaluate.evaluate_run(tmp_path, "x", [])
    assert seen["lock_wait_s"] == evaluate.LOCK_WAIT_S >= 600
