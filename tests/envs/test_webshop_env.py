"""The WebShop text environment: the page formats of spec environments §4.2, the action grammar
and navigation of §4.3, done on buy now, the turn cap, and a hypothesis fuzz test: arbitrary model
text never raises and changes nothing unless it is a valid action (docs/environments.md §6.5,
§6.6)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.webshop.env import WebShopEnv, parse_action
from tests.helpers.webshop_fixture import tiny_shop

CREAM = "Glow Face Moisturizer Cream for Dry Skin"
LOTION = "Glow Face Moisturizer Lotion for Oily Skin"
GEL = "Daily Face Moisturizer Gel with SPF 30"


@pytest.fixture(scope="module")
def shop():
    return tiny_shop()


def seed_of(env: WebShopEnv, asin: str, options: dict[str, str] | None = None) -> int:
    """A seed whose goal targets ``asin`` (with these options, when given)."""
    for seed, goal in enumerate(env.goals):
        if goal.asin == asin and (options is None or dict(goal.goal_options) == options):
            return seed
    raise AssertionError(f"no goal for {asin} {options}")


def env_on(shop, asin="B0AAAAAAA1", options=None, split="train") -> WebShopEnv:
    env = WebShopEnv(shop, split=split)
    env.reset(seed_of(env, asin, options))
    return env


def test_search_page_format_and_actions(shop):
    env = WebShopEnv(shop)
    obs = env.reset(0)
    assert obs.text == "'Search'"
    assert obs.admissible == ("search[<your query>]", "click[search]")
    assert obs.task == env.goal_of(0).instruction_text
    assert env.session.page.parts[:3] == ("WebShop", "Instruction:", obs.task)


def test_results_page_format(shop):
    env = env_on(shop)
    obs, reward, done, info = env.step("search[glow moisturizer]")
    price = shop.catalogue.get("B0AAAAAAA2").price_tag
    assert price == "$10.0 to $20.0"
    expected = [
        "Back to Search",
        "Page 1 (Total results: 3)",
        "Next >",
        "B0AAAAAAA1",
        CREAM,
        "$12.99",
        "B0AAAAAAA2",
        LOTION,
        price,
        "B0AAAAAAA3",
        GEL,
        "$100.0",  # no price: $100.0
    ]
    assert obs.text == " [SEP] ".join(f"'{p}'" for p in expected)
    assert obs.admissible == (
        "click[back to search]",
        "click[next >]",
        "click[b0aaaaaaa1]",
        "click[b0aaaaaaa2]",
        "click[b0aaaaaaa3]",
    )
    assert (reward, done, info["won"], info["task_score"]) == (0.0, False, False, 0.0)


def test_item_page_format_with_options(shop):
    env = env_on(shop)
    env.step("search[glow]")
    obs, *_ = env.step("click[b0aaaaaaa1]")
    expected = [
        "Back to Search",
        "< Prev",
        "size",
        "1.7 ounce",
        "3.4 ounce",
        "color",
        "natural | beige",  # lower-cased, "/" -> " | "
        "ivory",
        CREAM,
        "Price: $12.99",
        "Rating: N.A.",
        "Description",
        "Features",
        "Reviews",
        "Buy Now",
    ]
    assert obs.text == " [SEP] ".join(f"'{p}'" for p in expected)
    assert obs.admissible == tuple(
        f"click[{c}]"
        for c in (
            "back to search",
            "< prev",
            "description",
            "features",
            "reviews",
            "buy now",
            "1.7 ounce",
            "3.4 ounce",
            "natural | beige",
            "ivory",
        )
    )


def test_sub_pages(shop):
    env = env_on(shop)
    env.step("search[glow]")
    env.step("click[b0aaaaaaa1]")
    obs, *_ = env.step("click[description]")
    assert (
        obs.text
        == f"'Back to Search' [SEP] '< Prev' [SEP] '{CREAM}. A daily cream for every skin type.'"
    )
    assert obs.admissible == ("click[back to search]", "click[< prev]")
    env.step("click[< prev]")
    obs, *_ = env.step("click[features]")
    assert obs.text.endswith(f"'{CREAM} bullet one' [SEP] 'made without parabens'")
    env.step("click[< prev]")
    obs, *_ = env.step("click[reviews]")
    assert obs.text == "'Back to Search' [SEP] '< Prev'"  # no reviews are loaded


def test_paging_and_prev(shop):
    env = env_on(shop)
    env.step("search[face]")
    obs, *_ = env.step("click[next >]")
    assert (
        obs.text
        == "'Back to Search' [SEP] 'Page 2 (Total results: 3)' [SEP] '< Prev' [SEP] 'Next >'"
    )
    assert "click[< prev]" in obs.admissible
    obs, *_ = env.step("click[< prev]")
    assert obs.text.startswith("'Back to Search' [SEP] 'Page 1 (Total results: 3)' [SEP] 'Next >'")
    assert "click[< prev]" not in obs.admissible  # no < Prev on page 1


def test_prev_from_item_and_sub_page(shop):
    env = env_on(shop)
    env.step("search[glow]")
    env.step("click[b0aaaaaaa1]")
    env.step("click[ivory]")
    env.step("click[features]")
    env.step("click[< prev]")  # sub-page -> item: the options stay
    assert env.session.page.kind == "item" and env.session.options == {"color": "ivory"}
    obs, *_ = env.step("click[< prev]")  # item -> results: the options reset
    assert env.session.page.kind == "results" and env.session.options == {}
    assert "'Page 1 (Total results: 2)'" in obs.text
    obs, *_ = env.step("click[back to search]")
    assert obs.text == "'Search'" and env.session.keywords == ""


def test_perfect_purchase_wins_ten(shop):
    goal_options = {"color": "ivory", "size": "3.4 ounce"}
    env = env_on(shop, options=goal_options)
    for action in ("search[glow cream]", "click[b0aaaaaaa1]", "click[3.4 ounce]", "click[ivory]"):
        assert env.step(action)[1:3] == (0.0, False)
    _, reward, done, info = env.step("click[buy now]")
    assert (reward, done, info["won"], info["task_score"]) == (10.0, True, True, 1.0)
    assert (info["r_type"], info["r_att"], info["r_option"], info["r_price"]) == (
        1.0,
        1.0,
        1.0,
        1.0,
    )
    assert env.step("search[again]")[1:3] == (0.0, True)  # an ended episode changes nothing


def test_options_reset_on_new_search(shop):
    """Options chosen before a new search are lost: (2 attributes + 0 options + price) / 5."""
    env = env_on(shop, options={"color": "ivory", "size": "3.4 ounce"})
    env.step("search[glow]")
    env.step("click[b0aaaaaaa1]")
    env.step("click[ivory]")
    env.step("click[3.4 ounce]")
    env.step("search[glow]")
    env.step("click[b0aaaaaaa1]")
    _, reward, done, info = env.step("click[buy now]")
    assert done and reward == 0.0 and info["task_score"] == pytest.approx(3 / 5)


def test_turn_cap_ends_without_reward(shop):
    env = WebShopEnv(shop, max_steps=15)
    env.reset(0)
    for t in range(15):
        _, reward, done, info = env.step("click[search]")
        assert reward == 0.0 and done == (t == 14)
    assert info == {"won": False, "task_score": 0.0}


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("search[red shoes]", ("search", "red shoes")),
        ("click[< prev]", ("click", "< prev")),
        ("click[]", ("click[]", None)),  # an empty argument does not parse
        ("buy now", ("buy now", None)),
        ("search[a [b] c]", ("search[a ", "b] c")),  # the original's greedy pattern
    ],
)
def test_parse_action(action, expected):
    assert parse_action(action) == expected


@pytest.mark.parametrize(
    "action",
    [
        "click[search]",
        "Search[glow]",
        "click[buy now]",
        "click[b0aaaaaaa9]",
        "search[]",
        "glow",
        "",
    ],
)
def test_refused_actions_change_nothing(shop, action):
    env = env_on(shop)
    before = env.observation()
    obs, reward, done, _ = env.step(action)
    assert (obs, reward, done) == (before, 0.0, False)


def _state(env: WebShopEnv):
    s = env.session
    return (
        s.page,
        s.keywords,
        s.results,
        s.page_number,
        s.asin,
        dict(s.options),
        env.observation(),
    )


def _is_valid(env: WebShopEnv, action: str) -> bool:
    name, arg = parse_action(action)
    if arg is None:
        return False
    arg = arg.lower()
    return (name == "search" and bool(arg)) or (
        name == "click" and arg in env.session.page.clickables and arg != "search"
    )


PREFIXES = ["", "search[", "click[", "click[b0aaaaaaa", "search[glow", "click[next >", "<action>"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(PREFIXES), st.text(max_size=30), st.sampled_from(["", "]", "]]"])
        ),
        min_size=1,
        max_size=12,
    )
)
def test_fuzz_arbitrary_text_never_raises_or_changes_state(actions):
    env = WebShopEnv(tiny_shop(), max_steps=100)
    env.reset(3)
    for prefix, body, suffix in actions:
        action = prefix + body + suffix
        before, valid = _state(env), _is_valid(env, action)
        obs, reward, done, _ = env.step(action)
        assert isinstance(obs.text, str) and reward in (0.0, 10.0)
        if not valid:
            assert _state(env) == before and reward == 0.0
        if done:
            break


def test_grouped_seeds_share_a_goal(shop):
    a, b = WebShopEnv(shop), WebShopEnv(shop)
    assert a.reset(5) == b.reset(5)
    assert a.goal_of(5) == b.goal_of(5 + len(a.goals))


def test_split_goals_are_disjoint(shop):
    train = {g.instruction_text for g in shop.goals.train}
    test = {g.instruction_text for g in shop.goals.test}
    assert train and test and not train & test
    assert dataclasses.replace(shop.goals, test_size=3).test[:2] == shop.goals.test
