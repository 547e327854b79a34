"""launch/memory_watchdog.sh: it logs the watched process's resident size and SIGKILLs it only
above the limit (a sleeper stands in for a run; MATCH keeps every other process out)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "launch" / "memory_watchdog.sh"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="uses ps and free from procps")


def _sleeper(marker: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])


def _watchdog(marker: str, limit_gb: int) -> subprocess.Popen:
    env = os.environ | {"MATCH": marker, "LIMIT_GB": str(limit_gb), "POLL_S": "0.2"}
    return subprocess.Popen(["bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE, text=True)


def _stop(watchdog: subprocess.Popen) -> str:
    watchdog.terminate()
    out, _ = watchdog.communicate(timeout=10)
    return out


def test_a_process_over_the_limit_is_killed_and_the_kill_logged():
    marker = f"watchdog-test-{uuid.uuid4().hex}"
    sleeper = _sleeper(marker)
    watchdog = _watchdog(marker, limit_gb=0)  # any resident size is over 0 GB
    try:
        assert sleeper.wait(timeout=20) == -signal.SIGKILL
    finally:
        sleeper.kill()
        out = _stop(watchdog)
    assert f"killing {sleeper.pid}: over 0 GB" in out, out


def test_a_process_under_the_limit_is_logged_and_left_running():
    marker = f"watchdog-test-{uuid.uuid4().hex}"
    sleeper = _sleeper(marker)
    watchdog = _watchdog(marker, limit_gb=1000)
    try:
        time.sleep(2.0)  # ~10 polls
        assert sleeper.poll() is None
    finally:
        out = _stop(watchdog)
        sleeper.kill()
    lines = [line for line in out.splitlines() if f"pid {sleeper.pid} rss_gb" in line]
    assert lines and "killing" not in out, out
