"""Trajectory rows (docs/environments.md §1.8): one row per episode, the conversation continued,
observation tokens masked out of the loss.

A character tokenizer (one id per character, ``ord``) makes every expected id list and mask
readable by hand: a segment of k characters is k tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from arlarena_jax.objectives.host import collate
from arlarena_jax.rollout import collect
from arlarena_jax.rollout.trajectory import TrajectoryRows, cut_generation
from envs.base import Observation, Step
from envs.projection import Projection
from envs.text import Context, Generation, TaskFormat

LP = -0.5  # every generated token's behaviour log-prob


def _encode(text: str) -> list[int]:
    return [ord(c) for c in text]


def _decode(ids: Sequence[int]) -> str:
    return "".join(chr(i) for i in ids)


class CharPolicy:
    """Answers turn ``t`` of environment ``i`` with ``replies[i][t]``; records what it was
    asked."""

    def __init__(self, replies: list[list[str]]) -> None:
        self.replies = replies
        self.prompts: list[list[str]] = []
        self.contexts: list[list[Context]] = []

    def _gen(self, text: str, prompt_ids: list[int]) -> Generation:
        return Generation(text, prompt_ids, _encode(text), [LP] * len(text))

    def __call__(self, prompts: list[str], *, training: bool, seeds=None) -> list[Generation]:
        self.prompts.append(list(prompts))
        return [self._gen(self.replies[self._env(p)][0], _encode(p)) for p in prompts]

    def continue_from(self, contexts, *, training: bool, seeds=None) -> list[Generation]:
        self.contexts.append(list(contexts))
        turn = len(self.contexts)
        return [
            self._gen(self.replies[self._env(c.prompt)][turn], list(c.prompt_ids)) for c in contexts
        ]

    @staticmethod
    def _env(prompt: str) -> int:
        return int(prompt.split("#")[1])

    encode_text = staticmethod(_encode)
    decode = staticmethod(_decode)


class EchoEnv:
    """Env ``i`` (seed ``s``): the task is ``#s``; every response gets the observation
    ``<obs k>``; a response holding ``!`` (or the action None) ends the episode with reward 1
    (0 for None); ``void`` in a response sets ``exclude_from_loss``."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.actions: list[list] = []

    @property
    def num_envs(self) -> int:
        return self.n

    def reset(self, seeds):
        self.turns = [0] * self.n
        self.done = [False] * self.n
        return [Observation(text=f"#{s}", task=f"#{s}") for s in seeds]

    def step(self, actions):
        self.actions.append(list(actions))
        obs, rewards, dones, infos = [], [], [], []
        for i, action in enumerate(actions):
            self.turns[i] += 1
            end = action is None or "!" in action
            info = {"won": bool(action and "!" in action)}
            if action and "void" in action:
                info["exclude_from_loss"] = True
            self.done[i] = self.done[i] or end
            obs.append(Observation(text="" if end else f"<obs {self.turns[i]}>"))
            rewards.append(1.0 if info["won"] else 0.0)
            dones.append(self.done[i])
            infos.append(info)
        return Step(obs, np.asarray(rewards, np.float32), np.asarray(dones), infos)

    def close(self) -> None:
        pass


def _cut_at_bar(text: str) -> str:
    """Keep a response up to and including its first ``|``."""
    return text[: text.index("|") + 1] if "|" in text else text


FORMAT = TaskFormat(
    "echo",
    lambda obs: obs.task,
    lambda obs, task, window: f"task {task}",
    lambda text, obs: Projection(text, True, True),
    lambda projection, text: text,
    cut_response=_cut_at_bar,
    continuation=lambda obs: obs.text,
)


DEFAULT_ROWS = TrajectoryRows()


def _collect(replies, rows=DEFAULT_ROWS, max_turns=5, seeds=None, group_size=1):
    env = EchoEnv(len(replies))
    policy = CharPolicy(replies)
    seeds = list(range(len(replies))) if seeds is None else seeds
    rollout = collect(
        env,
        FORMAT,
        policy,
        group_seeds=seeds,
        group_size=group_size,
        max_turns=max_turns,
        rows=rows,
    )
    return rollout, env, policy


def test_one_row_per_episode_with_observations_masked():
    rollout, env, policy = _collect([["ab|junk", "c!"], ["x!"]])
    first, second = rollout.rows
    # env 0: "ab|" (3, cut after the bar) + "<obs 1>" (7) + "c!" (2) = 12 tokens
    assert first.response == "ab|<obs 1>c!"
    assert first.response_ids == _encode("ab|<obs 1>c!")
    assert first.loss_mask == [1] * 3 + [0] * 7 + [1] * 2
    assert first.log_probs == [LP] * 3 + [0.0] * 7 + [LP] * 2
    assert first.prompt_ids == _encode("task #0") and first.turn == 0
    assert (first.episode_length, first.episode_return, first.reward) == (2, 1.0, 1.0)
    assert second.response_ids == _encode("x!") and second.loss_mask == [1, 1]
    # the env got the cut text; the finished env got None on turn 2
    assert env.actions == [["ab|", "x!"], ["c!", None]]
    # turn 2 continued env 0 only, after its prompt and right side so far
    (context,) = policy.contexts[0]
    assert list(context.ids) == _encode("ab|<obs 1>")
    assert list(context.prompt_ids) == _encode("task #0")
    assert [t.won for t in rollout.trajectories] == [True, True]


def test_collate_masks_the_observation_tokens():
    rollout, _, _ = _collect([["ab|", "c!"]])
    batch = collate(rollout.to_host_turns(), num_rows=2, num_tokens=16)
    expected = np.zeros((2, 16), np.float32)
    expected[0, :12] = [1] * 3 + [0] * 7 + [1] * 2
    np.testing.assert_array_equal(np.asarray(batch.response_mask), expected)


def test_observation_and_right_side_caps():
    rows = TrajectoryRows(max_observation_tokens=4, max_right_tokens=9)
    rollout, env, _ = _collect([["ab|", "cd|", "ef|"]], rows=rows)
    (row,) = rollout.rows
    # "ab|" + "<obs" (cut to 4) = 7 < 9: a second turn; "cd|" + "<obs" = 14 >= 9: budget spent
    assert row.response.startswith("ab|<obscd|<obs")
    assert row.response_ids == _encode("ab|<obscd")  # the row is cut to 9 tokens
    assert row.loss_mask == [1, 1, 1, 0, 0, 0, 0, 1, 1]
    assert env.actions[-1] == [None]  # the spent episode was ended, not generated for
    assert row.episode_length == 2


def test_excluded_trajectory_has_no_loss_tokens():
    rollout, _, _ = _collect([["void!"], ["fine!"]])
    assert rollout.rows[0].loss_mask == [0] * 5
    assert rollout.rows[1].loss_mask == [1] * 5


def test_groups_and_ids_follow_the_turn_layout():
    rollout, _, _ = _collect([["a!"], ["b!"], ["c!"], ["d!"]], seeds=[0, 2], group_size=2)
    assert [(r.group, r.trajectory) for r in rollout.rows] == [(0, 0), (0, 1), (1, 2), (1, 3)]


def test_format_without_continuation_is_refused():
    fmt = FORMAT._replace(continuation=None)
    with pytest.raises(ValueError, match="cannot continue a conversation"):
        collect(
            EchoEnv(1),
            fmt,
            CharPolicy([["a!"]]),
            group_seeds=[0],
            group_size=1,
            max_turns=2,
            rows=TrajectoryRows(),
        )


def test_cut_generation_cuts_tokens_to_the_kept_text():
    gen = Generation("ab|cd", [1], _encode("ab|cd"), [-1.0, -2.0, -3.0, -4.0, -5.0])
    cut = cut_generation(gen, "ab|", _decode)
    assert cut.text == "ab|" and cut.response_ids == _encode("ab|")
    assert cut.log_probs == [-1.0, -2.0, -3.0]
    # multi-character tokens: the shortest prefix covering the kept text
    ids, table = [0, 1, 2], ["ab", "|c", "d"]
    wide = Generation("ab|cd", [], ids, [-1.0, -2.0, -3.0])
    cut = cut_generation(wide, "ab|", lambda xs: "".join(table[i] for i in xs))
    assert cut.text == "ab|c" and cut.response_ids == [0, 1]


def test_invalid_limits_are_refused():
    with pytest.raises(ValueError, match="max_right_tokens"):
        TrajectoryRows(max_right_tokens=0)


def test_schedules_count_one_row_per_trajectory_under_trajectory_rows():
    """The optimizer's schedule length: B·G rows per step under trajectory rows (math), B·G·turns
    under turn rows; ceil(rows / mini-batch) · epochs · steps."""
    import math

    from arlarena_jax.train.config_io import load_config
    from arlarena_jax.train.learner import optimizer_steps

    config = load_config("configs/math/base_tiny.yaml")
    env, t = config.env, config.trainer
    rows = env.train_batch_size * env.group_size
    want = math.ceil(rows / t.mini_batch_size) * t.ppo_epochs * t.total_steps
    assert optimizer_steps(config) == max(1, want)
    turns = load_config("configs/sokoban/base_tiny.yaml")
    env, t = turns.env, turns.trainer
    rows = env.train_batch_size * env.group_size * env.max_turns
    assert (
        optimizer_steps(turns) == math.ceil(rows / t.mini_batch_size) * t.ppo_epochs * t.total_steps
    )
