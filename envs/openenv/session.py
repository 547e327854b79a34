"""One OpenEnv client session (one WebSocket, one environment instance on the server): opened at
an episode's reset, closed at its end. ``openenv`` is imported here, lazily.

Errors are sorted into three kinds the environment treats differently (``envs.openenv.env``):
:class:`Late` (no reply within ``message_timeout_s``; the client drops the socket, so the
server-side episode is gone), :class:`Rejected` (the server answered with an error frame, e.g. an
action that fails its schema, or a reply that is not JSON: the session goes on) and
:class:`Lost` (anything else: the connection closed or refused, the server died)."""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any


class Late(Exception):
    """No reply within the message timeout."""


class Rejected(Exception):
    """The server answered with an error, or with something that is not a JSON reply."""


class Lost(Exception):
    """The session is gone: the connection was refused or closed, the server died."""


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def classify(exc: BaseException) -> Exception:
    """The kind of ``exc`` (see module doc), carrying its one-line text."""
    if isinstance(exc, TimeoutError):
        return Late(f"no reply: {_one_line(exc)}")
    if isinstance(exc, json.JSONDecodeError):
        return Rejected(f"reply is not JSON: {_one_line(exc)}")
    if isinstance(exc, RuntimeError) and str(exc).startswith("Server error"):
        return Rejected(_one_line(exc))
    return Lost(_one_line(exc))


class Session:
    """A synchronous ``openenv`` ``GenericEnvClient`` session on ``url``."""

    def __init__(self, url: str, connect_timeout_s: float, message_timeout_s: float) -> None:
        from openenv.core.generic_client import GenericEnvClient

        client = GenericEnvClient(
            base_url=url, connect_timeout_s=connect_timeout_s, message_timeout_s=message_timeout_s
        )
        self._client = client.sync()
        self._open = self._closed = False

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            if not self._open:
                self._client.connect()
                self._open = True
            return getattr(self._client, name)(*args, **kwargs)
        except Exception as exc:
            raise classify(exc) from exc

    def reset(self, seed: int) -> Any:
        """``reset(seed=seed)`` on the server: its StepResult (observation, reward, done)."""
        return self._call("reset", seed=seed)

    def step(self, action: dict[str, Any]) -> Any:
        """``step(action)`` on the server: its StepResult."""
        return self._call("step", action)

    def abandon(self) -> None:
        """Close in a background thread: a server that does not answer would hold the close
        handshake (the websocket's 10 s) on the episode's step."""
        threading.Thread(target=self.close, daemon=True, name="openenv-close").start()

    def close(self) -> None:
        """Close the socket (best effort, idempotent): the server ends the session."""
        if not self._closed:
            self._closed = True
            with contextlib.suppress(Exception):  # a dead server: nothing left to close
                self._client.close()
