"""Metrics: scalars read back from the event files, the declared reduce rules
(docs/algorithms.md §1.4), the console line and the timing splits."""

from __future__ import annotations

import io
import logging
import time

import jax.numpy as jnp
import numpy as np
import pytest

from arlarena_jax.objectives.declare import Reduction
from arlarena_jax.train.metrics import (
    ConsoleProgress,
    MetricsWriter,
    TimedEnvBatch,
    Timer,
    read_scalars,
    reduce_micro_batch_metrics,
)
from envs.base import Observation, Step


def write_run(log_dir) -> MetricsWriter:
    with MetricsWriter(log_dir) as writer:
        writer.scalars(1, {"actor/pg_loss": jnp.float32(-0.25), "episode/success_rate": 0.5})
        writer.scalars(
            2,
            {
                "actor/pg_loss": np.float64(0.125),
                "actor/grad_norm": jnp.asarray([3.0]),
                "episode/success_rate": 0.75,
                "actor/skipped": True,
                "actor/ppo_kl": float("nan"),
            },
        )
        writer.scalars(3, {"actor/ppo_kl": jnp.inf, "actor/grad_norm": 2})
        writer.text(3, "samples/reply", "<action>up</action>")
    return writer


def test_scalars_are_read_back_from_the_event_file(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        writer = write_run(tmp_path)
    got = read_scalars(tmp_path)
    assert got["actor/pg_loss"] == [(1, -0.25), (2, 0.125)]
    assert got["episode/success_rate"] == [(1, 0.5), (2, 0.75)]
    assert got["actor/grad_norm"] == [(2, 3.0), (3, 2.0)]
    assert got["actor/skipped"] == [(2, 1.0)]
    assert "actor/ppo_kl" not in got  # non-finite values are skipped, counted, warned once
    assert writer.nonfinite == {"actor/ppo_kl": 2}
    assert sum("actor/ppo_kl" in r.message for r in caplog.records) == 1


def test_tensorboard_reads_the_same_values(tmp_path):
    from tensorboard.backend.event_processing import event_accumulator as accumulator

    write_run(tmp_path)
    acc = accumulator.EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    acc.Reload()
    ours = read_scalars(tmp_path)
    assert set(acc.Tags()["scalars"]) == set(ours)
    for tag, points in ours.items():
        assert [(e.step, e.value) for e in acc.Scalars(tag)] == points


def test_a_record_cut_by_a_crash_is_dropped(tmp_path):
    with MetricsWriter(tmp_path) as writer:
        writer.scalars(1, {"a": 1.0})
        writer.scalars(2, {"a": 2.0})
    (path,) = tmp_path.glob("events.out.tfevents.*")
    path.write_bytes(path.read_bytes()[:-5])
    assert read_scalars(tmp_path) == {"a": [(1, 1.0)]}


def test_non_scalar_metric_is_a_one_line_error(tmp_path):
    with MetricsWriter(tmp_path) as writer, pytest.raises(ValueError, match="'x' must be one"):
        writer.scalars(1, {"x": np.zeros(3)})


def test_reduce_micro_batch_metrics_follows_spec_10():
    micro = [
        {"actor/pg_loss": jnp.float32(1.0), "actor/grad_norm_max": 2.0, "critic/score/min": 0.5},
        {"actor/pg_loss": 3.0, "actor/grad_norm_max": 5.0, "critic/score/min": -1.0},
        {"actor/pg_loss": np.float32(2.0), "actor/grad_norm_max": 1.0, "actor/kl_loss": 4.0},
    ]
    declared = {
        "actor/pg_loss": Reduction.MEAN,
        "actor/grad_norm_max": Reduction.MAX,
        "critic/score/min": Reduction.MIN,
        "actor/kl_loss": Reduction.MEAN,
    }
    out = reduce_micro_batch_metrics(micro, declared)
    assert out == {
        "actor/pg_loss": 2.0,
        "actor/grad_norm_max": 5.0,
        "critic/score/min": -1.0,
        "actor/kl_loss": 4.0,
    }


def test_reduce_micro_batch_metrics_reads_the_declaration_not_the_key():
    """A key's text never picks its reduction: "max_len" declared a mean is averaged, "rows"
    declared a sum is summed, and an undeclared key is refused."""
    micro = [{"max_len": 1.0, "rows": 2.0, "lowest": 3.0}, {"max_len": 3.0, "rows": 5.0}]
    declared = {"max_len": Reduction.MEAN, "rows": Reduction.SUM, "lowest": Reduction.MIN}
    assert reduce_micro_batch_metrics(micro, declared) == {
        "max_len": 2.0,
        "rows": 7.0,
        "lowest": 3.0,
    }
    with pytest.raises(ValueError, match=r"metrics \['rows'\] have no declared reduction"):
        reduce_micro_batch_metrics(micro, {"max_len": Reduction.MAX, "lowest": Reduction.MIN})


def test_console_line_shows_the_chosen_keys():
    stream = io.StringIO()
    progress = ConsoleProgress(200, stream=stream)
    metrics = {
        "episode/success_rate": 0.625,
        "episode/reward/mean": jnp.float32(3.1),
        "actor/pg_loss": -0.0123,
        "actor/grad_norm": 0.84,
        "actor/ppo_kl": 1.2e-4,
        "timing/rollout": 12.34,
        "timing/update": 4.5,
        "timing/total": 16.84,
        "perf/tokens_per_s": 1234.0,
        "critic/advantages/mean": 0.0,
    }
    first = progress.update(12, metrics)
    assert first == (
        "[ 12/200] success 0.625 reward 3.1 loss -0.0123 grad 0.84 kl 1.20e-04"
        " | rollout 12.3s update 4.5s | 1234 tok/s"
    )
    second = progress.update(13, metrics | {"stability/healthy": 0.0})
    assert second.startswith("[ 13/200] success 0.625") and "| UNSTABLE | eta " in second
    assert stream.getvalue().splitlines() == [first, second]
    quiet = ConsoleProgress(10, stream=stream, every=5)
    assert quiet.update(3, metrics) is None and quiet.update(5, metrics) is not None


def test_timer_splits_and_throughput():
    timer = Timer()
    with timer("rollout"):
        time.sleep(0.02)
    with timer("update"):
        time.sleep(0.01)
    with timer("rollout"):
        time.sleep(0.02)
    out = timer.metrics()
    assert set(out) == {"timing/rollout", "timing/update", "timing/total"}
    assert 0.04 <= out["timing/rollout"] < 0.5 and 0.01 <= out["timing/update"] < 0.5
    assert out["timing/total"] == pytest.approx(out["timing/rollout"] + out["timing/update"])
    assert timer.throughput(100, "update") == pytest.approx(100 / out["timing/update"])
    timer.reset()
    assert timer.metrics() == {"timing/total": 0}


class Ending:
    """Environments whose episodes end at the turns given (env i at turn ``ends[i]``)."""

    def __init__(self, ends: list[int]) -> None:
        self.ends, self.turn = ends, 0

    @property
    def num_envs(self) -> int:
        return len(self.ends)

    def reset(self, seeds):
        self.turn = 0
        return [Observation("start")] * len(seeds)

    def step(self, actions):
        self.turn += 1
        dones = np.asarray([self.turn >= end for end in self.ends])
        n = len(actions)
        return Step([Observation("next")] * n, np.zeros(n, np.float32), dones, [{}] * n)


def test_timed_envs_count_the_steps_of_running_episodes_and_time_them():
    timer = Timer()
    envs = TimedEnvBatch(Ending([1, 3, 2]), timer)
    for _ in range(2):  # two batches of episodes: ended ones are stepped along, not counted
        envs.reset([0, 1, 2])
        for _ in range(4):
            envs.step(["a", "b", "c"])
    assert envs.steps == 2 * (1 + 3 + 2)
    assert timer.seconds["rollout/env"] > 0 and envs.num_envs == 3
