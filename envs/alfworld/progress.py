"""ALFWorld's progress signal: the goal's state conditions the PDDL state satisfies
(docs/environments.md §1.9).

A game's goal (the problem's ``(:goal …)``, from ``alfworld.gen.goal_library``) is a conjunction
of existentials over typed variables, e.g. heat-then-place: some object ``?o`` of type Apple and
some receptacle ``?r`` of type DiningTable with ``(isHot ?o)`` and ``(inReceptacle ?o ?r)``. Its
atoms are of two kinds:

* *constraints*: predicates no action changes (types, capabilities such as ``heatable``, where a
  receptacle stands) and ``(not (= ?a ?b))``: they only choose which entities may fill a
  variable;
* *conditions*: predicates actions change (:data:`STATE_PREDICATES`: ``isHot``, ``inReceptacle``,
  ``holds``, ``isToggled``, ``atLocation``, …): the state the task asks for.

:func:`satisfied` is the largest number of conditions that hold together under one assignment of
the variables that meets every constraint (each existential is maximised on its own; they share
no variables). It reads the engine's facts (``state["_facts"]``) after each step, so it is a
function of the state alone: no planner, no expert. The goal holds exactly when every condition
does, so a won state satisfies them all. It is coarse and it can fall: a pick-and-place goal has
one condition, so its only increment is the win; taking the task's object out of the receptacle
the goal names (where the game may have put it at the start) undoes a condition.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# alfworld 0.4.2's alfred.pddl: the predicates some action's effect adds or deletes
STATE_PREDICATES = frozenset(
    {
        "atlocation",
        "objectatlocation",
        "opened",
        "inreceptacle",
        "checked",
        "holds",
        "holdsany",
        "isclean",
        "ishot",
        "iscool",
        "istoggled",
        "ison",
        "issliced",
    }
)

_NOT_CONSTRAINTS = frozenset({"and", "exists", "not"}) | STATE_PREDICATES
Node = str | list  # an s-expression: a token or a list of nodes
Fact = tuple[str, ...]  # (predicate, argument, …), lower-case


@dataclasses.dataclass(frozen=True)
class World:
    """The facts of one state, indexed for :func:`satisfied`."""

    facts: frozenset[Fact]
    by_type: Mapping[str, tuple[str, ...]]  # entity names by PDDL type


def parse(text: str) -> Node:
    """The first s-expression of ``text``, lower-cased (PDDL is case-insensitive), without
    ``;`` comments."""
    tokens = re.findall(r"\(|\)|[^\s()]+", re.sub(r";[^\n]*", "", text.lower()))
    stack: list[list] = [[]]
    for token in tokens:
        if token == "(":
            stack.append([])
        elif token == ")":
            if len(stack) == 1:
                raise ValueError("unbalanced ')' in a PDDL expression")
            node = stack.pop()
            stack[-1].append(node)
            if len(stack) == 1:
                return node
        else:
            stack[-1].append(token)
    raise ValueError("no complete PDDL expression")


def goal_of(problem: str) -> Node:
    """The goal formula of a PDDL problem text (what ``(:goal …)`` holds)."""
    at = problem.lower().find("(:goal")
    if at < 0:
        raise ValueError("the PDDL problem has no (:goal …) section")
    section = parse(problem[at:])
    if len(section) != 2:
        raise ValueError("the PDDL problem's (:goal …) must hold one formula")
    return section[1]


def conditions(goal: Node) -> int:
    """The number of condition atoms in ``goal`` (the most :func:`satisfied` can return)."""
    if isinstance(goal, str):
        return 0
    if goal[0] in ("and", "not"):
        return sum(conditions(child) for child in goal[1:])
    if goal[0] == "exists":
        return conditions(goal[2])
    return int(goal[0] in STATE_PREDICATES)


def world(facts: Iterable[Any]) -> World:
    """A :class:`World` of textworld ``Proposition`` facts (``name``, typed ``arguments``)."""
    out, by_type = set(), defaultdict(set)
    for fact in facts:
        out.add((fact.name.lower(), *(v.name.lower() for v in fact.arguments)))
        for v in fact.arguments:
            by_type[v.type.lower()].add(v.name.lower())
    return World(frozenset(out), {t: tuple(sorted(n)) for t, n in by_type.items()})


def satisfied(goal: Node, facts: World) -> int:
    """The most conditions of ``goal`` one constraint-meeting assignment satisfies (module doc);
    0 where no assignment meets the constraints."""
    best = _best(goal, {}, facts)
    return 0 if best is None else best


def _holds(atom: Sequence[Node], binding: Mapping[str, str], facts: World) -> bool:
    """Whether the atom, with its variables bound, is a fact (``=``: its two sides agree)."""
    args = tuple(binding.get(a, a) for a in atom[1:])
    if atom[0] == "=":
        return args[0] == args[1]
    return (atom[0], *args) in facts.facts


def _best(node: Node, binding: dict[str, str], facts: World) -> int | None:
    """Satisfied conditions of ``node`` under ``binding``; None where a constraint fails."""
    if isinstance(node, str):
        raise ValueError(f"unexpected token {node!r} in a PDDL goal")
    head = node[0]
    if head == "and":
        total = 0
        for child in node[1:]:
            value = _best(child, binding, facts)
            if value is None:
                return None
            total += value
        return total
    if head == "exists":
        return _exists(_variables(node[1]), node[2], binding, facts)
    atom = node[1] if head == "not" else node
    if isinstance(atom, str) or any(isinstance(a, list) for a in atom[1:]):
        raise ValueError(f"unsupported PDDL goal expression {head!r} (and, exists, not of an atom)")
    if head == "not":
        inner = _best(atom, binding, facts)
        if atom[0] in STATE_PREDICATES:
            return 1 - inner  # a negated condition holds when its atom does not
        return 0 if inner is None else None
    if head in STATE_PREDICATES:
        return int(_holds(node, binding, facts))
    return 0 if _holds(node, binding, facts) else None


def _variables(declaration: Sequence[str]) -> list[tuple[str, str]]:
    """``[?a ?b - type ?c - type2]`` as ``[(?a, type), (?b, type), (?c, type2)]``."""
    out, pending, tokens = [], [], list(declaration)
    while tokens:
        token = tokens.pop(0)
        if token == "-":
            kind = tokens.pop(0)
            out += [(name, kind) for name in pending]
            pending = []
        else:
            pending.append(token)
    return out + [(name, "object") for name in pending]


def _constraints(body: Node) -> list[Node]:
    """The constraint atoms among ``body``'s top-level conjuncts (checked while binding)."""
    conjuncts = body[1:] if body[0] == "and" else [body]
    out = []
    for atom in conjuncts:
        plain = atom[1] if atom[0] == "not" else atom
        if isinstance(plain, list) and plain[0] not in _NOT_CONSTRAINTS:
            out.append(atom)
    return out


def _meets(atom: Node, binding: Mapping[str, str], facts: World) -> bool | None:
    """Whether a constraint holds; None while one of its variables is unbound."""
    plain = atom[1] if atom[0] == "not" else atom
    if any(a.startswith("?") and a not in binding for a in plain[1:]):
        return None
    holds = _holds(plain, binding, facts)
    return not holds if atom[0] == "not" else holds


def _exists(
    variables: list[tuple[str, str]], body: Node, binding: dict[str, str], facts: World
) -> int | None:
    """The best of ``body`` over assignments of ``variables``, pruning on constraints as soon
    as their variables are bound."""
    constraints = _constraints(body)

    def search(k: int, bound: dict[str, str]) -> int | None:
        if k == len(variables):
            return _best(body, bound, facts)
        name, kind = variables[k]
        best = None
        for entity in facts.by_type.get(kind, ()):
            trial = {**bound, name: entity}
            if any(_meets(c, trial, facts) is False for c in constraints):
                continue
            value = search(k + 1, trial)
            if value is not None and (best is None or value > best):
                best = value
        return best

    return search(0, dict(binding))
