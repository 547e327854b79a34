"""Any OpenEnv environment as a text environment (docs/environments.md, §15.2): ``settings``
(the ``env.openenv`` section), ``render`` (observation dict → text), ``session`` (one OpenEnv
client session), ``env`` (one episode per session, run in the pool), ``launch`` (a third-party
ASGI app started locally with uvicorn), ``prompts``, ``spec``.

``openenv`` itself is imported lazily, only where a session is opened."""
