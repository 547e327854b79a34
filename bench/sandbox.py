"""Benchmark: the math sandbox's cost of isolation (envs/math/sandbox.py; issue 20).

Baseline (same run, same machine): what the original does, a plain ``subprocess`` call of the
same Python on the snippet, without namespaces, mounts, a uid change or limits. Measured for a
trivial snippet (``print(1 + 1)``) and a sympy snippet (``sympy.factor``):

* the median and p99 latency of one call, calls one after another;
* executions per second with ``--workers`` calls in flight (default: the usable cores).

Each backend given with ``--isolation`` gets a column and its ratio to the baseline (default:
every backend the machine has among ``bwrap``, and ``unshare`` as root or ``userns`` otherwise).

    python bench/sandbox.py [--calls 40] [--workers N] [--isolation bwrap --isolation unshare]
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

from envs.math.sandbox import SandboxConfig, SandboxUnavailable, resolve_isolation, run_python

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


def sandboxed(isolation: str):
    """A call of the sandbox under ``isolation``."""
    config = SandboxConfig(timeout_s=30.0, isolation=isolation)
    return lambda code: run_python(code, config).stdout


def backends(wanted: list[str] | None) -> list[str]:
    """The backends to time: ``wanted``, or those the machine has (see module doc)."""
    if wanted:
        return [resolve_isolation(SandboxConfig(isolation=w)) for w in wanted]
    found = []
    for name in ("bwrap", "unshare" if os.geteuid() == 0 else "userns"):
        try:
            found.append(resolve_isolation(SandboxConfig(isolation=name)))
        except SandboxUnavailable as exc:
            print(f"skipping {name}: {exc}")
    return found


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


def row(name: str, label: str, base: float, ours: list[float], unit: str) -> str:
    cells = " | ".join(f"{o:.1f}{unit} | {o / base:.2f}x" for o in ours)
    return f"| {name} | {label} | {base:.1f}{unit} | {cells} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--isolation", action="append", choices=("bwrap", "unshare", "userns"))
    args = parser.parse_args()
    names = backends(args.isolation)
    machine = platform.processor() or platform.machine()
    print(f"{machine}, {os.cpu_count()} cores, isolation {', '.join(names)}")
    columns = "".join(f" {n} | {n} / plain |" for n in names)
    print(f"| snippet | measure | plain subprocess |{columns}")
    print("|---" * (3 + 2 * len(names)) + "|")
    calls = [sandboxed(n) for n in names]
    for name, code in SNIPPETS.items():
        assert all(plain(code) == call(code) for call in calls), "the sandbox printed otherwise"
        base = latencies(plain, code, args.calls)
        ours = [latencies(call, code, args.calls) for call in calls]
        for label, q in (("median latency", 50), ("p99 latency", 99)):
            b = np.percentile(base, q) * 1e3
            print(row(name, label, b, [np.percentile(o, q) * 1e3 for o in ours], " ms"))
        b = throughput(plain, code, args.calls, args.workers)
        o = [throughput(call, code, args.calls, args.workers) for call in calls]
        print(row(name, f"runs/s, {args.workers} in flight", b, o, ""))


if __name__ == "__main__":
    main()
