"""Several ``jax.distributed`` processes on localhost, as a pod runs them: one command started
``n`` times with ``ARLARENA_COORDINATOR``/``ARLARENA_NUM_PROCESSES``/``ARLARENA_PROCESS_ID`` set
and ``devices`` simulated CPU devices each; their exit codes and outputs, or a test failure when
they do not finish in ``timeout`` seconds (every process is killed then: a hang fails, it never
blocks the suite)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def process_env(
    n: int, devices: int | None, port: int, extra: dict[str, str] | None = None
) -> dict:
    """The environment of every process but ARLARENA_PROCESS_ID (``devices`` None: XLA_FLAGS
    unset, the program picks its device count)."""
    env = dict(os.environ)
    # the suite's other XLA flags (conftest: -O0) stay; the device count is the processes'
    flags = [f for f in env.pop("XLA_FLAGS", "").split() if "device_count" not in f]
    if devices is not None:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env |= {"ARLARENA_COORDINATOR": f"localhost:{port}", "ARLARENA_NUM_PROCESSES": str(n)}
    return env | (extra or {})


def start(
    argv: Sequence[str],
    n: int,
    *,
    devices: int | None = 2,
    cwd: Path = ROOT,
    extra=None,
    script=None,
    port: int | None = None,
    ids: Sequence[int] | None = None,
) -> list[subprocess.Popen]:
    """``python -m arlarena_jax *argv`` (or ``python script *argv``) as ``n`` processes (outputs
    captured, merged); ``ids``: only these process ids (the others started elsewhere, on
    ``port``)."""
    env = process_env(n, devices, free_port() if port is None else port, extra)
    program = ["-m", "arlarena_jax"] if script is None else [str(script)]
    return [
        subprocess.Popen(
            [sys.executable, *program, *argv],
            cwd=cwd,
            env=env | {"ARLARENA_PROCESS_ID": str(i)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in (range(n) if ids is None else ids)
    ]


def finish(procs: list[subprocess.Popen], timeout: float) -> list[tuple[int, str]]:
    """Each process's (exit code, output); all are killed and the test fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            outs = [q.communicate()[0] for q in procs]
            import pytest

            pytest.fail(f"{len(procs)} processes did not finish in {timeout:.0f} s:\n" + tail(outs))
        results.append((p.returncode, out))
    return results


def run(argv: Sequence[str], n: int, *, timeout: float = 600.0, **kwargs) -> list[tuple[int, str]]:
    """:func:`start` then :func:`finish`."""
    return finish(start(argv, n, **kwargs), timeout)


def run_workers(worker: Path, *args: str, timeout: float = 240.0) -> list[str]:
    """``python WORKER ARGS…`` as two processes (the worker picks its device count): both
    outputs once both exited 0; the test fails when one did not, and skips when this JAX has no
    multi-process CPU collectives."""
    results = run(args, 2, script=worker, devices=None, timeout=timeout)
    logs = tail([out for _, out in results])
    if any(code for code, _ in results):
        if re.search(r"collectives? (is|are) not (yet )?(supported|implemented)", logs, re.I):
            import pytest

            pytest.skip("this JAX has no multi-process CPU collectives")
        import pytest

        pytest.fail(f"a worker failed:\n{logs}")
    return [out for _, out in results]


def signal_when(
    procs: list[subprocess.Popen], which: int, sig: signal.Signals, ready: Callable[[], bool]
) -> None:
    """Send ``sig`` to process ``which`` once ``ready()`` is true (polled every 0.2 s)."""
    while not ready():
        if any(p.poll() is not None for p in procs):
            return
        time.sleep(0.2)
    procs[which].send_signal(sig)


def tail(outputs: Sequence[str], chars: int = 3000) -> str:
    return "\n".join(f"--- process {i}\n{o[-chars:]}" for i, o in enumerate(outputs))
