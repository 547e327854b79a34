"""The processes of a run: which episodes each plays (``block``, a law checked with hypothesis),
the one-line refusal of a batch that does not split into whole groups, and the host exchange
between real ``jax.distributed`` processes on localhost (``tests/helpers/exchange_worker.py``):
allgather in process order per tag (and what it took: ``Exchange.traffic``), differing start-up
fingerprints refused in one line, and a process that never answers lost within the stated
timeout (3 s here), never a hang; each process's numbers of an RL step and their spread
(``process_stats``); the whole rollout put together from the processes' parts
(``whole_rollout``)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arlarena_jax.errors import ConfigError
from arlarena_jax.rollout.loop import Rollout, Trajectory
from arlarena_jax.train.process_shares import block, check_group_shares, whole_rollout
from arlarena_jax.train.process_stats import (
    NAMES,
    PER_PROCESS_TAGS,
    own_numbers,
    process_metrics,
    spread,
)
from arlarena_jax.train.processes import Exchange, Traffic
from tests.helpers.processes import ROOT, run

WORKER = ROOT / "tests" / "helpers" / "exchange_worker.py"


@given(st.integers(0, 500), st.integers(1, 64))
def test_blocks_cover_the_items_in_process_order(total, count):
    blocks = [block(total, p, count) for p in range(count)]
    assert [i for b in blocks for i in b] == list(range(total))  # disjoint, in order, complete
    assert max(map(len, blocks)) - min(map(len, blocks)) <= 1


def test_a_batch_of_whole_groups_per_process_is_accepted_and_another_refused():
    check_group_shares(8, 4)
    with pytest.raises(ConfigError, match=r"'env.train_batch_size' \(6 groups\).*4 processes"):
        check_group_shares(6, 4)


def test_one_process_exchanges_nothing():
    assert Exchange().allgather("anything", {"a": 1}) == [{"a": 1}]


class _SecondOfTwo:
    """Process 1 of 2's exchange, as the real one answers: the other's part a copy, its own
    part the very object it sent."""

    count = 2

    def __init__(self, other):
        self.other = other

    def allgather(self, tag, obj):
        return [self.other, obj]


def _part(envs: int) -> Rollout:
    from tests.train.test_rl_update import row

    rows = [row(i, [1], [2]) for i in range(envs)]  # environment i, locally
    done = [Trajectory(0, i, i, 1.0, 1, True, {}) for i in range(envs)]
    return Rollout(rows, done, group_size=envs, task_format="text")


def test_the_whole_rollout_is_global_and_leaves_each_part_as_it_was():
    """Process 1's part (environments 2-4 of the batch, 0-2 locally) after process 0's (0-1)."""
    other, own = _part(2), _part(3)
    whole = whole_rollout(_SecondOfTwo((other, 0)), "train", own, 2)
    assert [r.env_index for r in whole.rows] == [0, 1, 2, 3, 4]
    assert [t.env_index for t in whole.trajectories] == [0, 1, 2, 3, 4]
    assert [r.env_index for r in own.rows] == [0, 1, 2]  # its own indices, untouched
    assert [t.env_index for t in own.trajectories] == [0, 1, 2]


def _outputs(what: str, n: int = 2, **extra) -> list[dict]:
    results = run([what], n, script=WORKER, timeout=120, extra=extra, devices=1)
    outputs = []
    for code, out in results:
        lines = [line for line in out.splitlines() if line.startswith("{")]
        outputs.append(json.loads(lines[-1]) if lines else {"exit": code, "out": out[-2000:]})
    return outputs


def test_allgather_returns_every_process_object_in_process_order():
    outputs = _outputs("gather", 3)
    for out in outputs:
        assert out["first"] == [{"process": p, "rows": list(range(p + 1))} for p in range(3)]
        assert out["other"] == [f"text of {p}" for p in range(3)]
        assert out["second"] == [0, 10, 20]
        seconds, sent = out["traffic"]  # three exchanges: some time, some compressed pickles
        assert 0 < seconds < 60 and 3 * 10 < sent < 3 * 200


def test_traffic_adds_up_and_one_process_has_none():
    assert Traffic(1.5, 100) + Traffic(0.5, 20) == Traffic(2.0, 120)
    assert Traffic(2.0, 120) - Traffic(0.5, 20) == Traffic(1.5, 100)
    exchange = Exchange()
    exchange.allgather("anything", {"a": 1})
    assert exchange.traffic == Traffic()


def test_each_process_numbers_of_a_step_are_logged_under_its_index():
    traffic = Traffic(0.25, 3 * 2**20)
    seconds = {"rollout": 4.0, "rollout/env": 1.5, "update": 2.0, "wait": 9.0}  # no sync
    own = own_numbers(seconds, 24, traffic)
    assert own == {
        "env_steps": 24.0,
        "env_s": 1.5,
        "rollout_s": 4.0,
        "update_s": 2.0,
        "sync_s": 0.0,
        "exchange_s": 0.25,
        "exchange_mib": 3.0,
    }
    assert tuple(own) == NAMES
    assert process_metrics(Exchange(), own) == {f"process/0/{k}": v for k, v in own.items()}

    gathered = process_metrics(Gathered([own, {**own, "env_steps": 12.0}]), own)
    assert gathered["process/0/env_steps"] == 24.0 and gathered["process/1/env_steps"] == 12.0
    assert len(gathered) == 2 * len(NAMES) + 4 * len(NAMES)  # each process's, and the spread


class Gathered:
    """An exchange whose allgather returns these processes' numbers (in process order)."""

    def __init__(self, everyone):
        self.everyone = everyone

    def allgather(self, tag, obj):
        return self.everyone


def test_the_spread_over_processes_names_the_straggler():
    # update seconds 3, 7, 7, 1 over four processes: max 7 (first at process 1), min 1, mean 4.5
    everyone = [{"update_s": s, "env_steps": 6.0} for s in (3.0, 7.0, 7.0, 1.0)]
    got = process_metrics(Gathered(everyone), everyone[0])
    assert got["process/max/update_s"] == 7.0 and got["process/argmax/update_s"] == 1.0
    assert got["process/min/update_s"] == 1.0 and got["process/mean/update_s"] == 4.5
    assert got["process/argmax/env_steps"] == 0.0  # a tie: the lowest index
    assert got["process/3/update_s"] == 1.0


def test_beyond_eight_processes_only_the_spread_is_logged():
    everyone = [{name: float(i) for name in NAMES} for i in range(PER_PROCESS_TAGS + 1)]
    got = process_metrics(Gathered(everyone), everyone[0])
    assert PER_PROCESS_TAGS == 8
    assert len(got) == 4 * len(NAMES)  # 28 tags for any number of processes above 8
    assert not any(key.split("/")[1].isdigit() for key in got)
    assert got["process/argmax/update_s"] == 8.0 and got["process/mean/update_s"] == 4.0


@given(st.lists(st.floats(0, 1e6), min_size=2, max_size=70))
def test_the_spread_bounds_the_mean_and_points_at_the_largest(values):
    got = spread([{"x": v} for v in values])
    assert got["process/min/x"] <= got["process/mean/x"] * (1 + 1e-12) + 1e-12
    assert got["process/mean/x"] <= got["process/max/x"] * (1 + 1e-12) + 1e-12
    index = int(got["process/argmax/x"])
    assert values[index] == got["process/max/x"] and max(values[:index], default=-1) < values[index]


def test_processes_started_differently_are_refused_in_one_line():
    for out in _outputs("differ"):
        message = out["refused"]
        assert message and "\n" not in message
        assert "process 1 was started with other config than process 0" in message


def test_a_process_that_never_answers_is_lost_within_the_timeout():
    out = _outputs("silent", ARLARENA_PROCESS_TIMEOUT_S="3")[0]
    assert out["lost"] and "\n" not in out["lost"]
    assert "process 1 did not answer 'never/0' within 3 s" in out["lost"]
    assert out["seconds"] < 30
