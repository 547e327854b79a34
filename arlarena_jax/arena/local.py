"""The local executor: a pool of worker processes on this machine, the CPU cores split among them.

Each job runs through the wrapper (:mod:`arlarena_jax.arena.jobs`) in its own process, pinned to
its share of the cores (``sched_setaffinity``; XLA and the thread pools size themselves from the
cores they may use), with ``OMP_NUM_THREADS`` and friends set to that share. A job starts once
every job it needs is done; a job whose shared start (or, for an evaluation, whose run) failed is
marked failed without running. On
SIGTERM or SIGINT the executor passes SIGTERM to every running job (each saves and exits 75),
waits for them and returns :data:`EXIT_STOPPED`: running the sweep again resumes them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from arlarena_jax.arena.jobs import (
    EXIT_STOPPED,
    LOG_FILE,
    Job,
    need_failed,
    read_state,
    write_state,
)
from arlarena_jax.arena.progress import Progress

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def available_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def default_workers(cores: int | None = None, memory_gib: float | None = None) -> int:
    """Workers that fit a laptop: one per core, at most one per 4 GiB of memory, 1 to 8."""
    cores = cores if cores is not None else max(len(available_cores()), os.cpu_count() or 1)
    if memory_gib is None:
        with contextlib.suppress(ValueError, OSError, AttributeError):
            memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    by_memory = int(memory_gib // 4) if memory_gib else 8
    return max(1, min(cores, by_memory, 8))


def split_cores(cores: Sequence[int], workers: int) -> list[list[int]]:
    """``workers`` disjoint, equal shares of ``cores`` (the remainder unused); with fewer cores
    than workers, every worker shares all of them."""
    share = len(cores) // workers
    if share == 0:
        return [list(cores)] * workers
    return [list(cores[i * share : (i + 1) * share]) for i in range(workers)]


class LocalExecutor:
    """Run jobs on ``workers`` processes of this machine (see module doc)."""

    def __init__(self, workers: int, *, minutes: float | None = None, poll_s: float = 1.0):
        self.workers, self.minutes, self.poll_s = workers, minutes, poll_s
        self.slots = split_cores(available_cores(), workers)
        self._stop: int | None = None

    def _launch(self, job: Job, slot: int) -> subprocess.Popen:
        cores = self.slots[slot]
        env = dict(os.environ)
        if cores:
            env |= {name: str(len(cores)) for name in THREAD_VARIABLES}
        minutes = (
            []
            if self.minutes is None or job.name.startswith("start/")
            else [
                "--minutes",
                str(self.minutes),
            ]
        )
        argv = [sys.executable, "-m", "arlarena_jax.arena.jobs", str(job.run_dir), *minutes]
        job.run_dir.mkdir(parents=True, exist_ok=True)
        with (job.run_dir / LOG_FILE).open("a") as log:
            return subprocess.Popen(
                [*argv, "--", *job.command],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None,
            )

    def _on_signal(self, signum: int, _frame) -> None:
        self._stop = signum

    def run(self, jobs: Sequence[Job], progress: Progress, dirs: dict[str, Path]) -> int:
        """Run ``jobs`` (``dirs``: the run directory of every job name a job may need); 0 when
        the pool drained, :data:`EXIT_STOPPED` when a signal stopped it."""
        pending, running = list(jobs), {}
        handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            while pending or running:
                self._reap(running)
                if self._stop is not None:  # pass the stop on; what is pending waits
                    self._stop_all(running)
                    break
                pending = self._drop_blocked(pending, dirs, running)
                self._fill(pending, running, dirs)
                progress.update()
                time.sleep(self.poll_s)
        finally:
            for s, handler in handlers.items():
                signal.signal(s, handler)
        progress.update(force=True)
        return EXIT_STOPPED if self._stop is not None else 0

    def _reap(self, running: dict) -> None:
        for name, (process, _slot) in list(running.items()):
            if process.poll() is not None:
                del running[name]

    def _stop_all(self, running: dict) -> None:
        for process, _slot in running.values():
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        for process, _slot in running.values():
            process.wait()
        running.clear()

    def _drop_blocked(self, pending: list[Job], dirs: dict[str, Path], running: dict) -> list:
        """Jobs whose needed job ended without being done: failed (a failed need) or left for the
        next sweep (a need that stopped). A need that another sweep is running is waited for."""
        keep = []
        queued = {j.name for j in pending} | set(running)
        waiting = ("done", "running", "queued")
        for job in pending:
            ended = [n for n in job.needs if n not in queued and _state(dirs[n]) not in waiting]
            failed = [n for n in ended if _state(dirs[n]) == "failed"]
            if failed:
                error = need_failed(failed[0], dirs[failed[0]])
                write_state(job.run_dir, state="failed", error=error, command=list(job.command))
            elif not ended:
                keep.append(job)
        return keep

    def _fill(self, pending: list[Job], running: dict, dirs: dict[str, Path]) -> None:
        free = [s for s in range(self.workers) if s not in {slot for _, slot in running.values()}]
        for job in list(pending):
            if not free:
                return
            if all(_state(dirs[n]) == "done" for n in job.needs):
                pending.remove(job)
                slot = free.pop(0)
                running[job.name] = (self._launch(job, slot), slot)


def _state(run_dir: Path) -> str:
    return read_state(run_dir)["state"]
