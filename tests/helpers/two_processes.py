"""Two ``jax.distributed`` worker processes on localhost (CPU; a free port as the coordinator).

:func:`run_workers` starts ``python WORKER ARGS…`` twice with ``ARLARENA_COORDINATOR``,
``ARLARENA_NUM_PROCESSES`` = 2 and ``ARLARENA_PROCESS_ID`` = 0 and 1 (``XLA_FLAGS`` unset: the
worker picks its own device count), waits at most ``timeout`` seconds (then kills both and fails
the test: a deadlock fails instead of hanging) and skips the test when this JAX has no
multi-process CPU collectives.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_workers(worker: Path, *args: str, timeout: float = 240.0) -> list[str]:
    """Both workers' output, once both exited 0 (see module doc)."""
    port = _free_port()
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env |= {"ARLARENA_COORDINATOR": f"localhost:{port}", "ARLARENA_NUM_PROCESSES": "2"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), *args],
            env=env | {"ARLARENA_PROCESS_ID": str(i)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    results = []
    for p in procs:
        try:
            stdout, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
                q.communicate()
            pytest.fail(f"the two {worker.name} processes did not finish in {timeout:.0f} s")
        results.append(subprocess.CompletedProcess(p.args, p.returncode, stdout))
    logs = "\n".join(r.stdout[-3000:] for r in results)
    if any(r.returncode for r in results):
        if re.search(r"collectives? (is|are) not (yet )?(supported|implemented)", logs, re.I):
            pytest.skip("this JAX has no multi-process CPU collectives")
        pytest.fail(f"a worker failed:\n{logs}")
    return [r.stdout for r in results]
