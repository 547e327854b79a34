"""Lazy access to the real engine: alfworld 0.4.2 and textworld[pddl] 1.7.0
(docs/environments.md §4).

They are an optional dependency (``pip install -e ".[alfworld]"``; fast-downward builds from
source). Importing ``alfworld.info`` creates ``$ALFWORLD_DATA``, so :func:`alfworld` points that
variable at a cache directory first when the user has not set it. Nothing is downloaded.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from envs.alfworld import speedups

INSTALL_HINT = 'pip install -e ".[alfworld]" (alfworld==0.4.2, textworld[pddl]==1.7.0)'
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "arlarena"


def available() -> bool:
    """Whether alfworld and textworld can be imported."""
    try:
        alfworld()
    except ImportError:
        return False
    return True


def alfworld() -> ModuleType:
    """The ``alfworld`` package with ``alfworld.info`` loaded and the engine's parsers memoised
    (:mod:`envs.alfworld.speedups`); a one-line ImportError if absent."""
    os.environ.setdefault("ALFWORLD_DATA", str(CACHE_DIR / "alfworld_data"))
    try:
        import alfworld as package
        import alfworld.info  # creates $ALFWORLD_DATA
        import textworld  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"ALFWorld needs the real engine: {INSTALL_HINT} ({exc})") from None
    speedups.install()
    return package


def domain_and_grammar() -> tuple[str, str]:
    """alfworld 0.4.2's ``alfred.pddl`` domain and ``alfred.twl2`` grammar texts."""
    info = alfworld().info
    return Path(info.ALFRED_PDDL_PATH).read_text(), Path(info.ALFRED_TWL2_PATH).read_text()


def play_env(*, expert: bool = False):
    """A textworld ``PddlEnv`` behind the ALFRED wrappers (``AlfredDemangler(shuffle=False)``,
    ``AlfredInfos``), as ``AlfredTWEnv.init_env`` builds it (docs/environments.md §4.1); with
    ``expert=True`` also ``AlfredExpert("handcoded")``, which adds the next expert command to every
    state (``extra.expert_plan``; alfworld-generate's solver, docs/environments.md §4.2)."""
    alfworld()
    import textworld
    from alfworld.agents.environment.alfred_tw_env import (
        AlfredDemangler,
        AlfredExpert,
        AlfredExpertType,
        AlfredInfos,
    )
    from textworld.envs import PddlEnv

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    env = AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))
    return AlfredExpert(env, expert_type=AlfredExpertType.HANDCODED) if expert else env
