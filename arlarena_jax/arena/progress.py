"""The sweep's progress line: runs done, running, failed and queued, and the time left.

The time left is estimated from the jobs that are done (their recorded start and end, in this
sweep or an earlier one): the mean wall time of a finished run (and, separately, of a shared
start and of an evaluation) times the work still queued, less what the running jobs have already
spent, divided by the number of workers. Before a job of each kind still to come is done there is
no estimate.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence

from arlarena_jax.arena.jobs import Job, read_state

QUEUED = ("new", "queued", "stopped", "interrupted")


def _clock(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes} min"


class Progress:
    """Counts the states of ``jobs`` from their run directories and prints a line when they
    change (at most every ``every`` seconds otherwise)."""

    def __init__(
        self,
        jobs: Sequence[Job],
        workers: int,
        *,
        every: float = 60.0,
        emit: Callable[[str], None] = lambda line: print(line, flush=True),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.jobs, self.workers, self.every, self.emit, self.clock = (
            jobs,
            workers,
            every,
            emit,
            clock,
        )
        self._last_counts: Counter | None = None
        self._last_time = 0.0

    def states(self) -> dict[str, dict]:
        return {job.name: read_state(job.run_dir) for job in self.jobs}

    def seconds_left(self, states: dict[str, dict]) -> float | None:
        """Remaining wall time (see module doc), or None before any job of a kind ended."""
        now, spent = self.clock(), {"start": [], "run": [], "eval": []}
        for name, record in states.items():
            if record["state"] == "done" and "ended" in record and "started" in record:
                spent[_kind(name)].append(record["ended"] - record["started"])
        mean = {kind: sum(v) / len(v) for kind, v in spent.items() if v}
        left = 0.0
        for name, record in states.items():
            kind, state = _kind(name), record["state"]
            if state not in (*QUEUED, "running"):
                continue
            if kind not in mean:
                return None
            elapsed = now - record.get("started", now) if state == "running" else 0.0
            left += max(mean[kind] - elapsed, 0.0)
        return left / max(self.workers, 1)

    def line(self, states: dict[str, dict] | None = None) -> str:
        states = self.states() if states is None else states
        counts = Counter(_bucket(r["state"]) for r in states.values())
        left = self.seconds_left(states)
        eta = "estimating" if left is None else f"about {_clock(left)} left"
        return (
            f"sweep: {counts['done']} done, {counts['running']} running, {counts['failed']} "
            f"failed, {counts['queued']} queued of {len(states)} ({eta})"
        )

    def update(self, *, force: bool = False) -> None:
        """Print the line if the counts changed, ``every`` seconds passed, or ``force``."""
        states = self.states()
        counts = Counter(_bucket(r["state"]) for r in states.values())
        due = self.clock() - self._last_time >= self.every
        if force or due or counts != self._last_counts:
            self.emit(self.line(states))
            self._last_counts, self._last_time = counts, self.clock()


def _kind(name: str) -> str:
    """A job's kind, from its name: ``start/…``, ``eval/…`` or a run."""
    prefix = name.split("/", 1)[0]
    return prefix if prefix in ("start", "eval") else "run"


def _bucket(state: str) -> str:
    return "queued" if state in QUEUED else state
