"""How many sandbox calls fit this host's memory (issue 37, S3).

Each call may use ``env.math.sandbox_memory_mb`` in all (``envs.math.cgroups``, else rlimits
that keep its processes' sum within it), and ``env.math.executors`` calls run at once, so
``executors x sandbox_memory_mb`` is what model code may take together. At start-up that total
is checked against the host's memory (:func:`arlarena_base.host_memory.host_memory_mb`);
``executors: 0`` picks the usable cores, at most as many calls as fit half of it.
"""

from __future__ import annotations

from arlarena_base.host_memory import host_memory_mb

__all__ = ["default_executors", "host_memory_mb", "over_budget"]


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
