"""The ``env.openenv`` config section (docs/environments.md, §15.2)."""

from __future__ import annotations

import dataclasses

from arlarena_base.errors import InvalidField
from envs.spec_helpers import require_at_least


@dataclasses.dataclass(frozen=True)
class OpenEnvConfig:
    """Where the OpenEnv server is, how a text action becomes its action and how its
    observation becomes text.

    One of ``url`` (a running server, ``http://host:port``) and ``app`` (``module:attr``
    of an ASGI app, e.g. ``echo_game.server.app:app``, that the run starts on localhost with
    uvicorn in a subprocess, from ``app_dir``) is set; neither is refused at start-up (the
    section exists, empty, in every config)."""

    url: str = ""  # a running OpenEnv server, http(s)://host:port
    app: str = ""  # or: module:attr of an ASGI app started locally (uvicorn subprocess)
    app_dir: str = ""  # the folder the app is imported from (its module's parent; "": cwd)
    action_field: str = "message"  # the action's field the projected text action is put into
    # the action's other fields, constant (JSON object text, e.g. '{"mode": "say"}'; "": none)
    action_extra: str = ""
    observation_field: str = ""  # the observation field shown as text ("": all fields as JSON)
    admissible_field: str = ""  # a list-of-strings field of admissible actions ("": none)
    won_field: str = ""  # a bool field telling a win ("": the env ended it with reward > 0)
    instructions: str = ""  # the task the prompt states (the env's own goal, in words)
    connect_timeout_s: float = 10.0  # opening a session (and the start-up probe)
    message_timeout_s: float = 30.0  # a reply later than this is an invalid step ending it
    start_timeout_s: float = 60.0  # a locally started app must answer /health within this
    win_reward: float = 1.0  # the winning step's reward under env.reward: single

    def __post_init__(self) -> None:
        if self.url and self.app:
            raise InvalidField("openenv", "url", "set env.openenv.url or env.openenv.app, not both")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise InvalidField(
                "openenv", "url", f"must start with http:// or https://, got {self.url!r}"
            )
        if self.app and (":" not in self.app or not all(self.app.split(":", 1))):
            raise InvalidField("openenv", "app", f"must be module:attr, got {self.app!r}")
        if not self.action_field:
            raise InvalidField("openenv", "action_field", "must name the action's text field")
        limits = {"connect_timeout_s": 0, "message_timeout_s": 0, "start_timeout_s": 0}
        require_at_least("openenv", self, limits, strict=True)
        from envs.openenv.render import extra_fields  # a malformed action_extra: one line

        extra_fields(self.action_extra)
