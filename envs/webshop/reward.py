"""The WebShop purchase score, exactly as the original ``engine/goal.py::get_reward`` computes it
(docs/environments.md §6.7; ARLArena spec environments §4.4).

A purchase P = (product p, chosen options S, price π) is scored against a goal G with attributes A,
options O and price bound U::

    score = r_type × (n_att + n_opt + r_price) / (|A| + |O| + 1)

* ``r_price = 1[π ≤ U]``;
* ``n_att`` counts the goal attributes a with some product attribute ``token_set_ratio > 85``, or
  with a a substring of lower(title), lower(" ".join(bullets)) or lower(description);
* ``n_opt`` counts the goal options g with some chosen value s where
  ``token_set_ratio(normalize_color(s), normalize_color(g)) > 85``;
* ``r_type`` is 1.0, 0.5, 0.1 or 0.0 from the query, the breadcrumbs and the title nouns.

Two quirks of the original are kept on purpose, because the reward's behaviour depends on them:

* synthetic goals pass their options as ``dict.items()``, so each goal option is a
  ``(name, value)`` tuple. :func:`normalize_color` then tests *tuple membership* (a colour only
  when an element equals it), and the fuzzy matcher compares against ``str(tuple)``, i.e.
  "name value" after processing. Token-set matching makes this lenient: "large" matches
  ``('size', 'x-large')`` (100), while "medium" vs ``('size', 'large')`` is 25;
* the matcher is thefuzz 0.22's ``token_set_ratio`` with its defaults, re-expressed on rapidfuzz:
  ``str()`` of each argument, code points 128-255 deleted (thefuzz's "force_ascii", which leaves
  code points above 255 alone), ``rapidfuzz.utils.default_process``, then
  ``rapidfuzz.fuzz.token_set_ratio`` rounded with Python's ``round``.

The environment's reward is :func:`task_reward`: 10 for an exact 1.0, else 0.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from envs.webshop.catalogue import Product
from envs.webshop.goals import Goal

MATCH_THRESHOLD = 85  # a fuzzy match needs a ratio strictly above this
SUCCESS_REWARD = 10.0
CATEGORY_SEPARATOR = "›"
MIN_SHARED_CATEGORIES = 2
NO_NOUN_TITLE_SCORE = 0.2

# The original's colour words (web_agent_site/engine/normalize.py: 102, though the spec says 100),
# in its alphabetical order:
# normalize_color returns the first one found, so the order is part of the reward.
COLOR_SET: tuple[str, ...] = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue",
    "blush", "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne",
    "charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper",
    "coral", "cranberry", "cream", "crystal", "dark", "denim", "eggplant", "elephant", "espresso",
    "fuchsia", "gold", "granite", "grape", "graphite", "grass", "gray", "green", "grey",
    "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light",
    "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha",
    "multicolor", "mushroom", "mustard", "natural", "navy", "nude", "olive", "orange", "peach",
    "pewter", "pink", "plum", "purple", "rainbow", "red", "rose", "royal", "rust", "sand",
    "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone", "stonewash",
    "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet", "walnut", "wheat",
    "white", "wine", "yellow",
)  # fmt: skip

_LATIN1_HIGH = dict.fromkeys(range(128, 256))  # what thefuzz's force_ascii deletes

GoalOption = str | tuple[str, ...]
NounTagger = Callable[[str], Sequence[str]]


class TypeReward(NamedTuple):
    """The type factor and what it was decided from."""

    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


class RewardInfo(NamedTuple):
    """A purchase's score and its parts (weights w_* = |A|/D, |O|/D, 1/D with D = |A|+|O|+1)."""

    score: float
    r_type: float
    r_att: float | None  # None when the goal has no attributes
    w_att: float
    r_option: float | None  # None when the goal has no options
    w_option: float
    r_price: float
    w_price: float
    query_match: bool
    category_match: bool
    title_score: float


def _fuzz_process(value: object) -> str:
    """thefuzz's ``full_process(value, force_ascii=True)``: ``default_process`` of ``str(value)``
    with code points 128-255 deleted."""
    return default_process(str(value).translate(_LATIN1_HIGH))


def token_set_ratio(a: object, b: object) -> int:
    """thefuzz 0.22 ``fuzz.token_set_ratio(a, b)``: ``round(rapidfuzz token_set_ratio(proc(a),
    proc(b)))`` with ``proc`` = :func:`_fuzz_process`; 0 when either is None."""
    if a is None or b is None:
        return 0
    return round(fuzz.token_set_ratio(_fuzz_process(a), _fuzz_process(b)))


def normalize_color(value: GoalOption) -> GoalOption:
    """The first colour c of COLOR_SET with ``c in value``, else ``value``: a substring test for
    a string, an element-equality test for a (name, value) tuple."""
    for color in COLOR_SET:
        if color in value:
            return color
    return value


def price_reward(price: float, goal: Goal) -> float:
    """``r_price = 1[price ≤ goal.price_upper]``."""
    return 1.0 if price <= goal.price_upper else 0.0


def _attribute_in_text(attribute: str, product: Product) -> bool:
    """``a ⊂ lower(title)`` or ``a ⊂ lower(" ".join(bullets))`` or ``a ⊂ lower(description)``."""
    return (
        attribute in product.title.lower()
        or attribute in " ".join(product.bullets).lower()
        or attribute in product.description.lower()
    )


def attribute_matches(product: Product, goal: Goal) -> int:
    """``n_att = #{a ∈ A : max_p token_set_ratio(p, a) > 85 or a appears in the product text}``."""
    count = 0
    for attribute in goal.attributes:
        fuzzy = any(token_set_ratio(p, attribute) > MATCH_THRESHOLD for p in product.attributes)
        if fuzzy or _attribute_in_text(attribute, product):
            count += 1
    return count


def option_matches(chosen: Sequence[str], goal_options: Sequence[GoalOption]) -> int:
    """``n_opt = #{g ∈ O : ∃ s ∈ S, token_set_ratio(norm(s), norm(g)) > 85}`` (norm =
    :func:`normalize_color`; synthetic goal options are (name, value) tuples)."""
    purchased = [normalize_color(s) for s in chosen]
    count = 0
    for g in goal_options:
        target = normalize_color(g)
        if any(token_set_ratio(s, target) > MATCH_THRESHOLD for s in purchased):
            count += 1
    return count


def _categories(breadcrumbs: str) -> set[str]:
    """The stripped levels of ``"A › B › C"``."""
    return {level.strip() for level in breadcrumbs.split(CATEGORY_SEPARATOR)}


def title_score(product_title: str, goal_title: str, nouns: NounTagger) -> float:
    """``|set(nouns(p)) ∩ set(nouns(G))| / len(nouns(G))`` (the goal's list, duplicates
    counted), or 0.2 when the goal title has no nouns."""
    desired = list(nouns(goal_title))
    if not desired:
        return NO_NOUN_TITLE_SCORE
    return len(set(nouns(product_title)) & set(desired)) / len(desired)


def type_reward(product: Product, goal: Goal, nouns: NounTagger) -> TypeReward:
    """``r_type``: 1.0; 0.5 unless (same query or ≥ 2 shared breadcrumb levels or title score
    > 0.2); 0.1 if title score < 0.1; 0.0 if title score == 0 (later rules win)."""
    query_match = product.query == goal.query
    shared = _categories(product.product_category) & _categories(goal.product_category)
    category_match = len(shared) >= MIN_SHARED_CATEGORIES
    score = title_score(product.title, goal.name, nouns)
    r_type = 1.0
    if not (query_match or category_match or score > NO_NOUN_TITLE_SCORE):
        r_type = 0.5
    if score < 0.1:
        r_type = 0.1
    if score == 0.0:
        r_type = 0.0
    return TypeReward(r_type, query_match, category_match, score)


def purchase_score(
    product: Product,
    goal: Goal,
    price: float,
    options: Mapping[str, str],
    nouns: NounTagger,
) -> RewardInfo:
    """``score = (n_att + n_opt + r_price) / D × r_type`` with ``D = |A| + |O| + 1``;
    ``options`` maps option name -> chosen value (only the values are compared)."""
    kind = type_reward(product, goal, nouns)
    r_price = price_reward(price, goal)
    n_att = attribute_matches(product, goal)
    n_opt = option_matches(list(options.values()), goal.goal_options)
    n_a, n_o = len(goal.attributes), len(goal.goal_options)
    denominator = n_a + n_o + 1
    return RewardInfo(
        score=(n_att + n_opt + r_price) / denominator * kind.r_type,  # the original's order
        r_type=kind.r_type,
        r_att=n_att / n_a if n_a else None,
        w_att=n_a / denominator,
        r_option=n_opt / n_o if n_o else None,
        w_option=n_o / denominator,
        r_price=r_price,
        w_price=1 / denominator,
        query_match=kind.query_match,
        category_match=kind.category_match,
        title_score=kind.title_score,
    )


def task_reward(score: float) -> float:
    """ARLArena's environment reward: ``10 if score == 1.0 exactly else 0``."""
    return SUCCESS_REWARD if score == 1.0 else 0.0
