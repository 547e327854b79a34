"""One device program at a time per process when two threads dispatch them (asynchronous RL).

XLA runs a multi-device program's part on each device in the order the parts reach that device.
Asynchronous RL dispatches from two threads: the producer decodes (its sampler's programs wait
across the process's local devices) while the trainer updates (its programs wait across every
process's devices). Dispatched at the same moment, the two programs can reach two devices in
opposite orders: device 0 runs the update's part and waits for device 1, which runs the decode's
part and waits for device 0, for ever. Seen as a hang of the two-process k = 1 run on CPU
(tests/e2e/test_processes_train.py); NCCL on GPUs has the same rule. So each side takes the
process's device turn for its programs and gives it back once their results are ready: the
devices run one program at a time (they could not run two faster), and the producer's host work
(environments, tokenizing, the exchange) still overlaps the update.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import jax

T = TypeVar("T")
TURN = threading.RLock()  # re-entrant: a program run in turn may run others in turn


def in_turn(program: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``program(*args, **kwargs)`` with the device turn held until its results are ready."""
    with TURN:
        return jax.block_until_ready(program(*args, **kwargs))
