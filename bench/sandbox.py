"""Benchmark: the math sandbox's cost of isolation (envs/math/sandbox.py; issue 20).

Baseline (same run, same machine): what the original does, a plain ``subprocess`` call of the
same Python on the snippet, without namespaces, mounts, a uid change or limits. Measured for a
trivial snippet (``print(1 + 1)``) and a sympy snippet (``sympy.factor``):

* the median and p99 latency of one call, calls one after another;
* executions per second with ``--workers`` calls in flight (default: the usable cores).

    python bench/sandbox.py [--calls 40] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from envs.math.sandbox import SandboxConfig, resolve_isolation, run_python

SNIPPETS = {
    "trivial": "print(1 + 1)",
    "sympy": "import sympy\nx = sympy.Symbol('x')\nprint(sympy.factor(x**4 - 1))",
}


def plain(code: str) -> str:
    """The baseline: ``python -I -`` in a subprocess, the code on stdin, a wall-clock timeout."""
    done = subprocess.run(
        [sys.executable, "-I", "-"], input=code, capture_output=True, text=True, timeout=30
    )
    return done.stdout


def sandboxed(code: str) -> str:
    return run_python(code, SandboxConfig(timeout_s=30.0)).stdout


def latencies(call, code: str, calls: int) -> np.ndarray:
    """Seconds per call, one call after another (after one warm-up call)."""
    call(code)
    out = []
    for _ in range(calls):
        start = time.perf_counter()
        call(code)
        out.append(time.perf_counter() - start)
    return np.asarray(out)


def throughput(call, code: str, calls: int, workers: int) -> float:
    """Executions per second with ``workers`` calls in flight."""
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        outputs = list(pool.map(lambda _: call(code), range(calls)))
    seconds = time.perf_counter() - start
    assert all(outputs), "a call returned no output"
    return calls / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    isolation = resolve_isolation(SandboxConfig())
    machine = platform.processor() or platform.machine()
    print(f"{machine}, {os.cpu_count()} cores, isolation {isolation}")
    header = "| snippet | measure | plain subprocess | sandbox | sandbox / plain |"
    print(header + "\n" + "|---" * 5 + "|")
    for name, code in SNIPPETS.items():
        assert plain(code) == sandboxed(code), "the sandbox printed something else"
        base, ours = latencies(plain, code, args.calls), latencies(sandboxed, code, args.calls)
        for label, q in (("median latency", 50), ("p99 latency", 99)):
            b, o = np.percentile(base, q) * 1e3, np.percentile(ours, q) * 1e3
            print(f"| {name} | {label} | {b:.1f} ms | {o:.1f} ms | {o / b:.2f}x |")
        b = throughput(plain, code, args.calls, args.workers)
        o = throughput(sandboxed, code, args.calls, args.workers)
        print(f"| {name} | runs/s, {args.workers} in flight | {b:.1f} | {o:.1f} | {o / b:.2f}x |")


if __name__ == "__main__":
    main()
