"""The SLURM executor (arlarena_jax/arena/slurm.py) on a real single-node SLURM cluster.

The option checks run everywhere. The cluster tests start one with ``launch/slurm_local.sh``
(slurm-wlm: slurmctld, slurmd and a private munged, under a fresh temporary directory, on free
ports) and skip where SLURM is not installed. Their jobs are real ``arlarena`` commands: ``demo``
(a few seconds), ``train`` of a missing config (fails at once), and a tiny cloned start plus a
run branching from it, stopped by SIGTERM midway and requeued.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from arlarena_jax.arena.jobs import Job, read_state
from arlarena_jax.arena.progress import Progress
from arlarena_jax.arena.slurm import SlurmExecutor, alive_jobs, sbatch_options, slurm_job_id
from arlarena_jax.errors import ConfigError
from tests.helpers.slurm import ROOT, local_cluster

DEMO = ("demo", "--method", "grpo", "--env", "sokoban")
MISSING = ("train", "/nonexistent.yaml")
TINY = [
    "sft.num_episodes=64",
    "sft.steps=10",
    "env.train_batch_size=2",
    "env.group_size=2",
    "env.max_turns=8",
    "trainer.mini_batch_size=16",
    "trainer.micro_batch_size=8",
    "sampler.max_concurrent_decodes=16",
    "trainer.eval_episodes=16",
    "env.eval_batch_size=16",
    "trainer.export_hf=false",
    "trainer.total_steps=1",
]


# ---- the sweep file's slurm: options (no cluster needed) ----


def test_options_become_sbatch_arguments():
    args = sbatch_options({"partition": "gpu", "gpus_per_node": 1, "exclusive": True}, 30)
    assert args == ["--partition=gpu", "--gpus-per-node=1", "--exclusive", "--time=45"]
    assert sbatch_options({"time": "2:00:00", "qos-name": "low"}, 30) == [
        "--time=2:00:00",
        "--qos-name=low",
    ]
    assert sbatch_options({}) == []


@pytest.mark.parametrize(
    "options, words",
    [
        ({"partition": "a\nb"}, "one-line"),
        ({"mem": 1.5}, "string or an integer"),
        ({"output": "x.out"}, "set by the sweep"),
        ({"Bad Key": 1}, "option name"),
        ({"nodes": 2}, "one process on one node"),
    ],
)
def test_bad_options_are_one_line_errors(options, words):
    with pytest.raises(ConfigError, match=words) as caught:
        sbatch_options(options)
    assert "\n" not in str(caught.value) and "slurm." in str(caught.value)


def test_without_sbatch_a_config_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="needs sbatch on PATH"):
        SlurmExecutor({})


# ---- a real single-node cluster ----


@pytest.fixture(scope="module")
def cluster():
    """SLURM_CONF of a local cluster, started for this module and stopped after it. The jobs'
    environment comes from the submitter's (sbatch --export=ALL), so their `arlarena` processes
    share the suite's compilation cache ($ARLARENA_XLA_CACHE)."""
    with local_cluster() as conf:
        yield conf


def _run(
    executor: SlurmExecutor, jobs: list[Job], lines: list[str] | None = None, deadline: float = 240
) -> int:
    """``executor.run``; past ``deadline`` seconds the jobs are cancelled, so a hung cluster fails
    the test instead of hanging it."""
    emit = lines.append if lines is not None else lambda _line: None
    dirs = {job.name: job.run_dir for job in jobs}
    timer = threading.Timer(deadline, _cancel, args=(jobs,))
    timer.start()
    try:
        return executor.run(jobs, Progress(jobs, len(jobs), emit=emit), dirs)
    finally:
        timer.cancel()


def _cancel(jobs: list[Job]) -> None:
    ids = [str(i) for i in (slurm_job_id(job.run_dir) for job in jobs) if i is not None]
    subprocess.run(["scancel", *ids], timeout=30, check=False)


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_needs_order_failures_and_no_double_submission(cluster, tmp_path):
    jobs = [
        Job("start/ok", DEMO, tmp_path / "start-ok"),
        Job("run/ok", DEMO, tmp_path / "run-ok", ("start/ok",)),
        Job("start/bad", MISSING, tmp_path / "start-bad"),
        Job("run/bad", DEMO, tmp_path / "run-bad", ("start/bad",)),
    ]
    assert _run(SlurmExecutor({"cpus_per_task": 1}, wait=False), jobs) == 0
    ids = {job.name: slurm_job_id(job.run_dir) for job in jobs}
    assert all(isinstance(i, int) for i in ids.values()), ids
    assert read_state(jobs[1].run_dir)["state"] == "queued"
    # run again while they are queued: nothing is submitted twice, and this call waits for them
    lines: list[str] = []
    assert _run(SlurmExecutor({}, poll_s=0.5), jobs, lines) == 0
    assert {job.name: slurm_job_id(job.run_dir) for job in jobs} == ids
    states = {job.name: read_state(job.run_dir) for job in jobs}
    assert [states[j.name]["state"] for j in jobs] == ["done", "done", "failed", "failed"]
    assert states["run/ok"]["started"] >= states["start/ok"]["ended"]
    assert "cannot read" in states["start/bad"]["error"]
    assert states["run/bad"]["error"].startswith("its shared start start/bad failed")
    assert not (jobs[3].run_dir / "sweep.log").exists()  # it never ran
    assert (jobs[0].run_dir / f"slurm-{ids['start/ok']}.out").is_file()
    assert lines[-1].startswith("sweep: 2 done, 0 running, 2 failed, 0 queued of 4")
    assert alive_jobs(ids.values()) == set()


def test_a_job_gone_without_a_state_is_failed(cluster, tmp_path):
    job = Job("run/late", DEMO, tmp_path / "late")
    executor = SlurmExecutor({"begin": "now+600"}, poll_s=0.3)  # pending until cancelled
    cancel = threading.Thread(target=_cancel_when_queued, args=(job.run_dir,), daemon=True)
    cancel.start()
    assert _run(executor, [job]) == 0
    cancel.join(timeout=30)
    job_id = slurm_job_id(job.run_dir)
    record = read_state(job.run_dir)
    assert record["state"] == "failed" and record["slurm_job_id"] == job_id
    assert record["error"] == (
        f"slurm job {job_id} ended without a state (see {job.run_dir}/slurm-{job_id}.out)"
    )


def _cancel_when_queued(run_dir: Path) -> None:
    _wait_for(lambda: slurm_job_id(run_dir) is not None, 30, "the submission")
    subprocess.run(["scancel", str(slurm_job_id(run_dir))], check=True, timeout=30)


def test_tiny_start_stopped_requeued_then_its_run(cluster, tmp_path):
    """A cloned start gets SIGTERM midway (as 120 s before its time limit): it saves, exits 75 and
    is requeued under the same id; its run waits (afterok) and branches from the finished start."""
    base = str(ROOT / "configs" / "sokoban" / "base_tiny.yaml")
    start_dir, run_dir = tmp_path / "start", tmp_path / "run"
    start = Job("start/tiny", ("sft", base, *TINY, f"trainer.run_dir={start_dir}"), start_dir)
    run = Job(
        "run/tiny",
        ("train", base, *TINY, f"trainer.run_dir={run_dir}", f"sft.init_from={start_dir}"),
        run_dir,
        ("start/tiny",),
    )
    jobs = [start, run]
    assert _run(SlurmExecutor({}, wait=False), jobs) == 0
    start_id = slurm_job_id(start_dir)
    log = start_dir / "sweep.log"
    _wait_for(lambda: log.is_file() and "cloning:" in log.read_text(), 120, "cloning to start")
    subprocess.run(["scancel", "--batch", "--signal=TERM", str(start_id)], check=True, timeout=30)
    _wait_for(lambda: read_state(start_dir)["state"] == "stopped", 90, "the start to stop")
    assert _run(SlurmExecutor({}, wait=False), jobs) == 0  # requeued: not submitted again
    assert slurm_job_id(start_dir) == start_id
    assert _run(SlurmExecutor({}, poll_s=0.5), jobs) == 0
    first, second = read_state(start_dir), read_state(run_dir)
    assert (first["state"], second["state"]) == ("done", "done"), (first, second)
    assert second["started"] >= first["ended"]
    out = (start_dir / f"slurm-{start_id}.out").read_text()
    assert f"requeueing job {start_id}" in out
    assert log.read_text().count("--- ") == 2  # two attempts, one log
