"""The sweep's progress line: runs done, running, failed and queued, and the time left.

The time left is estimated from the jobs that are done (their recorded start and end, in this
sweep or an earlier one). Each job still to do is expected to take the mean wall time of the done
jobs of its own settings (its command less the seed and the paths that name it: the other seeds of
the same cell), or, where none is done yet, that of all done jobs of its kind (a run, a shared
start, an evaluation), less what a running job has already spent; the sum is divided by the
number of workers. Jobs of one kind can differ a lot (a run with RL steps against one without), so
the line says how many jobs were estimated from other settings. Before a job of each kind still to
come is done there is no estimate.
"""

from __future__ import annotations

import re
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
        estimate = self._estimate(states)
        return None if estimate is None else estimate[0]

    def _estimate(self, states: dict[str, dict]) -> tuple[float, int, int] | None:
        """(seconds left, jobs to do, of them estimated from other settings), or None."""
        settings = {job.name: (_kind(job.name), _settings(job.command)) for job in self.jobs}
        spent: dict[tuple, list[float]] = {}
        for name, record in states.items():
            if record["state"] == "done" and "ended" in record and "started" in record:
                wall = record["ended"] - record["started"]
                for key in (settings[name], settings[name][0]):
                    spent.setdefault(key, []).append(wall)
        mean = {key: sum(v) / len(v) for key, v in spent.items()}
        now, left, to_do, guessed = self.clock(), 0.0, 0, 0
        for name, record in states.items():
            state = record["state"]
            if state not in (*QUEUED, "running"):
                continue
            own, kind = settings[name], settings[name][0]
            if kind not in mean:
                return None
            to_do, guessed = to_do + 1, guessed + (own not in mean)
            elapsed = now - record.get("started", now) if state == "running" else 0.0
            left += max(mean.get(own, mean[kind]) - elapsed, 0.0)
        return left / max(self.workers, 1), to_do, guessed

    def line(self, states: dict[str, dict] | None = None) -> str:
        states = self.states() if states is None else states
        counts = Counter(_bucket(r["state"]) for r in states.values())
        estimate = self._estimate(states)
        if estimate is None:
            eta = "estimating"
        else:
            left, to_do, guessed = estimate
            eta = f"about {_clock(left)} left"
            if guessed:
                eta += f"; {guessed} of the {to_do} to do timed by other settings' jobs"
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


_NAMES_THE_JOB = ("trainer.seed=", "trainer.run_dir=", "sft.init_from=")


def _settings(command: tuple[str, ...]) -> tuple[str, ...]:
    """What a job's cost depends on: its command less the seed and the paths that name the job
    (an evaluation's run directory with its ``_seed<n>`` removed)."""
    return tuple(
        re.sub(r"_seed\d+(?=/|$)", "", token)
        for token in command
        if not token.startswith(_NAMES_THE_JOB)
    )


def _bucket(state: str) -> str:
    return "queued" if state in QUEUED else state
