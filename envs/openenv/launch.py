"""A third-party OpenEnv app started on localhost: ``uvicorn <module:attr>`` in a subprocess on a
free port, from the app's folder, ready once ``GET /health`` answers (``env.openenv.app``).

One server per (app, folder) per process, shared by every batch of the run and stopped at exit.
The server is the third party's code as published; nothing of ours is served."""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request

from arlarena_base.errors import ConfigError

_SERVERS: dict[tuple[str, str], tuple[subprocess.Popen, str]] = {}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def healthy(url: str, timeout: float) -> bool:
    """Whether ``url``/health answers 200 within ``timeout`` seconds (one try)."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=timeout) as reply:
            return reply.status == 200
    except (OSError, ValueError):
        return False


def start(app: str, folder: str, timeout: float) -> tuple[subprocess.Popen, str]:
    """Start ``uvicorn app`` on a free port from ``folder``; (process, url) once healthy, else a
    one-line ConfigError (the process stopped)."""
    if folder and not os.path.isdir(folder):
        raise ConfigError(f"config key 'env.openenv.app_dir': no folder {folder!r}")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [folder, os.environ.get("PYTHONPATH")])),
    }
    process = subprocess.Popen(
        [*command, "--log-level", "warning"],
        cwd=folder or None,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if healthy(url, 1.0):
            return process, url
        time.sleep(0.2)
    stop(process)
    tail = (process.stderr.read() if process.stderr else "").strip().splitlines()
    why = tail[-1][:200] if tail else f"no /health within {timeout} s"
    raise ConfigError(f"config key 'env.openenv.app': {app!r} did not start: {why}")


def stop(process: subprocess.Popen) -> None:
    """Terminate ``process``, then kill it after 5 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def server_url(app: str, folder: str, timeout: float) -> str:
    """The url of this process's server for ``app`` (started on first use, see module doc)."""
    key = (app, folder)
    known = _SERVERS.get(key)
    if known is None or known[0].poll() is not None:
        _SERVERS[key] = start(app, folder, timeout)
    return _SERVERS[key][1]


@atexit.register
def _stop_all() -> None:
    for process, _ in list(_SERVERS.values()):
        with contextlib.suppress(OSError):
            stop(process)
    _SERVERS.clear()
