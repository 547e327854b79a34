"""One OpenEnv episode per session (docs/environments.md, §15.2).

:class:`OpenEnvTextEnv` is a :class:`envs.base.TextEnv`: the host pool (``envs.pool``) or
``envs.local.LocalEnvBatch`` runs N of them, each built by a picklable :class:`OpenEnvFactory`.

* ``reset(seed)`` closes the previous session, opens a new one and calls the server's
  ``reset(seed=seed)``. The observation's text is :func:`envs.openenv.render.observation_text`,
  its admissible actions the ``admissible_field`` list, its task ``instructions``.
* ``step(text)`` sends ``{action_field: text, **action_extra}``; the reward is the server's. The
  episode ends when the server says ``done`` or after ``max_steps`` steps; the session is closed
  then. ``info``: ``won`` (``won_field``, else: the server ended it with a reward > 0),
  ``action_is_effective``, ``openenv_error`` (one line, on an invalid step).
* A rejected or malformed reply (an error frame, a reply that is not JSON or lacks the declared
  fields, a non-finite reward) is an **invalid step**: reward 0, ``action_is_effective`` False,
  the observation unchanged; the episode goes on. A **late** reply (none within
  ``message_timeout_s``) is an invalid step that ends the episode (the client dropped the
  socket, and with it the server's episode). A **lost** session (refused, closed, the server
  died) ends the episode as a failure (``info["failure"]``), masked out of the group statistics
  as the pool's failures are (``arlarena_jax.rollout``); the next reset opens a new session.
  A reset that fails raises (the pool reports the failure at the next step).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from envs.base import Observation
from envs.openenv import render
from envs.openenv.session import Late, Lost, Rejected, Session
from envs.openenv.settings import OpenEnvConfig

Outcome = tuple[Observation, float, bool, dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class OpenEnvFactory:
    """Builds an :class:`OpenEnvTextEnv` on ``url`` (picklable: pool workers call it)."""

    settings: OpenEnvConfig
    url: str
    max_steps: int

    def __call__(self) -> OpenEnvTextEnv:
        return OpenEnvTextEnv(self.settings, self.url, self.max_steps)


class OpenEnvTextEnv:
    """An OpenEnv environment behind one client session per episode (see module doc)."""

    def __init__(self, settings: OpenEnvConfig, url: str, max_steps: int) -> None:
        self.settings, self.url, self.max_steps = settings, url, max_steps
        self._extra = render.extra_fields(settings.action_extra)
        self._session: Session | None = None
        self._obs = Observation("")
        self._steps, self._done = 0, True
        self._after: dict[str, Any] = {"won": False}  # what steps after the end report

    def _observation(self, raw: Any) -> Observation:
        s = self.settings
        text = render.observation_text(raw, s.observation_field)
        return Observation(text, render.admissible(raw, s.admissible_field), s.instructions)

    def reset(self, seed: int) -> Observation:
        """A new session, the server's ``reset(seed=seed)``; a failure raises one line."""
        self.close()
        s = self.settings
        self._session = Session(self.url, s.connect_timeout_s, s.message_timeout_s)
        try:
            result = self._session.reset(int(seed))
            self._obs = self._observation(result.observation)
        except (Late, Lost, Rejected, render.Malformed) as exc:
            self.close()
            raise RuntimeError(f"openenv reset on {self.url}: {exc}") from None
        self._steps, self._done = 0, bool(result.done)
        self._after = {"won": False}
        return self._obs

    def step(self, action: Any) -> Outcome:
        """One step of the server (see module doc); never raises for a reply's sake."""
        if self._done or self._session is None:
            return self._obs, 0.0, True, dict(self._after)
        self._steps += 1
        payload = render.action_payload(str(action), self.settings.action_field, self._extra)
        try:
            result = self._session.step(payload)
            obs, reward = self._observation(result.observation), render.reward_of(result.reward)
        except Lost as exc:
            failure = {"won": False, "failure": f"openenv session lost: {exc}"}
            return self._end(0.0, failure, wait=False)
        except Late as exc:
            why = f"late reply (over {self.settings.message_timeout_s} s): {exc}"
            return self._end(0.0, self._invalid(why), wait=False)
        except (Rejected, render.Malformed) as exc:
            done = self._steps >= self.max_steps
            return (self._end if done else self._go_on)(0.0, self._invalid(str(exc)))
        self._obs = obs
        info = {"won": self._won(result, reward), "action_is_effective": True}
        if bool(result.done) or self._steps >= self.max_steps:
            return self._end(reward, info)
        return self._obs, reward, False, info

    def _won(self, result: Any, reward: float) -> bool:
        field = self.settings.won_field
        if field:
            raw = result.observation if isinstance(result.observation, dict) else {}
            return bool(raw.get(field, False))
        return bool(result.done) and reward > 0

    @staticmethod
    def _invalid(reason: str) -> dict[str, Any]:
        return {"won": False, "action_is_effective": False, "openenv_error": reason[:200]}

    def _go_on(self, reward: float, info: dict[str, Any]) -> Outcome:
        return self._obs, reward, False, info

    def _end(self, reward: float, info: dict[str, Any], *, wait: bool = True) -> Outcome:
        self._done = True
        self._after = {"won": False, **({"failure": info["failure"]} if "failure" in info else {})}
        if wait:
            self.close()
        elif self._session is not None:  # late: do not wait on the server's close handshake
            session, self._session = self._session, None
            session.abandon()
        return self._obs, reward, True, info

    def close(self) -> None:
        """Close the episode's session (idempotent)."""
        if self._session is not None:
            session, self._session = self._session, None
            session.close()
