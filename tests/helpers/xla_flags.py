"""XLA_FLAGS for a worker script started by a test: the device count is the worker's own, the
suite's other flags (tests/conftest.py: ``-O0``) stay, so the worker compiles as the test process
it is compared with does. Imports nothing heavy: workers call it before importing JAX."""

from __future__ import annotations

import os


def set_device_count(devices: int) -> None:
    """``XLA_FLAGS`` := the inherited flags but any device count, + ``devices`` CPU devices;
    ``JAX_PLATFORMS`` defaults to ``cpu``."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f]
    flags.append(f"--xla_force_host_platform_device_count={devices}")
    os.environ["XLA_FLAGS"] = " ".join(flags)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
