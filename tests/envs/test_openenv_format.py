"""The OpenEnv environment's parts that need no server and no openenv: observation rendering,
reply checks, the action payload, the prompt and projection, the settings' one-line errors."""

from __future__ import annotations

import math

import pytest

from arlarena_base.errors import ConfigError
from arlarena_jax.train.config_io import load_config
from envs.base import Observation
from envs.openenv import render
from envs.openenv.prompts import OPENENV_FORMAT
from envs.openenv.session import Late, Lost, Rejected, classify

CONFIG = "configs/openenv/grpo_tiny.yaml"


def test_an_observation_is_its_field_or_all_its_fields_as_sorted_json():
    raw = {"b": [1, 2], "a": "x", "reward": 1.0, "done": False, "metadata": {"k": 1}}
    assert render.observation_text(raw, "a") == "x"
    assert render.observation_text(raw, "b") == "[1, 2]"
    assert render.observation_text(raw, "") == '{"a": "x", "b": [1, 2]}'
    with pytest.raises(render.Malformed, match="no field 'c'"):
        render.observation_text(raw, "c")
    with pytest.raises(render.Malformed, match="not a JSON object"):
        render.observation_text(["x"], "")


@pytest.mark.parametrize("bad", ["1", math.nan, math.inf, True, [1]])
def test_a_reward_that_is_not_a_finite_number_is_malformed(bad):
    with pytest.raises(render.Malformed):
        render.reward_of(bad)


def test_rewards_admissible_actions_and_the_payload():
    assert render.reward_of(None) == 0.0 and render.reward_of(3) == 3.0
    assert render.admissible({"acts": ["go", 2]}, "acts") == ("go", "2")
    assert render.admissible({"acts": ["go"]}, "") == ()
    with pytest.raises(render.Malformed):
        render.admissible({"acts": "go"}, "acts")
    extra = render.extra_fields('{"mode": "say"}')
    assert render.action_payload("hi", "message", extra) == {"mode": "say", "message": "hi"}


def test_the_prompt_and_the_projection():
    obs = Observation("room", ("go north", "look"), "find the key")
    prompt = OPENENV_FORMAT.build_prompt(obs, OPENENV_FORMAT.extract_task(obs), None)
    assert "find the key" in prompt and "room" in prompt and "'go north'" in prompt
    assert OPENENV_FORMAT.project("<think>x</think><action>Look</action>", obs) == (
        "look",
        True,
        True,
    )
    assert not OPENENV_FORMAT.project("<think>x</think><action>jump</action>", obs).action_valid
    free = Observation("{}")
    assert OPENENV_FORMAT.project("<think></think><action>anything</action>", free).action_valid
    assert not OPENENV_FORMAT.project("\x00 junk", free).format_valid  # never raises
    assert "act well" in OPENENV_FORMAT.extract_task(free)


def test_errors_are_sorted_into_late_rejected_and_lost():
    assert isinstance(classify(TimeoutError()), Late)
    assert isinstance(classify(RuntimeError("Server error: bad (code: X)")), Rejected)
    assert isinstance(classify(ConnectionRefusedError(111, "refused")), Lost)
    assert isinstance(classify(RuntimeError("something else")), Lost)


@pytest.mark.parametrize(
    "override, key",
    [
        ("env.openenv.url=http://x:1", "env.openenv.url"),  # and app: both
        ("env.openenv.app=nocolon", "env.openenv.app"),
        ("env.openenv.action_extra='[1]'", "env.openenv.action_extra"),
        ("env.openenv.action_field=''", "env.openenv.action_field"),
        ("env.openenv.message_timeout_s=0", "env.openenv.message_timeout_s"),
    ],
)
def test_bad_settings_are_one_line(override, key):
    with pytest.raises(ConfigError) as error:
        load_config(CONFIG, [override])
    assert "\n" not in str(error.value) and f"'{key}'" in str(error.value)
