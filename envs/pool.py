"""Host environment pool: N Python text environments in W worker processes
(docs/environments.md §2.3).

Each worker owns a contiguous chunk of envs, built in the worker by the picklable ``factory()``.
``reset(seeds)`` and ``step(actions)`` send every worker its slice at once over its own Pipe, then
gather the replies. A worker steps its environments one after another, and the deadline
(``reset_timeout`` / ``step_timeout``) bounds each environment's call, not the worker's whole
share: the worker says ``progress`` after each environment it has done, which renews its
deadline. Grouped resets (docs/environments.md §1.1) come from equal seeds; see
:func:`envs.local.grouped_seeds`.

Failures never lose the batch:
- a worker that dies, or one of whose envs misses the deadline, is killed and replaced by a fresh
  one (its envs are rebuilt); the episodes of all its envs end as failures;
- an exception raised by env code ends only that env's episode (logged with its traceback); the
  worker rebuilds that env at the next reset.
A failed env reports ``done=True``, reward 0, ``won=False`` and ``failure`` (a one-line reason),
with its last known observation, on every step until the next ``reset``; a reset that fails
returns the last known observation and the failure shows at the next step (see :attr:`failed`).
Counters: ``restarts`` (workers replaced), ``failures`` (episodes ended as failures).

Workers ignore SIGINT and exit when their pipe closes, so they never outlive the driver; they are
not daemonic, so an env may start its own subprocesses. ``close()`` is idempotent and also runs
from ``atexit`` (registered after ``multiprocessing``'s own hook, so it runs first).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import multiprocessing.util  # registers its atexit hook before ours
import signal
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from envs.base import Observation, Step, TextEnv
from envs.local import LocalEnvBatch, check_length, make_step

logger = logging.getLogger(__name__)
_POOLS: weakref.WeakSet[EnvPool] = weakref.WeakSet()


def _one_line(exc: BaseException) -> str:
    """``Type: message`` on one line, at most 200 characters."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def _worker_main(conn: mp_connection.Connection, factory: Callable[[], TextEnv], n: int) -> None:
    """Worker loop: build ``n`` envs, then serve ``reset``/``step``/``close`` until the pipe closes.

    Replies are ``("ok", [(local, "ok", value) | (local, "error", (reason, traceback))])``; a
    failure to build the envs at start is ``("fatal", reason)``. Between an env and the next (each
    built, reset or stepped) it sends ``("progress", None)``: each env's call has its own deadline.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    envs: list[TextEnv | None] = []
    try:
        for _ in range(n):
            if envs:
                conn.send(("progress", None))
            envs.append(factory())
    except BaseException as exc:  # report, then exit: the driver restarts or raises
        conn.send(("fatal", f"building the environments failed: {_one_line(exc)}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            cmd, payload = conn.recv()
        except (EOFError, OSError):
            return
        if cmd == "close":
            return
        results = []
        for local, arg in payload:
            if results:
                conn.send(("progress", None))
            try:
                if envs[local] is None:
                    if cmd != "reset":
                        raise RuntimeError("environment not reset since it failed")
                    envs[local] = factory()
                env = envs[local]
                results.append((local, "ok", env.reset(arg) if cmd == "reset" else env.step(arg)))
            except Exception as exc:
                envs[local] = None  # rebuilt at the next reset
                results.append((local, "error", (_one_line(exc), traceback.format_exc())))
        conn.send(("ok", results))


@dataclasses.dataclass
class _Worker:
    index: int
    first: int  # index of its first env
    count: int
    process: Any  # multiprocessing process of the pool's context
    conn: mp_connection.Connection


class EnvPool:
    """N text environments in ``num_workers`` processes behind ``envs.base.EnvBatch``."""

    def __init__(
        self,
        factory: Callable[[], TextEnv],
        num_envs: int,
        num_workers: int,
        step_timeout: float = 60.0,
        reset_timeout: float = 300.0,
        start_method: str = "spawn",
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if not 1 <= num_workers <= num_envs:
            raise ValueError(f"num_workers must be in 1..num_envs={num_envs}, got {num_workers}")
        if start_method not in ("spawn", "forkserver"):
            raise ValueError(f"start_method must be 'spawn' or 'forkserver', got {start_method!r}")
        if step_timeout <= 0 or reset_timeout <= 0:
            raise ValueError("step_timeout and reset_timeout must be > 0")
        self._factory, self._num_envs = factory, num_envs
        self.step_timeout, self.reset_timeout = float(step_timeout), float(reset_timeout)
        self._ctx = mp.get_context(start_method)
        self.restarts = self.failures = 0
        self._last_obs = [Observation(text="") for _ in range(num_envs)]
        self._failure: list[str | None] = [None] * num_envs
        self._workers: list[_Worker] = []
        self._closed = False
        _POOLS.add(self)
        bounds = np.linspace(0, num_envs, num_workers + 1).round().astype(int).tolist()
        try:
            for w in range(num_workers):
                self._workers.append(self._start(w, bounds[w], bounds[w + 1] - bounds[w]))
            replies = self._gather(self._workers, self.reset_timeout, want_ready=True)
            for w, reply in sorted(replies.items()):
                if isinstance(reply, str):
                    raise RuntimeError(f"worker {w} failed to start: {reply}")
        except BaseException:
            self.close()
            raise

    @property
    def num_envs(self) -> int:
        """Number of environments N."""
        return self._num_envs

    @property
    def failed(self) -> np.ndarray:
        """[N] bool: envs whose current episode ended as a failure (cleared by ``reset``)."""
        return np.asarray([f is not None for f in self._failure], bool)

    def reset(self, seeds: Sequence[int]) -> list[Observation]:
        """Start an episode in every env (equal seeds → same task); failures: see module doc."""
        seeds = [int(s) for s in check_length("seeds", seeds, self._check_open())]
        payloads = {
            w.index: list(enumerate(seeds[w.first : w.first + w.count])) for w in self._workers
        }
        for w, ok, results in self._call("reset", payloads, self.reset_timeout):
            for i in range(w.first, w.first + w.count):
                self._failure[i] = None  # a new episode
                if not ok:
                    self._failure[i] = self._fail(i, results)
            for local, status, value in results if ok else []:
                i = w.first + local
                if status == "ok":
                    self._last_obs[i] = value
                else:
                    self._failure[i] = self._fail(i, value, w.index)
        return list(self._last_obs)

    def step(self, actions: Sequence[Any]) -> Step:
        """Apply one action per env on all workers concurrently; failed envs report failures."""
        actions = check_length("actions", actions, self._check_open())
        out: list[tuple[Observation, float, bool, dict[str, Any]] | None] = [None] * self._num_envs
        payloads = {}
        for w in self._workers:
            live = [i for i in range(w.first, w.first + w.count) if self._failure[i] is None]
            if live:
                payloads[w.index] = [(i - w.first, actions[i]) for i in live]
        for w, ok, results in self._call("step", payloads, self.step_timeout):
            if not ok:
                for local, _ in payloads[w.index]:
                    self._failure[w.first + local] = self._fail(w.first + local, results)
                continue
            for local, status, value in results:
                i = w.first + local
                if status == "ok":
                    out[i] = value
                    self._last_obs[i] = value[0]
                else:
                    self._failure[i] = self._fail(i, value, w.index)
        for i, reason in enumerate(self._failure):
            if reason is not None:
                out[i] = (self._last_obs[i], 0.0, True, {"won": False, "failure": reason})
        return make_step(out)  # type: ignore[arg-type]

    def close(self) -> None:
        """Stop every worker (ask, wait briefly, then kill); idempotent."""
        if self._closed:
            return
        self._closed = True
        _shutdown(self._workers)
        _POOLS.discard(self)

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            with contextlib.suppress(Exception):  # interpreter shutdown: best effort only
                self.close()

    def _check_open(self) -> int:
        if self._closed:
            raise ValueError("EnvPool is closed")
        return self._num_envs

    def _start(self, index: int, first: int, count: int) -> _Worker:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(target=_worker_main, args=(child, self._factory, count))
        process.start()  # not daemonic: an env may start processes of its own
        child.close()
        return _Worker(index, first, count, process, parent)

    def _fail(self, i: int, why: str | tuple[str, str], worker: int | None = None) -> str:
        """Count a newly failed episode of env ``i`` and return its one-line reason."""
        if isinstance(why, tuple):  # an exception in env code: (reason, traceback)
            logger.error("env %d (worker %s) raised %s\n%s", i, worker, why[0], why[1])
            why = why[0]
        if self._failure[i] is None:
            self.failures += 1
        return why

    def _call(
        self, cmd: str, payloads: dict[int, list], timeout: float
    ) -> list[tuple[_Worker, bool, Any]]:
        """Send ``cmd`` to the workers in ``payloads``, gather, restart the broken ones.

        Returns ``(worker, ok, results)``; when not ok, ``results`` is the one-line reason.
        """
        for index, payload in payloads.items():
            with contextlib.suppress(OSError):  # a dead worker: _gather reports it at EOF
                self._workers[index].conn.send((cmd, payload))
        replies = self._gather([self._workers[i] for i in payloads], timeout)
        out = []
        for index in payloads:
            w, reply = self._workers[index], replies[index]
            if isinstance(reply, str):
                reply = f"worker {index}: {reply}"
                logger.warning("EnvPool %s; restarting it", reply)
                self._restart(w)
            out.append((w, not isinstance(reply, str), reply))
        return out

    def _gather(
        self, workers: list[_Worker], timeout: float, want_ready: bool = False
    ) -> dict[int, Any]:
        """One reply per worker; a str reply is the reason a worker broke. Each worker has
        ``timeout`` seconds for its next env: a ``progress`` message renews its deadline."""
        pending = {w.conn: w for w in workers}
        deadline = dict.fromkeys(pending, time.monotonic() + timeout)
        replies: dict[int, Any] = {}
        while pending:
            now = time.monotonic()
            for conn in [c for c in pending if deadline[c] <= now]:
                replies[pending.pop(conn).index] = f"no reply within {timeout:g} s (timed out)"
            if not pending:
                break
            soonest = min(deadline[c] for c in pending)
            for conn in mp_connection.wait(list(pending), timeout=max(soonest - now, 0)):
                w = pending[conn]
                try:
                    kind, body = conn.recv()
                except (EOFError, OSError):
                    w.process.join(timeout=1.0)
                    replies[w.index] = f"worker process died (exit code {w.process.exitcode})"
                    del pending[conn]
                    continue
                if kind == "progress" or (kind == "ready" and not want_ready):
                    deadline[conn] = time.monotonic() + timeout  # (a restarted worker's envs built)
                    continue
                replies[w.index] = str(body) if kind == "fatal" else body
                del pending[conn]
        return replies

    def _restart(self, w: _Worker) -> None:
        """Kill worker ``w`` and start a fresh one with the same envs (built anew)."""
        _kill(w)
        self._workers[w.index] = self._start(w.index, w.first, w.count)
        self.restarts += 1


def _kill(w: _Worker) -> None:
    """Kill a worker process and reap it (no zombie)."""
    if w.process.is_alive():
        w.process.kill()
    w.process.join(timeout=5.0)
    w.conn.close()


def _shutdown(workers: list[_Worker], grace: float = 2.0) -> None:
    """Ask every worker to stop, wait up to ``grace`` seconds in all, then kill the rest."""
    for w in workers:
        with contextlib.suppress(OSError):
            w.conn.send(("close", None))
    deadline = time.monotonic() + grace
    for w in workers:
        w.process.join(timeout=max(deadline - time.monotonic(), 0.0))
        _kill(w)


@atexit.register
def _close_all_pools() -> None:
    """Best-effort shutdown of the pools still open when the interpreter exits."""
    for pool in list(_POOLS):
        pool.close()


def text_env_batch(
    factory: Callable[[], TextEnv], num_envs: int, num_workers: int, step_timeout: float = 60.0
) -> LocalEnvBatch | EnvPool:
    """``num_envs`` text environments: in this process when ``num_workers`` is 0, else in
    ``min(num_workers, num_envs)`` pool processes (the trainer's ``env.num_workers``)."""
    workers = min(num_workers, num_envs)
    if workers == 0:
        return LocalEnvBatch(factory, num_envs)
    return EnvPool(factory, num_envs, workers, step_timeout=step_timeout)
