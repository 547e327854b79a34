"""How many sandbox calls fit this host's memory (issue 37, S3).

Each call may use ``env.math.sandbox_memory_mb`` in all (``envs.math.cgroups``, else rlimits
that keep its processes' sum within it), and ``env.math.executors`` calls run at once, so
``executors x sandbox_memory_mb`` is what model code may take together. At start-up that total
is checked against the host's memory (``MemTotal``, or this process's cgroup limit where lower);
``executors: 0`` picks the usable cores, at most as many calls as fit half of it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

CGROUP_LIMITS = (  # this process's memory limit: v2, then v1 (the paths of /proc/self/cgroup)
    ("", "memory.max"),
    ("memory", "memory.limit_in_bytes"),
)


def _cgroup_limit_mb(proc_cgroup: str, root: Path) -> int | None:
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        for name, key in CGROUP_LIMITS:
            if name in (controllers.split(",") if controllers else [""]):
                base = root / name if name else root
                with contextlib.suppress(OSError, ValueError):
                    text = (base / path.lstrip("/") / key).read_text().strip()
                    if text != "max" and int(text) < 2**60:
                        return int(text) // 2**20
    return None


def host_memory_mb(root: Path = Path("/sys/fs/cgroup")) -> int:
    """The memory this process may use: ``MemTotal``, or its cgroup's limit where lower."""
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    total = int(meminfo["MemTotal"].split()[0]) // 1024
    with contextlib.suppress(OSError, ValueError):
        limit = _cgroup_limit_mb(Path("/proc/self/cgroup").read_text(), root)
        if limit is not None:
            return min(total, limit)
    return total


def default_executors(memory_mb: int, cores: int, host_mb: int) -> int:
    """``executors: 0``: the usable cores, at most as many calls as fit half the memory."""
    return max(1, min(cores, host_mb // 2 // memory_mb))


def over_budget(memory_mb: int, executors: int, host_mb: int) -> tuple[str, str] | None:
    """``(key, why)`` when ``executors`` calls of ``memory_mb`` each do not fit ``host_mb``."""
    if memory_mb > host_mb:
        why = f"{memory_mb} MiB per call is more than this host's {host_mb} MiB"
        return "sandbox_memory_mb", why
    if executors * memory_mb > host_mb:
        total = executors * memory_mb
        why = f"{executors} calls x {memory_mb} MiB = {total} MiB is more than this host's "
        return "executors", why + f"{host_mb} MiB (lower it, or env.math.sandbox_memory_mb)"
    return None
