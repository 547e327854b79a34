"""Text → environment action, with the validity flags the trainer reads (docs/environments.md §1.5).

A projection never raises: any string (empty, binary junk, CJK, unbalanced tags) maps to some
action with flags. Malformed but extractable actions are still executed (docs/environments.md §1.5).

:func:`project_text` serves the text-command environments (ALFWorld, WebShop): a strict pass
over the whole response, then the first ``<action>…</action>`` chunk, then the last 30
characters of the raw response. Environment-specific projections (Sokoban's keyword test) live
in ``envs/<name>/prompts.py``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

STRICT = re.compile(r"^\s*<think>(.*?)</think>\s*<action>(.*?)</action>\s*$", re.I | re.S)
# The fallback search tolerates whitespace inside the tags, as the tag counts do.
FIRST_ACTION = re.compile(r"<\s*action\s*>(.*?)</\s*action\s*>", re.I | re.S)
CJK = re.compile("[\u4e00-\u9fff]")
TAG_PATTERNS = tuple(
    re.compile(pattern, re.I)
    for pattern in (r"<\s*think\s*>", r"</\s*think\s*>", r"<\s*action\s*>", r"</\s*action\s*>")
)
RAW_TAIL = 30  # characters of an unparsable response kept as its action


class Projection(NamedTuple):
    """One projected response: the action the env executes and the two flags of
    docs/environments.md §1.3."""

    action: Any  # str (ALFWorld, WebShop) or int 0..4 (Sokoban)
    action_valid: bool
    format_valid: bool


def strict_format(text: str) -> str | None:
    """The action group of a strictly formatted response, or None
    (docs/environments.md §1.5, case 1).

    Strict: the whole text matches ``<think>…</think><action>…</action>`` (whitespace around),
    each of the four tags occurs exactly once (whitespace inside the brackets counted too), and
    there is no CJK ideograph U+4E00–U+9FFF.
    """
    match = STRICT.match(text)
    if match is None or CJK.search(text):
        return None
    if any(len(tag.findall(text)) != 1 for tag in TAG_PATTERNS):
        return None
    return match.group(2)


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
    match = FIRST_ACTION.search(text)
    if match is not None:
        return Projection(match.group(1).strip().lower(), False, False)
    return Projection(text[-RAW_TAIL:], False, False)
