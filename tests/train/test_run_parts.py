"""The run's collaborators alone: the one metric assembly of an RL step (synchronous and
asynchronous), and the evaluation schedule with the repair of an evaluation a stop missed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from arlarena_jax.train import rl_step
from arlarena_jax.train.evaluation import evaluates_at, missed_evaluation
from arlarena_jax.train.held_out import held_out_path, write_records
from arlarena_jax.train.metrics import Timer
from arlarena_jax.train.rl_step import Batch, step_metrics


@pytest.fixture(autouse=True)
def fixed_rollout_metrics(monkeypatch):
    """The rollout's and the producer's own metrics are theirs to test: fixed stand-ins here."""
    rollout = {"batch/response_tokens": 600.0, "episode/success_rate": 0.5}
    monkeypatch.setattr(rl_step, "rollout_metrics", lambda last, episode_metrics=None: rollout)
    staleness = {"async/staleness_mean": 0.5, "async/staleness_max": 1.0}
    monkeypatch.setattr(rl_step, "staleness_metrics", lambda rows, step, version: staleness)


def timer_of(**seconds: float) -> Timer:
    timer = Timer()
    for name, value in seconds.items():
        timer.seconds[name.replace("__", "/")] = value
    return timer


def timing_keys(metrics: dict[str, float]) -> list[str]:
    return [k for k in metrics if k.startswith("timing/")]


def test_a_synchronous_step_reads_its_own_timer():
    """Rollout 5 s of which the environments 2 s, update 3 s, sync 1 s (one timer): policy
    time 5 − 2 = 3 s, total 5 + 3 + 1 = 9 s (parts with a slash are inside their split),
    600 response tokens over 5 s of rollout = 120 tokens/s, and no async/ keys."""
    timer = timer_of(rollout__env=2.0, rollout=5.0, update=3.0, sync=1.0)
    batch = Batch("rollout", "last", 2, seconds=timer.seconds)
    got = step_metrics(4, {"actor/pg_loss": -0.25}, batch, timer)
    assert got == {
        "actor/pg_loss": -0.25,
        "batch/response_tokens": 600.0,
        "episode/success_rate": 0.5,
        "timing/rollout/env": 2.0,
        "timing/rollout": 5.0,
        "timing/update": 3.0,
        "timing/sync": 1.0,
        "timing/rollout/policy": 3.0,
        "timing/total": 9.0,
        "batch/gen_tries": 2.0,
        "perf/response_tokens_per_s": 120.0,
    }
    assert timing_keys(got) == [  # the console prints the splits in this order
        "timing/rollout/env",
        "timing/rollout",
        "timing/update",
        "timing/sync",
        "timing/rollout/policy",
        "timing/total",
    ]


def test_a_synchronous_step_without_environment_time_logs_it_as_zero():
    """On-device rollouts never step the host environments: the step's own timer logs
    ``rollout/env`` as 0 s (after the sync split, where it is first read) and the policy's
    share is the whole rollout, 4 s."""
    timer = timer_of(rollout=4.0, update=1.0, sync=0.5)
    got = step_metrics(1, {}, Batch(None, None, 1, seconds=timer.seconds), timer)
    assert got["timing/rollout/env"] == 0.0 and got["timing/rollout/policy"] == 4.0
    assert got["timing/total"] == 5.5 and got["perf/response_tokens_per_s"] == 150.0
    assert timing_keys(got)[:5] == [
        "timing/rollout",
        "timing/update",
        "timing/sync",
        "timing/rollout/env",
        "timing/rollout/policy",
    ]


def test_an_asynchronous_step_joins_the_producers_splits_and_waits():
    """The trainer waited 0.25 s, updated 3 s, published 0.5 s (total 3.75 s: the rollout ran
    in the producer, not in the step); the producer played 4 s on device (no environment
    split) and waited 0.75 s. Throughput is over the producer's rollout: 600 / 4 = 150."""
    timer = timer_of(wait=0.25, update=3.0, sync=0.5)
    batch = Batch(
        SimpleNamespace(rows=[]),
        None,
        3,
        seconds={"rollout": 4.0},
        version=6,
        trainer_wait_s=0.25,
        producer_wait_s=0.75,
    )
    got = step_metrics(7, {"actor/lr": 1e-5}, batch, timer)
    assert got == {
        "actor/lr": 1e-5,
        "batch/response_tokens": 600.0,
        "episode/success_rate": 0.5,
        "timing/wait": 0.25,
        "timing/update": 3.0,
        "timing/sync": 0.5,
        "timing/total": 3.75,
        "timing/rollout": 4.0,
        "timing/rollout/policy": 4.0,
        "async/staleness_mean": 0.5,
        "async/staleness_max": 1.0,
        "async/trainer_wait_s": 0.25,
        "async/producer_wait_s": 0.75,
        "batch/gen_tries": 3.0,
        "perf/response_tokens_per_s": 150.0,
    }


def schedule(eval_every: int, total_steps: int, split: str = "validation"):
    trainer = SimpleNamespace(eval_every=eval_every, total_steps=total_steps, eval_split=split)
    return SimpleNamespace(trainer=trainer)


@pytest.mark.parametrize(
    ("eval_every", "total_steps", "due"),
    [(3, 10, [3, 6, 9]), (3, 9, [3, 6]), (1, 4, [1, 2, 3]), (0, 10, []), (20, 10, [])],
)
def test_an_rl_step_evaluates_every_eval_every_steps_but_the_last(eval_every, total_steps, due):
    """The last step's evaluation is the final evaluation (``Run.finish``), not the step's."""
    config = schedule(eval_every, total_steps)
    assert [s for s in range(1, total_steps + 1) if evaluates_at(config, s)] == due


def test_a_due_evaluation_without_its_held_out_file_is_missed(tmp_path):
    """eval_every 3 of 10 steps, held_out files kept for step 3 only: steps 6 and 9 missed
    theirs (a stop during them); step 4 and the last step 10 owe none."""
    config = schedule(3, 10)
    write_records(held_out_path(tmp_path, 3, "validation"), [{"seed": 1, "success": True}])
    missed = [s for s in range(1, 11) if missed_evaluation(config, tmp_path, s)]
    assert missed == [6, 9]
    other_split = schedule(3, 10, "test")  # the file of another split does not count
    assert missed_evaluation(other_split, tmp_path, 3)
