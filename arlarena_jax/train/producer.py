"""Asynchronous RL: a producer thread that rolls out ahead of the trainer under a staleness bound
(``trainer.max_staleness``; docs/architecture.md, "Asynchronous RL").

The trainer publishes parameters with a *version*: the number of updates applied to them (RL
step s publishes version s). The producer plays the batch of step s with the newest published
parameters of version v, and only once ``(s − 1) − v ≤ k``: the update of step s, which consumes
that batch, is then at most k updates ahead of the parameters that generated it. Batches are
consumed in order; at k = 0 the producer waits for every update (the synchronous schedule).

The producer owns the training environments and the sampler engine while it runs; a caller that
needs the engine (evaluation) holds :meth:`Producer.paused`, which waits for the rollout in
flight to end and starts none until it is left. :meth:`Producer.stop` joins the thread (always:
``close``). An exception in ``produce`` is re-raised, the same object, by the next
:meth:`Producer.take`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np


@dataclasses.dataclass
class Produced:
    """One batch of the producer: what ``produce`` returned (``value``), for which step, from
    parameters of which version, and how long the producer waited on the bound before it."""

    step: int
    version: int
    value: Any
    wait_s: float = 0.0


@dataclasses.dataclass
class _Published:
    params: Any
    version: int


class Producer:
    """The rollout thread (see module doc). ``produce(step, params, version)`` plays step
    ``step``'s batch; steps ``first_step … last_step`` are produced, in order."""

    def __init__(
        self,
        produce: Callable[[int, Any, int], Any],
        *,
        max_staleness: int,
        first_step: int,
        last_step: int,
        params: Any,
        version: int,
    ) -> None:
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {max_staleness}")
        self._produce, self.max_staleness = produce, max_staleness
        self._next, self._last = first_step, last_step
        self._published = _Published(params, version)
        self._ready: deque[Produced] = deque()
        self._cond = threading.Condition()
        self._error: BaseException | None = None
        self._stopping = self._busy = False
        self._pauses = 0
        self._thread = threading.Thread(target=self._run, name="arlarena-producer", daemon=True)
        self._thread.start()

    # -- the trainer's side ---------------------------------------------------------------------

    def publish(self, params: Any, version: int) -> None:
        """New parameters (an on-device copy the trainer never donates) of ``version``."""
        with self._cond:
            self._published = _Published(params, version)
            self._cond.notify_all()

    def newest(self) -> tuple[Any, int]:
        """The newest published (params, version)."""
        with self._cond:
            return self._published.params, self._published.version

    def take(self, step: int, poll_s: float = 0.05) -> tuple[Produced, float]:
        """The batch of ``step`` (the next in order) and the seconds waited for it; re-raises
        the producer's exception."""
        start = time.perf_counter()
        with self._cond:
            while not self._ready and self._error is None:
                if not self._thread.is_alive():
                    raise RuntimeError("the rollout producer ended without a batch")
                self._cond.wait(poll_s)
            if not self._ready:  # batches played before an error are still taken first
                raise self._error
            produced = self._ready.popleft()
            self._cond.notify_all()
        if produced.step != step:
            raise RuntimeError(f"producer batch of step {produced.step}, expected step {step}")
        return produced, time.perf_counter() - start

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Within: no rollout runs (the one in flight is waited for); re-raises its error."""
        with self._cond:
            self._pauses += 1
            while self._busy and self._error is None:
                self._cond.wait(0.05)
        try:
            yield
        finally:
            with self._cond:
                self._pauses -= 1
                self._cond.notify_all()

    def stop(self) -> None:
        """Stop producing, drop queued batches and join the thread (the rollout in flight ends
        first). Idempotent."""
        with self._cond:
            self._stopping = True
            self._ready.clear()
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()

    @property
    def error(self) -> BaseException | None:
        return self._error

    # -- the thread -----------------------------------------------------------------------------

    def _may_start(self) -> bool:
        """Step ``_next`` may start: not paused, and its consumer's staleness within k."""
        behind = (self._next - 1) - self._published.version
        return not self._pauses and behind <= self.max_staleness

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    start = time.perf_counter()
                    while not self._stopping and (self._next > self._last or not self._may_start()):
                        self._cond.wait()
                    if self._stopping:
                        return
                    step, published = self._next, self._published
                    self._busy, waited = True, time.perf_counter() - start
                try:
                    value = self._produce(step, published.params, published.version)
                finally:
                    with self._cond:
                        self._busy = False
                        self._cond.notify_all()
                with self._cond:
                    if self._stopping:
                        return
                    self._ready.append(Produced(step, published.version, value, waited))
                    self._next += 1
                    self._cond.notify_all()
        except BaseException as exc:  # re-raised by take()
            with self._cond:
                self._error = exc
                self._cond.notify_all()


def token_versions(row: Any, version: int) -> tuple[np.ndarray, np.ndarray]:
    """(versions, counted) of a row's response tokens: its recorded versions (else ``version``
    on every token) and where they count (the loss mask, and a recorded version >= 0)."""
    n = len(row.response_ids)
    recorded = getattr(row, "versions", None)
    versions = np.full(n, version) if recorded is None else np.asarray(recorded, np.int64)[:n]
    counted = versions >= 0
    if row.loss_mask is not None:
        counted &= np.asarray(row.loss_mask[:n]) > 0
    return versions, counted


def staleness_metrics(rows: Sequence[Any], step: int, version: int) -> dict[str, float]:
    """``async/staleness_mean`` / ``_max`` (updates behind the update of ``step`` that consumes
    them: (step − 1) − version, over counted tokens), ``async/mixed_rows`` (rows whose counted
    tokens come from more than one version) and ``async/policy_version`` (of the batch's start)."""
    behind, mixed = [], 0
    for row in rows:
        versions, counted = token_versions(row, version)
        used = versions[counted]
        behind.append((step - 1) - used)
        mixed += int(np.unique(used).size > 1)
    tokens = np.concatenate(behind) if behind else np.zeros(0)
    return {
        "async/staleness_mean": float(tokens.mean()) if tokens.size else 0.0,
        "async/staleness_max": float(tokens.max()) if tokens.size else 0.0,
        "async/mixed_rows": float(mixed),
        "async/policy_version": float(version),
    }
