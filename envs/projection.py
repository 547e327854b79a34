"""Text → environment action, with the validity flags the trainer reads (docs/environments.md §1.5).

A projection never raises: any string (empty, binary junk, CJK, unbalanced tags) maps to some
action with flags. Malformed but extractable actions are still executed (docs/environments.md §1.5).

:func:`project_text` serves the text-command environments (ALFWorld, WebShop): a strict pass
over the whole response, then the first ``<action>…</action>`` chunk, then the last 30
characters of the raw response. Environment-specific projections (Sokoban's keyword test) live
in ``envs/<name>/prompts.py``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

CJK = re.compile("[\u4e00-\u9fff]")
# The four tags, whitespace inside the brackets allowed (the counts and the fallback search use
# them); a strict response has them without inner whitespace. Each pattern is linear to search:
# no nested or lazy groups, so projecting a reply of any length costs O(length).
TAG_PATTERNS = tuple(
    re.compile(pattern, re.I)
    for pattern in (r"<\s*think\s*>", r"</\s*think\s*>", r"<\s*action\s*>", r"</\s*action\s*>")
)
THINK_OPEN, THINK_CLOSE, ACTION_OPEN, ACTION_CLOSE = TAG_PATTERNS
# Strict tags: no inner whitespace; case-insensitive as ``re.I`` matches (its Unicode folding).
EXACT_TAGS = tuple(
    re.compile(re.escape(tag), re.I) for tag in ("<think>", "</think>", "<action>", "</action>")
)
RAW_TAIL = 30  # characters of an unparsable response kept as its action


class Projection(NamedTuple):
    """One projected response: the action the env executes and the two flags of
    docs/environments.md §1.3."""

    action: Any  # str (ALFWorld, WebShop) or int 0..4 (Sokoban)
    action_valid: bool
    format_valid: bool


def strict_format(text: str) -> str | None:
    """The action of a strictly formatted response, or None (docs/environments.md §1.5, case 1).

    Strict: the whole text is ``<think>…</think><action>…</action>`` with only whitespace around
    and between the two parts, each of the four tags occurs exactly once (whitespace inside the
    brackets counted too) and is written without inner whitespace (any case), and there is no
    CJK ideograph U+4E00–U+9FFF. Linear in the length: one pass per tag, then slices.
    """
    tags = []
    for pattern in TAG_PATTERNS:
        found = list(itertools.islice(pattern.finditer(text), 2))
        if len(found) != 1:
            return None
        tags.append(found[0])
    spans_in_order = all(a.end() <= b.start() for a, b in itertools.pairwise(tags))
    exact = all(tag.fullmatch(m.group(0)) for m, tag in zip(tags, EXACT_TAGS, strict=True))
    if not (spans_in_order and exact) or CJK.search(text):
        return None
    think_open, think_close, action_open, action_close = tags
    gaps = (
        text[: think_open.start()],
        text[think_close.end() : action_open.start()],
        text[action_close.end() :],
    )
    if any(gap.strip() for gap in gaps):
        return None
    return text[action_open.end() : action_close.start()]


def first_action(text: str) -> str | None:
    """The text between the first ``<action>`` tag and the next ``</action>`` after it (inner
    whitespace in the tags allowed), or None. When the first opening tag has no closing tag after
    it, no later one has either, so one forward search each suffices."""
    opening = ACTION_OPEN.search(text)
    if opening is None:
        return None
    closing = ACTION_CLOSE.search(text, opening.end())
    return None if closing is None else text[opening.end() : closing.start()]


def project_text(text: str, admissible: Sequence[str] | None = None) -> Projection:
    """ALFWorld / WebShop projection (docs/environments.md §1.5).

    ``admissible`` is the current state's command list (ALFWorld): a strictly formatted action is
    valid iff it is in the lower-cased list. With ``admissible=None`` (WebShop) a strictly
    formatted action is always valid.
    """
    action = strict_format(text)
    if action is not None:
        action = action.strip().lower()
        valid = admissible is None or action in {a.lower() for a in admissible}
        return Projection(action, valid, True)
    chunk = first_action(text)
    if chunk is not None:
        return Projection(chunk.strip().lower(), False, False)
    return Projection(text[-RAW_TAIL:], False, False)
