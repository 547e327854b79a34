"""One owner per run directory: an advisory lock held for the life of a run.

Two processes writing one run directory race at every checkpoint and interleave one TensorBoard
file, so :class:`~arlarena_jax.train.run.Run` takes ``run_dir/.lock`` with ``fcntl.flock``
(exclusive, non-blocking) before it builds or writes anything, and keeps it until it closes. A
second ``train``, ``sft``, ``eval``, ``export`` or ``eval-run`` on a held directory is one line,
``run directory X is in use by process N on host H`` (:class:`RunDirInUse`, a ConfigError, so
the command exits 2).

The kernel drops the lock when its process dies, however it dies, so a lock left by a killed run
is free: the next start takes it over and says whose it was (the owner is written into the file
while held and erased on a clean release). On several processes (multi-host) only process 0
holds it. ``flock`` is advisory and local to what the file system supports: on NFSv4 it is a
lock across hosts (a crashed host's lock is dropped when its lease expires, ~90 s); on a file
system without locks the start fails with the OS's reason.

``wait_s`` > 0 waits that long for a held directory (one notice line, then a retry every
``poll_s``) before refusing: ``arlarena eval-run`` waits, so a sweep's evaluations of one run,
which start together once the run is done, take the directory one after another.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from arlarena_jax.errors import ConfigError

LOCK_FILE = ".lock"


class RunDirInUse(ConfigError):
    """The run directory is held by another live process."""


def _owner(text: str) -> str:
    try:
        owner = json.loads(text)
        return f"process {owner['pid']} on host {owner['host']}"
    except (ValueError, KeyError, TypeError):
        return "another process"


class RunDirLock:
    """The held lock of one run directory; :meth:`release` (or process exit) frees it."""

    def __init__(self, run_dir: str | Path, *, wait_s: float = 0.0, poll_s: float = 1.0) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._acquire(wait_s, poll_s)
        except BaseException:
            self._close()
            raise
        left = os.pread(self._fd, 4096, 0).decode(errors="replace").strip()
        if left:
            print(
                f"arlarena: run directory {self.run_dir}: taking over the lock of "
                f"{_owner(left)}, which ended without releasing it",
                file=sys.stderr,
            )
        me = json.dumps({"pid": os.getpid(), "host": socket.gethostname()})
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, me.encode(), 0)

    def _holder(self) -> str:
        assert self._fd is not None
        return _owner(os.pread(self._fd, 4096, 0).decode(errors="replace"))

    def _acquire(self, wait_s: float, poll_s: float) -> None:
        """Take the lock, waiting up to ``wait_s`` for a holder to let go; else RunDirInUse."""
        assert self._fd is not None
        deadline, noted = time.monotonic() + wait_s, False
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                holder, left = self._holder(), deadline - time.monotonic()
            if left <= 0:
                waited = f" (waited {wait_s:g} s)" if wait_s > 0 else ""
                raise RunDirInUse(f"run directory {self.run_dir} is in use by {holder}{waited}")
            if not noted:
                print(
                    f"arlarena: run directory {self.run_dir} is in use by {holder}; waiting up "
                    f"to {wait_s:g} s for it",
                    file=sys.stderr,
                    flush=True,
                )
                noted = True
            time.sleep(min(poll_s, left))

    def release(self) -> None:
        """Erase the owner and unlock (idempotent)."""
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._close()

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def hold_run_dir(
    run_dir: str | Path, process_index: int = 0, *, wait_s: float = 0.0
) -> RunDirLock | None:
    """The run directory's lock, held by process 0 of a run (None on the others)."""
    return RunDirLock(run_dir, wait_s=wait_s) if process_index == 0 else None
