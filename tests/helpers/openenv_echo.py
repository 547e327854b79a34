"""A third party's OpenEnv environment on localhost for the OpenEnv tests: the echo environment
that openenv's own ``openenv init`` writes (the package's template, its code as published),
served by uvicorn in a subprocess (``envs.openenv.launch``).

The one change is the template's documented knob: ``max_concurrent_envs=1`` raised so that many
sessions can share the server ("increase this number to allow more concurrent WebSocket
sessions", the template's own comment)."""

from __future__ import annotations

from pathlib import Path

APP = "echo_game.server.app:app"
SESSIONS = 64  # concurrent sessions the server admits


def write_echo_env(folder: Path) -> Path:
    """``openenv init echo_game`` into ``folder`` (the command's own function, in this process:
    the CLI in a subprocess would import openenv again, ~6 s); returns ``folder``, the app's
    import root."""
    from openenv.cli.commands.init import init

    init("echo_game", output_dir=str(folder))
    app = folder / "echo_game" / "server" / "app.py"
    text = app.read_text()
    if "max_concurrent_envs=1," not in text:
        raise RuntimeError(f"openenv's template changed: no max_concurrent_envs=1 in {app}")
    app.write_text(text.replace("max_concurrent_envs=1,", f"max_concurrent_envs={SESSIONS},"))
    return folder


def settings(url: str, **changes):
    """``env.openenv`` for the echo environment on ``url``."""
    from envs.openenv.settings import OpenEnvConfig

    values = dict(
        url=url,
        action_field="message",
        observation_field="echoed_message",
        instructions="echo a message; longer messages earn more",
        connect_timeout_s=5.0,
        message_timeout_s=5.0,
    )
    return OpenEnvConfig(**{**values, **changes})
