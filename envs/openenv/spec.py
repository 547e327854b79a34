"""The registry entry of any OpenEnv environment (docs/environments.md, §15.2): ``env.name:
openenv`` with the ``env.openenv`` section.

The server is ``env.openenv.url``, or ``env.openenv.app`` started on localhost
(:mod:`envs.openenv.launch`). The start-up check opens one session and resets it: a server that
does not answer is one ConfigError line before anything else starts. Episodes run in the host
pool (``env.num_workers`` processes, 0: this process), one session each.

Splits: an external environment offers only ``reset(seed=...)``. The three splits are the
trainer's disjoint seed ranges, passed on as they are; whether different seeds are different
tasks (and so whether the splits hold different tasks) is the server's business, which this
side cannot check: ``split_members`` is None. No expert (so no cloning and no ``tiny-openenv``
tokenizer: ``model.tokenizer`` names a folder).
"""

from __future__ import annotations

from typing import Any

from arlarena_base.errors import ConfigError
from envs.base import EnvBatch
from envs.openenv.prompts import OPENENV_FORMAT
from envs.openenv.settings import OpenEnvConfig
from envs.registry import EnvSpec, check_split
from envs.spec_helpers import pool_batch


def server_url(env: Any) -> str:
    """``env.openenv.url``, or the url of the locally started ``env.openenv.app``."""
    s = env.openenv
    if s.url:
        return s.url.rstrip("/")
    from envs.openenv.launch import server_url as launched

    return launched(s.app, s.app_dir, s.start_timeout_s)


def _require_openenv() -> None:
    try:
        import openenv.core.generic_client  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"config key 'env.name': 'openenv' needs the openenv package "
            f"(pip install 'arlarena-jax[openenv]'): {exc}"
        ) from None


def check_data(env: Any, training: bool) -> None:
    """openenv importable, the timeouts inside the pool's, one session that resets (a seed
    outside every split's range); each failure is one ConfigError line."""
    from envs.openenv.env import OpenEnvTextEnv

    _require_openenv()
    s = env.openenv
    if not (s.url or s.app):
        raise ConfigError(
            "config key 'env.openenv.url': env.name openenv needs env.openenv.url (a running "
            "server) or env.openenv.app (module:attr of an app to start locally)"
        )
    if env.num_workers > 0 and s.message_timeout_s >= env.step_timeout_s:
        raise ConfigError(
            f"config key 'env.openenv.message_timeout_s': {s.message_timeout_s} must be below "
            f"env.step_timeout_s ({env.step_timeout_s}), or the pool kills the worker first"
        )
    url = server_url(env)
    probe = OpenEnvTextEnv(s, url, max_steps=1)
    try:
        probe.reset(0)
    except RuntimeError as exc:
        raise ConfigError(f"config key 'env.openenv.url': {str(exc)[:300]}") from None
    finally:
        probe.close()


def make_batch(env: Any, num_envs: int, split: str) -> EnvBatch:
    """``num_envs`` OpenEnv episodes of ``split`` (its seeds come from the trainer) in
    ``env.num_workers`` pool processes, each capped at ``env.max_turns`` steps."""
    from envs.openenv.env import OpenEnvFactory

    check_split(split)
    factory = OpenEnvFactory(env.openenv, server_url(env), env.max_turns)
    return pool_batch(env, factory, num_envs)


OPENENV = EnvSpec(
    name="openenv",
    make_batch=make_batch,
    formats={"paper": OPENENV_FORMAT},
    check_data=check_data,
    settings=OpenEnvConfig,
    native_reward="dense",  # the server's reward, whatever step it comes on
    single_reward=lambda env: env.openenv.win_reward,
    ignores={"data_path": "the environment is the server's: no data here"},
)
