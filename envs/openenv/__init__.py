"""Any OpenEnv environment as a text environment (docs/environments.md, "OpenEnv: training on any
OpenEnv environment"): ``settings`` (the ``env.openenv`` section), ``render`` (observation dict
→ text), ``session`` (one OpenEnv client session), ``env`` (one episode per session, run in the
pool), ``launch`` (a third-party ASGI app started locally with uvicorn), ``prompts``, ``spec``.

``openenv`` itself is imported lazily, only where a session is opened."""
