"""Sokoban end to end: the rollout over the JAX-native batch, the in-process reference batch and the
worker pool, with the solver expert as a scripted policy
(docs/environments.md §1.2, §1.3, §1.7, §3).

Expected values come from independent reasoning: the expert plays a BFS-optimal plan, so every
episode is won in k = (optimal length of the reset room) moves, no move is invalid, and the return
is −0.1·k + 1 + 10 (spec §8.2); one row per move.
"""

from __future__ import annotations

import numpy as np
import pytest

from arlarena_jax.rollout import collect, rollout_metrics
from arlarena_jax.train.evaluate import evaluate
from envs.local import LocalEnvBatch
from envs.pool import EnvPool
from envs.sokoban.batch import SokobanBatch
from envs.sokoban.expert import current_grid, expert_replies, expert_reply, short_expert_replies
from envs.sokoban.prompts import SOKOBAN_COMPACT_FORMAT, SOKOBAN_FORMAT, compact_grid
from envs.sokoban.reference import SokobanTextEnv
from envs.sokoban.render import parse_text, render_text
from envs.sokoban.solver import solve
from envs.text import ScriptedPolicy

GROUP_SEEDS = [0, 1, 2, 3]
GROUP_SIZE = 2
SEED0_GRID = np.array(
    [
        [0, 0, 0, 0, 0, 0],
        [0, 1, 1, 1, 1, 0],
        [0, 0, 2, 1, 5, 0],
        [0, 0, 0, 4, 1, 0],
        [0, 0, 0, 1, 1, 0],
        [0, 0, 0, 0, 0, 0],
    ]
)

expert = ScriptedPolicy(expert_replies)


def check_expert_rollout(rollout, first_grids: list[np.ndarray]) -> None:
    """Every trajectory won optimally; rows well formed (see module doc)."""
    n = len(GROUP_SEEDS) * GROUP_SIZE
    assert len(rollout.trajectories) == n
    for i, traj in enumerate(rollout.trajectories):
        k = len(solve(first_grids[i]))
        assert traj.won and traj.length == k
        assert traj.episode_return == pytest.approx(-0.1 * k + 11, abs=1e-5)
        rows = [r for r in rollout.rows if r.trajectory == traj.trajectory]
        assert [r.turn for r in rows] == list(range(k))
        assert all(r.action_valid and r.format_valid for r in rows)
        assert rows[0].anchor == render_text(first_grids[i])
        assert sum(r.reward for r in rows) == pytest.approx(traj.episode_return, abs=1e-5)
        assert {r.group for r in rows} == {i // GROUP_SIZE}
    metrics = rollout_metrics(rollout, training=True)
    assert metrics["episode/success_rate"] == 1.0
    assert metrics["episode/valid_action_ratio"] == 1.0


def test_expert_reads_the_current_grid_from_the_prompt():
    obs = render_text(SEED0_GRID)
    prompt = f"history [Observation 1: '{obs}', Action 1: 'Up']\nnow:\n{obs}\nact now"
    assert (current_grid(prompt) == SEED0_GRID).all()
    assert expert_reply(SEED0_GRID).endswith("<action>down</action>")
    assert current_grid("no grid here") is None
    assert expert_reply(None).endswith("<action>still</action>")


def test_expert_rollout_on_the_reference_batch():
    envs = LocalEnvBatch(SokobanTextEnv, len(GROUP_SEEDS) * GROUP_SIZE)
    rollout = collect(
        envs,
        SOKOBAN_FORMAT,
        expert,
        group_seeds=GROUP_SEEDS,
        group_size=GROUP_SIZE,
        max_turns=15,
    )
    first = [
        parse_text(next(r.anchor for r in rollout.rows if r.trajectory == t.trajectory))
        for t in rollout.trajectories
    ]
    assert (first[0] == SEED0_GRID).all()  # seed 0: the spec's room (§2.3)
    check_expert_rollout(rollout, first)


def test_expert_rollout_through_the_pool_equals_the_local_batch():
    n = len(GROUP_SEEDS) * GROUP_SIZE
    kwargs = dict(group_seeds=GROUP_SEEDS, group_size=GROUP_SIZE, max_turns=15)
    local = collect(LocalEnvBatch(SokobanTextEnv, n), SOKOBAN_FORMAT, expert, **kwargs)
    with EnvPool(SokobanTextEnv, n, num_workers=2) as pool:
        pooled = collect(pool, SOKOBAN_FORMAT, expert, **kwargs)
    assert [(r.prompt, r.response, r.reward, r.anchor) for r in pooled.rows] == [
        (r.prompt, r.response, r.reward, r.anchor) for r in local.rows
    ]


def test_expert_rollout_on_the_jax_batch():
    envs = SokobanBatch(len(GROUP_SEEDS) * GROUP_SIZE)
    rollout = collect(
        envs, SOKOBAN_FORMAT, expert, group_seeds=GROUP_SEEDS, group_size=GROUP_SIZE, max_turns=15
    )
    first = [
        parse_text(next(r.anchor for r in rollout.rows if r.trajectory == t.trajectory))
        for t in rollout.trajectories
    ]
    for g in range(len(GROUP_SEEDS)):  # a group shares its room
        assert (first[g * GROUP_SIZE] == first[g * GROUP_SIZE + 1]).all()
    assert not (first[0] == first[GROUP_SIZE]).all()
    check_expert_rollout(rollout, first)


def test_compact_prompt_and_short_expert_replies():
    envs = SokobanBatch(len(GROUP_SEEDS) * GROUP_SIZE)
    rollout = collect(
        envs,
        SOKOBAN_COMPACT_FORMAT,
        ScriptedPolicy(short_expert_replies),
        group_seeds=GROUP_SEEDS,
        group_size=GROUP_SIZE,
        max_turns=15,
    )
    assert all(t.won for t in rollout.trajectories)
    first, second = rollout.rows[0], rollout.rows[1]
    assert first.prompt.startswith("Sokoban step 1.") and "Last action: none." in first.prompt
    assert second.prompt.startswith("Sokoban step 2.")
    move = first.response.removeprefix("<think></think><action>").removesuffix("</action>")
    assert f"Last action: {move.capitalize()}." in second.prompt
    assert first.response.startswith("<think></think><action>")
    assert (current_grid(second.prompt) == parse_text(second.anchor)).all()
    assert compact_grid(second.anchor) in second.prompt


def test_evaluation_over_more_seeds_than_envs():
    metrics, rollout = evaluate(
        SokobanBatch(4), SOKOBAN_FORMAT, expert, seeds=list(range(10)), max_turns=15
    )
    assert len(rollout.trajectories) == 10
    assert len({t.trajectory for t in rollout.trajectories}) == 10
    assert metrics["val/success_rate"] == 1.0
    lengths = [len(solve(parse_text(r.anchor))) for r in rollout.rows if r.turn == 0]
    assert len(rollout.rows) == sum(lengths)
    mean_return = sum(11 - 0.1 * k for k in lengths) / len(lengths)
    assert metrics["val/reward/mean"] == pytest.approx(mean_return, abs=1e-5)
