"""A private single-node SLURM cluster for a test module (``launch/slurm_local.sh``): slurmctld,
slurmd and munged under a fresh temporary directory, on free ports, stopped (its jobs cancelled)
when the module ends. Where slurm-wlm is not installed the module's cluster tests skip, naming
what is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "launch" / "slurm_local.sh"
TOOLS = ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "munged")


@contextmanager
def local_cluster() -> Iterator[Path]:
    """Start a cluster and yield its slurm.conf with ``$SLURM_CONF`` set to it (so the client
    tools and the jobs, which inherit the submitter's environment, use it); skip the test when
    SLURM is missing."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"SLURM not installed (apt-get install slurm-wlm): no {', '.join(missing)}")
    state = Path(tempfile.mkdtemp(prefix="arlarena-slurm-", dir="/tmp"))  # short socket paths
    env = dict(os.environ, SLURM_LOCAL_TIMEOUT="60")
    try:
        started = subprocess.run(
            [str(SCRIPT), "start", str(state)], env=env, capture_output=True, text=True, timeout=90
        )
        assert started.returncode == 0, f"{started.stdout}{started.stderr}"
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SLURM_CONF", str(state / "slurm.conf"))
            yield state / "slurm.conf"
    finally:
        subprocess.run([str(SCRIPT), "stop", str(state)], timeout=60, check=False)
        shutil.rmtree(state, ignore_errors=True)
