"""Sampling keys from the global episode identity (arlarena_jax/rollout/keys.py; issue 65).

The law: how a batch's episodes are split between calls does not change them. A batch of G groups
played as one environment batch equals the same groups played as two sub-batches (the second with
``group_offset`` G/2), on the host loop, with trajectory rows and on device; an evaluation gives
the same episodes whatever its chunk size. The policy is the tiny Sokoban config's random policy
at temperature 1 (training and evaluation sampling), so every reply is a draw.

Token ids, actions, rewards and every other row field are compared exactly. Behaviour log-probs
are compared within 1e-5: a sub-batch runs differently shaped programs (prefill batches padded to
another power of two, another decode window), whose float32 rounding differs in the last bits
(measured here: up to 4.8e-7 apart on CPU, the tokens still equal).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arlarena_jax.objectives import advantage as adv
from arlarena_jax.objectives.compose import GroupFilter, Objective
from arlarena_jax.objectives.ratio import vanilla
from arlarena_jax.rollout.keys import draw_sample_seed, episode_seed_table, episode_turn_seed
from arlarena_jax.rollout.loop import Rollout, Trajectory, collect
from arlarena_jax.rollout.policy import SamplerPolicy, call_seed
from arlarena_jax.rollout.trajectory import TrajectoryRows
from arlarena_jax.sampler import GREEDY
from arlarena_jax.train import build
from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.evaluate import evaluate
from arlarena_jax.train.rl import collect_batch
from envs.text import ScriptedPolicy

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs/sokoban/sampo_tiny.yaml"
SMALL = ["env.max_turns=6", "env.train_batch_size=2", "env.group_size=2"]
LOG_PROB_TOL = 1e-5  # float32 log-softmax of the same logits computed by two programs
GROUP_SEEDS = [31, 32, 33, 34]  # G = 4 groups of 2
GROUP_SIZE, MAX_TURNS = 2, 6
FIELDS = ("prompt_ids", "response_ids", "prompt", "response", "anchor", "action", "reward")
FIELDS += ("action_valid", "format_valid", "turn", "trajectory", "group", "info")
FIELDS += ("episode_return", "episode_length", "loss_mask")


@pytest.fixture(scope="module")
def parts():
    """The tiny config, a random tiny policy (temperature 1) and its on-device rollout."""
    config = load_config(CONFIG, SMALL)
    tokenizer = build.build_tokenizer(config)
    model = build.build_model(config, tokenizer, None, seed=0)
    _, policy = build.build_policy(config, model, tokenizer, None)
    assert policy.train_sampling.temperature == policy.eval_sampling.temperature == 1.0
    return config, policy, build.build_device_rollout(config, policy)


def test_a_reply_depends_on_its_seed_not_its_place(parts):
    """SamplerPolicy with per-prompt seeds: a prompt's reply is the same alone, first or last in
    a call (log-probs within 1e-5), and explicit seeds draw nothing from the policy's stream."""
    _, policy, _ = parts
    prompts, seeds = ["go up", "go left", "push the box"], [11, 12, 13]
    calls = policy.calls
    together = policy(prompts, training=True, seeds=seeds)
    backwards = policy(prompts[::-1], training=True, seeds=seeds[::-1])[::-1]
    alone = [policy([p], training=True, seeds=[s])[0] for p, s in zip(prompts, seeds, strict=True)]
    assert policy.calls == calls
    for other in (backwards, alone):
        for a, b in zip(together, other, strict=True):
            assert (a.text, a.response_ids) == (b.text, b.response_ids)
            np.testing.assert_allclose(a.log_probs, b.log_probs, atol=LOG_PROB_TOL)
    assert (
        len({tuple(g.response_ids) for g in policy(["go up"] * 3, training=True, seeds=seeds)}) > 1
    )


def _same_episodes(whole: Rollout, parts: list[Rollout]) -> None:
    """``parts`` concatenated are ``whole``'s rows and trajectories (the index in the batch
    aside: it is where an episode sat in its own batch)."""
    rows = [r for p in parts for r in p.rows]
    assert len(rows) == len(whole.rows)
    for x, y in zip(whole.rows, rows, strict=True):
        for f in FIELDS:
            assert getattr(x, f) == getattr(y, f), (f, x.trajectory, x.turn)
        np.testing.assert_allclose(x.log_probs, y.log_probs, atol=LOG_PROB_TOL)

    def placeless(trajectories: list[Trajectory]) -> list[Trajectory]:
        return [dataclasses.replace(t, env_index=0) for t in trajectories]

    assert placeless(whole.trajectories) == placeless([t for p in parts for t in p.trajectories])


def _play_split(collector, config, policy, calls: int, **kwargs) -> tuple[Rollout, list[Rollout]]:
    """The G groups as one batch, then as two halves (``group_offset`` 0 and G/2), each from the
    policy's counter at ``calls`` (as every process holds it) and advancing it by one."""
    half = len(GROUP_SEEDS) // 2

    def play(seeds: list[int], offset: int) -> Rollout:
        policy.calls = calls
        envs = build.make_envs(config, len(seeds) * GROUP_SIZE)
        out = collector(
            envs,
            build.task_format(config),
            policy,
            group_seeds=seeds,
            group_size=GROUP_SIZE,
            max_turns=MAX_TURNS,
            history_length=2,
            group_offset=offset,
            **kwargs,
        )
        assert policy.calls == calls + 1  # one sample seed per batch, whatever its size
        return out

    whole = play(GROUP_SEEDS, 0)
    return whole, [play(GROUP_SEEDS[:half], 0), play(GROUP_SEEDS[half:], half)]


def _drawn(rollout: Rollout) -> None:
    """The rollout is a draw: the two members of a group (one room) replied differently."""
    first = {(r.group, r.trajectory): tuple(r.response_ids) for r in rollout.rows if r.turn == 0}
    by_group: dict[int, set] = {}
    for (group, _), ids in first.items():
        by_group.setdefault(group, set()).add(ids)
    assert any(len(replies) > 1 for replies in by_group.values())


@pytest.fixture(scope="module")
def host_split(parts):
    """The host turn loop's whole batch and halves (from the policy's counter at 3)."""
    config, policy, _ = parts
    return _play_split(collect, config, policy, calls=3)


def test_a_batch_split_in_two_plays_the_same_episodes(host_split):
    """Host turn loop: the whole batch and its two halves give the same rows and trajectories."""
    whole, halves = host_split
    _drawn(whole)
    _same_episodes(whole, halves)


def test_trajectory_rows_split_in_two_play_the_same_episodes(parts):
    """Trajectory rows (the conversation continued token by token, the grid as the
    observation): the same law."""
    config, policy, _ = parts
    fmt = build.task_format(config)._replace(continuation=lambda o: o.text)
    rows = TrajectoryRows(max_observation_tokens=8, max_right_tokens=256)  # never spent

    def collector(envs, _, policy, **kwargs):
        return collect(envs, fmt, policy, rows=rows, **kwargs)

    whole, halves = _play_split(collector, config, policy, calls=0)
    _drawn(whole)
    _same_episodes(whole, halves)


def test_the_device_rollout_split_in_two_plays_the_same_episodes(parts, host_split):
    """The on-device rollout: the halves equal the whole batch, and the host loop's."""
    config, policy, device = parts
    whole, halves = _play_split(device.collect, config, policy, calls=3)
    _same_episodes(whole, halves)
    _same_episodes(host_split[0], halves)


def test_evaluation_does_not_depend_on_its_chunk_size(parts):
    """Three held-out seeds on batches of 4 (one chunk, padded by one) and of 2 environments
    (two chunks, the second padded): the same episodes, from one sample seed drawn once per
    evaluation."""
    config, policy, _ = parts
    seeds = [101, 102, 103]
    out = []
    for size in (4, 2):
        copy = dataclasses.replace(policy, seed=9, calls=0)
        _, rollout = evaluate(
            build.make_envs(config, size),
            build.task_format(config),
            copy,
            seeds=seeds,
            max_turns=MAX_TURNS,
        )
        assert copy.calls == 1
        assert [t.trajectory for t in rollout.trajectories] == list(range(len(seeds)))
        out.append(rollout)
    _same_episodes(out[0], [out[1]])


def test_dynamic_sampling_draws_one_sample_seed_per_try():
    """collect_batch: each try is one batch with the policy's next sample seed (three tries of
    uniform groups here), so the counter advances by the number of tries."""
    policy = SamplerPolicy(None, None, GREEDY, GREEDY, 1, seed=7, calls=5)
    seen: list[int] = []

    def collector(envs, fmt, policy, *, group_seeds, group_size, group_offset, sample_seed, **_):
        seen.append(sample_seed)
        first = group_offset * group_size
        trajectories = [  # every group uniform (returns 0): dynamic sampling tries again
            Trajectory(group_offset + i // group_size, first + i, i, 0.0, 1, False, {})
            for i in range(len(group_seeds) * group_size)
        ]
        return Rollout([], trajectories, group_size, "t")

    class Envs:
        num_envs = 4

    objective = Objective(adv.grpo(), vanilla(), group_filter=GroupFilter(max_num_gen_batches=3))
    _, _, tries = collect_batch(
        Envs(), None, policy, objective, group_seeds=lambda k: [k, k + 10], group_size=2,
        max_turns=1, history_length=0, global_step=1, collector=collector,
    )  # fmt: skip
    assert tries == 3 and seen == [call_seed(7, 5), call_seed(7, 6), call_seed(7, 7)]
    assert policy.calls == 8


def test_a_scripted_policy_has_no_seed_stream():
    assert draw_sample_seed(ScriptedPolicy(lambda prompts: prompts)) == 0


@given(
    sample_seed=st.integers(0, 2**31 - 1),
    trajectory=st.integers(0, 2**40),
    turn=st.integers(0, 2**16),
)
def test_episode_turn_seeds_fit_int32(sample_seed, trajectory, turn):
    """The driver's jitted keys take int32 seeds: every turn seed is in [0, 2³¹)."""
    assert 0 <= episode_turn_seed(sample_seed, trajectory, turn) < 2**31


def test_episode_turn_seeds_are_distinct_over_a_batch():
    """128 episodes × 16 turns of one batch, and the same of the next batch: 4096 distinct
    seeds; the table is the function, cell by cell."""
    tables = [episode_seed_table(s, range(128), 16) for s in (call_seed(0, 0), call_seed(0, 1))]
    assert tables[0].dtype == np.int32 and tables[0].shape == (128, 16)
    assert len(np.unique(np.concatenate([t.ravel() for t in tables]))) == 2 * 128 * 16
    assert tables[1][37, 5] == episode_turn_seed(call_seed(0, 1), 37, 5)
    offset = episode_seed_table(call_seed(0, 0), range(64, 128), 16)
    np.testing.assert_array_equal(offset, tables[0][64:])  # rows are episodes, not places
