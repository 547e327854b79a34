"""Memoised parsing for the pinned ALFWorld engine (textworld 1.7.0, fast-downward-textworld).

Profiling the suite's ALFWorld work (building games, the expert, the environment pool) found
most of it re-parsing the same texts:

* ``textworld.envs.pddl.textgen._parse_and_convert``: every feedback sentence of every step is
  derived by parsing its template with tatsu again, although a game has a few dozen templates;
* ``textworld.logic._parse_and_convert``: every such sentence's conditions (conjunctive queries
  over the state) are parsed again too;
* ``fast_downward.pddl2sas``: every ``PddlState`` (each ``load`` and each ``reset`` of a game)
  translates the same domain and problem to SAS twice (plain and optimised), from scratch.

All three are pure functions of their text arguments, so :func:`install` wraps them with a bounded
per-process memo. A parse result (symbols whose ``context`` the derivation overwrites, rules and
propositions) is deep-copied for each call; the translated task is only read (actions, types,
objects, initial facts), and the SAS text is a string, so those are shared. ``pddl2sas`` also
rewrites ``sys.argv`` (a hack of fast-downward's option parser); a cached call does not.

The observable behaviour is unchanged: the same walkthroughs, feedback texts and admissible
commands (tests/envs/test_alfworld_speedups.py plays the same games with and without). Games
that differ in their problem text get their own entries; the memo holds at most ``MAX_ENTRIES``
of each. ``ARLARENA_ALFWORLD_MEMO=off`` leaves the engine as it is (bench/alfworld_env.py's
baseline).
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Callable
from typing import Any

SWITCH_ENV = "ARLARENA_ALFWORLD_MEMO"  # off: the engine's own parsers (a baseline, a suspicion)
MAX_ENTRIES = 4096  # templates of the ALFRED grammar: a few hundred; problems: one per game


def memoised_parse(parse: Callable[..., Any]) -> Callable[..., Any]:
    """``parse(*args, **kwargs)`` computed once per distinct arguments; a deep copy each call."""
    cached = functools.lru_cache(maxsize=MAX_ENTRIES)(
        lambda args, kwargs: parse(*args, **dict(kwargs))
    )

    @functools.wraps(parse)
    def wrapper(*args, **kwargs):
        return copy.deepcopy(cached(args, tuple(sorted(kwargs.items()))))

    wrapper.cache_info = cached.cache_info  # type: ignore[attr-defined]
    return wrapper


def memoised_translation(pddl2sas: Callable[..., Any]) -> Callable[..., Any]:
    """``pddl2sas(domain, problem, verbose, optimize)`` once per distinct arguments, shared."""
    cached = functools.lru_cache(maxsize=MAX_ENTRIES)(pddl2sas)

    @functools.wraps(pddl2sas)
    def wrapper(domain: str, problem: str, verbose: bool = False, optimize: bool = False):
        return cached(domain, problem, bool(verbose), bool(optimize))

    wrapper.cache_info = cached.cache_info  # type: ignore[attr-defined]
    return wrapper


def _targets() -> list[tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]]:
    import fast_downward
    import textworld.logic
    from textworld.envs.pddl import textgen

    return [
        (textgen, "_parse_and_convert", memoised_parse),
        (textworld.logic, "_parse_and_convert", memoised_parse),
        (fast_downward, "pddl2sas", memoised_translation),
    ]


def install() -> None:
    """Wrap the three parsers in this process (idempotent), unless ``$ARLARENA_ALFWORLD_MEMO``
    is ``off``. Call after the engine imports."""
    if os.environ.get(SWITCH_ENV, "").strip().lower() in ("off", "0", "false"):
        return
    for module, name, wrap in _targets():
        current = getattr(module, name)
        if not hasattr(current, "cache_info"):
            setattr(module, name, wrap(current))


def uninstall() -> None:
    """Put the engine's own parsers back (the baseline of bench/alfworld_env.py)."""
    for module, name, _ in _targets():
        current = getattr(module, name)
        if hasattr(current, "cache_info"):
            setattr(module, name, current.__wrapped__)
