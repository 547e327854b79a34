"""ALFWorld on the real TextWorld engine: game building, the environment, its expert, the pool.

docs/environments.md §4 and the spec's §8.3 test vector. Needs the ``alfworld`` extra and the shared
evaluation tarball; skips with the reason otherwise (tests/conftest.py fixtures).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from arlarena_jax.rollout import collect
from arlarena_jax.rollout.metrics import success_metrics
from arlarena_jax.train.demos import expert_demonstrations
from envs.alfworld.data import find_games, task_type_of
from envs.alfworld.env import WIN_REWARD, AlfworldEnv, AlfworldFactory, play_order
from envs.alfworld.expert import (
    WalkthroughExpert,
    expert_reply,
    walkthrough,
    walkthrough_expert,
)
from envs.alfworld.games import task_description
from envs.alfworld.prompts import ALFWORLD_FORMAT, alfworld_episode_metrics
from envs.local import LocalEnvBatch
from envs.pool import EnvPool

# Spec §8.3.
RESET_TEXT = (
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly "
    "around you, you see a bed 1, a desk 2, a desk 1, a garbagecan 1, a shelf 5, a shelf 4, a "
    "shelf 3, a shelf 2, and a shelf 1.\n\nYour task is to: look at cd under the desklamp."
)
GO_TO = ["bed 1", "desk 1", "desk 2", "garbagecan 1"] + [f"shelf {k}" for k in range(1, 6)]
WALKTHROUGH = ("look", "go to shelf 1", "take cd 2 from shelf 1", "go to shelf 2", "use desklamp 1")


@pytest.fixture(scope="module")
def played(spec_game):
    return AlfworldEnv([str(spec_game.path)])


def test_game_file_layout(spec_game):
    game = json.loads(spec_game.path.read_text())
    assert set(game) == {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}
    assert game["solvable"] is True and "UNKNOWN GOAL" not in game["grammar"]
    assert "Your task is to: look at cd under the desklamp." in game["grammar"]
    assert (spec_game.path.parent / "traj_data.json").is_file()  # the expert reads it
    assert spec_game.task_type == "look_at_obj_in_light"
    assert find_games(spec_game.path.parents[2]) == [spec_game.path]


def test_reset_text_and_admissible_commands(played):
    obs = played.reset(0)
    assert obs.text == RESET_TEXT
    assert list(obs.admissible) == sorted(
        [f"go to {r}" for r in GO_TO] + ["help", "inventory", "look"]
    )
    assert obs.task == "look at cd under the desklamp."
    prompt = ALFWORLD_FORMAT.build_prompt(obs, ALFWORLD_FORMAT.extract_task(obs), None)
    assert "'go to bed 1'\n 'go to desk 1'" in prompt and "'help'" not in prompt


def test_expert_walkthrough_wins_at_step_five(spec_game, played):
    assert spec_game.walkthrough == WALKTHROUGH
    played.reset(0)
    for k, command in enumerate(WALKTHROUGH, start=1):
        obs, reward, done, info = played.step(command)
        assert done == (k == 5) and info["won"] == (k == 5)
        assert reward == (WIN_REWARD if k == 5 else 0.0)
    assert obs.text == "You turn on the desklamp 1."
    assert info["task_type"] == "look_at_obj_in_light" and info["gamefile"] == str(spec_game.path)
    again = played.step("look")  # a finished episode: same observation, no reward, still done
    assert again[0] == obs and again[1:3] == (0.0, True)


def test_inapplicable_commands_use_steps_until_the_limit(spec_game):
    env = AlfworldEnv([str(spec_game.path)], max_steps=3)
    env.reset(7)
    for k, command in enumerate(["", "fly to the moon", "<action>go to shelf 1"], start=1):
        obs, reward, done, info = env.step(command)
        assert obs.text == "Nothing happens." and reward == 0.0 and not info["won"]
        assert done == (k == 3)  # the step limit ends the episode (docs/environments.md §4.5)


def test_phrasing_is_reproducible_and_one_of_the_templates(spec_game):
    traj = json.loads((spec_game.path.parent / "traj_data.json").read_text())
    templates = {task_description(traj, phrasing=i) for i in range(2)}
    assert templates == {"look at cd under the desklamp", "examine the cd with the desklamp"}
    drawn = [task_description(traj, seed=s) for s in range(16)]
    assert drawn == [task_description(traj, seed=s) for s in range(16)]
    assert set(drawn) == templates  # 16 draws of a fair choice: both appear (p = 1 - 2^-15)


@pytest.fixture(scope="module")
def few_games(alfworld_data_root):
    """Built solvable games, one per task type (tests/conftest.py)."""
    return find_games(alfworld_data_root / "json_2.1.1" / "valid_seen")


def test_eight_environments_in_the_pool_play_the_expert(few_games):
    games = tuple(str(g) for g in few_games)
    seeds = [0, 0, 1, 1, 2, 2, 3, 3]  # four groups of two: a group plays one game
    factory = AlfworldFactory(games)
    with EnvPool(factory, num_envs=8, num_workers=2) as pool:
        observations = pool.reset(seeds)
        assert observations[0] == observations[1] and observations[0] != observations[2]
        expert = WalkthroughExpert([walkthrough(factory().game_for(s)) for s in seeds])
        rollout = collect(
            pool,
            ALFWORLD_FORMAT,
            expert,
            group_seeds=[0, 1, 2, 3],
            group_size=2,
            max_turns=50,
            skip_done=False,
            training=False,
        )
        assert pool.failures == 0 and pool.restarts == 0
    won = [t.won for t in rollout.trajectories]
    lengths = [len(walkthrough(factory().game_for(s))) for s in seeds]
    assert won == [n <= 50 for n in lengths]
    assert all(r.action_valid and r.format_valid for r in rollout.rows)
    assert [t.episode_return for t in rollout.trajectories] == [WIN_REWARD * w for w in won]
    metrics = success_metrics(rollout.trajectories, alfworld_episode_metrics)
    types = {task_type_of(factory().game_for(s)) for s in seeds}
    assert metrics["success_rate"] == np.mean(won)
    assert sum(k.endswith("_success_rate") and k != "success_rate" for k in metrics) >= len(types)


def demonstrations(envs, games, seeds):
    """The walkthrough expert over ``games`` through the paper prompt, as the trainer runs it."""
    expert = walkthrough_expert(games)
    return expert_demonstrations(envs, expert, seeds, task_format=ALFWORLD_FORMAT, max_turns=50)


def test_demonstrations_replay_the_expert_through_the_rl_prompts(few_games):
    games = [str(g) for g in few_games if len(walkthrough(g)) <= 50][:3]
    envs = LocalEnvBatch(AlfworldFactory(tuple(games)), 2)
    demos = demonstrations(envs, games, [0, 1, 2])
    ordered = play_order(games)
    expected = [c for s in range(3) for c in walkthrough(ordered[s])]
    assert [d.reply for d in demos] == [expert_reply(c) for c in expected]
    first = AlfworldEnv(games).reset(0)  # the first turn: the no-history prompt of the reset
    assert demos[0].prompt == ALFWORLD_FORMAT.build_prompt(
        first, ALFWORLD_FORMAT.extract_task(first), None
    )
    assert "You are now at step 2" in demos[1].prompt  # the second turn carries history


class CountingResets(LocalEnvBatch):
    def __init__(self, *args):
        super().__init__(*args)
        self.resets: list[int] = []

    def reset(self, seeds):
        self.resets += [int(s) for s in seeds]
        return super().reset(seeds)


def test_demonstrations_replay_each_distinct_game_once(few_games):
    """Seeds s and s + n (n games) play the same game, whose replay does not depend on the seed:
    it is played once and its turns repeat, in seed order."""
    games = [str(g) for g in few_games if len(walkthrough(g)) <= 50][:2]
    ordered = play_order(games)
    envs = CountingResets(AlfworldFactory(tuple(games)), 2)
    demos = demonstrations(envs, games, [1, 0, 3, 2, 5])
    assert sorted(set(envs.resets)) == [0, 1]  # two distinct games, one batch of two
    replies = {g: [expert_reply(c) for c in walkthrough(ordered[g])] for g in (0, 1)}
    assert [d.reply for d in demos] == [r for s in [1, 0, 3, 2, 5] for r in replies[s % 2]]
    once = demonstrations(envs, games, [1])
    assert demos[: len(once)] == once
