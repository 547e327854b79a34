"""Stopping at safe points: SIGTERM or SIGINT (a :class:`~arlarena_jax.train.preemption.
PreemptionGuard`) turns into :class:`Stopped` at the next point that calls :meth:`Stops.check`.

On several processes every decision is a collective (:func:`on_any_process`): all processes
stop, save or play at the same safe point.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import jax
import numpy as np


class Stopped(Exception):
    """SIGTERM or SIGINT arrived: raised at a safe point, what to resume is saved (or is
    saved by :meth:`Run.stopped`). ``str()`` says which signal, in which phase, at which step."""


def on_any_process(*flags: bool) -> tuple[bool, ...]:
    """Each flag, true where it is true on any process (on several, a collective that every
    process calls at the same point, so all decide alike)."""
    if jax.process_count() == 1:
        return tuple(bool(f) for f in flags)
    from jax.experimental import multihost_utils

    gathered = multihost_utils.process_allgather(np.asarray(flags, np.bool_))
    return tuple(bool(f) for f in np.any(gathered.reshape(-1, len(flags)), axis=0))


class Stops:
    """The run's phase and its stop requests. ``guard``: what tells a stop was asked
    (``requested``, ``signal``), or None; ``at``: the default position of a stop, (the RL step,
    of total_steps)."""

    def __init__(self, guard: Any, at: Callable[[], tuple[int, int]]) -> None:
        self.guard, self.at, self.phase = guard, at, "startup"

    def check(self, at: tuple[int, int] | None = None) -> None:
        """A safe point: once SIGTERM or SIGINT has arrived, raise :class:`Stopped`, naming the
        signal, the phase and ``at`` (step, of steps; default: the RL step, of total_steps)."""
        if self.requested():
            raise self.stopped_at(at)

    def check_between_chunks(self) -> None:
        """A safe point between the chunks of a process's own share of a phase (evaluation
        episodes, demonstrations): their number differs between processes, so a collective there
        would deadlock. One process checks (:meth:`check`); several leave the decision to the
        phase's next shared safe point."""
        if jax.process_count() == 1:
            self.check()

    def requested(self) -> bool:
        """Whether a signal asked to stop; on several processes, whether any process got one
        (a collective: every process stops at the same safe point)."""
        if self.guard is None:
            return False
        return on_any_process(self.guard.requested)[0]

    def stopped_at(self, at: tuple[int, int] | None) -> Stopped:
        if at is None and self.phase != "demonstrations":
            at = self.at()
        where = "" if at is None else f" at step {at[0]} of {at[1]}"
        number = self.guard.signal if self.guard is not None else None
        name = signal.Signals(number).name if number else "a signal to another process"
        return Stopped(f"{name} during {self.phase}{where}")
