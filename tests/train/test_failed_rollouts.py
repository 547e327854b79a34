"""Failed rollouts do not bias groups (docs/algorithms.md §3.0; issue 40 item 5).

An episode lost to an infrastructure failure (the host pool's crashed or hung worker, here with
the fault injection of tests/helpers/scored_env.py) is marked ``failed``, masked out of its group's
statistics and the loss, and counted as ``rollout/failed_episodes``.

Expected numbers come from hand computation in the comments. Tolerances: 1e-6 absolute for the
hand-computed GRPO/RLOO values (float32 arithmetic on values ≤ 2); advantages compared against
the estimator on the kept rows alone use 1e-5 (the same float32 formulas, summed over a different
padded layout); the no-failure regression is exact (bit-identical to the values recorded before
this change).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arlarena_jax.objectives import advantage as adv
from arlarena_jax.objectives.compose import GroupFilter, Objective
from arlarena_jax.objectives.host import HostTurn, collate, kept_rows
from arlarena_jax.objectives.ratio import vanilla
from arlarena_jax.rollout import collect, rollout_metrics
from arlarena_jax.train.rl import collect_batch
from envs.local import LocalEnvBatch
from envs.pool import EnvPool
from tests.helpers.scored_env import SCORED_FORMAT, ScoredEnv, ScriptPolicy

EPS = 1e-6  # EPS_STD of the GRPO denominator
LOSS = vanilla()
ROWS = 20  # one static batch shape in most tests: the eager ops compile once


def prepare(estimator, batch):
    out, _, _ = Objective(advantage=estimator, policy_loss=LOSS).prepare(batch)
    return out


def row_advantages(estimator, batch) -> np.ndarray:
    """The advantage on each row's first token (outcome estimators broadcast one value)."""
    return np.asarray(prepare(estimator, batch).advantages)[:, 0]


@pytest.fixture(scope="module")
def pool():
    # 4 envs on 3 workers: bounds [0, 1, 3, 4], so env 0 is alone on worker 0 and a crash or a
    # hang there fails env 0's episode only.
    with EnvPool(ScoredEnv, num_envs=4, num_workers=3, step_timeout=2.0) as pool:
        yield pool


def play(envs, script, group_size=4, max_turns=2, seeds=(3,)):
    return collect(
        envs,
        SCORED_FORMAT,
        ScriptPolicy(script),
        group_seeds=list(seeds),
        group_size=group_size,
        max_turns=max_turns,
    )


@pytest.mark.parametrize("fault", ["crash", "hang"])
def test_a_lost_episode_leaves_its_group(pool, fault):
    restarts = pool.restarts
    # Turn 0: env 0 waits, envs 1..3 end with rewards 1, 0, 2. Turn 1: env 0's worker dies or
    # hangs past the 2-s step timeout, so env 0's episode (2 rows) ends as a failure.
    rollout = play(pool, [["wait", "1", "0", "2"], [fault]])
    assert pool.restarts == restarts + 1
    assert [(r.env_index, r.turn, r.failed) for r in rollout.rows] == [
        (0, 0, True),
        (0, 1, True),
        (1, 0, False),
        (2, 0, False),
        (3, 0, False),
    ]
    assert "failure" in rollout.rows[1].info and rollout.trajectories[0].failed
    metrics = rollout_metrics(rollout)
    assert metrics["rollout/failed_episodes"] == 1.0
    assert metrics["episode/success_rate"] == 0.5  # envs 1 and 3 won; the failed one did not

    turns = rollout.to_host_turns()
    batch = collate(turns, ROWS, 3)
    np.testing.assert_array_equal(batch.row_mask[:5], [0, 0, 1, 1, 1])
    # Kept scores s = [1, 0, 2]: μ = 1, σ (ddof 1) = √((0 + 1 + 1)/2) = 1.
    grpo = row_advantages(adv.grpo(), batch)[:5]
    np.testing.assert_allclose(grpo, [0, 0, 0, -1 / (1 + EPS), 1 / (1 + EPS)], atol=1e-6)
    # RLOO: n/(n−1)·(s − μ) = 1.5·[0, −1, 1].
    rloo = row_advantages(adv.rloo(), batch)[:5]
    np.testing.assert_allclose(rloo, [0, 0, 0, -1.5, 1.5], atol=1e-6)
    # Against the estimators on the group without the failed member (more in the law below).
    alone = collate([t for t in turns if not t.failed], ROWS, 3)
    for estimator in (adv.grpo(), adv.rloo(), adv.gigpo()):
        full = row_advantages(estimator, batch)
        np.testing.assert_allclose(full[2:5], row_advantages(estimator, alone)[:3], atol=1e-5)
        assert (full[:2] == 0).all(), estimator.name


def test_failed_rows_carry_no_loss(pool):
    rollout = play(pool, [["wait", "1", "0", "2"], ["crash"]])
    prepared = prepare(adv.grpo(), collate(rollout.to_host_turns(), ROWS, 3))
    objective = Objective(advantage=adv.grpo(), policy_loss=LOSS)

    def loss(log_probs):
        return objective.loss(log_probs, prepared)[0]

    grad = jax.grad(loss)(prepared.old_log_probs + 0.01)
    assert (np.asarray(grad[:2]) == 0).all()  # env 0's two rows
    assert (np.abs(np.asarray(grad[3:5, :2])) > 0).all()  # envs 2, 3: nonzero advantages


def test_dynamic_sampling_sees_the_group_without_its_failed_member(pool):
    # Groups of 2: (env 0, env 1) and (env 2, env 3). Try 1: env 0 crashes at once, so group 0
    # holds one valid return [1]: uniform, dropped (scored as a 0 it would pass as [0, 1]);
    # group 1 is [1, 1], uniform. Try 2 (the last): group 0 = [0, 1] kept, group 1 = [2, 2]
    # fills the batch.
    script = [["crash", "1", "1", "1"], ["0", "1", "2", "2"]]
    objective = Objective(adv.grpo(), LOSS, group_filter=GroupFilter(max_num_gen_batches=2))
    kept, last, tries = collect_batch(
        pool,
        SCORED_FORMAT,
        ScriptPolicy(script),
        objective,
        group_seeds=lambda k: [10 * k, 10 * k + 1],
        group_size=2,
        max_turns=1,
        history_length=0,
        global_step=1,
    )
    assert tries == 2 and [t.episode_return for t in kept.trajectories] == [0, 1, 2, 2]
    assert not any(t.failed for t in kept.trajectories)
    assert rollout_metrics(last)["rollout/failed_episodes"] == 0.0


def host_turn(group, trajectory, score, failed=False, tokens=1):
    return HostTurn(
        group=group,
        trajectory=trajectory,
        turn=0,
        anchor=f"task {group}",
        episode_return=score,
        step_reward=score,
        action_valid=True,
        old_log_probs=[-0.5] * tokens,
        failed=failed,
    )


def test_a_group_left_with_one_member_gives_no_gradient():
    turns = [
        host_turn(0, 0, 1.0, failed=True),
        host_turn(0, 1, 5.0),  # the only valid member of group 0: masked too
        host_turn(1, 2, 3.0),  # a singleton group without a failure: kept, as before
        host_turn(2, 3, 0.0, failed=True),
        host_turn(2, 4, 0.0, failed=True),  # all failed
    ]
    assert kept_rows(turns).tolist() == [False, False, True, False, False]
    # Group 1 is a singleton: μ = 0, σ = 1 (§3.1), A = 3/(1 + 1e-6).
    grpo = row_advantages(adv.grpo(), collate(turns, ROWS, 3))[:5]
    np.testing.assert_allclose(grpo, [0, 0, 3 / (1 + EPS), 0, 0], atol=1e-6)


# Recorded with the code before this change (commit 5c67e78) on the batch below: no failure
# must give the same float32 values bit for bit.
REGRESSION_SCRIPT = [["1", "wait", "0", "wait", "2", "wait"], ["3", "wait", "0"], ["1"]]
BEFORE = {
    "grpo": [-0.49999967217445374, 0.8333327770233154, 0.8333327770233154, -1.1666659116744995,
             0.22140344977378845, 0.22140344977378845, 0.22140344977378845, 1.5498241186141968,
             -1.107017159461975, -1.107017159461975],
    "rloo": [-1.0, 1.6666667461395264, 1.6666667461395264, -2.3333334922790527,
             0.20000003278255463, 0.20000003278255463, 0.20000003278255463, 1.4000000953674316,
             -1.0, -1.0],
    "vanilla_grpo": [-0.21821777522563934, 1.0910886526107788, 1.0910886526107788,
                     -0.8728709816932678, 0.0, 0.0, 0.0, 0.9999990463256836,
                     -0.9999990463256836, -0.9999990463256836],
    "gigpo": [-0.695946216583252, 1.9168020486831665, 0.8333327770233154, -2.0541887283325195,
              0.15650619566440582, 0.9285091161727905, 0.22140344977378845, 2.580691337585449,
              -2.0729870796203613, -1.8141229152679443],
    "grpo_passk": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.328420639038086, 0.0, 0.0],
}  # fmt: skip
BEFORE_METRICS = {
    "episode/success_rate": 2 / 3,
    "episode/reward/mean": 7 / 6,  # returns 1, 3, 0, 1, 2, 0
    "episode/length/max": 3.0,
    "rollout/failed_episodes": 0.0,
}


def test_no_failure_is_bit_identical_to_before():
    rollout = play(LocalEnvBatch(ScoredEnv, 6), REGRESSION_SCRIPT, 3, 3, seeds=(4, 9))
    batch = collate(rollout.to_host_turns())
    assert np.asarray(batch.row_mask).tolist() == [1.0] * 10
    estimators = (adv.grpo(), adv.rloo(), adv.vanilla_grpo(), adv.gigpo(mode="mean_std_norm"))
    for estimator in (*estimators, adv.pass_at_k()):
        got = row_advantages(estimator, batch)
        np.testing.assert_array_equal(got, np.float32(BEFORE[estimator.name]), estimator.name)
    metrics = rollout_metrics(rollout)
    assert {k: metrics[k] for k in BEFORE_METRICS} == pytest.approx(BEFORE_METRICS, abs=1e-12)


ESTIMATORS = (
    adv.grpo(),
    adv.grpo(norm_by_std=False),
    adv.drgrpo(),
    adv.rloo(),
    adv.vanilla_grpo(),
    adv.pass_at_k(),
    adv.reinforce_plus_plus_baseline(),
    adv.gigpo(mode="mean_std_norm"),
)


@st.composite
def groups_with_failures(draw):
    """2–4 groups of 1–5 single-row trajectories: rewards in {0, 0.5, …, 3}, 1–3 tokens, and a
    random failed subset."""
    turns, traj = [], 0
    for group in range(draw(st.integers(2, 4))):
        for _ in range(draw(st.integers(1, 5))):
            score = draw(st.integers(0, 6)) / 2
            failed, tokens = draw(st.booleans()), draw(st.integers(1, 3))
            turns.append(host_turn(group, traj, score, failed, tokens))
            traj += 1
    return turns


@settings(max_examples=30, deadline=None)
@given(groups_with_failures(), st.sampled_from(ESTIMATORS))
def test_law_kept_members_get_the_estimator_of_the_kept_members_alone(turns, estimator):
    """For any rewards and failed subset: every dropped row (failed, or in a group a failure
    left with < 2 members) gets advantage 0, and the kept rows get what the estimator gives
    on a batch of the kept rows alone."""
    keep = np.zeros(ROWS, bool)
    keep[: len(turns)] = kept_rows(turns)
    full = np.asarray(prepare(estimator, collate(turns, ROWS, 3)).advantages)
    assert (full[~keep] == 0).all()  # padding rows included
    if keep.any():
        kept = [t for t, k in zip(turns, keep, strict=False) if k]
        alone = np.asarray(prepare(estimator, collate(kept, ROWS, 3)).advantages)
        np.testing.assert_allclose(full[keep], alone[: len(kept)], atol=1e-5)
    for group in {t.group for t in turns}:  # the rule for short groups
        rows = [i for i, t in enumerate(turns) if t.group == group]
        valid = sum(not turns[i].failed for i in rows)
        if any(turns[i].failed for i in rows):
            assert keep[rows].any() == (valid >= 2)
