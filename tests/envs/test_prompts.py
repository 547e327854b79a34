"""Prompt construction and memory (docs/environments.md §1.4; the spec's §8.5 vectors).

Expected strings are written out by hand from the spec's rules, not produced by the code.
"""

from __future__ import annotations

import pytest

from arlarena_jax.rollout import SimpleMemory
from envs import registry
from envs.alfworld.prompts import ALFWORLD_FORMAT, alfworld_actions
from envs.base import Observation
from envs.sokoban.prompts import SOKOBAN_FORMAT
from envs.sokoban.render import render_text
from envs.text import HistoryWindow
from envs.webshop.prompts import WEBSHOP_FORMAT, WEBSHOP_MAX_PROMPT_CHARS, webshop_actions

INTRO = (
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly "
    "around you, you see a bed 1, a desk 2, a desk 1, a garbagecan 1, a shelf 5, a shelf 4, a "
    "shelf 3, a shelf 2, and a shelf 1.\n\nYour task is to: look at cd under the desklamp."
)
ADMISSIBLE = ("go to bed 1", "go to desk 1", "help", "inventory", "look")
SEED0_GRID = [
    [0, 0, 0, 0, 0, 0],
    [0, 1, 1, 1, 1, 0],
    [0, 0, 2, 1, 5, 0],
    [0, 0, 0, 4, 1, 0],
    [0, 0, 0, 1, 1, 0],
    [0, 0, 0, 0, 0, 0],
]


# ---- memory (spec §8.5) ------------------------------------------------------------------------


def test_memory_line_vector():
    memory = SimpleMemory(1)
    memory.store(["<obs>"], ["look"])
    memory.store(["<obs>"], ["go to shelf 1"])
    memory.store(["<obs>"], ["take cd 2 from shelf 1"])
    window = memory.window(0, history_length=2)
    assert window.history == (
        "[Observation 2: '<obs>', Action 2: 'go to shelf 1']\n"
        "[Observation 3: '<obs>', Action 3: 'take cd 2 from shelf 1']"
    )
    assert (window.step_count, window.history_length, window.current_step) == (3, 2, 4)
    assert memory.fetch(2) == ([window.history], [2])


def test_memory_short_history_and_per_env_records():
    memory = SimpleMemory(2)
    assert memory.fetch() == (["", ""], [0, 0])
    memory.store(["a0", "b0"], ["x", "y"])
    assert memory.fetch(history_length=3) == (
        ["[Observation 1: 'a0', Action 1: 'x']", "[Observation 1: 'b0', Action 1: 'y']"],
        [1, 1],
    )
    assert memory.window(1, 0) == HistoryWindow("", 0, 1)
    assert memory[0] == [{"text_obs": "a0", "action": "x"}] and len(memory) == 2
    with pytest.raises(ValueError, match="memory of 2 envs"):
        memory.store(["only one"], ["x"])


# ---- ALFWorld ----------------------------------------------------------------------------------


def test_alfworld_task_and_admissible_formatting():
    fmt = ALFWORLD_FORMAT
    assert fmt.extract_task(Observation(INTRO)) == "look at cd under the desklamp."
    assert fmt.extract_task(Observation("no marker", task="put a cd in shelf")) == (
        "put a cd in shelf"
    )
    with pytest.raises(ValueError, match="Your task is to"):
        fmt.extract_task(Observation("no marker"))
    assert alfworld_actions(ADMISSIBLE) == ("'go to bed 1'\n 'go to desk 1'\n 'inventory'\n 'look'")


def test_alfworld_no_history_prompt():
    prompt = ALFWORLD_FORMAT.build_prompt(
        Observation(INTRO, ADMISSIBLE), "look at cd under the desklamp.", None
    )
    assert prompt.startswith("\n")
    assert f"Your current observation is: {INTRO}\n" in prompt
    assert "[" + alfworld_actions(ADMISSIBLE) + "]." in prompt
    assert "'help'" not in prompt
    assert "<think> </think>" in prompt and "<action> </action>" in prompt
    assert "step(s)" not in prompt and prompt.count("Your task is to:") == 1  # only the intro's


def test_alfworld_history_prompt():
    memory = SimpleMemory(1)
    memory.store([INTRO], ["look"])
    memory.store(["You arrive at shelf 1."], ["go to shelf 1"])
    obs = Observation("You pick up the cd 2 from the shelf 1.", ADMISSIBLE)
    prompt = ALFWORLD_FORMAT.build_prompt(
        obs, "look at cd under the desklamp.", memory.window(0, 2)
    )
    assert "Your task is to: look at cd under the desklamp.\n" in prompt
    assert "taken 2 step(s)" in prompt and "latest 2 observations" in prompt
    assert memory.window(0, 2).history in prompt
    assert f"step 3, and your current observation is: {obs.text}\n" in prompt


# ---- WebShop -----------------------------------------------------------------------------------


def test_webshop_actions_and_task():
    actions = ("search[<your query>]", "click[back to search]", "click[b07x]")
    assert webshop_actions(actions) == (
        "'search[<your query>]',\n'click[back to search]',\n'click[b07x]',"
    )
    fmt = WEBSHOP_FORMAT
    assert fmt.extract_task(Observation("'Search'", task="i need a red shirt")) == (
        "i need a red shirt"
    )
    raw = "WebShop [SEP] Instruction: [SEP] i need a red shirt [SEP] Search"
    assert fmt.extract_task(Observation(raw)) == "i need a red shirt"


def test_webshop_prompts_and_length_fallback():
    fmt = WEBSHOP_FORMAT
    memory = SimpleMemory(1)
    memory.store(["'Search'"], ["search[red shirt]"])
    obs = Observation("'Back to Search' [SEP] 'Page 1 (Total results: 0)'", ("click[b1]",))
    no_his = fmt.build_prompt(obs, "i need a red shirt", None)
    assert "e\u2011commerce" in no_his
    assert "Your task is to: i need a red shirt.\n" in no_his
    assert f"Your current observation is: {obs.text}.\n" in no_his
    assert "are:\n[\n'click[b1]',\n].\n" in no_his
    with_his = fmt.build_prompt(obs, "i need a red shirt", memory.window(0, 2))
    assert "[Observation 1: ''Search'', Action 1: 'search[red shirt]']" in with_his
    assert f"step 2, and your current observation is: {obs.text}.\n" in with_his
    # a history window that pushes the prompt past 13,000 characters falls back to NO_HIS
    memory.store(["x" * WEBSHOP_MAX_PROMPT_CHARS], ["click[b1]"])
    assert fmt.build_prompt(obs, "i need a red shirt", memory.window(0, 2)) == no_his


# ---- Sokoban -----------------------------------------------------------------------------------


def test_sokoban_prompts_put_the_grid_on_its_own_lines():
    fmt = SOKOBAN_FORMAT
    grid = render_text(SEED0_GRID)
    assert fmt.extract_task(Observation(grid)) == ""
    admissible = 'Your admissible actions are ["up", "down", "left", "right"].\n'
    no_his = fmt.build_prompt(Observation(grid), "", None)
    assert f"Your current observation is:\n{grid}\n{admissible}" in no_his
    memory = SimpleMemory(1)
    memory.store([grid], [fmt.memory_action(fmt.project("<action>up</action>", None), "")])
    with_his = fmt.build_prompt(Observation(grid), "", memory.window(0, 2))
    assert f"[Observation 1: '{grid}', Action 1: 'Up']" in with_his
    assert f"step 2, and your current observation is:\n{grid}\n{admissible}" in with_his
    for symbol in ("`#`", "`_`", "`O`", "`X`", "`P`", "`√`", "`S`"):
        assert symbol in no_his


def test_memory_words():
    sok = SOKOBAN_FORMAT
    words = [
        sok.memory_action(sok.project(f"<action>{w}</action>", None), "")
        for w in ("still", "up", "down", "left", "right", "nonsense")
    ]
    assert words == ["Still", "Up", "Down", "Left", "Right", "Still"]
    alf = ALFWORLD_FORMAT
    obs = Observation("x", ("look",))
    raw = "no tags at all, just a long rambling response here"
    assert alf.memory_action(alf.project(raw, obs), raw) == raw[-30:]
    assert alf.memory_action(alf.project("<action>Look</action>", obs), "") == "look"


def test_formats_by_environment_and_unknown_environment():
    assert registry.get("sokoban").formats["paper"].name == "sokoban"
    assert registry.get("alfworld").formats["paper"] is ALFWORLD_FORMAT
    with pytest.raises(ValueError, match="unknown environment 'chess'"):
        registry.get("chess")
