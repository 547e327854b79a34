"""env.reward: native | single | dense (envs/rewards.py), on scripted episodes whose sums are
worked out by hand, the config checks, ``build.make_envs``'s wrapping and Sokoban's single reward
through the rollout (docs/environments.md §1.9). TextWorld's and ALFWorld's progress on the real
engines: tests/envs/test_textworld_env.py, tests/envs/test_alfworld_progress.py."""

from __future__ import annotations

import numpy as np
import pytest

from arlarena_jax.errors import ConfigError
from arlarena_jax.rollout import collect, rollout_metrics
from arlarena_jax.train import build
from arlarena_jax.train.config_io import load_config
from envs.base import Observation, Step
from envs.rewards import INFO_PROGRESS, Progress, ShapedRewards, dense_rewards
from envs.sokoban.batch import SokobanBatch
from envs.sokoban.expert import short_expert_replies
from envs.text import ScriptedPolicy

PROGRESS = Progress(gained=lambda i: i["score_delta"], maximum=lambda i: i["max_score"])


class Scripted:
    """Two envs; env 0 gains 1, 0, 2 points of 3 and wins on step 3; env 1 gains 1 then loses
    on step 2. The native reward is 10 on the win, else 0."""

    num_envs = 2
    deltas = ((1, 0, 2), (1, 0, 0))
    ends = (3, 2)

    def reset(self, seeds):
        self.t = 0
        return [Observation("start")] * 2

    def step(self, actions):
        self.t += 1
        infos, rewards, dones = [], [], []
        for i in range(2):
            won = i == 0 and self.t == 3
            infos.append({"won": won, "score_delta": self.deltas[i][self.t - 1], "max_score": 3})
            rewards.append(10.0 if won else 0.0)
            dones.append(self.t >= self.ends[i])
        return Step(
            [Observation("x")] * 2, np.asarray(rewards, np.float32), np.asarray(dones), infos
        )

    def close(self):
        pass


def play(batch):
    batch.reset([0, 1])
    return np.stack([batch.step(["a", "a"]).rewards for _ in range(3)])


def test_dense_normalised_sums_to_one_on_a_win_and_fractions_on_a_loss():
    rewards = play(
        ShapedRewards(Scripted(), "dense", win_reward=10.0, progress=PROGRESS, normalise=True)
    )
    np.testing.assert_allclose(rewards[:, 0], [1 / 3, 0, 2 / 3], rtol=1e-6)
    assert rewards[:, 0].sum() == pytest.approx(1.0)
    np.testing.assert_allclose(rewards[:, 1], [1 / 3, 0, 0], rtol=1e-6)  # step 3: finished


def test_dense_raw_and_single():
    raw = play(ShapedRewards(Scripted(), "dense", win_reward=10.0, progress=PROGRESS))
    assert raw[:, 0].tolist() == [1, 0, 2]
    single = play(ShapedRewards(Scripted(), "single", win_reward=5.0))
    assert single[:, 0].tolist() == [0, 0, 5] and single[:, 1].tolist() == [0, 0, 0]


def test_native_is_untouched_and_bad_modes_refuse():
    assert play(ShapedRewards(Scripted(), "native", win_reward=1.0))[:, 0].tolist() == [0, 0, 10]
    with pytest.raises(ValueError, match="progress signal"):
        ShapedRewards(Scripted(), "dense", win_reward=1.0)
    with pytest.raises(ValueError, match="reward mode"):
        ShapedRewards(Scripted(), "shaped", win_reward=1.0)


class Detour(Scripted):
    """Env 0 gains 1, loses it again (a step away from the goal) and gains 3 on the win; env 1
    gains 2 of 3 and loses on step 2."""

    deltas = ((1, -1, 3), (2, 0, 0))


def test_dense_normalised_steps_away_are_negative_and_the_win_still_sums_to_one():
    rewards = play(
        ShapedRewards(Detour(), "dense", win_reward=10.0, progress=PROGRESS, normalise=True)
    )
    np.testing.assert_allclose(rewards[:, 0], [1 / 3, -1 / 3, 1], rtol=1e-6)
    assert rewards[:, 0].sum() == pytest.approx(1.0)
    assert rewards[:, 1].sum() == pytest.approx(2 / 3)  # a loss: the fraction done
    assert play(ShapedRewards(Detour(), "dense", win_reward=1.0, progress=PROGRESS))[1, 0] == -1


def test_info_progress_reads_the_standard_keys_and_keeps_the_native_reward():
    assert INFO_PROGRESS.gained({"progress": 2}) == 2 and INFO_PROGRESS.maximum({}) == 0
    batch = ShapedRewards(Scripted(), "single", win_reward=1.0)
    batch.reset([0, 1])
    batch.step(["a", "a"]), batch.step(["a", "a"])
    last = batch.step(["a", "a"])
    assert last.infos[0]["native_reward"] == 10.0 and last.rewards.tolist() == [1.0, 0.0]
    zero = dense_rewards([{"progress": 1, "progress_max": 0}], INFO_PROGRESS, normalise=True)
    assert zero.tolist() == [0.0]  # no maximum: nothing to normalise by


def one_line_error(*overrides: str, path: str = "configs/math/base_tiny.yaml") -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, list(overrides))
    assert "\n" not in str(info.value)
    return str(info.value)


def test_config_refuses_bad_reward_settings():
    message = one_line_error("env.reward=dense")
    assert "'env.reward'" in message and "progress" in message
    assert "'env.reward'" in one_line_error("env.reward=shaped")
    assert "alfworld, textworld, webshop" in message  # the environments that have one
    message = one_line_error(  # Sokoban's dense rewards are its own: nothing to normalise by
        "env.reward=dense", "env.reward_normalise=true", path="configs/sokoban/base_tiny.yaml"
    )
    assert "'env.reward_normalise'" in message and "'sokoban'" in message
    message = one_line_error(
        "env.reward=single", "env.reward_normalise=true", path="configs/textworld/base_tiny.yaml"
    )
    assert "'env.reward_normalise'" in message
    message = one_line_error(
        "env.textworld.progress=moves", path="configs/textworld/base_tiny.yaml"
    )
    assert "'env.textworld.progress'" in message and "quest, score" in message
    for env in ("textworld", "alfworld"):  # both have a progress signal
        config = load_config(
            f"configs/{env}/base_tiny.yaml", ["env.reward=dense", "env.reward_normalise=true"]
        )
        assert config.env.reward == "dense" and config.env.reward_normalise


def sokoban(*overrides: str):
    return load_config("configs/sokoban/base_tiny.yaml", ["env.train_batch_size=2", *overrides])


def test_make_envs_wraps_single_and_leaves_native_and_sokobans_dense_raw():
    for reward, shaped in (("native", False), ("dense", False), ("single", True)):
        batch = build.make_envs(sokoban(f"env.reward={reward}"), 2)
        assert isinstance(batch, ShapedRewards) == shaped, reward
        inner = batch.batch if shaped else batch
        assert isinstance(inner, SokobanBatch)
        batch.close()


def test_sokoban_single_rewards_reach_the_rollout_rows_and_success_reads_won():
    """The BFS expert wins every room in k moves: natively the return is −0.1·k + 11
    (tests/envs/test_sokoban_rollout.py); under ``env.reward: single`` it is the +10 win alone, on
    the last row, and success still comes from ``won``."""
    config = sokoban("env.reward=single")
    results = {}
    for reward in ("native", "single"):
        batch = build.make_envs(sokoban(f"env.reward={reward}"), 4)
        results[reward] = collect(
            batch,
            build.task_format(config),
            ScriptedPolicy(short_expert_replies),
            group_seeds=[0, 1],
            group_size=2,
            max_turns=15,
        )
        batch.close()
    native, single = results["native"], results["single"]
    for traj, raw in zip(single.trajectories, native.trajectories, strict=True):
        rows = [r for r in single.rows if r.trajectory == traj.trajectory]
        assert traj.won and [r.reward for r in rows] == [0.0] * (len(rows) - 1) + [10.0]
        assert traj.episode_return == 10.0 and all(r.episode_return == 10.0 for r in rows)
        assert raw.episode_return == pytest.approx(-0.1 * len(rows) + 11, abs=1e-5)
        assert rows[-1].info["native_reward"] == pytest.approx(10.9, abs=1e-5)
    assert [t.step_reward for t in single.to_host_turns()] == [r.reward for r in single.rows]
    metrics = rollout_metrics(single, training=True)
    assert metrics["episode/success_rate"] == 1.0 and metrics["episode/reward/mean"] == 10.0


def test_webshop_dense_is_the_purchase_score_on_the_buying_turn():
    """WebShop's progress is the purchase score (the original WebShop's reward): 0 before the
    purchase, the score on `buy now`. The shopper's full plan scores 1.0 (ARLArena's native 10);
    the same plan without its option clicks buys the right product with the wrong options:
    a score strictly between 0 and 1, native reward 0."""
    from arlarena_jax.train.build import make_envs
    from envs.webshop.env import WebShopEnv
    from envs.webshop.expert import plan_purchase
    from envs.webshop.spec import shop

    config = load_config(
        "configs/webshop/base_tiny.yaml", ["env.reward=dense", "env.num_workers=0"]
    )
    env = WebShopEnv(shop(config.env), split="train")
    seed = next(s for s in range(50) if env.goal_of(s).goal_options and plan_purchase(env, s))
    plan = plan_purchase(env, seed)
    no_options = plan[: -1 - len(env.goal_of(seed).goal_options)] + plan[-1:]
    for actions, native in ((plan, 10.0), (no_options, 0.0)):
        batch = make_envs(config, 1, "train")
        batch.reset([seed])
        rewards = [batch.step([action]) for action in actions]
        assert [float(r.rewards[0]) for r in rewards[:-1]] == [0.0] * (len(actions) - 1)
        last = rewards[-1]
        score = last.infos[0]["task_score"]
        assert float(last.rewards[0]) == pytest.approx(score, abs=1e-6)
        assert last.infos[0]["native_reward"] == native and bool(last.dones[0])
        assert (score == 1.0) if native else (0.0 < score < 1.0)
        batch.close()
