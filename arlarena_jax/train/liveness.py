"""Each process's pulse, and a watch that ends this process in one line when another goes silent.

A process killed outright (SIGKILL, the OOM killer, a host that dies) sends nothing. The others
may then be waiting anywhere: in a host exchange (bounded: ``ProcessLost``), but also inside a
device collective of the update, which waits for ever. JAX's coordination service would end them
after its heartbeat timeout, but through a C++ fatal check (a stack trace, exit 134). So every
process publishes a pulse in the coordination service's key-value store from a daemon thread, and
watches the others': a process whose pulse has not changed for ``timeout_s`` (and that has not
said it finished) is lost, and this process prints one line and exits 75 (the same command
resumes from the last checkpoint; a checkpoint is written to a temporary folder and renamed, so an
interrupted save is not a checkpoint).
:func:`arlarena_jax.train.distributed.initialize_if_distributed` sets JAX's own heartbeat
timeout longer than ``timeout_s``, so this watch speaks first.

Not covered: the loss of process 0 itself. It hosts the coordination service, and the other
processes' JAX clients abort at once when its socket closes (a C++ message naming the service,
within a second), before any Python code can run. That ending is also bounded and leaves the
saved run intact.

The daemon thread is stopped at interpreter exit (``atexit``), whatever the exit: Python ends a
daemon thread that returns from a C++ call during finalisation by unwinding it, and the
coordination client's C++ frames catch that unwinding ("FATAL: exception not rethrown", an
abort). A worker that left the thread running crashed so on exit once. Stopping it does not mark
the process finished: after a failure the others must still see its pulse stop.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

EXIT_TEMPFAIL = 75  # as the CLI's: stopped, or another process was lost; the same command resumes
_PULSE, _DONE = "arlarena/pulse", "arlarena/finished"


def _exit_lost(message: str) -> None:
    """Print ``message`` as the process's one line and end it now (other threads may be blocked
    in a collective that never returns, so no orderly shutdown is possible)."""
    print(f"arlarena: {message}; run the same command to resume", file=sys.stderr, flush=True)
    os._exit(EXIT_TEMPFAIL)


class Liveness:
    """Publish this process's pulse and watch the others' (see module doc)."""

    def __init__(
        self,
        client: Any,
        index: int,
        count: int,
        timeout_s: float,
        on_lost: Callable[[str], None] = _exit_lost,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client, self.index, self.count = client, index, count
        self.timeout_s, self.on_lost, self.clock = timeout_s, on_lost, clock
        self.period_s = max(0.2, timeout_s / 5)
        self._beats = 0
        self._seen: dict[int, tuple[str | None, float]] = {}  # value and when it last changed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        """Publish the next pulse: a counter that changes on every beat."""
        self._beats += 1
        self.client.key_value_set(f"{_PULSE}/{self.index}", str(self._beats), allow_overwrite=True)

    def silent(self) -> list[int]:
        """The other processes whose pulse has not changed for ``timeout_s`` and that have not
        finished. A value that cannot be read (not yet published, or the store unreachable)
        counts as unchanged."""
        now, lost = self.clock(), []
        for process in range(self.count):
            if process == self.index or self._read(f"{_DONE}/{process}") is not None:
                continue
            value = self._read(f"{_PULSE}/{process}")
            last, since = self._seen.get(process, (None, now))
            if value is not None and value != last:
                last, since = value, now
            self._seen[process] = (last, since)
            if now - since >= self.timeout_s:
                lost.append(process)
        return lost

    def check(self) -> None:
        """Call ``on_lost`` with one line if another process has gone silent."""
        lost = self.silent()
        if lost:
            names = ", ".join(str(p) for p in lost)
            self.on_lost(
                f"process {names} stopped answering (no pulse for {self.timeout_s:.0f} s, "
                "ARLARENA_HEARTBEAT_TIMEOUT_S): it died or hangs; this process stops too"
            )

    def start(self) -> None:
        """Beat once, then beat and check every ``period_s`` on a daemon thread."""
        self.beat()
        self.silent()  # the watch starts now, for processes not yet seen
        self._thread = threading.Thread(target=self._run, name="arlarena-liveness", daemon=True)
        self._thread.start()
        atexit.register(self.stop)

    def stop(self) -> None:
        """Stop beating and watching, without saying finished (see module doc); waits at most a
        beat plus 5 s for a call into the store to return."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.period_s + 5.0)

    def finish(self) -> None:
        """This process has finished its work (or stopped at a safe point): the others no longer
        expect its pulse, and it no longer watches theirs."""
        self.stop()
        atexit.unregister(self.stop)
        self.client.key_value_set(f"{_DONE}/{self.index}", "1", allow_overwrite=True)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            with contextlib.suppress(Exception):  # store unreachable: the others' silence decides
                self.beat()
            self.check()

    def _read(self, key: str) -> str | None:
        try:
            return self.client.key_value_try_get(key)
        except Exception:  # NOT_FOUND, or the service unreachable
            return None


_active: Liveness | None = None


def watch(client: Any, index: int, count: int, timeout_s: float) -> Liveness:
    """Start this process's pulse and watch (once per process)."""
    global _active
    if _active is None:
        _active = Liveness(client, index, count, timeout_s)
        _active.start()
    return _active


def finished() -> None:
    """Tell the other processes that this one ended in order (no-op for one process)."""
    global _active
    if _active is not None:
        _active.finish()
        _active = None
