"""Sandbox uids allocated host-wide: never shared by two live calls (issue 37, S5).

As root the sandbox runs each call as a uid of its own, so that ``RLIMIT_NPROC`` counts that
call's processes only. A per-process counter gave two processes (two sweep workers, say) the
same uids at once. Here a uid is held by an exclusive ``flock`` on ``<LOCK_DIR>/<uid>`` for the
life of the call: every process on the host that uses this module sees it taken. The kernel drops
the lock when the holder dies, so a crash leaks nothing. The search starts at a slot drawn from
the process id and a counter, and tries every slot once.

``LOCK_DIR`` is ``$ARLARENA_SANDBOX_LOCKS``, else ``/run/lock/arlarena-sandbox`` (``/run`` is
local to the host and emptied at boot), else the temporary folder's ``arlarena-sandbox-uids``.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

UID_BASE = 200_000  # never a real user's uid
UID_SLOTS = 10_000
_counter = itertools.count()
_counter_lock = threading.Lock()


class NoFreeUid(RuntimeError):
    """Every sandbox uid is held by a live call."""


def lock_dir() -> Path:
    """Where the uid locks live (see module doc), created 0700 if missing."""
    configured = os.environ.get("ARLARENA_SANDBOX_LOCKS")
    candidates = [Path(configured)] if configured else []
    candidates += [Path("/run/lock/arlarena-sandbox")]
    candidates += [Path(tempfile.gettempdir()) / "arlarena-sandbox-uids"]
    for path in candidates:
        with contextlib.suppress(OSError):
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
            if os.access(path, os.W_OK):
                return path
    raise NoFreeUid(f"no writable folder for the sandbox's uid locks (tried {candidates[0]})")


def _first_slot() -> int:
    with _counter_lock:
        n = next(_counter)
    return (os.getpid() * 7919 + n * 104_729) % UID_SLOTS


@contextlib.contextmanager
def held_uid(directory: Path | None = None) -> Iterator[int]:
    """A uid in ``[UID_BASE, UID_BASE + UID_SLOTS)`` no other live call holds, for the block."""
    directory = directory or lock_dir()
    start = _first_slot()
    for i in range(UID_SLOTS):
        uid = UID_BASE + (start + i) % UID_SLOTS
        fd = os.open(directory / str(uid), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield uid
        finally:
            os.close(fd)  # closing the only descriptor drops the lock
        return
    raise NoFreeUid(f"all {UID_SLOTS} sandbox uids are in use (locks in {directory})")
