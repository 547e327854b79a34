"""A SIGTERM/SIGINT guard for clean pre-emption: the signal only sets a flag, and the run stops
at its next safe point (:meth:`~arlarena_jax.train.run.Run.check_stop`)."""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any

from arlarena_jax.train.checkpoint import CheckpointError


class PreemptionGuard:
    """``with PreemptionGuard() as guard:`` … ``if guard.requested: save(force=True); break``.

    SIGTERM (and SIGINT with ``sigint=True``) only sets ``requested`` (and ``signal``), so the loop
    saves at the next step boundary and exits cleanly; a second SIGINT raises
    ``KeyboardInterrupt``. The previous handlers come back on exit. Main thread only. On several
    hosts, combine with :meth:`Checkpointer.reached_preemption` so all processes stop together.
    """

    def __init__(self, *, sigint: bool = False) -> None:
        self.signals = (signal.SIGTERM, signal.SIGINT) if sigint else (signal.SIGTERM,)
        self.requested = False
        self.signal: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested, self.signal = True, signum

    def __enter__(self) -> PreemptionGuard:
        try:
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        except ValueError:
            self.__exit__()
            raise CheckpointError("PreemptionGuard must be entered in the main thread") from None
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
