"""XLA's persistent compilation cache for the ``arlarena`` command.

Every ``arlarena`` process compiles the same programs again: the cloning step, the on-device
rollout, the update and the log-prob passes. An arena sweep starts one process per run, so each
of its runs compiles them anew. JAX can keep compiled programs on disk
(``jax_compilation_cache_dir``) and load them instead of compiling. The key of a cached program
covers the program, the JAX and XLA versions, the backend, the devices and the compile options,
so a program is reused only where it is the same program for the same machine.

The command turns the cache on before anything compiles:

* ``ARLARENA_XLA_CACHE`` unset or empty: ``$XDG_CACHE_HOME/arlarena/xla`` (by default
  ``~/.cache/arlarena/xla``);
* ``ARLARENA_XLA_CACHE=<folder>``: that folder;
* ``ARLARENA_XLA_CACHE=off`` (or ``0``, ``false``, ``none``): no cache;
* ``JAX_COMPILATION_CACHE_DIR`` set: JAX's own setting stands and this module changes nothing.

JAX's own default stores only programs that took at least 1 s to compile
(``jax_persistent_cache_min_compile_time_secs``). With it, the main job stores 6 of the more
than a hundred programs it compiles, and a second run was no faster (11.6 and 11.5 min): the
many programs under 1 s make up most of its compile time. So the command stores every program
(0 s), unless ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` says otherwise. A folder that
cannot be created leaves the cache off with one warning line: a cache must never stop a run.

The folder is kept bounded: where it holds more than ``ARLARENA_XLA_CACHE_MAX_GB`` (default 4
GiB; 0 keeps everything), the command deletes its oldest-written programs at start-up until it
holds half of that (:func:`prune_cache`). A run that meanwhile misses a deleted program compiles
it again (JAX reads a vanished entry as a miss, with a warning).

JAX stores programs from process 0 only, and on the CPU backend the other processes' keys are
their own, so they would compile everything on every start: there every process stores its own
entries (:mod:`arlarena_jax.compile_cache_processes`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import jax

from arlarena_jax.compile_cache_processes import store_on_every_cpu_process

CACHE_ENV = "ARLARENA_XLA_CACHE"
JAX_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
JAX_MIN_TIME_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
MAX_GB_ENV = "ARLARENA_XLA_CACHE_MAX_GB"
DEFAULT_MAX_GB = 4.0
OFF = frozenset({"off", "0", "false", "none"})


def default_cache_dir(environ: Mapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/arlarena/xla``, with ``~/.cache`` where XDG_CACHE_HOME is unset."""
    base = environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base) / "arlarena" / "xla"


def cache_dir_from_env(environ: Mapping[str, str]) -> Path | None:
    """The folder the command should cache compiled programs in, or None for no change (the
    cache is off, or JAX's own ``JAX_COMPILATION_CACHE_DIR`` decides). See the module doc."""
    if environ.get(JAX_CACHE_ENV):
        return None
    value = environ.get(CACHE_ENV, "").strip()
    if value.lower() in OFF:
        return None
    return Path(value).expanduser() if value else default_cache_dir(environ)


def enable_compilation_cache(environ: Mapping[str, str] | None = None) -> Path | None:
    """Point JAX's persistent compilation cache at :func:`cache_dir_from_env`'s folder, creating
    it; returns the folder, or None where the cache stays as it was. Call before the first
    compilation of the process."""
    environ = os.environ if environ is None else environ
    path = cache_dir_from_env(environ)
    if path is None:
        return None
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        print(
            f"arlarena: warning: compilation cache off, cannot create {path}: {error.strerror}"
            f" (set {CACHE_ENV} to another folder, or to off)",
            file=sys.stderr,
        )
        return None
    keep_bounded(path, environ)
    jax.config.update("jax_compilation_cache_dir", str(path))
    if JAX_MIN_TIME_ENV not in environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    store_on_every_cpu_process()
    return path


def cache_limit_bytes(environ: Mapping[str, str]) -> int:
    """The command's cache size limit in bytes from ``ARLARENA_XLA_CACHE_MAX_GB`` (a number of
    GiB, default :data:`DEFAULT_MAX_GB`; 0: no limit). A value that is not a number >= 0 keeps
    the default, with one warning line."""
    value = environ.get(MAX_GB_ENV, "").strip()
    try:
        gib = float(value) if value else DEFAULT_MAX_GB
        if not 0 <= gib < float("inf"):  # also rejects nan
            raise ValueError
    except ValueError:
        print(
            f"arlarena: warning: {MAX_GB_ENV}={value!r} is not a number of GiB >= 0;"
            f" keeping the cache under {DEFAULT_MAX_GB:g} GiB",
            file=sys.stderr,
        )
        gib = DEFAULT_MAX_GB
    return int(gib * (1 << 30))


def keep_bounded(folder: Path, environ: Mapping[str, str]) -> int:
    """:func:`prune_cache` under :func:`cache_limit_bytes`; returns the files deleted. A file
    that cannot be deleted leaves the folder as it is, with one warning line."""
    max_bytes = cache_limit_bytes(environ)
    if not max_bytes:
        return 0
    try:
        return prune_cache(folder, max_bytes)
    except OSError as error:  # the cache grows, the run goes on
        print(f"arlarena: warning: cannot prune {folder}: {error}", file=sys.stderr)
        return 0


def prune_cache(folder: Path, max_bytes: int) -> int:
    """Where ``folder`` holds more than ``max_bytes``, delete its oldest-written files until it
    holds at most half of that; returns the number of files deleted. One pass over the folder,
    for a moment when no process uses it (JAX's own ``jax_compilation_cache_max_size`` does the
    same on every write, under a lock, re-reading every entry: it made the test suite
    almost a third slower at ten thousand entries)."""
    entries = []
    for path in folder.iterdir() if folder.is_dir() else ():
        try:
            stat = path.stat()
        except OSError:  # deleted meanwhile
            continue
        if path.is_file():
            entries.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in entries)
    if total <= max_bytes:
        return 0
    deleted = 0
    for _, size, path in sorted(entries, key=lambda entry: entry[0]):
        if total <= max_bytes // 2:
            break
        path.unlink(missing_ok=True)
        total -= size
        deleted += 1
    return deleted
