"""Reading and writing ALFWorld ``initial_state.pddl`` problems (docs/environments.md §4.2).

The real files (json_2.1.1) have a fixed shape: ``(define (problem plan_trial_<id>)``, ``(:domain
alfred)``, an ``(:objects …)`` block, an ``(:init …)`` block with one flat fact per line (no
numeric fluents, no negations) and a ``(:goal …)`` taken from ``alfworld.gen.goal_library``. A
:class:`Problem` keeps the header and the objects block verbatim and the init block as a tuple of
facts, so a problem can be rewritten fact by fact and rendered back in the same layout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

_FACT = re.compile(r"\(([A-Za-z][^()]*)\)")

Fact = tuple[str, ...]


@dataclass(frozen=True)
class Problem:
    """One ALFWorld planning problem: verbatim head (define … objects block), init facts, goal."""

    head: str  # from "(define" up to and including the closing ")" of (:objects …)
    init: tuple[Fact, ...]
    goal: str  # the "(:goal …)" expression, without the final ")" that closes (define …)

    def facts(self, predicate: str) -> list[Fact]:
        """The init facts of one predicate, in file order (arguments only)."""
        return [f[1:] for f in self.init if f[0] == predicate]

    def with_init(self, init: tuple[Fact, ...], goal: str | None = None) -> Problem:
        """A copy with new init facts (and optionally a new goal)."""
        return replace(self, init=init, goal=self.goal if goal is None else goal)


def parse_problem(text: str) -> Problem:
    """Parse the text of an ``initial_state.pddl``; ``ValueError`` if it lacks a section."""
    for section in ("(define", "(:objects", "(:init", "(:goal"):
        if section not in text:
            raise ValueError(f"PDDL problem has no {section} section")
    i_init, i_goal = text.index("(:init"), text.index("(:goal")
    if not text.index("(:objects") < i_init < i_goal:
        raise ValueError("PDDL problem sections are not in the order objects, init, goal")
    head = text[:i_init].rstrip()
    init_body = text[i_init + len("(:init") : i_goal]
    init = tuple(tuple(m.group(1).split()) for m in _FACT.finditer(init_body))
    goal = _strip_outer_close(text[i_goal:])
    return Problem(head=head, init=init, goal=goal)


def render_problem(problem: Problem) -> str:
    """The problem as text in the layout of the real files (one fact per line)."""
    facts = "\n".join(f"        ({' '.join(f)})" for f in problem.init)
    return f"{problem.head}\n    \n\n(:init\n\n{facts}\n        )\n    \n\n{problem.goal}\n)\n"


def goal_text(pddl_template: str, **slots: str) -> str:
    """A goal_library ``pddl`` string made concrete: ``#`` → ``-``, ``{obj}`` etc. filled with
    class names, and its trailing ``)`` (which closes ``(define …``) dropped."""
    filled = pddl_template.replace("#", "-").format(**slots)
    return _strip_outer_close(filled.strip())


def _strip_outer_close(goal: str) -> str:
    """Keep the balanced ``(:goal …)`` expression at the start of ``goal``."""
    depth = 0
    for i, ch in enumerate(goal):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and ch == ")":
            return goal[: i + 1]
    raise ValueError("unbalanced parentheses in PDDL goal")
