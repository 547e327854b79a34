"""The synthetic WebShop catalogue (envs/webshop/synthetic.py): determinism, the real files'
schema, the properties a synthetic catalogue must keep (reference spec environments §4.8), goals
the target can win, distractors, the noun lexicon and BM25 retrieval (envs/webshop/stats.py)."""

from __future__ import annotations

import collections
import itertools
import json
import re

import pytest
from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

from envs.webshop.catalogue import (
    ATTRIBUTES_FILE,
    ITEMS_FILE,
    NOUNS_FILE,
    PRODUCT_KEYS,
    load_catalogue,
    option_value,
)
from envs.webshop.goals import synthetic_goals
from envs.webshop.stats import retrieval_ranks, retrieval_summary
from envs.webshop.synthetic import (
    CATEGORIES,
    CRUMB,
    HUMAN_INSTRUCTIONS_FILE,
    OPTION_POOLS,
    word_count,
    write_synthetic_catalogue,
)
from envs.webshop.vocabulary import (
    ATTRIBUTE_SENTENCES,
    BULLET_LEADS,
    CATEGORY_TEXT,
    DETAILS,
    GROUPS,
    INTRO_VERBS,
    INTROS,
    NON_NOUNS,
    USE_SENTENCES,
    Group,
)

FILES = (ITEMS_FILE, ATTRIBUTES_FILE, HUMAN_INSTRUCTIONS_FILE, NOUNS_FILE)
ADJECTIVES = (
    "free", "long", "lasting", "waterproof", "lightweight", "soft", "natural", "wireless",
    "portable", "adjustable", "high", "slim", "breathable", "small", "solid", "smooth", "deep",
    "clear", "faux", "quick", "low", "organic", "resistant", "sensitive", "compact", "modern",
)  # fmt: skip


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_synthetic_catalogue(tmp_path_factory.mktemp("shop"), seed=0, num_products=1000)


@pytest.fixture(scope="module")
def records(folder):
    return json.loads((folder / ITEMS_FILE).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def entries(folder):
    return json.loads((folder / ATTRIBUTES_FILE).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def catalogue(folder):
    return load_catalogue(folder)


@pytest.fixture(scope="module")
def goal_set(catalogue):
    return synthetic_goals(catalogue, seed=0)


def _text(product) -> tuple[str, str, str]:
    return product.title.lower(), " ".join(product.bullets).lower(), product.description.lower()


def _in_text(attribute: str, product) -> bool:
    return any(attribute in t for t in _text(product))


def _in_list(attribute: str, product) -> bool:
    return any(
        fuzz.token_set_ratio(p, attribute, processor=default_process) > 85
        for p in product.attributes
    )


def _by_query(catalogue):
    groups = collections.defaultdict(list)
    for p in catalogue.products:
        groups[p.query].append(p)
    return groups


# ------------------------------------------------------------------ determinism and schema


def test_same_seed_same_bytes_other_seed_differs(folder, tmp_path):
    again = write_synthetic_catalogue(tmp_path / "again", seed=0, num_products=1000)
    other = write_synthetic_catalogue(tmp_path / "other", seed=1, num_products=1000)
    for name in FILES:
        assert (again / name).read_bytes() == (folder / name).read_bytes(), name
    assert (other / ITEMS_FILE).read_bytes() != (folder / ITEMS_FILE).read_bytes()


def test_schema(folder, records, entries, catalogue):
    assert len(records) == len(catalogue) == 1000
    asins = [r["asin"] for r in records]
    assert len(set(asins)) == len(asins)
    assert all(re.fullmatch(r"B0[A-Z0-9]{8}", a) for a in asins)
    for r in records:
        assert set(PRODUCT_KEYS) <= set(r)
        assert isinstance(r["small_description"], list) and r["images"]
    assert set(entries) == set(asins)  # every asin of items_shuffle has an entry
    assert all(set(e) >= {"attributes", "instruction_attributes"} for e in entries.values())
    assert json.loads((folder / HUMAN_INSTRUCTIONS_FILE).read_text()) == {}
    nouns = json.loads((folder / NOUNS_FILE).read_text())
    assert nouns == sorted(set(nouns)) and all(w == w.lower() for w in nouns)


# the word tables (envs/webshop/vocabulary.py)


def _fixed_text(group: Group) -> str:
    """Every non-attribute text a product of ``group`` can show, lower-cased."""
    text = CATEGORY_TEXT[group.category]
    pieces = [
        *group.types, *group.materials, *group.benefits, *group.uses, *group.tags,
        *group.specs, *text.brands, *text.fillers, *text.closers, *text.headers, *text.notes,
        *INTROS, *INTRO_VERBS.values(), *DETAILS, *USE_SENTENCES,
        *(t for ts in ATTRIBUTE_SENTENCES.values() for t in ts), *BULLET_LEADS.values(),
    ]  # fmt: skip
    return "\n".join(pieces).lower()


def _attribute_problems(group: Group) -> list[str]:
    """Attribute phrases of ``group`` that another phrase or the fixed text would match."""
    phrases = [p for p, _ in group.attributes]
    problems = [f"{group.query}: duplicate attribute {p!r}" for p in sorted(set(phrases))
                if phrases.count(p) > 1]  # fmt: skip
    fixed = _fixed_text(group)
    for i, a in enumerate(phrases):
        if a in fixed:
            problems.append(f"{group.query}: attribute {a!r} is in the fixed text")
        for b in phrases[i + 1 :]:
            ratio = fuzz.token_set_ratio(a, b, processor=default_process)
            if a in b or b in a or ratio > 85:
                problems.append(f"{group.query}: attributes {a!r} and {b!r} match ({ratio:.0f})")
    return problems


def _group_problems(group: Group) -> list[str]:
    """Type phrases without the head noun, bad breadcrumbs, clashing option pools."""
    problems = [f"{group.query}: type {t!r} lacks {group.head!r}" for t in group.types
                if group.head not in t.split()]  # fmt: skip
    if group.head in NON_NOUNS:
        problems.append(f"{group.query}: head noun {group.head!r} is in NON_NOUNS")
    for leaf in group.leaves:
        levels = len((group.crumbs + (CRUMB + leaf if leaf else "")).split(CRUMB))
        if not 3 <= levels <= 5:
            problems.append(f"{group.query}: breadcrumbs with leaf {leaf!r} have {levels} levels")
    names = [OPTION_POOLS[k][0] for k in group.options]
    if len(set(names)) != len(names):
        problems.append(f"{group.query}: two option pools share a name")
    values = [v.lower() for k in group.options for v in OPTION_POOLS[k][1]]
    if len(set(values)) != len(values):
        problems.append(f"{group.query}: option pools share a value")
    return problems


def vocabulary_problems() -> list[str]:
    """Everything wrong with the word tables (empty when they are sound): type phrases without
    the head noun, attribute phrases that fuzzy-match or contain each other or occur in the fixed
    text (a product would get credit for an attribute it lacks), breadcrumbs outside 3-5
    levels, option pools of one group sharing a name or a value."""
    problems = []
    for group in GROUPS:
        problems += _group_problems(group) + _attribute_problems(group)
    return problems


def test_word_tables_are_sound():
    assert vocabulary_problems() == []


# ------------------------------------------------------------------ §4.8 structure


def test_categories_queries_and_breadcrumbs(catalogue):
    assert {p.category for p in catalogue.products} == set(CATEGORIES)
    groups = _by_query(catalogue)
    assert len(groups) >= 50
    assert all(15 <= len(ps) <= 25 for ps in groups.values())
    for query, products in groups.items():
        assert query == query.lower().strip()
        levels = [{c.strip() for c in p.product_category.split("›")} for p in products]
        assert all(3 <= len(lv) <= 5 for lv in levels), query
        assert len(set.intersection(*levels)) >= 2, query


def test_small_catalogue_keeps_ten_queries(tmp_path):
    small = load_catalogue(write_synthetic_catalogue(tmp_path, seed=3, num_products=200))
    assert len(_by_query(small)) >= 10
    assert {p.category for p in small.products} == set(CATEGORIES)
    assert len(synthetic_goals(small, seed=0, test_size=50).goals) > 100


def test_text_lengths(catalogue):
    for p in catalogue.products:
        assert 10 <= word_count(p.title) <= 30, p.title
        assert 50 <= word_count(p.description) <= 200, p.asin
        assert 3 <= len(p.bullets) <= 6, p.asin
        assert p.query.split()[-1] in p.title.lower().split(), p.title


def test_options(catalogue, records):
    for p in catalogue.products:
        assert len(p.options) <= 3
        assert all(2 <= len(values) <= 8 for _, values in p.options)
        assert len({v for _, values in p.options for v in values}) == sum(
            len(values) for _, values in p.options
        )  # a value names one option group only
        combos = 1
        for _, values in p.options:
            combos *= len(values)
        assert combos <= 24
    raw = [o["value"] for r in records for os in (r["customization_options"] or {}).values()
           for o in os]  # fmt: skip
    assert any("/" in v for v in raw)
    assert any(v != v.lower() for v in raw)
    assert sum(not p.options for p in catalogue.products) > 0


def test_option_values_survive_the_colour_rule():
    from envs.webshop.reward import option_matches

    for name, values in OPTION_POOLS.values():
        for raw in values:
            value = option_value(raw)
            assert option_matches([value], [(name, value)]) == 1, raw


def test_attributes_and_where_they_show(catalogue):
    text_only = list_only = 0
    for p in catalogue.products:
        assert 2 <= len(p.attributes) <= 5, p.asin
        for a in p.instruction_attributes:
            listed, shown = a in p.attributes, _in_text(a, p)
            text_only += shown and not listed
            list_only += listed and not shown
    assert text_only >= 50
    assert list_only >= 50


def test_prices(records, goal_set):
    pricing = [r["pricing"] for r in records]
    assert 0 < pricing.count("") < 60
    assert 50 < sum(" - " in p for p in pricing) < 250
    assert any(goal.price_upper == 1e6 for goal in goal_set.goals)  # prices >= 980
    assert any(goal.price_upper < 1e6 for goal in goal_set.goals)


def test_instructions(catalogue):
    instructed = [p for p in catalogue.products if p.instruction is not None]
    assert 0.6 <= len(instructed) / len(catalogue) <= 0.8
    for p in instructed:
        text = p.instruction
        assert text == text.lower() and 1 <= len(p.instruction_attributes) <= 3
        assert all(a in text for a in p.instruction_attributes), text
        assert p.query.split()[-1] in text.split(), text
        assert "price" not in text and "dollars" not in text and ":" not in text


# ------------------------------------------------------------------ goals and distractors


def test_goal_count(goal_set):
    assert 1500 <= len(goal_set.goals) <= 5000


def test_every_target_can_score_one(catalogue, goal_set):
    for goal in goal_set.goals:
        product = catalogue.get(goal.asin)
        for a in goal.attributes:
            assert _in_list(a, product) or _in_text(a, product), (goal.asin, a)
        options = product.option_map
        for name, value in goal.goal_options:
            assert value in options[name]
            assert fuzz.token_set_ratio(value, f"{name} {value}", processor=default_process) > 85
        assert goal_set.prices[goal.asin] <= goal.price_upper


def test_targets_have_look_alikes_that_miss_an_attribute(catalogue, goal_set):
    groups = _by_query(catalogue)
    targets = {g.asin: g for g in goal_set.goals}
    for asin, goal in targets.items():
        missing = [
            q
            for q in groups[goal.query]
            if q.asin != asin and not all(_in_list(a, q) or _in_text(a, q) for a in goal.attributes)
        ]
        assert len(missing) >= 2, asin


# ------------------------------------------------------------------ nouns and retrieval


def test_noun_lexicon(folder, catalogue):
    nouns = set(json.loads((folder / NOUNS_FILE).read_text()))
    for p in catalogue.products:
        assert p.query.split()[-1] in nouns, p.query
        assert set(re.findall(r"[a-z0-9]+", p.title.lower())) & nouns
    assert not nouns & set(ADJECTIVES)
    assert not any(w.isdigit() for w in nouns)


def test_bm25_finds_most_targets_but_not_always_first(catalogue, goal_set):
    from envs.webshop.search import BM25Search

    engine = BM25Search(catalogue.products)
    goals = goal_set.goals[::3]
    summary = retrieval_summary(retrieval_ranks(goals, engine))
    assert summary["n"] == len(goals)
    assert summary["top50"] >= 0.9
    assert summary["top1"] <= 0.8


def test_retrieval_stats_helpers(goal_set):
    class Fixed:
        def search(self, keywords, k=50):
            assert keywords == keywords.lower()
            return ["X", goal_set.goals[1].asin, "Y"][:k]

    goals = goal_set.goals[:3]
    ranks = retrieval_ranks(goals, Fixed(), k=2)
    assert ranks[1] == 1 and len(ranks) == 3
    summary = retrieval_summary([0, 3, 12, None])
    assert summary == {"n": 4, "top1": 0.25, "top10": 0.5, "top50": 0.75}
    assert retrieval_summary([])["top1"] == 0.0
    with pytest.raises(ValueError, match="k must be"):
        retrieval_ranks(goals, Fixed(), k=0)


def test_option_combinations_match_goal_count(catalogue, goal_set):
    expected = 0
    for p in catalogue.products:
        if p.instruction is not None:
            expected += len(list(itertools.product(*(v for _, v in p.options))))
    assert expected == len(goal_set.goals)
