"""The built-in environments: one registration line each (loaded by :mod:`envs.registry` on its
first lookup)."""

from __future__ import annotations

from envs.alfworld.spec import ALFWORLD
from envs.math.spec import MATH
from envs.openenv.spec import OPENENV
from envs.registry import register
from envs.sokoban.spec import SOKOBAN
from envs.textworld.spec import TEXTWORLD
from envs.webshop.spec import WEBSHOP

register(SOKOBAN)
register(ALFWORLD)
register(WEBSHOP)
register(MATH)
register(TEXTWORLD)
register(OPENENV)
