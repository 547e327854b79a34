"""``arlarena sweep`` end to end on tiny runs with the local executor: cloning runs once for
every method of a seed, a sweep stopped in the middle resumes and skips its finished runs, and a
failing job is marked failed while the sweep goes on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from arlarena_jax.arena import jobs
from arlarena_jax.arena.local import LocalExecutor, split_cores
from arlarena_jax.arena.progress import Progress
from tests.helpers.sweeps import TINY, child_env

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "configs" / "sokoban" / "base_tiny.yaml"
METHODS = ("grpo", "gspo", "sapo")


def sweep(path: Path, *extra: str, **kwargs) -> subprocess.Popen:
    command = [sys.executable, "-m", "arlarena_jax", "sweep", str(path), *extra]
    return subprocess.Popen(command, env=child_env(), cwd=ROOT, text=True, **kwargs)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


def headers(run_dir: Path) -> int:
    """How many times the job was started (one header line per start in its log)."""
    return (run_dir / jobs.LOG_FILE).read_text().count("\n--- ") + 1


def step0_success(run_dir: Path) -> float:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return next(e.value for e in events.Scalars("test/success_rate") if e.step == 0)


def test_a_sweep_clones_once_is_stopped_and_resumes(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(
        f"name: tiny\nbase: {BASE}\nout: {tmp_path / 'runs'}\nstarts: {tmp_path / 'starts'}\n"
        f"methods: [{', '.join(METHODS)}]\nseeds: [0]\n" + textwrap.dedent(TINY)
    )
    runs = {m: tmp_path / "runs" / "tiny" / "sokoban" / f"{m}_seed0" for m in METHODS}
    first = sweep(path, "--workers", "1", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: jobs.read_state(runs["grpo"])["state"] == "done", 400, "the first run")
        first.send_signal(signal.SIGTERM)  # the sweep passes it on; the running run saves
        out, _ = first.communicate(timeout=180)
    finally:
        first.kill()
    assert first.returncode == 75, out
    assert "stopped; run the same command to resume" in out
    states = {m: jobs.read_state(d)["state"] for m, d in runs.items()}
    assert states["grpo"] == "done" and states["sapo"] == "new", states
    assert states["gspo"] in ("stopped", "new"), states  # stopped if it had started

    again = sweep(path, "--workers", "1", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = again.communicate(timeout=600)
    assert again.returncode == 0, out
    assert "sweep: 3 of 3 runs done, 0 failed" in out
    (start,) = (tmp_path / "starts" / "sokoban").iterdir()
    assert headers(start) == 1 and headers(runs["grpo"]) == 1  # cloned once; done: not rerun
    assert (start / jobs.LOG_FILE).read_text().count("cloning: ") == 1
    for run_dir in runs.values():
        log = (run_dir / jobs.LOG_FILE).read_text()
        assert "starting from the cloned policy" in log and "cloning: " not in log
        assert step0_success(run_dir) == step0_success(start)  # the start's evaluation
    exported = subprocess.run(
        [
            sys.executable,
            "-m",
            "arlarena_jax",
            "export",
            str(runs["gspo"]),
            "--out",
            str(tmp_path / "hf"),
        ],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert exported.returncode == 0, exported.stderr
    assert "exported checkpoint step 1" in exported.stdout
    assert (tmp_path / "hf" / "config.json").is_file()
    assert (tmp_path / "hf" / "model.safetensors").stat().st_size > 0
    listing = sweep(path, "--dry-run", stdout=subprocess.PIPE)
    table, _ = listing.communicate(timeout=120)
    assert table.count("(done)") == 3 and table.count("  done") == 3


def test_a_failing_job_is_marked_failed_and_the_pool_goes_on(tmp_path):
    """A job that fails (a missing config: exit 2) is recorded with its error line; the job
    needing it is marked failed without running; an independent job still runs to done."""
    bad = jobs.Job("start/e/bad", ("train", str(tmp_path / "missing.yaml")), tmp_path / "bad")
    child = jobs.Job("e/child", ("demo", "--env", "sokoban"), tmp_path / "child", (bad.name,))
    good = jobs.Job("e/good", ("demo", "--env", "sokoban", "--method", "grpo"), tmp_path / "ok")
    job_list = [bad, child, good]
    lines: list[str] = []
    executor = LocalExecutor(2, poll_s=0.2)
    status = executor.run(
        job_list,
        Progress(job_list, 2, emit=lines.append),
        {j.name: j.run_dir for j in job_list},
    )
    assert status == 0
    assert jobs.read_state(bad.run_dir)["state"] == "failed"
    assert "missing.yaml" in jobs.read_state(bad.run_dir)["error"]
    record = jobs.read_state(child.run_dir)
    assert record["state"] == "failed" and "shared start start/e/bad failed" in record["error"]
    assert not (child.run_dir / jobs.LOG_FILE).exists()  # never started
    assert jobs.read_state(good.run_dir)["state"] == "done"
    assert "loss" in (good.run_dir / jobs.LOG_FILE).read_text()
    assert lines[-1].startswith("sweep: 1 done, 0 running, 2 failed, 0 queued of 3")


def test_cores_are_split_between_workers():
    assert split_cores([0, 1, 2, 3, 4], 2) == [[0, 1], [2, 3]]
    assert split_cores([0, 1], 2) == [[0], [1]]
    assert split_cores([0], 3) == [[0], [0], [0]]


def test_a_start_running_in_another_sweep_is_waited_for(tmp_path):
    """Two sweeps share a start: the second finds it running (another process on this host)
    and waits for it to be done before starting its run."""
    start = jobs.Job("start/e/s", ("demo",), tmp_path / "start")
    run = jobs.Job("e/r", ("demo", "--env", "sokoban"), tmp_path / "run", (start.name,))
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        jobs.write_state(start.run_dir, state="running", pid=holder.pid, host=os.uname().nodename)
        executor = LocalExecutor(1, poll_s=0.2)
        dirs = {start.name: start.run_dir, run.name: run.run_dir}

        def finish_start():
            time.sleep(2)
            jobs.write_state(start.run_dir, state="done", started=0.0, ended=1.0)

        threading.Thread(target=finish_start, daemon=True).start()
        status = executor.run([run], Progress([start, run], 1, emit=lambda _: None), dirs)
    finally:
        holder.kill()
    assert status == 0
    record = jobs.read_state(run.run_dir)
    assert record["state"] == "done" and record["started"] > time.time() - 120


def test_a_stop_before_the_run_could_save_is_recorded_as_stopped(tmp_path):
    """SIGTERM reaches a run while it is still starting (before its own handler is in place):
    it dies of the signal, and the wrapper records the job as stopped (resumable), not failed."""
    command = ["train", str(BASE), f"trainer.run_dir={tmp_path / 'r'}"]
    wrapper = subprocess.Popen(
        [sys.executable, "-m", "arlarena_jax.arena.jobs", str(tmp_path / "r"), "--", *command],
        env=child_env(),
    )
    wait_for(lambda: jobs.read_state(tmp_path / "r")["state"] == "running", 60, "the start")
    wrapper.send_signal(signal.SIGTERM)
    assert wrapper.wait(timeout=120) != 0
    record = jobs.read_state(tmp_path / "r")
    assert record["state"] == "stopped", record
