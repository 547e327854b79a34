"""The processes of a run, and what they send each other on the host.

On a pod one process per host runs the same command (:mod:`arlarena_jax.train.distributed`).
Device work crosses processes through XLA collectives inside the jitted update. Host objects (a
process's share of a rollout, its evaluation episodes, a start-up fingerprint) cross through the
key-value store of ``jax.distributed``'s coordination service instead:

- it is thread-safe, so the asynchronous producer can gather from its own thread while the main
  thread runs the update's collectives (two streams of device collectives issued in a different
  order on two processes would deadlock);
- every wait is bounded (``timeout_s``): a process that died or hangs is :class:`ProcessLost`,
  one line, not a hang.

:func:`allgather` is the one exchange: every process calls it with the same tag in the same
order and receives every process's object, in process order. One process exchanges nothing.
:attr:`Exchange.traffic` is what this process's exchanges took so far (wall seconds inside them,
bytes sent): the host's share of cross-process communication (``process_stats``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import pickle
import threading
import time
import zlib
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import jax

from arlarena_jax.errors import ConfigError
from arlarena_jax.train.distributed import process_timeout_s


class ProcessLost(RuntimeError):
    """Another process did not answer an exchange in time: it died, hangs, or never started."""


def _client() -> Any:
    from jax._src import distributed  # the coordination service's client (as orbax uses it)

    client = distributed.global_state.client
    if client is None:
        raise RuntimeError("several processes but no jax.distributed client")
    return client


@dataclasses.dataclass(frozen=True)
class Traffic:
    """What a process's exchanges took: wall seconds inside :meth:`Exchange.allgather`
    (pickling, sending, waiting for the slowest process, reading) and the bytes it sent
    (compressed)."""

    seconds: float = 0.0
    sent_bytes: int = 0

    def __add__(self, more: Traffic) -> Traffic:
        return Traffic(self.seconds + more.seconds, self.sent_bytes + more.sent_bytes)

    def __sub__(self, earlier: Traffic) -> Traffic:
        """What was added since ``earlier`` (a snapshot of the same exchange)."""
        return Traffic(self.seconds - earlier.seconds, self.sent_bytes - earlier.sent_bytes)


class Exchange:
    """Host-side exchange between this run's processes (see module doc)."""

    def __init__(self, timeout_s: float | None = None) -> None:
        """``timeout_s``: how long to wait for another process (default: the environment's
        ``ARLARENA_PROCESS_TIMEOUT_S``, ``distributed.process_timeout_s``)."""
        self.index, self.count = jax.process_index(), jax.process_count()
        self.timeout_s = process_timeout_s() if timeout_s is None else timeout_s
        self._numbers: defaultdict[str, itertools.count] = defaultdict(itertools.count)
        self._traffic, self._lock = Traffic(), threading.Lock()  # the producer thread's too

    @property
    def traffic(self) -> Traffic:
        """What this process's exchanges took so far (none with one process)."""
        with self._lock:
            return self._traffic

    def allgather(self, tag: str, obj: Any) -> list[Any]:
        """Every process's ``obj`` (picklable), in process order. A collective: every process
        calls it with the same ``tag`` sequence; within a tag, calls are numbered."""
        if self.count == 1:
            return [obj]
        start = time.perf_counter()
        client, ms = _client(), int(self.timeout_s * 1000)
        key = f"arlarena/{tag}/{next(self._numbers[tag])}"
        data = zlib.compress(pickle.dumps(obj), 1)
        client.key_value_set_bytes(f"{key}/{self.index}", data)
        out = [obj if p == self.index else self._get(client, key, p, ms) for p in range(self.count)]
        self._wait(client, f"{key}/read", ms)  # every process has read every value
        client.key_value_delete(f"{key}/{self.index}")
        with self._lock:
            self._traffic += Traffic(time.perf_counter() - start, len(data))
        return out

    def first_then_all(self, tag: str, action: Callable[[], Any]) -> Any:
        """``action()`` on process 0 alone (e.g. writing the shared run directory), which every
        process then waits for (a collective); its result on process 0, None on the others."""
        result = action() if self.index == 0 else None
        self.allgather(tag, None)
        return result

    def same_everywhere(self, what: str, value: str) -> None:
        """Refuse, in one line, a ``value`` (e.g. a fingerprint of the config) that is not the
        same on every process."""
        values = self.allgather(f"same/{what}", value)
        for p, other in enumerate(values):
            if other != values[0]:
                raise ConfigError(
                    f"process {p} was started with other {what} than process 0 "
                    f"({_short(other)} vs {_short(values[0])}): start every process alike"
                )

    def _get(self, client: Any, key: str, process: int, ms: int) -> Any:
        try:
            data = client.blocking_key_value_get_bytes(f"{key}/{process}", ms)
        except Exception as error:  # the client raises XlaRuntimeError (DEADLINE_EXCEEDED, …)
            raise self._lost(key, f"process {process}", error) from None
        return pickle.loads(zlib.decompress(data))

    def _wait(self, client: Any, barrier: str, ms: int) -> None:
        try:
            client.wait_at_barrier(barrier, ms)
        except Exception as error:
            raise self._lost(barrier, "a process", error) from None

    def _lost(self, key: str, who: str, error: Exception) -> ProcessLost:
        reason = str(error).strip().splitlines()[0][:160] if str(error).strip() else ""
        return ProcessLost(
            f"{who} did not answer {key.removeprefix('arlarena/')!r} within "
            f"{self.timeout_s:.0f} s (it died, hangs or never started; {reason})"
        )


def _short(value: str) -> str:
    return value if len(value) <= 16 else hashlib.sha256(value.encode()).hexdigest()[:12]
