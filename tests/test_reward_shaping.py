"""env.reward: native | single | dense (envs/rewards.py), on a scripted episode whose sums are
worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from envs.base import Observation, Step
from envs.rewards import Progress, ShapedRewards

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
