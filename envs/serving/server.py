"""The OpenEnv server of one environment: OpenEnv's own ``create_app`` under uvicorn.

:func:`build_app` wraps :class:`envs.serving.environment.ServedEnvironment` with OpenEnv's
``create_app`` (its WebSocket sessions, each with its own environment, at most
``max_sessions`` at once; its idle-session reaper with ``served.idle_timeout``; its error replies
to a malformed action). :func:`serve` binds the port first (one line when it is taken), runs
uvicorn, and on SIGTERM or SIGINT stops accepting, closes the open sessions (uvicorn's graceful
shutdown, at most ``GRACE_S`` seconds) and then every environment batch and pool worker.
"""

from __future__ import annotations

import errno
import functools
import logging
import signal
import socket
import sys
from typing import Any

import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.types import ConcurrencyConfig

from arlarena_base.errors import ConfigError
from envs.serving.environment import Served, ServedEnvironment
from envs.serving.models import ArlarenaObservation, ArlarenaState, action_model

GRACE_S = 5.0  # seconds open sessions get to finish once a stop is asked for
logger = logging.getLogger(__name__)


def build_app(served: Served, max_sessions: int) -> Any:
    """The FastAPI app OpenEnv builds for ``served`` (one environment per session)."""
    concurrency = ConcurrencyConfig(
        max_concurrent_envs=max_sessions, session_timeout=served.idle_timeout
    )
    return create_app(
        functools.partial(ServedEnvironment, served),
        action_model(served.name, served.moves),
        ArlarenaObservation,
        env_name=f"arlarena-{served.name}",
        concurrency_config=concurrency,
        state_cls=ArlarenaState,
    )


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``; a port in use is a one-line ConfigError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} on {host} is in use (another server?); choose another with --port"
            ) from None
        raise ConfigError(f"cannot listen on {host}:{port}: {error.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(served: Served, host: str, port: int, max_sessions: int, log_level: str) -> int:
    """Serve until SIGTERM or SIGINT, then shut down cleanly (see module doc); exit status 0."""
    sock = bind(host, port)
    stops: list[int] = []
    previous = {s: signal.signal(s, lambda n, _: stops.append(n)) for s in _SIGNALS}
    try:
        first = served.panels.seed(served.split, 0)
        # before any session: a reset, and with declared moves one step of the first (a JAX
        # batch compiles its step here; the next session's reset starts afresh)
        served.source.warm(served.split, first, 0 if served.moves else None)
        app = build_app(served, max_sessions)
        config = uvicorn.Config(
            app, log_level=log_level, timeout_graceful_shutdown=GRACE_S, lifespan="on"
        )
        server = uvicorn.Server(config)
        timeout = f"{served.idle_timeout:g} s" if served.idle_timeout else "none"
        print(
            f"arlarena: serving {served.name} (split {served.split}) at "
            f"http://{host}:{sock.getsockname()[1]}: {max_sessions} sessions at most, "
            f"idle timeout {timeout}",
            file=sys.stderr,
            flush=True,
        )
        if not stops:  # a stop asked for while warming up: no server
            server.run(sockets=[sock])  # uvicorn catches SIGTERM/SIGINT, re-raises them on exit
    finally:
        served.source.close()
        sock.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    why = f" ({signal.Signals(stops[0]).name})" if stops else ""
    print(f"arlarena: {served.name} server stopped{why}", file=sys.stderr, flush=True)
    return 0


_SIGNALS = (signal.SIGTERM, signal.SIGINT)
