"""Servers of ``arlarena serve`` for the serving tests: the real command in a child process
(port 0, its port read off its start line), and the checks that compare what OpenEnv's client
gets with the same environment stepped in process."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from arlarena_jax.train.config_io import apply_overrides, config_from_dict
from envs import registry

ROOT = Path(__file__).resolve().parents[2]
START = re.compile(r"serving \w+ \(split \w+\) at http://([\d.]+):(\d+)")


@dataclasses.dataclass
class Server:
    process: subprocess.Popen
    url: str
    idle: Any = None  # a session left idle since ``idle_since`` (time.monotonic())
    idle_since: float = 0.0
    reference: Any = None  # the in-process batch the test compares with


def launch(*args: str) -> subprocess.Popen:
    """``arlarena serve ARGS --port 0`` in a child process (this checkout's code)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "arlarena_jax.cli", "serve", *args, "--port", "0"]
    return subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)


def start_server(*args: str, wait_s: float = 120.0) -> Server:
    """``arlarena serve ARGS --port 0``, once it listens."""
    return listening(launch(*args), wait_s)


def listening(process: subprocess.Popen, wait_s: float = 120.0) -> Server:
    """The launched server, once its start line says where it listens."""
    deadline = time.monotonic() + wait_s
    lines = []
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line and process.poll() is not None:
            break
        lines.append(line)
        found = START.search(line)
        if found:
            return Server(process, f"http://{found.group(1)}:{found.group(2)}")
    process.kill()
    raise AssertionError(f"the server did not start: {''.join(lines)}")


def stop_server(server: Server, timeout: float = 20.0) -> tuple[int, str]:
    """SIGTERM, then its exit status and the rest of its stderr."""
    server.process.send_signal(signal.SIGTERM)
    try:
        _, rest = server.process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        server.process.kill()
        raise
    return server.process.returncode, rest


def env_section(name: str, *sets: str):
    """The trainer's env section the server builds for ``name`` with ``--set`` overrides."""
    config = apply_overrides(config_from_dict({"env": {"name": name}}), list(sets))
    return config.env


def local_batch(name: str, split: str, *sets: str):
    """The in-process reference: the registry's one-environment batch, no pool."""
    env = dataclasses.replace(env_section(name, *sets), num_workers=0)
    return registry.get(name).make_batch(env, 1, split)


def same_turn(served: dict, observation, reward, done, info) -> None:
    """One served step equals the in-process one: text, admissible, reward, done, info."""
    got = served.observation
    assert got["text"] == observation.text
    assert got["admissible"] == list(observation.admissible)
    assert got["task"] == observation.task
    assert served.reward == reward and served.done == done
    assert got["info"] == info and got["won"] == info["won"]


def outliving(pids: list[int], within_s: float) -> list[int]:
    """Those of ``pids`` still running (not zombies) after up to ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while True:
        alive = []
        for pid in pids:
            with contextlib.suppress(OSError, IndexError):
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found
