"""One process of the host-exchange tests (tests/train/test_processes.py): joins the run's
processes (``ARLARENA_*`` variables), then does what ``argv[1]`` names and prints one JSON line.

- ``gather``: three allgathers of a per-process object, under two tags, interleaved, and what
  they took (``Exchange.traffic``);
- ``differ``: ``same_everywhere`` on a value that differs on process 1 (refused in one line);
- ``silent``: process 1 exits before the exchange; process 0 must lose it within the timeout.
"""

from __future__ import annotations

import json
import sys
import time

from arlarena_jax.train.distributed import initialize_if_distributed
from arlarena_jax.train.processes import Exchange, ProcessLost

if __name__ == "__main__":
    initialize_if_distributed()
    exchange = Exchange()
    what, me = sys.argv[1], exchange.index
    if what == "gather":
        first = exchange.allgather("a", {"process": me, "rows": list(range(me + 1))})
        other = exchange.allgather("b", f"text of {me}")
        second = exchange.allgather("a", me * 10)
        traffic = exchange.traffic
        out = {"first": first, "other": other, "second": second}
        print(json.dumps(out | {"traffic": [traffic.seconds, traffic.sent_bytes]}))
    elif what == "differ":
        try:
            exchange.same_everywhere("config", "abc" if me == 0 else "abd")
            print(json.dumps({"refused": None}))
        except Exception as error:
            print(json.dumps({"refused": str(error)}))
    elif what == "silent":
        if me == 1:
            sys.exit(0)
        started = time.monotonic()
        try:
            exchange.allgather("never", me)
            print(json.dumps({"lost": None}))
        except ProcessLost as error:
            print(json.dumps({"lost": str(error), "seconds": time.monotonic() - started}))
