"""The math reward (spec environments §5, "Reward"): binary, by math-verify, with a timeout.

``reward = 1`` iff ``verify(parse(\\boxed{gt}), parse(\\boxed{extract_answer(text)}))``, as
SimpleTIR/ARLArena's ``hf_math_verify.compute_score`` (a string that already contains ``\\boxed``
is not wrapped again). Its comparison calls ``sympy_expr_eq(gold, target, 6, 15, True)``, which
under math-verify 0.9 passes ``True`` as ``allow_set_relation_comp``; :func:`is_correct` passes
the same (``strict`` stays True).

math-verify's own timeouts use ``signal.alarm`` and only work in a main thread, so they are off
here (``parsing_timeout=None``, ``timeout_seconds=None``). :class:`Scorer` enforces the
original's 10-s limit instead: it runs :func:`is_correct` in a plain worker subprocess
(:mod:`envs.math.score_worker`) and kills it when a reply is late. A plain subprocess (not a
process pool) works from threads and from non-daemonic multiprocessing workers alike.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envs.math.answer import extract_answer, has_boxed

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "REPO_ROOT",
    "Score",
    "Scorer",
    "default_worker_command",
    "is_correct",
]

DEFAULT_TIMEOUT_S = 10.0  # the original's per-answer limit
DEFAULT_START_TIMEOUT_S = 60.0
REPO_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the `envs` package


def _boxed(answer: str) -> str:
    """``\\boxed{answer}`` unless the answer already has a ``\\boxed``."""
    return answer if "\\boxed" in answer else f"\\boxed{{{answer}}}"


def is_correct(predicted: str, ground_truth: str) -> bool:
    """Whether math-verify finds ``\\boxed{predicted}`` equal to ``\\boxed{ground_truth}``.

    No timeout (run it in :class:`Scorer`'s worker for one); any error is False.
    """
    from math_verify import parse, verify

    try:
        target = parse(_boxed(predicted), parsing_timeout=None)
        gold = parse(_boxed(ground_truth), parsing_timeout=None)
        return bool(verify(gold, target, allow_set_relation_comp=True, timeout_seconds=None))
    except Exception:  # malformed model output is a normal event: it scores 0
        return False


@dataclasses.dataclass(frozen=True)
class Score:
    """One scored response: ``correct`` (the binary reward), the ``extracted`` answer, ``boxed``
    (the text had ``\\boxed{``: the is_boxed_ratio metric), whether scoring ``timed_out`` (the
    answer's fault: scored incorrect) and whether the scorer ``failed`` (its worker died twice or
    never started: no verdict, an infrastructure failure; docs/environments.md §9.3)."""

    correct: bool
    extracted: str
    boxed: bool
    timed_out: bool = False
    failed: bool = False


def default_worker_command() -> list[str]:
    """The default worker: this interpreter running :mod:`envs.math.score_worker`."""
    return [sys.executable, "-m", "envs.math.score_worker"]


class _WorkerDied(Exception):
    """The worker exited, closed its pipe, or answered something unreadable."""


class _WorkerTimeout(Exception):
    """The worker did not answer within the deadline."""


class Scorer:
    """The math reward with a per-answer timeout, scored in a lazily started worker subprocess.

    ``score(text, gt)`` extracts the answer (:func:`extract_answer`; empty -> incorrect without
    asking the worker) and asks the worker. A reply later than ``timeout_s`` kills the worker
    (the next call starts a fresh one), counts in ``timeouts`` and scores incorrect with
    ``timed_out=True``. A dead worker (or one not ready within ``start_timeout_s``) is restarted
    and the call retried once; a second death scores incorrect with ``failed=True`` and counts in
    ``failures``. Calls
    are serialised by a lock (one worker per Scorer; use one Scorer per thread for parallelism).
    A process forked or unpickled from an owner starts its own worker.
    """

    def __init__(
        self,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        worker_command: Sequence[str] | None = None,
    ) -> None:
        self.timeout_s = float(timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self.worker_command = list(worker_command) if worker_command else default_worker_command()
        self.timeouts = 0
        self.failures = 0
        self._reset_process_state()

    def _reset_process_state(self) -> None:
        """No worker, an empty read buffer, a fresh lock, owned by this process."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_proc", "_buf", "_lock", "_pid"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_process_state()

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if self._pid == os.getpid():  # never the worker of the process we were forked from
                self._kill()
        except Exception:
            pass

    def close(self) -> None:
        """Kill the worker (a later :meth:`score` starts a new one)."""
        if getattr(self, "_pid", None) != os.getpid():
            return
        with self._lock:
            self._kill()

    def score(self, text: str, ground_truth: str) -> Score:
        """Score one response against the ground truth (see the class docstring)."""
        extracted = extract_answer(text)
        boxed = has_boxed(text)
        if not extracted:
            return Score(False, extracted, boxed)
        request = {"predicted": extracted, "ground_truth": str(ground_truth)}
        payload = (json.dumps(request) + "\n").encode("utf-8")
        if self._pid != os.getpid():  # forked: the worker and lock belong to the parent
            self._reset_process_state()
        with self._lock:
            correct, timed_out, failed = self._ask_with_retry(payload)
        return Score(correct, extracted, boxed, timed_out, failed)

    def _ask_with_retry(self, payload: bytes) -> tuple[bool, bool, bool]:
        """(correct, timed_out, failed): one retry on a dead worker, none on a timeout."""
        for _ in range(2):
            try:
                return self._ask(payload), False, False
            except _WorkerTimeout:
                self._kill()
                self.timeouts += 1
                return False, True, False
            except _WorkerDied:
                self._kill()
        self.failures += 1
        return False, False, True

    def _ask(self, payload: bytes) -> bool:
        """Send one request and read its reply within ``timeout_s``."""
        proc = self._ensure_started()
        assert proc.stdin is not None
        try:
            proc.stdin.write(payload)
            proc.stdin.flush()
        except OSError as error:  # BrokenPipeError: it died
            raise _WorkerDied(str(error)) from None
        reply = _parse_reply(self._read_line(time.monotonic() + self.timeout_s))
        if "correct" not in reply:
            raise _WorkerDied(f"unexpected reply {reply!r}")
        return bool(reply["correct"])

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        """The running worker, started (and awaited until ready) when there is none."""
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._kill()
        env = dict(os.environ)
        path = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + path if path else "")
        try:
            self._proc = subprocess.Popen(
                self.worker_command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
                cwd=REPO_ROOT,
                env=env,
            )
        except OSError as error:  # no such program, no processes left
            raise _WorkerDied(f"cannot start the worker: {error}") from None
        try:
            ready = _parse_reply(self._read_line(time.monotonic() + self.start_timeout_s))
        except _WorkerTimeout:
            raise _WorkerDied("not ready in time") from None
        if ready.get("ready") is not True:
            raise _WorkerDied(f"unexpected greeting {ready!r}")
        return self._proc

    def _read_line(self, deadline: float) -> bytes:
        """The worker's next line (without the newline), waiting until ``deadline`` at most."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise _WorkerTimeout
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise _WorkerDied("end of output")
                self._buf += chunk
        line, _, rest = bytes(self._buf).partition(b"\n")
        self._buf = bytearray(rest)
        return line

    def _kill(self) -> None:
        """Kill and reap the worker, if any, and forget its unread output."""
        proc, self._proc = self._proc, None
        self._buf = bytearray()
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5.0)


def _parse_reply(line: bytes) -> dict[str, Any]:
    """A reply line as a dict; anything else means the worker is broken."""
    try:
        reply = json.loads(line)
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        raise _WorkerDied(f"unreadable reply {line[:200]!r}")
    return reply
