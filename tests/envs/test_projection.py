"""Text → action projection (docs/environments.md §1.5) and the spec's §8.1 test vectors.

Expected values are written out by hand from the rules of docs/environments.md §1.5.
"""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.alfworld.prompts import ALFWORLD_FORMAT
from envs.base import Observation
from envs.projection import Projection, first_action, project_text, strict_format
from envs.sokoban.prompts import SOKOBAN_FORMAT, project_sokoban
from envs.webshop.prompts import WEBSHOP_FORMAT

# ---- spec §8.1 vectors ----------------------------------------------------------------------


def test_vector_strict_action_is_lower_cased_and_admissible():
    got = project_text("<think>a</think><action>Go To Desk 1</action>", ["go to desk 1"])
    assert got == Projection("go to desk 1", True, True)


def test_vector_two_thinks_fail_strict_but_action_is_executed():
    text = "<think>a</think>\n<action>go to desk 1</action>\n<think>b</think>"
    assert project_text(text, ["go to desk 1"]) == Projection("go to desk 1", False, False)


def test_vector_untagged_text_is_its_own_action():
    assert project_text("go to desk 1", ["go to desk 1"]) == Projection(
        "go to desk 1", False, False
    )


def test_vector_sokoban_without_think_is_executed_but_invalid():
    assert project_sokoban("<action>push UP</action>") == Projection(1, False, True)


def test_vector_sokoban_still_is_a_valid_no_op():
    assert project_sokoban("<think>x</think><action>still</action>") == Projection(0, True, True)


# ---- ALFWorld / WebShop rules ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        # whitespace around the blocks and inside the groups is fine; the action is stripped
        ("  <think>\nplan\n</think>\n\n<action>  Open Drawer 1 </action>\n", "open drawer 1"),
        ("<THINK>x</THINK><ACTION>look</ACTION>", "look"),  # tags case-insensitive
    ],
)
def test_strict_pass_variants(text, expected):
    assert project_text(text, ["open drawer 1", "look"]) == Projection(expected, True, True)


def test_strict_but_not_admissible_is_invalid_with_valid_format():
    got = project_text("<think>a</think><action>fly away</action>", ["look"])
    assert got == Projection("fly away", False, True)


def test_webshop_strict_action_is_always_valid():
    got = project_text("<think>a</think><action>click[Buy Now]</action>", None)
    assert got == Projection("click[buy now]", True, True)


@pytest.mark.parametrize(
    "text",
    [
        "<think>日本</think><action>look</action>",  # CJK ideograph
        "<think>a</think><action>look</action> trailing words",  # text after the action
        "preface <think>a</think><action>look</action>",  # text before the think
        "<think>a</think><action>look</action><action>look</action>",  # two actions
        "<think>a</think>< think ><action>look</action>",  # spaced extra tag still counts
        "<think>a</think><action>look</ action >",  # spaced closing tag: regex fails
    ],
)
def test_strict_failures_fall_back_to_the_first_action(text):
    got = project_text(text, ["look"])
    assert got == Projection("look", False, False)


def test_fallback_is_the_first_of_several_actions_and_tolerates_spaced_tags():
    got = project_text("< action >First </action> <action>second</action>", ["first"])
    assert got == Projection("first", False, False)


def test_unparsable_keeps_last_30_characters_unlowered():
    text = "I think I should Go To The Kitchen Counter Number 3"
    assert project_text(text, []) == Projection(text[-30:], False, False)
    assert len(text[-30:]) == 30
    assert project_text("", []) == Projection("", False, False)


def test_task_formats_project_with_the_observation():
    obs = Observation("x", admissible=("go to desk 1", "help"))
    text = "<think>a</think><action>Go to desk 1</action>"
    assert ALFWORLD_FORMAT.project(text, obs) == Projection("go to desk 1", True, True)
    assert WEBSHOP_FORMAT.project("<think>a</think><action>x</action>", obs).action_valid
    assert SOKOBAN_FORMAT.project("<think/><action>left</action>", obs).action == 3


# ---- Sokoban rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>a</think><action>Down</action>", Projection(2, True, True)),
        ("<think>a</think><ACTION>left</ACTION>", Projection(3, True, True)),  # lower-cased first
        ("<think>a</think><action>right</action>", Projection(4, True, True)),
        # keyword order: "up" is tested before "right", so "upright" is up
        ("<think>a</think><action>upright</action>", Projection(1, True, True)),
        ("<think>a</think><action>move downward</action>", Projection(2, True, True)),
        ("<think>a</think><action>jump</action>", Projection(0, False, True)),  # no keyword
        ("<think>a</think> up", Projection(0, False, True)),  # no action tags
        ("<think>a</think><action>up", Projection(0, False, True)),  # no closing tag
        ("</action><action>up", Projection(0, False, True)),  # close before open: empty slice
        ("<think>a<action>up</action>", Projection(1, False, True)),  # no </think>
        ("<THINK>a</THINK><action>up</action>", Projection(1, False, True)),  # think is exact
        ("<think>a</think><action>still</action>", Projection(0, True, True)),
    ],
)
def test_sokoban_rules(text, expected):
    assert project_sokoban(text) == expected


# ---- never raises ------------------------------------------------------------------------------

TAGGY = st.lists(
    st.sampled_from(["<think>", "</think>", "<action>", "</action>", "< action >", "up", "日", " "])
    | st.text(max_size=8),
    max_size=12,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=st.text() | TAGGY, admissible=st.lists(st.text(max_size=6), max_size=4))
def test_projection_never_raises(text, admissible):
    for got in (project_text(text, admissible), project_text(text, None)):
        assert isinstance(got.action, str)
        if first_action(text) is None:  # no action chunk: the raw tail, flags 0
            assert got == Projection(text[-30:], False, False)
        assert got.action_valid <= got.format_valid  # valid implies well formatted
    sok = project_sokoban(text)
    assert sok.action in range(5) and sok.format_valid
    fmt = ALFWORLD_FORMAT
    fmt.memory_action(fmt.project(text, Observation(text, tuple(admissible))), text)
    SOKOBAN_FORMAT.memory_action(sok, text)


# ---- linear time, and the same answers as the regular expressions it replaced -------------------

# The original one-regex definitions (quadratic on adversarial replies), kept as the reference.
REFERENCE_STRICT = re.compile(r"^\s*<think>(.*?)</think>\s*<action>(.*?)</action>\s*$", re.I | re.S)
REFERENCE_FIRST_ACTION = re.compile(r"<\s*action\s*>(.*?)</\s*action\s*>", re.I | re.S)
REFERENCE_TAGS = tuple(
    re.compile(p, re.I)
    for p in (r"<\s*think\s*>", r"</\s*think\s*>", r"<\s*action\s*>", r"</\s*action\s*>")
)


def reference_strict(text: str) -> str | None:
    match = REFERENCE_STRICT.match(text)
    if match is None or re.search("[\u4e00-\u9fff]", text):
        return None
    if any(len(tag.findall(text)) != 1 for tag in REFERENCE_TAGS):
        return None
    return match.group(2)


STRICT_PARTS = st.lists(
    st.sampled_from(
        [
            *("<think>", "</think>", "<action>", "</action>", "<THINK>", "</ action>"),
            *("<thin\u212a>", "<th\u0131nk>", "</act\u0130on>"),  # re.I's Unicode case folding
            *(" ", "\n", "\u00a0", "go west", "日", "a", "<", ">"),
        ]
    ),
    max_size=10,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(text=st.text() | TAGGY | STRICT_PARTS)
def test_strict_format_and_first_action_equal_the_reference_regexes(text):
    assert strict_format(text) == reference_strict(text)
    match = REFERENCE_FIRST_ACTION.search(text)
    assert first_action(text) == (None if match is None else match.group(1))


def _seconds(fn, text: str) -> float:
    best = float("inf")
    for _ in range(7):
        start = time.perf_counter()
        fn(text)
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.parametrize(
    "unit",
    [
        "<think></think>" * 3 + "<action>",  # many tags, no closing action tag
        "</think> <action>",
        "< action " + " " * 20,  # tag-like openings padded with spaces
        "<think>go</think>\n<action>x",
    ],
)
def test_projection_is_linear_in_the_reply_length(unit):
    """Projecting a 200k-character adversarial reply costs about 10x a 20k one (linear), not
    100x (quadratic, as the lazy regular expressions did): the ratio is asserted, not a time."""
    short = unit * (20_000 // len(unit))
    long = unit * (200_000 // len(unit))
    project_text(short)  # warm up
    ratio = _seconds(project_text, long) / _seconds(project_text, short)
    assert ratio < 30, ratio
