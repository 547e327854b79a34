"""Shared helpers for the benchmarks in this folder: timing a call, naming the machine, a free
port for a coordinator."""

from __future__ import annotations

import os
import platform
import socket
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def best_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Fastest wall time of ``fn()`` over ``repeats`` calls, after ``warmup`` untimed calls (for
    machine ceilings such as memory bandwidth, where slower runs are interference)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def machine() -> str:
    """The CPU model, its core count and the load average now."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    names = [ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")]
    model = names[0] if names else platform.processor() or platform.machine()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{model}, {os.cpu_count()} cores, load average {load}"


def free_port() -> int:
    """A free TCP port on localhost (for a ``jax.distributed`` coordinator)."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_processes(argv: list[str], envs: list[dict], logs: list[Path], cwd: Path, timeout: float):
    """``argv`` as one process per environment in ``envs``, each writing to its log; the wall
    seconds from the first start to the last exit. A failure or ``timeout`` ends the bench with
    every log's tail (the processes still running are killed)."""
    begin, procs = time.perf_counter(), []
    for env, log in zip(envs, logs, strict=True):
        with log.open("w") as out:
            procs.append(subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=out))
    try:
        codes = [p.wait(timeout=max(1.0, begin + timeout - time.perf_counter())) for p in procs]
    except subprocess.TimeoutExpired:
        codes = [None] * len(procs)
    for p in procs:
        if p.poll() is None:
            p.kill()
    if any(code != 0 for code in codes):  # None: timed out
        tails = "\n".join(f"--- {log}\n{log.read_text()[-3000:]}" for log in logs)
        raise SystemExit(f"{len(procs)} processes: exit codes {codes}\n{tails}")
    return time.perf_counter() - begin
