"""The multi-turn rollout loop and its metrics (docs/environments.md §1.2, §1.3, §1.7).

Fake environments keep these tests independent of the real ones: a Sokoban-like batch over hand
made rooms (docs/environments.md §3.1–§3.2 moves and rewards, via the BFS solver's ``successors``)
and an ALFWorld-like corridor. Expected values (returns, lengths, metrics) are worked out by hand in
the comments.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from arlarena_jax.objectives.host import collate
from arlarena_jax.rollout import Trajectory, collect, rollout_metrics, success_metrics
from arlarena_jax.rollout.metrics import standard_errors
from envs.alfworld.prompts import ALFWORLD_FORMAT, alfworld_episode_metrics
from envs.base import Observation, Step
from envs.sokoban.prompts import SOKOBAN_FORMAT
from envs.sokoban.render import ACTION_NAMES, parse_text, render_text
from envs.sokoban.solver import solve, split_grid, successors
from envs.text import ScriptedPolicy
from envs.webshop.prompts import webshop_episode_metrics

ROOMS = [  # seed s plays ROOMS[s % 3]; optimal lengths 7, 1, 6
    [
        [0] * 6,
        [0, 1, 1, 1, 1, 0],
        [0, 0, 2, 1, 5, 0],
        [0, 0, 0, 4, 1, 0],
        [0, 0, 0, 1, 1, 0],
        [0] * 6,
    ],
    [[0] * 6, [0, 1, 1, 1, 1, 0], [0, 5, 4, 2, 1, 0], [0, 1, 1, 1, 1, 0], [0] * 6],
    [
        [0] * 6,
        [0, 5, 1, 1, 1, 0],
        [0, 1, 4, 1, 1, 0],
        [0, 1, 1, 1, 1, 0],
        [0, 1, 1, 2, 1, 0],
        [0] * 6,
    ],
]


class FakeSokoban:
    """N Sokoban rooms stepped in Python with the docs/environments.md §3.1–§3.2 rules (actions are
    ints 0..4)."""

    def __init__(self, num_envs: int, max_steps: int = 15):
        self.num_envs, self.max_steps = num_envs, max_steps

    def _render(self, i: int) -> str:
        grid = np.where(self.walls[i], 0, 1)
        for r, c in self.targets[i]:
            grid[r, c] = 2
        for r, c in self.state[i][1]:
            grid[r, c] = 3 if (r, c) in self.targets[i] else 4
        pr, pc = self.state[i][0]
        grid[pr, pc] = 6 if (pr, pc) in self.targets[i] else 5
        return render_text(grid)

    def reset(self, seeds):
        parts = [split_grid(np.array(ROOMS[s % len(ROOMS)])) for s in seeds]
        self.walls = [p[0] for p in parts]
        self.targets = [p[3] for p in parts]
        self.state = [(p[1], p[2]) for p in parts]
        self.steps, self.done = [0] * self.num_envs, [False] * self.num_envs
        return [Observation(self._render(i)) for i in range(self.num_envs)]

    def step(self, actions):
        rewards, infos = np.zeros(self.num_envs, np.float32), []
        for i, action in enumerate(actions):
            on = len(self.state[i][1] & self.targets[i])
            if not self.done[i]:
                rewards[i] = -0.1
                if action != 0:
                    self.state[i] = dict(successors(self.walls[i], self.state[i])).get(
                        action, self.state[i]
                    )
                    self.steps[i] += 1
                    new_on = len(self.state[i][1] & self.targets[i])
                    won = self.state[i][1] <= self.targets[i]
                    rewards[i] += (new_on - on) + 10.0 * won
                    self.done[i] = won or self.steps[i] == self.max_steps
            infos.append({"won": self.state[i][1] <= self.targets[i]})
        obs = [Observation(self._render(i)) for i in range(self.num_envs)]
        return Step(obs, rewards, np.array(self.done), infos)

    def close(self):
        pass


TASKS = ("pick_and_place_simple", "look_at_obj_in_light", "pick_two_obj_and_place")


class FakeCorridor:
    """ALFWorld-like text env: seed s must 'go forward' from room 0 to room 1 + s % 3."""

    def __init__(self, num_envs: int):
        self.num_envs = num_envs

    def reset(self, seeds):
        self.seeds, self.room = list(seeds), [0] * self.num_envs
        intro = "-= Welcome =-\n\nYou are in room 0.\n\nYour task is to: reach room {}."
        return [Observation(intro.format(1 + s % 3), ("go forward", "help", "look")) for s in seeds]

    def step(self, actions):
        obs, rewards, dones, infos = [], [], [], []
        for i, action in enumerate(actions):
            if action == "go forward" and self.room[i] < 1 + self.seeds[i] % 3:
                self.room[i] += 1
            won = self.room[i] == 1 + self.seeds[i] % 3
            obs.append(Observation(f"You arrive at room {self.room[i]}.", ("go forward", "look")))
            rewards.append(10.0 * won)
            dones.append(won)
            infos.append({"won": won, "extra.gamefile": f"/v/{TASKS[self.seeds[i] % 3]}-x/g.pddl"})
        return Step(obs, np.array(rewards, np.float32), np.array(dones), infos)

    def close(self):
        pass


def current_grid(prompt: str) -> np.ndarray:
    """The grid after the prompt's last "observation is:" line (its rows hold tabs)."""
    lines = prompt.rsplit("observation is:\n", 1)[1].split("\n")
    rows = lines[: next(k for k, line in enumerate(lines) if "\t" not in line)]
    return parse_text("\n".join(rows))


def sokoban_expert(prompts):
    """The first move of a BFS-optimal plan from the prompt's current grid."""
    plans = [solve(current_grid(p)) or [0] for p in prompts]
    return [f"<think>plan</think><action>{ACTION_NAMES[plan[0]]}</action>" for plan in plans]


def test_solver_expert_solves_every_room_with_well_formed_rows():
    envs, seeds = FakeSokoban(6), [0, 1, 2]
    rollout = collect(
        envs,
        SOKOBAN_FORMAT,
        ScriptedPolicy(sokoban_expert),
        group_seeds=seeds,
        group_size=2,
        max_turns=15,
    )
    optimal = [len(solve(np.array(ROOMS[s]))) for s in seeds]
    assert optimal == [7, 1, 6]
    assert rollout_metrics(rollout)["episode/success_rate"] == 1.0
    for traj in rollout.trajectories:
        k = optimal[traj.group]  # spec §8.2: return of solving in k moves = -0.1 k + 1 + 10
        assert traj.won and traj.length == k and traj.trajectory == traj.env_index
        assert traj.episode_return == pytest.approx(11 - 0.1 * k, abs=1e-5)
    assert len(rollout.rows) == 2 * sum(optimal)
    i = 0
    for env in range(6):
        rows = rollout.rows[i : i + optimal[env // 2]]
        i += len(rows)
        assert [r.turn for r in rows] == list(range(len(rows)))
        assert {(r.env_index, r.group, r.trajectory) for r in rows} == {(env, env // 2, env)}
        assert rows[0].anchor == render_text(np.array(ROOMS[env // 2]))  # the reset grid
        assert all(r.action_valid and r.format_valid and r.data_source == "text" for r in rows)
        assert sum(r.reward for r in rows) == pytest.approx(rows[0].episode_return)
        assert {(r.episode_return, r.episode_length) for r in rows} == {
            (rows[0].episode_return, len(rows))
        }
        for prev, row in itertools.pairwise(rows):  # the history shows the last turn
            word = ACTION_NAMES[prev.action].capitalize()
            assert (
                f"[Observation {prev.turn + 1}: '{prev.anchor}', Action {prev.turn + 1}: "
                f"'{word}']" in row.prompt
            )
            assert row.anchor in row.prompt
    batch = collate(rollout.to_host_turns(), num_tokens=4)  # scripted: no response tokens
    np.testing.assert_array_equal(batch.group_ids, [r.group for r in rollout.rows])
    np.testing.assert_array_equal(batch.turn_ids, [r.turn for r in rollout.rows])
    # both members of a group see the same grids, so their turn-t rows share an anchor id
    anchors = np.asarray(batch.anchor_ids)
    np.testing.assert_array_equal(anchors[:7], anchors[7:14])
    assert len(set(anchors[:7].tolist())) == 7


def test_max_turns_cut_and_done_envs_leave_no_rows():
    calls = []

    def expert(prompts):
        calls.append(len(prompts))
        return sokoban_expert(prompts)

    # seed 1 is solved at turn 0; seed 0 needs 7 moves but is cut after 3 turns
    rollout = collect(
        FakeSokoban(2),
        SOKOBAN_FORMAT,
        ScriptedPolicy(expert),
        group_seeds=[1, 0],
        group_size=1,
        max_turns=3,
        training=False,
    )
    assert calls == [2, 1, 1]  # skip_done: only running envs are prompted
    assert [(r.env_index, r.turn) for r in rollout.rows] == [(0, 0), (1, 0), (1, 1), (1, 2)]
    assert [t.length for t in rollout.trajectories] == [1, 3]
    assert [t.won for t in rollout.trajectories] == [True, False]
    # returns: 10.9 (one push onto the target) and 3 × −0.1 (seed 0's first moves push nothing)
    metrics = rollout_metrics(rollout, training=False)
    expected = {
        "val/success_rate": 0.5,
        "val/valid_action_ratio": 1.0,
        "val/valid_response_format_ratio": 1.0,
        "val/reward/mean": 5.3,
        "val/reward/max": 10.9,
        "val/reward/min": -0.3,
        "val/length/mean": 2.0,
        "val/length/max": 3.0,
        "val/length/min": 1.0,
        "val/text/test_score": (10.9 - 3 * 0.3) / 4,
        "val/episodes": 2.0,
        "val/success_rate_se": 0.5 / 2**0.5,  # sqrt(p(1 - p)/n), p = 1/2, n = 2
        "val/failed_episodes": 0.0,
    }
    assert metrics == pytest.approx(expected, abs=1e-5)
    calls.clear()
    again = collect(
        FakeSokoban(2),
        SOKOBAN_FORMAT,
        ScriptedPolicy(expert),
        group_seeds=[1, 0],
        group_size=1,
        max_turns=3,
        skip_done=False,
    )
    assert calls == [2, 2, 2]  # the original: every env every turn, finished ones dropped
    assert [(r.prompt, r.response, r.reward) for r in again.rows] == [
        (r.prompt, r.response, r.reward) for r in rollout.rows
    ]
    still = collect(
        FakeSokoban(2),
        SOKOBAN_FORMAT,
        ScriptedPolicy(lambda p: ["<think>wait</think><action>still</action>"] * len(p)),
        group_seeds=[0],
        group_size=2,
        max_turns=4,
        history_length=0,
    )
    assert len(still.rows) == 8 and all("[Observation" not in r.prompt for r in still.rows)
    assert [t.episode_return for t in still.trajectories] == pytest.approx([-0.4, -0.4])


def corridor_policy(prompts):
    """Malformed-but-extractable at reset (executed, both flags 0), strict afterwards."""
    out = []
    for p in prompts:
        at_reset = p.lower().rsplit("current observation is: ", 1)[1].startswith("-= welcome")
        out.append(
            "<action>Go Forward</action>"
            if at_reset
            else "<think>on</think><action>go forward</action>"
        )
    return out


def test_text_env_rows_and_alfworld_metrics():
    # seeds 0, 1, 2 need 1, 2, 3 moves; with 2 turns seed 2's envs fail
    rollout = collect(
        FakeCorridor(6),
        ALFWORLD_FORMAT,
        ScriptedPolicy(corridor_policy),
        group_seeds=[0, 1, 2],
        group_size=2,
        max_turns=2,
    )
    assert [t.length for t in rollout.trajectories] == [1, 1, 2, 2, 2, 2]
    assert [t.episode_return for t in rollout.trajectories] == [10, 10, 10, 10, 0, 0]
    second = [r for r in rollout.rows if r.turn == 1]
    assert all(r.action_valid and r.format_valid and r.action == "go forward" for r in second)
    assert all("Your task is to: reach room" in r.prompt for r in second)
    assert (
        "[Observation 1: '-= Welcome =-" in second[0].prompt
        and "Action 1: 'go forward']" in second[0].prompt
    )
    # rows: 2 + 4 + 4 = 10, four of them strict; row-mean return (2·10 + 4·10 + 4·0) / 10 = 6
    expected = {
        "success_rate": 4 / 6,
        "pick_and_place_success_rate": 1.0,
        "look_at_obj_in_light_success_rate": 1.0,
        "pick_two_obj_and_place_success_rate": 0.0,
        "valid_action_ratio": 0.4,
        "valid_response_format_ratio": 0.4,
        "reward/mean": 40 / 6,
        "reward/max": 10.0,
        "reward/min": 0.0,
        "length/mean": 10 / 6,
        "length/max": 2.0,
        "length/min": 1.0,
    }
    got = rollout_metrics(rollout, episode_metrics=alfworld_episode_metrics)
    want = {f"episode/{k}": v for k, v in expected.items()} | {"rollout/failed_episodes": 0.0}
    assert got == pytest.approx(want)
    val = rollout_metrics(rollout, training=False)
    assert val["val/text/test_score"] == pytest.approx(6.0) and val["val/success_rate"] == 4 / 6


def test_ids_offset_and_size_check():
    rollout = collect(
        FakeCorridor(4),
        ALFWORLD_FORMAT,
        ScriptedPolicy(corridor_policy),
        group_seeds=[0, 0],
        group_size=2,
        max_turns=1,
        group_offset=5,
    )
    assert [(r.group, r.trajectory) for r in rollout.rows] == [(5, 10), (5, 11), (6, 12), (6, 13)]
    assert all(type(r.group) is int and type(r.trajectory) is int for r in rollout.rows)
    with pytest.raises(ValueError, match="3 group seeds x group_size 2 = 6 envs"):
        collect(
            FakeCorridor(4),
            ALFWORLD_FORMAT,
            ScriptedPolicy(corridor_policy),
            group_seeds=[0, 1, 2],
            group_size=2,
            max_turns=1,
        )


def test_success_keys_from_infos():
    def traj(won, info):
        return Trajectory(0, 0, 0, 10.0 * won, 1, won, {"won": won, **info})

    bought = {"task_score": 1.0, "asin": "B0AAAAAAA1", "r_type": 1.0, "r_price": 1.0}
    webshop = [traj(True, bought), traj(False, {"task_score": 0.0})]
    assert success_metrics(webshop, webshop_episode_metrics) == {
        "success_rate": 0.5,
        "webshop_task_score (not success_rate)": 0.5,
        "purchase_rate": 0.5,
        "purchase/r_type": 1.0,  # over the episodes that bought
        "purchase/r_price": 1.0,
    }
    alfworld = [
        traj(True, {"gamefile": "v/pick_heat_then_place_in_recep-Egg-None-Fridge-1/t/g.pddl"}),
        traj(False, {"extra.gamefile": ["v/pick_and_place_simple-Cd-None-Shelf-3/t/g.pddl"]}),
        traj(True, {"gamefile": None}),  # no path: counted in success_rate only
    ]
    assert success_metrics(webshop) == {"success_rate": 0.5}  # no environment keys by default
    # scores 1 and 0: std 0.5, n 2; r_type reported by one episode only: std 0
    assert standard_errors(webshop, webshop_episode_metrics) == pytest.approx(
        {
            "success_rate_se": 0.5 / 2**0.5,
            "webshop_task_score (not success_rate)_se": 0.5 / 2**0.5,
            "purchase_rate_se": 0.5 / 2**0.5,
            "purchase/r_type_se": 0.0,
            "purchase/r_price_se": 0.0,
        }
    )
    assert success_metrics(alfworld, alfworld_episode_metrics) == pytest.approx(
        {
            "success_rate": 2 / 3,
            "pick_heat_then_place_in_recep_success_rate": 1.0,
            "pick_and_place_success_rate": 0.0,
        }
    )
