"""The math reward's scoring worker: ``python -m envs.math.score_worker`` (started by
:class:`envs.math.verify.Scorer`).

Protocol, one JSON object per line: after importing math-verify and scoring one warm-up pair it
writes ``{"ready": true}``; then for each request ``{"predicted": str, "ground_truth": str}`` on
stdin it writes ``{"correct": bool}`` (:func:`envs.math.verify.is_correct`) and flushes. Any
exception for one pair (a malformed request, a parser error) answers ``{"correct": false}``. It
exits at the end of stdin, or when its parent process is gone.

The replies go to a private copy of the original stdout; file descriptor 1 and ``sys.stdout``
are pointed at stderr, so that a stray print in a parser cannot corrupt the protocol. Timeouts
are the parent's job (it kills this process), so math-verify's own signal-based ones are off.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from typing import TextIO

from envs.math.verify import is_correct

PARENT_POLL_S = 1.0


def _watch_parent(parent: int) -> None:
    """Exit (even mid-computation) once the parent is gone: we were re-parented."""
    while True:
        time.sleep(PARENT_POLL_S)
        if os.getppid() != parent:
            os._exit(0)


def _private_stdout() -> TextIO:
    """A writer on a copy of fd 1; fd 1 and ``sys.stdout`` then go to stderr."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def answer(line: str) -> bool:
    """Score one request line; False for anything malformed or any error."""
    try:
        request = json.loads(line)
        predicted, truth = request["predicted"], request["ground_truth"]
        if not isinstance(predicted, str) or not isinstance(truth, str):
            return False
        return is_correct(predicted, truth)
    except Exception:  # a bad pair is a normal event: it scores 0
        return False


def main() -> int:
    """Serve requests from stdin until it closes."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout is disabled" is intended
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    out = _private_stdout()
    is_correct("1", "1")  # warm up: the first parse loads sympy and the LaTeX grammar
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in iter(sys.stdin.readline, ""):
        if not line.strip():
            continue
        out.write(json.dumps({"correct": bool(answer(line))}) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
