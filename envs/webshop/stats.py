"""How well search finds the goal products (docs/environments.md §6.10; spec environments §4.8
item 2): BM25 on a goal's instruction should put the target in the top 50 for most goals, but not
always first, or the shop would be trivial.

:func:`retrieval_ranks` asks a search engine (anything with ``search(keywords, k) -> [ASIN]``,
e.g. :class:`envs.webshop.search.BM25Search`) for each goal's lower-cased instruction text and
records the target's 0-based rank (None when it is not among the ``k`` results);
:func:`retrieval_summary` turns the ranks into top-1 / top-10 / top-50 fractions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from envs.webshop.goals import Goal

TOP_K = 50
CUTOFFS = (1, 10, 50)


class SearchEngine(Protocol):
    """What :func:`retrieval_ranks` needs: ASINs best first for lower-cased keywords."""

    def search(self, keywords: str, k: int = TOP_K) -> list[str]: ...


def retrieval_ranks(
    goals: Iterable[Goal], search: SearchEngine, k: int = TOP_K
) -> list[int | None]:
    """The 0-based rank of each goal's ASIN in ``search.search(lower(instruction_text), k)``,
    None when it is not returned."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    ranks: list[int | None] = []
    for goal in goals:
        results = list(search.search(goal.instruction_text.lower(), k))[:k]
        ranks.append(results.index(goal.asin) if goal.asin in results else None)
    return ranks


def retrieval_summary(ranks: Sequence[int | None]) -> dict[str, float | int]:
    """``{"n", "top1", "top10", "top50"}``: the number of ranks and the fraction of ranks below
    each cutoff (0.0 for no ranks)."""
    n = len(ranks)
    summary: dict[str, float | int] = {"n": n}
    for cutoff in CUTOFFS:
        hits = sum(1 for r in ranks if r is not None and r < cutoff)
        summary[f"top{cutoff}"] = hits / n if n else 0.0
    return summary
