"""Where a session's environment comes from: one-environment batches of the registry, recycled.

Every session plays its own batch of one environment, ``spec.make_batch(env, 1, split)``: a
Python environment (TextWorld, ALFWorld, WebShop) then runs in its own worker of the host pool
(``envs.pool``, with its step timeout and restarts) when ``env.num_workers`` is at least 1, or in
the server process when it is 0; Sokoban is a JAX batch in the server process. A batch that
offers ``fresh()`` (Sokoban's: a copy sharing the compiled programs, with its own state) is
copied from the split's first batch instead of compiled again. A closed session's batch goes
back to the source and the next session of its split takes it (a reset starts every episode
anew); :meth:`BatchSource.close` closes them all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from envs.base import EnvBatch


class BatchSource:
    """One-environment batches of one environment's splits (see module doc)."""

    def __init__(self, make_batch: Callable[[str], EnvBatch]) -> None:
        self._make = make_batch
        self._lock = threading.Lock()
        self._templates: dict[str, EnvBatch] = {}
        self._idle: dict[str, list[EnvBatch]] = {}
        self._lent: set[int] = set()
        self._all: list[EnvBatch] = []
        self._closed = False

    def take(self, split: str) -> EnvBatch:
        """A batch of ``split`` for one session: an idle one, a fresh copy, or a new one."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the server is shutting down")
            idle = self._idle.get(split)
            if idle:
                batch = idle.pop()
                self._lent.add(id(batch))
                return batch
            template = self._templates.get(split)
        fresh = getattr(template, "fresh", None)
        batch = fresh() if callable(fresh) else self._make(split)
        with self._lock:
            self._templates.setdefault(split, batch)
            self._all.append(batch)
            self._lent.add(id(batch))
            closed = self._closed
        if closed:
            batch.close()
            raise RuntimeError("the server is shutting down")
        return batch

    def warm(self, split: str, seed: int, action: object = None) -> None:
        """Make ``split``'s first batch now and play one reset (and one step of ``action`` when
        given): a JAX batch compiles its programs here, not in the first session's step."""
        batch = self.take(split)
        try:
            batch.reset([seed])
            if action is not None:
                batch.step([action])
        finally:
            self.give_back(split, batch)

    def give_back(self, split: str, batch: EnvBatch) -> None:
        """Return a session's batch for the next session of ``split``."""
        with self._lock:
            if id(batch) not in self._lent:
                return
            self._lent.discard(id(batch))
            if not self._closed:
                self._idle.setdefault(split, []).append(batch)
                return
        batch.close()

    def close(self) -> None:
        """Close every batch this source made (idempotent)."""
        with self._lock:
            self._closed = True
            batches, self._all = self._all, []
            self._idle.clear()
        for batch in batches:
            batch.close()

    def stats(self) -> dict[str, Any]:
        """Batches made, lent and idle (for logs and tests)."""
        with self._lock:
            idle = sum(len(v) for v in self._idle.values())
            return {"made": len(self._all), "lent": len(self._lent), "idle": idle}
