"""What every ``envs/<name>/spec.py`` repeats, written once: a function that imports its module
on the first call (a spec names its CLI, expert and device program without importing their heavy
or optional dependencies), the expert's batch and reasoning settings, the host pool batch, and
the range checks of a settings section that raise :class:`arlarena_base.errors.InvalidField`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from arlarena_base.errors import InvalidField
from envs.base import EnvBatch


def lazy(module: str, name: str) -> Callable[..., Any]:
    """``module.name`` as a function that imports ``module`` only when called, e.g. an
    ``EnvSpec``'s ``commands=lazy("envs.webshop.cli", "add_commands")``."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__module__ = module
    call.__doc__ = f"``{module}.{name}``, imported on the first call."
    return call


def demo_batch_size(env: Any) -> int:
    """Episodes the expert plays at once: one training batch (``train_batch_size`` groups of
    ``group_size``)."""
    return env.train_batch_size * env.group_size


def expert_options(env: Any, section: str) -> dict[str, Any]:
    """The text experts' common keywords: ``think`` (``env.<section>.expert_think``: a short
    rationale in each demonstration, else an empty ``<think>``) and ``batch_size``."""
    return {"think": getattr(env, section).expert_think, "batch_size": demo_batch_size(env)}


def pool_batch(env: Any, factory: Any, num_envs: int) -> EnvBatch:
    """``num_envs`` environments of ``factory`` in ``env.num_workers`` pool processes (0: in this
    process), each step bounded by ``env.step_timeout_s``."""
    from envs.pool import text_env_batch

    return text_env_batch(factory, num_envs, env.num_workers, env.step_timeout_s)


def require_one_of(owner: str, settings: Any, choices: Mapping[str, Sequence[str]]) -> None:
    """Each field of ``choices`` is one of its values, else an :class:`InvalidField` naming
    them (``owner``: the section, e.g. ``"webshop"``)."""
    for field, valid in choices.items():
        value = getattr(settings, field)
        if value not in valid:
            raise InvalidField(owner, field, f"must be one of {', '.join(valid)}, got {value!r}")


def require_at_least(
    owner: str, settings: Any, minimums: Mapping[str, float], *, strict: bool = False
) -> None:
    """Each field of ``minimums`` is ``>=`` its minimum (``strict``: ``>``), else an
    :class:`InvalidField` (a NaN fails too)."""
    for field, minimum in minimums.items():
        value = getattr(settings, field)
        if not (value > minimum if strict else value >= minimum):
            rule = ">" if strict else ">="
            raise InvalidField(owner, field, f"must be {rule} {minimum}, got {value!r}")
