"""Test session setup: 8 simulated CPU devices for the multi-device tests.

XLA reads the flag when JAX initialises its backend, so it is set before any test imports JAX.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
