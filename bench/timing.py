"""Shared helpers for the benchmarks in this folder: timing a call, naming the machine, a free
port for a coordinator."""

from __future__ import annotations

import os
import platform
import socket
import statistics
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
