"""Lazy access to the real TextWorld engine (textworld 1.7.0, docs/environments.md §10.1).

``textworld`` is an optional dependency (the ``alfworld`` extra installs it; Inform 7, which
compiles generated games, ships inside its wheel), so every import of it goes through
:func:`textworld`. :func:`clean` turns the Z-machine's raw output into the observation text.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator
from types import ModuleType
from typing import Any

INSTALL_HINT = 'pip install -e ".[alfworld]" (textworld==1.7.0)'
_BANNER_LINE = re.compile(r"^[\s$_|\\/<>]*$")  # a line of the ASCII-art "TextWorld" banner


def available() -> bool:
    """Whether ``textworld`` can be imported."""
    try:
        textworld()
    except ImportError:
        return False
    return True


def textworld() -> ModuleType:
    """The ``textworld`` package; a one-line ImportError where it is not installed."""
    try:
        import textworld as package
    except ImportError as exc:
        raise ImportError(f"TextWorld needs the real engine: {INSTALL_HINT} ({exc})") from None
    return package


def start(game_file: str) -> Any:
    """A textworld environment over ``game_file`` (a compiled ``.z8`` with its ``.json``
    beside it) reporting the infos the environment reads."""
    tw = textworld()
    infos = tw.EnvInfos(
        admissible_commands=True,
        objective=True,
        score=True,
        max_score=True,
        won=True,
        lost=True,
        policy_commands=True,
        extras=["walkthrough"],
    )
    with quiet():
        return tw.start(str(game_file), infos)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence jericho's warnings that a generated game is not one of its supported games (it
    has no built-in walkthrough for it; the environment reads TextWorld's own)."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message="(Unable to (retrieve walkthrough|find valid)|Game .* is not fully supported)",
        )
        yield


def clean(feedback: str) -> str:
    """The game's text without the banner, the ``>`` prompt line (and the status bar the
    Z-machine prints after it) and runs of blank lines."""
    lines = []
    for line in feedback.splitlines():
        stripped = line.strip()
        if stripped.startswith(">") or (stripped and _BANNER_LINE.match(stripped)):
            continue
        if stripped or (lines and lines[-1]):
            lines.append(stripped)
    return "\n".join(lines).strip()
