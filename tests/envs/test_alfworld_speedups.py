"""The memoised engine parsers (envs/alfworld/speedups.py): each call still gets its own result,
and a game plays to the same texts with and without the memo."""

from __future__ import annotations

import sys

import pytest

from envs.alfworld import speedups


def test_a_memoised_parse_computes_once_and_returns_a_fresh_copy():
    calls = []

    def parse(text, rule_name=None):
        calls.append((text, rule_name))
        return [{"symbol": text, "context": {}}]

    memo = speedups.memoised_parse(parse)
    first = memo("#a#", rule_name="symbols")
    first[0]["context"]["state"] = "mutated by the caller"
    second = memo("#a#", rule_name="symbols")
    assert second == [{"symbol": "#a#", "context": {}}]  # the caller's change did not stick
    assert memo("#a#", rule_name="other") == second and len(calls) == 2  # other kwargs: a miss
    assert memo.cache_info().hits == 1


def test_a_memoised_translation_shares_its_result_and_leaves_argv_alone(monkeypatch):
    calls = []

    def pddl2sas(domain, problem, verbose=False, optimize=False):
        calls.append(optimize)
        sys.argv = ["translate.py", "domain", "task"]  # what fast-downward's does
        return object(), f"sas of {problem} {optimize}"

    memo = speedups.memoised_translation(pddl2sas)
    monkeypatch.setattr(sys, "argv", ["pytest"])
    plain = memo("d", "p")
    monkeypatch.setattr(sys, "argv", ["pytest"])
    assert memo("d", "p", verbose=False) is plain and sys.argv == ["pytest"]
    assert memo("d", "p", optimize=True) is not plain and calls == [False, True]


def _play(path, walkthrough):
    """Feedback, score, done and admissible commands of two episodes of the walkthrough."""
    from envs.alfworld.engine import play_env

    env = play_env()
    env.load(str(path))
    seen = []
    for _ in range(2):
        state = env.reset()
        seen.append((state["feedback"], sorted(state["admissible_commands"])))
        for command in walkthrough:
            state, score, done = env.step(command)
            seen.append((state["feedback"], score, done, sorted(state["admissible_commands"])))
    return seen


def test_a_game_plays_the_same_with_and_without_the_memo(spec_game, monkeypatch):
    import fast_downward
    import textworld.logic
    from textworld.envs.pddl import textgen

    speedups.install()
    memoised = _play(spec_game.path, spec_game.walkthrough)
    assert textgen._parse_and_convert.cache_info().hits > 0
    assert textworld.logic._parse_and_convert.cache_info().hits > 0
    assert fast_downward.pddl2sas.cache_info().hits > 0  # the reset after the load
    monkeypatch.setenv(speedups.SWITCH_ENV, "off")  # play_env's engine() must not re-install it
    speedups.uninstall()
    try:
        plain = _play(spec_game.path, spec_game.walkthrough)
        assert not hasattr(fast_downward.pddl2sas, "cache_info")  # the engine's own, throughout
        assert not hasattr(textgen._parse_and_convert, "cache_info")
    finally:
        monkeypatch.delenv(speedups.SWITCH_ENV)
        speedups.install()
    assert memoised == plain and plain[-1][2] is True  # the walkthrough wins, both ways


def test_install_is_idempotent():
    pytest.importorskip("textworld")
    speedups.install()
    speedups.install()
    from textworld.envs.pddl import textgen

    assert not hasattr(textgen._parse_and_convert.__wrapped__, "cache_info")
