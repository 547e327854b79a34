"""TextWorld on the real engine: game generation (deterministic, deduplicated, disjoint splits),
the environment, its progress signals and dense rewards, its prompt, the walkthrough expert and
the pool (docs/environments.md §1.9, §10).

Needs ``textworld`` (the ``alfworld`` extra); skips with the reason otherwise. The games are
generated once per module into a temporary folder (~1 s each).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("textworld", reason="TextWorld tests need textworld (the alfworld extra)")

from arlarena_jax.errors import ConfigError, InvalidField
from arlarena_jax.objectives.host import collate
from arlarena_jax.rollout import collect, rollout_metrics
from arlarena_jax.train import build
from arlarena_jax.train.config_io import load_config
from envs.local import LocalEnvBatch
from envs.pool import EnvPool
from envs.rewards import ShapedRewards
from envs.textworld import spec
from envs.textworld.build import (
    TEST_OFFSET,
    VALIDATION_OFFSET,
    build_split,
    read_manifest,
    select,
    split_folder,
)
from envs.textworld.env import WIN_REWARD, TextworldEnv, TextworldFactory
from envs.textworld.expert import WalkthroughExpert, walkthrough_expert
from envs.textworld.games import Generated, generate
from envs.textworld.prompts import TEXTWORLD_FORMAT

TIER = "w2-o3-q4"
TRAIN, EVAL = 3, 2


def full_config(root, *overrides: str):
    settings = [f"env.data_path={root}", f"env.textworld.train_games={TRAIN}"]
    settings += [f"env.textworld.test_games={EVAL}", f"env.textworld.validation_games={EVAL}"]
    settings += ["env.textworld.build_workers=0"]
    return load_config("configs/textworld/base_tiny.yaml", settings + list(overrides))


def config(root, *overrides: str):
    return full_config(root, *overrides).env


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("textworld")
    spec.check_data(config(root), training=True)  # builds both splits on demand
    return root


@pytest.fixture(scope="module")
def train_games(root):
    return spec.split_games(config(root), "train")


def test_splits_are_built_deterministic_and_disjoint(root, train_games, tmp_path):
    held_out = read_manifest(split_folder(root, TIER, 0, "test"))[:EVAL]
    validation = read_manifest(split_folder(root, TIER, 0, "validation"))[:EVAL]
    train = read_manifest(split_folder(root, TIER, 0, "train"))[:TRAIN]
    assert [g.seed for g in held_out] == [TEST_OFFSET, TEST_OFFSET + 1]
    assert [g.seed for g in validation] == [VALIDATION_OFFSET, VALIDATION_OFFSET + 1]
    assert [g.seed for g in train] == [0, 1, 2]
    assert all(g.solvable for g in train + validation + held_out)
    hashes = [{g.hash for g in games} for games in (train, validation, held_out)]
    assert not hashes[0] & hashes[1] and not hashes[0] & hashes[2] and not hashes[1] & hashes[2]
    members = spec.split_members(config(root))
    assert [members[s] for s in ("train", "validation", "test")] == hashes
    assert len(train_games[0]) == TRAIN and all(w for w in train_games[1])
    again = build_split(tmp_path, TIER, 0, "train", 1)[0]  # the same game in another folder
    assert dataclasses.replace(again) == train[0]
    first = split_folder(root, TIER, 0, "train") / train[0].file
    same = split_folder(tmp_path, TIER, 0, "train") / again.file
    assert first.with_suffix(".json").read_bytes() == same.with_suffix(".json").read_bytes()
    assert build_split(root, TIER, 0, "train", TRAIN) == train  # cached: nothing generated


def test_selection_skips_duplicates_unsolvable_and_excluded_games():
    def game(seed, digest, solvable=True):
        return Generated(seed, f"{seed}.z8", digest, ("look",), solvable)

    candidates = [game(0, "a"), game(1, "a"), game(2, "b", False), game(3, "c"), game(4, "d")]
    assert [g.seed for g in select(candidates, 3)] == [0, 3, 4]
    assert [g.seed for g in select(candidates, 3, frozenset({"c"}))] == [0, 4]


def test_reset_and_step_report_admissible_commands_and_score(train_games):
    files, walkthroughs = train_games
    env = TextworldEnv(files, max_steps=20)
    obs = env.reset(TRAIN + 1)  # seed s plays game s % len(games)
    assert env.game_for(TRAIN + 1) == files[1] and obs.task and obs.task in obs.text
    assert obs.admissible and "look" in obs.admissible and "$$" not in obs.text
    obs, reward, done, info = env.step("dance with the moon")  # not a command: no error
    assert (reward, done, info["won"], info["score"], info["score_delta"]) == (
        0.0,
        False,
        False,
        0,
        0,
    )
    assert info["max_score"] >= 1 and obs.admissible
    for command in walkthroughs[1]:
        obs, reward, done, info = env.step(command)
    assert (reward, done, info["won"], info["score"]) == (WIN_REWARD, True, True, info["max_score"])
    assert info["score_delta"] >= 1
    assert env.step("look")[1:3] == (0.0, True)  # an ended episode changes nothing
    env.close()


def test_step_limit_ends_the_episode(train_games):
    env = TextworldEnv(train_games[0], max_steps=2)
    first = env.reset(0)
    assert not env.step("look")[2] and env.step("look")[2]
    assert env.reset(0) == first and not env.step("look")[2]  # a new episode of the same game
    env.close()


def test_prompt_lists_the_admissible_commands_and_projects_against_them(train_games):
    env = TextworldEnv(train_games[0])
    obs = env.reset(0)
    task = TEXTWORLD_FORMAT.extract_task(obs)
    prompt = TEXTWORLD_FORMAT.build_prompt(obs, task, None)
    assert all(f"'{a}'" in prompt for a in obs.admissible) and "<action>" in prompt
    command = obs.admissible[0]
    assert TEXTWORLD_FORMAT.project(f"<think>x</think><action>{command}</action>", obs).action_valid
    assert not TEXTWORLD_FORMAT.project("<think>x</think><action>fly</action>", obs).action_valid
    env.close()


def test_the_expert_wins_every_game_through_the_prompts(root, train_games):
    env = config(root)
    for split in ("train", "validation", "test"):
        files, walkthroughs = spec.split_games(env, split)
        batch = LocalEnvBatch(TextworldFactory(files, max_steps=12), len(files))
        trajectories = collect(
            batch,
            TEXTWORLD_FORMAT,
            WalkthroughExpert(walkthroughs),
            group_seeds=list(range(len(files))),
            group_size=1,
            max_turns=12,
            skip_done=False,
            training=False,
        ).trajectories
        batch.close()
        assert [t.won for t in trajectories] == [True] * len(files), split
    expert = walkthrough_expert(train_games[1])
    assert expert.task_of(TRAIN + 2) == 2 and expert.every_turn


def test_the_pool_runs_the_games_in_two_workers(root, train_games):
    env = config(root)
    assert env.num_workers == 2
    pool = spec.make_batch(env, 4, "train")
    try:
        assert isinstance(pool, EnvPool)
        files, walkthroughs = train_games
        observations = pool.reset([0, 1, 2, 0])
        assert observations[0] == observations[3] and all(o.admissible for o in observations)
        step = pool.step([w[0] for w in walkthroughs] + [walkthroughs[0][0]])
        assert np.all(step.rewards == 0.0) and all("score" in i for i in step.infos)
        assert pool.failures == 0 and [i["gamefile"] for i in step.infos[:3]] == list(files)
    finally:
        pool.close()


def test_missing_games_are_a_one_line_error_without_auto_build(tmp_path):
    env = config(tmp_path, "env.textworld.auto_build=false")
    with pytest.raises(ConfigError) as info:
        spec.check_data(env, training=False)
    message = str(info.value)
    assert "\n" not in message and "0 of 2 test games" in message
    assert "arlarena textworld build" in message


def test_bad_settings_are_refused():
    with pytest.raises(InvalidField, match="tier must be one of w2-o3-q4, w4-o6-q8, cooking"):
        spec.TextworldConfig(tier="w9")
    with pytest.raises(InvalidField, match="train_games must be >= 1"):
        spec.TextworldConfig(train_games=0)
    with pytest.raises(InvalidField, match="progress must be one of quest, score, got 'moves'"):
        spec.TextworldConfig(progress="moves")


def test_the_cooking_tier_generates_winnable_games_whose_score_moves(tmp_path):
    game = generate("cooking", 5, "test", str(tmp_path))
    assert game.solvable and len(game.walkthrough) > 4 and (tmp_path / game.file).is_file()
    env = TextworldEnv([str(tmp_path / game.file)], max_steps=50, progress="score")
    env.reset(0)
    infos = [env.step(command)[3] for command in game.walkthrough]
    env.close()
    assert infos[-1]["won"] and infos[-1]["max_score"] > 1  # the score moves before the win
    assert sum(i["progress"] for i in infos) == infos[-1]["progress_max"] == infos[-1]["max_score"]
    assert sum(i["score_delta"] > 0 for i in infos[:-1]) >= 1
    assert sum(i["quest_progress"] for i in infos) == infos[-1]["quest_length"] > 1
    env = TextworldEnv([str(tmp_path / game.file)], progress="quest")
    assert env.reset(0) and env.step(game.walkthrough[0])[3]["progress_max"] > 1
    env.close()


DETOUR_BACK = {"go north": "go south", "go south": "go north", "go east": "go west"} | {
    "go west": "go east"
}


def test_quest_progress_falls_on_a_detour_and_telescopes_to_the_quest_length(train_games):
    """After the walkthrough's first command, walking out of the room and back costs and regains
    one command of the engine's winning policy; the walkthrough then wins, so the increments sum
    to the quest length (the remaining policy at the reset)."""
    files, walkthroughs = train_games
    env = TextworldEnv(files, max_steps=20)
    for seed, walkthrough in enumerate(walkthroughs):
        env.reset(seed)
        first = env.step(walkthrough[0])
        away = next(c for c in first[0].admissible if c in DETOUR_BACK)
        steps = [first, env.step(away), env.step(DETOUR_BACK[away])]
        steps += [env.step(command) for command in walkthrough[1:]]
        progress = [info["quest_progress"] for _, _, _, info in steps]
        length = steps[0][3]["quest_length"]
        assert progress[:3] == [1, -1, 1] and length == len(walkthrough) == 4
        assert steps[-1][3]["won"] and steps[-1][3]["quest_remaining"] == 0
        assert sum(progress) == length and all(
            i["progress"] == i["quest_progress"] for *_, i in steps
        )
        assert all(i["progress_max"] == length for *_, i in steps)
        assert env.step("look")[3]["progress"] == 0  # an ended episode gains nothing
    env.close()


def test_normalised_dense_rewards_reach_the_rows_and_sum_to_one_on_won_games(root):
    """``env.reward: dense`` with ``env.reward_normalise`` through ``build.make_envs`` and the
    rollout: every walkthrough step gains one of the quest's 4 commands, so each row's reward is
    1/4, the returns are 1 and success still reads ``won``; ``native`` gives the raw batch."""
    dense = ["env.reward=dense", "env.reward_normalise=true", "env.num_workers=0"]
    files, walkthroughs = spec.split_games(config(root), "test")
    native = build.make_envs(full_config(root, "env.num_workers=0"), len(files), "test")
    assert isinstance(native, LocalEnvBatch)
    native.close()
    batch = build.make_envs(full_config(root, *dense), len(files), "test")
    assert isinstance(batch, ShapedRewards) and isinstance(batch.batch, LocalEnvBatch)
    rollout = collect(
        batch,
        TEXTWORLD_FORMAT,
        WalkthroughExpert(walkthroughs),
        group_seeds=list(range(len(files))),
        group_size=1,
        max_turns=12,
        training=False,
    )
    batch.close()
    assert [t.won for t in rollout.trajectories] == [True] * len(files)
    assert [r.reward for r in rollout.rows] == [0.25] * 4 * len(files)
    assert all(t.episode_return == pytest.approx(1.0) for t in rollout.trajectories)
    assert rollout.rows[-1].info["native_reward"] == WIN_REWARD
    turns = collate(rollout.to_host_turns(), num_tokens=1)
    np.testing.assert_allclose(np.asarray(turns.step_rewards), [0.25] * 4 * len(files))
    metrics = rollout_metrics(rollout, training=True)
    assert metrics["episode/success_rate"] == 1.0 and metrics["episode/reward/mean"] == 1.0


def test_commands_that_are_not_admissible_never_reach_the_interpreter(
    train_games, tmp_path, monkeypatch
):
    """The interpreter's meta commands would write a transcript or a save file into the working
    directory (``script``, ``save``: the next command is read as the file name), or end the game
    (``quit``). A command that is not admissible uses a step, changes nothing and is answered
    "Nothing happens."; admissible commands match case- and whitespace-insensitively."""
    monkeypatch.chdir(tmp_path)
    files, walkthroughs = train_games
    env = TextworldEnv(files, max_steps=20)
    start = env.reset(0)
    for command in ("script", "junk file name", "save", "restore", "quit", "restart", "undo"):
        obs, reward, done, info = env.step(command)
        assert (obs.text, reward, done) == ("Nothing happens.", 0.0, False), command
        assert obs.admissible == start.admissible and info["progress"] == 0
    assert list(tmp_path.iterdir()) == []  # no transcript, no save file
    steps = [env.step(f"  {c.upper()} ") for c in walkthroughs[0]]
    assert steps[-1][3]["won"] and sum(s[3]["quest_progress"] for s in steps) == 4
    env.close()
