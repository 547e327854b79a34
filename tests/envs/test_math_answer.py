"""envs/math/answer.py: the qwen-math style answer extraction of the math reward."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.math.answer import extract_answer, has_boxed, last_boxed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so the result is \boxed{5}.", "5"),
        (r"\boxed{\frac{a}{b}}", r"\frac{a}{b}"),
        (r"$\boxed{\frac{1}{2}}$", r"\frac{1}{2}"),
        (r"\boxed{\left\{1, 2\right\}}", r"\left\{1, 2\right\}"),
        (r"first \boxed{1}, then \boxed{2}, finally \boxed{3}", "3"),
        (r"the answer: $\boxed 5$", "5"),
        (r"\boxed 5 apples", "5"),
        (r"\boxed {7}", "7"),
        (r"\fbox{42}", "42"),
        (r"\boxed{}", ""),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "text",
    ["no box here", r"\boxed{12", r"\boxed{1} and then \boxed{\frac{1}{2}", r"\boxedX{3}"],
)
def test_last_boxed_none(text):
    assert last_boxed(text) is None


def test_unterminated_last_box_takes_the_rest_as_the_original():
    assert extract_answer("we had \\boxed{1} then \\boxed{12") == "12"


def test_has_boxed():
    assert has_boxed(r"x \boxed{3}")
    assert not has_boxed(r"\boxed 3")
    assert not has_boxed("boxed{3}")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is 5.", "5"),
        ("So the answer is 3.5.", "3.5"),
        ("Thus the final answer is $\\frac{1}{2}$. I hope it is correct.", r"\frac{1}{2}"),
        ("The answer is: 12\nLet me double check: 13", "12"),
        ("the answer is 7 and the final answer is 8.", "8"),
    ],
)
def test_answer_phrases(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so we get 12 apples and then 3.5", "3.5"),
        ("the temperature dropped to -7", "-7"),
        ("in total 1,234 items", "1234"),
        ("half of it: 3/4 of a pie", "3/4"),
        ("a value of 2.", "2"),
        ("nothing numeric here", ""),
        ("", ""),
    ],
)
def test_last_number_fallback(text, expected):
    assert extract_answer(text) == expected


def test_box_wins_over_phrase_and_numbers():
    assert extract_answer(r"The answer is 4. Check: \boxed{5} and 6") == "5"


def test_multiline_box_is_joined():
    assert extract_answer("\\boxed{\n  1,\n  2\n}") == "1,2"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("{}\\$ .,:/-\nboxedfanswrhi0123456789"), max_size=60))
def test_extraction_never_raises_on_latex_soup(text):
    assert isinstance(extract_answer(text), str)
    assert last_boxed(text) is None or isinstance(last_boxed(text), str)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_extraction_never_raises(text):
    assert isinstance(extract_answer(text), str)
    last_boxed(text)
    has_boxed(text)


@settings(max_examples=200, deadline=None)
@given(st.text().filter(lambda s: not any(c in s for c in ("{", "}", "\\boxed", "\\fbox"))))
def test_brace_free_box_roundtrip(s):
    """Any brace-free content (without a box command of its own) comes back verbatim."""
    assert last_boxed(f"xx \\boxed{{{s}}}") == s
