"""Every process of a multi-process CPU run keeps its own compiled programs.

JAX writes its persistent compilation cache from process 0 alone (``jax._src.compiler.
_cache_write``: on shared storage, many hosts writing one entry would contend); the other
processes only read, expecting process 0's entries to be theirs too. On the CPU backend they are
not: a program's key covers its compile options and the devices' topology as each process sees
them, and those differ per process. Measured (jax 0.10.2, a two-process TextWorld run started
twice over one cache folder): process 0 found all 121 of its programs, process 1 none of its 121,
each under a key process 0 never wrote. So every process but the first compiles every program
on every start, a resume included, and stores nothing.

:func:`store_on_every_cpu_process` wraps JAX's writer so that, on the CPU backend, every process
stores its own entries (under keys of its own: no two processes write one file). On other
backends, and on process 0, JAX's writer runs unchanged. It relies on two JAX internals,
``compiler._cache_write`` and ``compilation_cache.put_executable_and_time``; where they are
missing or their signature differs, nothing is wrapped and the cache is JAX's own. A failed
write is ignored: a cache never stops a run.
"""

from __future__ import annotations

import contextlib
import inspect

WRITER_PARAMETERS = (
    "cache_key",
    "compile_time_secs",
    "module_name",
    "backend",
    "executable",
    "host_callbacks",
)


def store_on_every_cpu_process() -> bool:
    """Let every process of a CPU run write its own cache entries (module doc); whether JAX's
    writer is now wrapped (False: this JAX has no writer of the expected shape)."""
    try:
        from jax._src import compilation_cache, compiler, distributed
        from jax._src import config as jax_config
    except ImportError:
        return False
    original = getattr(compiler, "_cache_write", None)
    put = getattr(compilation_cache, "put_executable_and_time", None)
    if getattr(original, "every_cpu_process", False):
        return True
    if original is None or put is None or _parameters(original) != WRITER_PARAMETERS:
        return False

    def cache_write(
        cache_key, compile_time_secs, module_name, backend, executable, host_callbacks
    ) -> None:
        own = (
            distributed.global_state.process_id != 0
            and getattr(backend, "platform", None) == "cpu"
            and not host_callbacks
        )
        if not own:
            return original(
                cache_key, compile_time_secs, module_name, backend, executable, host_callbacks
            )
        if compile_time_secs < jax_config.persistent_cache_min_compile_time_secs.value:
            return None
        with contextlib.suppress(Exception):  # a cache never stops a run: it is compiled
            put(cache_key, module_name, executable, backend, int(compile_time_secs))
        return None

    cache_write.every_cpu_process = True  # type: ignore[attr-defined]
    compiler._cache_write = cache_write
    return True


def _parameters(function) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return ()
