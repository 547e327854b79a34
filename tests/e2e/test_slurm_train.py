"""``launch/slurm_gpu.sbatch`` as a two-task job on a real single-node SLURM cluster (issue 65).

The script itself is submitted (its ``srun --kill-on-bad-exit=1 python3 -m arlarena_jax train``
line, its signal and requeue handling), to a private cluster started by
``launch/slurm_local.sh`` (``tests/helpers/slurm.py``; skipped where slurm-wlm is missing). The
command line overrides the script's GPU requests for one CPU node: ``--ntasks=2
--ntasks-per-node=2 --gpus-per-node=0 --cpus-per-task=1``. Each task simulates 2 CPU devices
(``XLA_FLAGS``), so the main job's Sokoban config shrunk as in ``test_processes_train.py``
(mesh data=2 × fsdp=2) spans both tasks. ``jax.distributed.initialize`` finds the coordinator
from the SLURM variables (the first node of the step, ``localhost``); its port would come from
the job id (``61440 + id % 4096``), and every fresh local cluster numbers its jobs from 1, so the
test names a free port in ``JAX_COORDINATOR_PORT`` (JAX's override) and concurrent runs cannot
collide. ``SLURM_LABELIO=1`` makes the script's ``srun`` prefix each line with its task's rank.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arlarena_jax.train.metrics import read_scalars
from tests.helpers.process_runs import CONFIG, SHRUNK
from tests.helpers.processes import free_port
from tests.helpers.slurm import ROOT, local_cluster

SBATCH = ROOT / "launch" / "slurm_gpu.sbatch"
ONE_CPU_NODE = [
    "--nodes=1",
    "--ntasks=2",
    "--ntasks-per-node=2",
    "--gpus-per-node=0",
    "--cpus-per-task=1",
    "--time=30",
]
OVERRIDES = [*SHRUNK, "sft.steps=10"]  # trainer.total_steps=2 already
DEADLINE_S = 1200.0  # measured about 4.5 min on 2 loaded cores
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"}
NOT_INHERITED = ("ARLARENA_COORDINATOR", "ARLARENA_NUM_PROCESSES", "ARLARENA_PROCESS_ID")


@pytest.fixture(scope="module")
def cluster():
    with local_cluster() as conf:
        yield conf


def job_env() -> dict[str, str]:
    """The submitter's environment, which the job inherits (sbatch --export=ALL): this checkout,
    this interpreter first on PATH (the script runs ``python3``), 2 CPU devices per task, a free
    coordinator port, rank-labelled output; no explicit coordinator (the SLURM path is tested)."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
    env["XLA_FLAGS"] = " ".join([*flags, "--xla_force_host_platform_device_count=2"])
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    return env | {"JAX_COORDINATOR_PORT": str(free_port()), "SLURM_LABELIO": "1"}


def submit(run_dir: Path, output: Path) -> int:
    """Submit the script with the shrunk config; its job id."""
    argv = ["sbatch", "--parsable", *ONE_CPU_NODE, f"--output={output}", str(SBATCH), CONFIG]
    argv += [*OVERRIDES, f"trainer.run_dir={run_dir}"]
    done = subprocess.run(argv, cwd=ROOT, env=job_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return int(done.stdout.strip().split(";")[0])


def job_record(job_id: int) -> tuple[str, str]:
    """(JobState, ExitCode) of a job SLURM still knows (``scontrol show job``)."""
    shown = subprocess.run(
        ["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True, timeout=30
    ).stdout
    state = re.search(r"\bJobState=(\S+)", shown)
    code = re.search(r"\bExitCode=(\S+)", shown)
    return (state.group(1) if state else "GONE", code.group(1) if code else "?")


def wait_for_end(job_id: int, output: Path) -> tuple[str, str]:
    """The job's final (state, exit code); past DEADLINE_S it is cancelled and the test fails
    with the end of its output."""
    deadline = time.monotonic() + DEADLINE_S
    while (record := job_record(job_id))[0] not in ENDED | {"GONE"}:
        if time.monotonic() > deadline:
            subprocess.run(["scancel", str(job_id)], timeout=30, check=False)
            log = output.read_text()[-4000:] if output.is_file() else "(no output)"
            pytest.fail(f"job {job_id} not done after {DEADLINE_S:.0f} s ({record}):\n{log}")
        time.sleep(2)
    return record


@pytest.fixture(scope="module")
def two_task_job(cluster, tmp_path_factory):
    """The finished job: (run directory, its output, (state, exit code))."""
    root = tmp_path_factory.mktemp("slurm_train")
    run_dir, output = root / "run", root / "slurm.out"
    job_id = submit(run_dir, output)
    record = wait_for_end(job_id, output)
    return run_dir, output.read_text(), record


def test_the_job_completes_and_the_run_is_complete(two_task_job):
    run_dir, out, record = two_task_job
    assert record == ("COMPLETED", "0:0"), out[-4000:]
    final = json.loads((run_dir / "final.json").read_text())
    assert final["complete"] and final["step"] == 2
    assert (run_dir / "hf" / "model.safetensors").is_file()


def test_two_tasks_ran_and_task_zero_alone_reported(two_task_job):
    """Both tasks joined one run (each connected to the other for the collectives); task 0
    alone printed the two RL steps and the summary."""
    _, out, _ = two_task_job
    for rank in (0, 1):
        assert re.search(rf"^{rank}: .*Rank {rank} is connected", out, re.M), out[-4000:]
    assert len(re.findall(r"^0: \[[12]/2\]", out, re.M)) == 2, out[-4000:]
    assert re.search(r"^0: \| RL steps +\| 2 \|", out, re.M), out[-4000:]
    assert not re.search(r"^1: (\[[12]/2\]|\| RL steps)", out, re.M), out[-4000:]
    assert not re.search(r"^[2-9]: ", out, re.M)  # two tasks, no more


def test_process_zero_alone_wrote_the_logs_and_the_held_out_files(two_task_job):
    run_dir, _, _ = two_task_job
    events = list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    scalars = read_scalars(run_dir / "tensorboard")
    assert [step for step, _ in scalars["test/success_rate"]] == [0, 1, 2]  # before RL, 2 steps
    assert [step for step, _ in scalars["episode/success_rate"]] == [1, 2]
    held_out = sorted((run_dir / "held_out" / "test").glob("step_*.jsonl"))
    assert [p.name for p in held_out] == [f"step_00000{i}.jsonl" for i in range(3)]
    for path in held_out:  # every evaluation episode, both tasks' blocks gathered
        assert len(path.read_text().splitlines()) == 6
