"""A numeric x axis among one environment's groups tested at their end point: a budget sweep's
``sft.num_episodes`` (G), say, with one line per value of the other keys that split the groups
(``trainer.total_steps``: cloning only, cloning then RL).

:func:`choose_axis` decides from the groups' distinguishing keys alone; :func:`find_axis` applies
it to the groups that have test end-point episodes (:func:`~arlarena_jax.arena.report.end_point.
test_episodes`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from arlarena_jax.arena.report.end_point import test_episodes
from arlarena_jax.arena.report.groups import Group, flatten

METHOD_KEY = "algorithm.method"  # a line key where an environment's groups differ in method


@dataclasses.dataclass(frozen=True)
class AxisChoice:
    """The x key and the keys whose values name a line (none: one line)."""

    key: str
    line_keys: tuple[str, ...]


def number(text: str) -> float | None:
    """``text`` as a finite float, None if it is none (``true``, ``[1, 2]``, ``nan``)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def order(text: str) -> tuple:
    """A value's sort key: numbers first, by value, then text."""
    value = number(text)
    return (0, value, "") if value is not None else (1, 0.0, text)


def _distinct(points: Sequence[Mapping[str, str]], key: str) -> set[float]:
    """The distinct numbers of ``key``; none unless every value is a number."""
    values = [number(p[key]) for p in points]
    found = {v for v in values if v is not None}
    return found if None not in values else set()


def depends_on(points: Sequence[Mapping[str, str]], key: str, x: str) -> bool:
    """Whether ``key`` is a function of ``x``: one value of ``key`` per value of ``x``."""
    seen: dict[str, str] = {}
    return all(seen.setdefault(p[x], p[key]) == p[key] for p in points)


def _lines_hold(points: Sequence[Mapping[str, str]], x: str, lines: tuple[str, ...]) -> bool:
    """Each (x, line) holds one point at most, and some line has two x values or more."""
    cells = [(p[x], tuple(p[k] for k in lines)) for p in points]
    per_line: dict[tuple, set[str]] = {}
    for value, line in cells:
        per_line.setdefault(line, set()).add(value)
    return len(set(cells)) == len(cells) and any(len(v) > 1 for v in per_line.values())


def choose_axis(points: Sequence[Mapping[str, str]], key: str | None = None) -> AxisChoice | None:
    """The x axis of points (one per group: dotted key → value as text), or None; ``key``: the
    only candidate (declared with ``arlarena report --against KEY``).

    The keys are those every point has whose values are not all equal. A candidate x is such a
    key whose values are all finite numbers, two or more distinct; its line keys are the other
    keys, less those that are a function of x (one value per x value: a recipe chosen per x).
    It qualifies when each (x, line) holds one point at most and some line has two x values.
    Of several, the most distinct x values wins, ties by key name."""
    common = set.intersection(*(set(p) for p in points)) if points else set()
    keys = sorted(k for k in common if len({p[k] for p in points}) > 1)
    found = []
    for x in keys if key is None else [k for k in keys if k == key]:
        distinct = _distinct(points, x)
        if len(distinct) < 2:
            continue
        lines = tuple(k for k in keys if k != x and not depends_on(points, k, x))
        if _lines_hold(points, x, lines):
            found.append((-len(distinct), x, lines))
    if not found:
        return None
    _, x, lines = min(found)
    return AxisChoice(x, lines)


@dataclasses.dataclass(frozen=True)
class Axis:
    """One environment's groups on an x axis: ``xs`` (the x values as text, ascending),
    ``lines`` (labels such as ``trainer.total_steps=0``, in line order) and the group of each
    (x, line) that has one."""

    env: str
    key: str
    line_keys: tuple[str, ...]
    xs: tuple[str, ...]
    lines: tuple[str, ...]
    groups: Mapping[tuple[str, str], Group]

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """(later, earlier) for every two lines, in line order."""
        return [(b, a) for j, b in enumerate(self.lines) for a in self.lines[:j]]


def tested(group: Group) -> bool:
    """Whether some run of the group has test end-point episodes."""
    return any(test_episodes(run.path) is not None for run in group.runs)


def group_point(group: Group, keys: Sequence[str], methods: bool) -> dict[str, str]:
    """The group's values of ``keys`` (its own, else its first run's config where it has the
    key), its method too where ``methods``."""
    own, flat = dict(group.keys), flatten(group.runs[0].config)
    point = {k: own[k] if k in own else flat[k] for k in keys if k in own or k in flat}
    return point | ({METHOD_KEY: group.method} if methods else {})


def line_label(point: Mapping[str, str], keys: Sequence[str]) -> str:
    """``k=v`` of each line key, space-separated; ``all runs`` for no line keys (one line)."""
    return " ".join(f"{k}={point[k]}" for k in keys) or "all runs"


def find_axis(groups: Sequence[Group], key: str | None = None) -> Axis | None:
    """The x axis of one environment's groups tested at their end point (:func:`choose_axis`,
    ``key`` the only candidate where given); None without one."""
    chosen = [g for g in groups if tested(g)]
    keys = sorted({k for g in chosen for k, _ in g.keys})
    points = [group_point(g, keys, len({g.method for g in chosen}) > 1) for g in chosen]
    choice = choose_axis(points, key)
    if choice is None:
        return None
    x, line_keys = choice.key, choice.line_keys
    ordered = sorted(points, key=lambda p: [order(p[k]) for k in line_keys])
    lines = tuple(dict.fromkeys(line_label(p, line_keys) for p in ordered))
    xs = tuple(sorted({p[x] for p in points}, key=order))
    cells = {(p[x], line_label(p, line_keys)): g for p, g in zip(points, chosen, strict=True)}
    return Axis(chosen[0].env, x, line_keys, xs, lines, cells)
