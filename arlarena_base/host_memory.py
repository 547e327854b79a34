"""The memory this process may use: ``MemTotal``, or its control group's limit where lower.

One reader for every check against the host's memory: the trainer's start-up memory estimate
(:mod:`arlarena_jax.train.memory_estimate`) and the math sandbox's budget of concurrent calls
(``envs.math.memory_budget``). Inside a container the cgroup's limit, not the host's RAM, is what
the kernel enforces.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

CGROUP_LIMITS = (  # this process's memory limit: v2, then v1 (the paths of /proc/self/cgroup)
    ("", "memory.max"),
    ("memory", "memory.limit_in_bytes"),
)


def cgroup_limit_mb(proc_cgroup: str, root: Path) -> int | None:
    """The memory limit (MiB) of the cgroup ``proc_cgroup`` (``/proc/self/cgroup``'s text) names
    under ``root``, v2 then v1; None where there is none ("max" or the v1 "unlimited" value)."""
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
        limit = cgroup_limit_mb(Path("/proc/self/cgroup").read_text(), root)
        if limit is not None:
            return min(total, limit)
    return total
