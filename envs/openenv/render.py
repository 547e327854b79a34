"""An OpenEnv observation (a JSON object) as text, and the text action as an OpenEnv action.

With ``observation_field`` the prompt shows that field (a string as it is, anything else as
JSON); without it, every field but ``reward``, ``done`` and ``metadata`` as one JSON object with
sorted keys. Malformed replies never raise here: they are reported as :class:`Malformed`."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from arlarena_base.errors import InvalidField

HIDDEN = ("reward", "done", "metadata")  # fields OpenEnv carries beside the observation


class Malformed(ValueError):
    """A reply that does not have the shape the settings declare (one line)."""


def extra_fields(text: str) -> dict[str, Any]:
    """``env.openenv.action_extra`` as a dict (``""``: none); anything but a JSON object is an
    InvalidField."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidField("openenv", "action_extra", f"is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidField("openenv", "action_extra", f"must be a JSON object, got {text!r}")
    return value


def as_text(value: Any) -> str:
    """A string as it is, anything else as compact JSON (``str`` for what JSON cannot hold)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def observation_text(observation: Any, field: str) -> str:
    """The text of ``observation`` (see module doc); not a mapping or no ``field``: Malformed."""
    if not isinstance(observation, Mapping):
        raise Malformed(f"observation is {type(observation).__name__}, not a JSON object")
    if field:
        if field not in observation:
            raise Malformed(f"observation has no field {field!r} (has {sorted(observation)})")
        return as_text(observation[field])
    return as_text({k: v for k, v in observation.items() if k not in HIDDEN})


def admissible(observation: Mapping[str, Any], field: str) -> tuple[str, ...]:
    """The admissible actions in ``field`` (``""``: none); a field that is not a list: Malformed."""
    if not field:
        return ()
    value = observation.get(field, [])
    if not isinstance(value, list | tuple):
        raise Malformed(f"observation field {field!r} is {type(value).__name__}, not a list")
    return tuple(as_text(v) for v in value)


def reward_of(value: Any) -> float:
    """A finite float reward (None: 0); anything else: Malformed."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Malformed(f"reward {value!r} is not a finite number")
    return float(value)


def action_payload(text: str, field: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    """The OpenEnv action: the constant ``extra`` fields and the text action in ``field``."""
    return {**extra, field: text}
