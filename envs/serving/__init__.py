"""Our environments served through OpenEnv (``arlarena serve``, docs/environments.md §15).

* :mod:`envs.serving.panels`: what an episode index of a split plays (no OpenEnv needed).
* :mod:`envs.serving.source`: where a session's one-environment batch comes from (recycled,
  or a fresh copy of a compiled JAX batch; Python environments through the worker pool).
* :mod:`envs.serving.models`: the typed action, observation and state (pydantic subclasses of
  OpenEnv's types).
* :mod:`envs.serving.environment`: the OpenEnv ``Environment`` adapter, one per session.
* :mod:`envs.serving.server`: the app (OpenEnv's own ``create_app``) and the uvicorn server with
  its port check and SIGTERM shutdown.

Only this package's ``models``, ``environment`` and ``server`` import ``openenv`` (the
``openenv`` extra); importing ``envs.serving`` itself does not.
"""
