"""Where the suite's time goes: a pytest plugin, opt-in with ``-p tests.helpers.suite_profile``.

For each test (setup, call and teardown together) it records the wall seconds, this process's CPU
seconds, its child processes' CPU seconds, and the seconds JAX spent on the way to a program:
tracing to a jaxpr, lowering to StableHLO, and the XLA compile (or the persistent cache's load,
which JAX times as the same event), with the counts of compiles and cache hits. Each worker
appends JSON lines to ``$ARLARENA_SUITE_PROFILE`` (default ``suite_profile.jsonl``; under
pytest-xdist the worker's name is added before the suffix).

``python -m tests.helpers.suite_profile FILE [FILE ...]`` prints the slowest tests and the split.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

PROFILE_ENV = "ARLARENA_SUITE_PROFILE"
# JAX's own event names (jax/_src/dispatch.py and compiler.py).
DURATIONS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
    "/jax/core/compile/backend_compile_duration": "compile_s",
}
COUNTS = {
    "/jax/compilation_cache/cache_hits": "cache_hits",
    "/jax/compilation_cache/cache_misses": "cache_misses",
}

_totals: Counter = Counter()


def _on_duration(event: str, duration_secs: float, **_: object) -> None:
    key = DURATIONS.get(event)
    if key:
        _totals[key] += duration_secs
        if key == "compile_s":
            _totals["compiles"] += 1


def _on_event(event: str, **_: object) -> None:
    key = COUNTS.get(event)
    if key:
        _totals[key] += 1


def _output_path() -> Path:
    path = Path(os.environ.get(PROFILE_ENV, "suite_profile.jsonl"))
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return path.with_name(f"{path.stem}.{worker}{path.suffix}") if worker else path


def _cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def pytest_sessionstart(session: pytest.Session) -> None:
    import jax.monitoring

    jax.monitoring.register_event_duration_secs_listener(_on_duration)
    jax.monitoring.register_event_listener(_on_event)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    before = Counter(_totals)
    wall = time.perf_counter()
    own = _cpu_seconds(resource.RUSAGE_SELF)
    children = _cpu_seconds(resource.RUSAGE_CHILDREN)
    yield
    record = {
        "test": item.nodeid,
        "wall_s": time.perf_counter() - wall,
        "cpu_s": _cpu_seconds(resource.RUSAGE_SELF) - own,
        "children_cpu_s": _cpu_seconds(resource.RUSAGE_CHILDREN) - children,
    }
    record.update({k: v - before.get(k, 0) for k, v in _totals.items()})
    with _output_path().open("a") as out:
        out.write(json.dumps(record) + "\n")


def summarize(records: list[dict], top: int = 30) -> str:
    """The slowest ``top`` tests and the suite's totals, as Markdown."""
    keys = ["wall_s", "compile_s", "trace_s", "lower_s", "children_cpu_s", "compiles"]
    lines = ["| test | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for r in sorted(records, key=lambda r: -r["wall_s"])[:top]:
        lines.append(f"| {r['test']} | " + " | ".join(f"{r.get(k, 0):.1f}" for k in keys) + " |")
    total = Counter()
    for r in records:
        total.update({k: v for k, v in r.items() if isinstance(v, int | float)})
    lines.append("")
    lines.append(f"{len(records)} tests; " + ", ".join(f"{k} {total[k]:.1f}" for k in keys))
    for k in ("cache_hits", "cache_misses"):
        lines.append(f"{k}: {total[k]:.0f}")
    return "\n".join(lines)


if __name__ == "__main__":
    rows = [json.loads(line) for f in sys.argv[1:] for line in Path(f).read_text().splitlines()]
    print(summarize(rows))
