"""Asynchronous RL (``trainer.max_staleness``; docs/architecture.md, "Asynchronous RL"): the
producer thread, its staleness bound, per-token policy versions, partial rollouts, stop and
resume, errors, and the monitor's warning on a growing sampler-trainer disagreement.

Runs are the tiny Sokoban config cut to seconds (2 groups x 2, 3 turns, no cloning, a random
policy: its replies run to the token budget, so a rollout spans several decode calls). Timing
never decides a result: where an update has to land mid-rollout, hooks hold the producer and
the trainer until it has.
"""

from __future__ import annotations

import collections
import json
import math
import signal
import threading
import time

import pytest

from arlarena_jax.errors import ConfigError
from arlarena_jax.train.async_rollouts import AsyncRollouts
from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.loop import train
from arlarena_jax.train.monitor import MonitorSettings, StabilityMonitor
from arlarena_jax.train.producer import Producer, staleness_metrics
from arlarena_jax.train.run import Run
from tests.helpers.tiny_runs import BASE_TINY, RL_SIZES

CONFIG = BASE_TINY
SMALL = [
    "sft.enabled=false",
    "trainer.eval_at_start=false",
    *RL_SIZES,
    "trainer.use_rollout_log_probs=false",  # lp_old recomputed: the disagreement is measured
]
# wall-clock keys (each process's share of a step: mostly seconds), and the producer's own
DIFFERS = ("timing/", "perf/", "process/", "async/")
ASYNC_KEYS = (
    "async/staleness_mean",
    "async/staleness_max",
    "async/mixed_rows",
    "async/trainer_wait_s",
    "async/producer_wait_s",
    "actor/sampler_trainer_kl",
)


def config(directory, steps: int, *extra: str):
    overrides = [*SMALL, *extra, f"trainer.total_steps={steps}", f"trainer.run_dir={directory}"]
    return load_config(CONFIG, overrides)


def no_producer_thread() -> bool:
    return not any(t.name == "arlarena-producer" for t in threading.enumerate())


def host_state(directory, step: int) -> dict:
    """The host state a checkpoint holds (its ``host`` item, JSON)."""
    return json.loads((directory / "checkpoints" / str(step) / "host" / "metadata").read_text())


class Guard:
    """A stop guard without signal handlers (those need the main thread): ``requested`` is set
    by the test."""

    signal = signal.SIGTERM
    requested = False


@pytest.fixture(scope="module")
def synchronous(tmp_path_factory):
    directory = tmp_path_factory.mktemp("sync")
    return directory, train(config(directory, 3), console=False)


# -- configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["trainer.max_staleness=-1"], "trainer.max_staleness"),
        (["trainer.partial_rollouts=true"], "trainer.partial_rollouts"),
        (
            ["trainer.max_staleness=1", "trainer.partial_rollouts=true", "env.device_rollout=true"],
            "trainer.partial_rollouts",
        ),
    ],
)
def test_bad_async_settings_are_one_line_config_errors(tmp_path, overrides, key):
    with pytest.raises(ConfigError) as info:
        config(tmp_path, 1, *overrides)
    assert f"'{key}'" in str(info.value) and "\n" not in str(info.value)


# -- k = 0 --------------------------------------------------------------------------------------


def test_max_staleness_0_is_the_synchronous_loop(synchronous, tmp_path):
    """The key set to 0 runs the synchronous code path: no producer, the same metrics at every
    step, bit for bit (timings aside)."""
    _, expected = synchronous
    got = train(config(tmp_path, 3, "trainer.max_staleness=0"), console=False)
    assert len(got.history) == 3
    for want, row in zip(expected.history, got.history, strict=True):
        assert not any(k.startswith("async/") for k in row)
        assert {k: v for k, v in row.items() if not k.startswith(DIFFERS)} == {
            k: v for k, v in want.items() if not k.startswith(DIFFERS)
        }
        assert row["process/0/env_steps"] == want["process/0/env_steps"] > 0


def test_the_producer_at_k_0_reproduces_the_synchronous_run(synchronous, tmp_path, monkeypatch):
    """The producer thread itself, bounded at k = 0, equals the synchronous loop: the same
    metrics at every step bit for bit (same task seeds, sampler seeds, parameters), staleness 0,
    and the same host state (task RNG, policy calls) in every checkpoint."""
    sync_dir, expected = synchronous
    monkeypatch.setattr(Run, "asynchronous", property(lambda self: True))
    got = train(config(tmp_path, 3), console=False)
    for want, row in zip(expected.history, got.history, strict=True):
        assert row["async/staleness_max"] == 0.0 and row["async/mixed_rows"] == 0.0
        same = {k: v for k, v in row.items() if not k.startswith(DIFFERS)}
        assert same == {k: v for k, v in want.items() if not k.startswith(DIFFERS)}
        assert row["process/0/env_steps"] == want["process/0/env_steps"] > 0  # the producer's
    for step in (2, 3):  # keep_checkpoints: 2
        assert host_state(tmp_path, step) == host_state(sync_dir, step)
    assert no_producer_thread()


# -- k > 0 --------------------------------------------------------------------------------------


def test_partial_rollouts_mix_versions_within_the_bound(tmp_path, monkeypatch):
    """k = 1 with partial rollouts: step 2's rollout starts on version 0 (the trainer holds the
    publication of version 1 until it has) and waits at its second decode call until version 1
    is published, so the tokens after the switch carry version 1 and rows mix versions. The
    bound holds at every step (staleness ≤ 1), evaluation at step 2 runs with the producer
    paused, and the thread is joined at the end."""
    calls: collections.Counter[int] = collections.Counter()
    switch, publish = AsyncRollouts.switch_to_newest, Producer.publish
    runs: list[AsyncRollouts] = []

    def held_switch(self):
        runs[:] = [self]
        step = self.producing_step
        calls[step] += 1
        if step == 2 and calls[step] == 2:
            wait_until(lambda: self.producer.newest()[1] >= 1)
        switch(self)

    def held_publish(self, params, version):
        if version == 1:
            wait_until(lambda: runs and runs[0].producing_step >= 2)
        publish(self, params, version)

    monkeypatch.setattr(AsyncRollouts, "switch_to_newest", held_switch)
    monkeypatch.setattr(Producer, "publish", held_publish)
    settings = ("trainer.max_staleness=1", "trainer.partial_rollouts=true")
    summary = train(config(tmp_path, 3, *settings), console=False)
    history = summary.history
    assert [row["step"] for row in history] == [1.0, 2.0, 3.0]
    for row in history:
        for key in ASYNC_KEYS:
            assert math.isfinite(row[key]), key
        assert 0 <= row["async/staleness_mean"] <= row["async/staleness_max"] <= 1
    assert history[1]["async/mixed_rows"] > 0  # version 0 then 1 within rows
    for row in history:  # the default trust region of async runs: token TIS, cap 2
        assert 0 < row["actor/tis_weight_mean"] <= 2.0
    assert 0 < history[1]["async/staleness_mean"] < 1
    assert "val/success_rate" in history[1]
    assert no_producer_thread()


def test_k_2_stops_saves_and_resumes_from_the_saved_step(tmp_path, monkeypatch):
    """k = 2, a stop signal after step 1 (with batches 2 and 3 possibly in flight): the run
    saves step 1 with the task RNG of the last consumed batch and exits; started again it
    continues from step 2, regenerating the dropped batches."""

    guard, step = Guard(), Run.step

    def stop_after_step_1(self):
        metrics = step(self)
        guard.requested = self.host.step >= 1
        return metrics

    monkeypatch.setattr(Run, "step", stop_after_step_1)
    first = train(config(tmp_path, 3, "trainer.max_staleness=2"), console=False, guard=guard)
    assert first.stopped is not None and first.steps == 1
    assert no_producer_thread()
    monkeypatch.setattr(Run, "step", step)
    saved = host_state(tmp_path, 1)  # kept: the newest two
    resumed = train(config(tmp_path, 3, "trainer.max_staleness=2"), console=False)
    assert [row["step"] for row in resumed.history] == [2.0, 3.0]
    assert saved["step"] == 1
    for row in first.history + resumed.history:
        assert row["async/staleness_max"] <= 2
        assert all(key in row for key in ASYNC_KEYS)
    assert resumed.history[0]["async/policy_version"] == 1.0  # restarted from the saved params
    assert no_producer_thread()


def test_a_rollback_drops_the_queued_batches(tmp_path):
    """k = 1 and a KL bound every step breaks, rollback after one bad step: each step restores
    the previous checkpoint, and the batches queued from the discarded parameters are dropped:
    the producer starts again from the restored parameters, so steps 2 and 3 train on batches
    of the parameters they update (staleness 0)."""
    extra = ("monitor.rollback=true", "monitor.rollback_after=1", "monitor.kl_bound=1e-12")
    settings = ("trainer.max_staleness=1", "trainer.eval_every=0", *extra)
    summary = train(config(tmp_path, 3, *settings), console=False)
    rolled = [row.get("stability/rolled_back_to") for row in summary.history]
    assert rolled == [0.0, 1.0, 2.0]
    assert [row["async/staleness_max"] for row in summary.history[1:]] == [0.0, 0.0]
    assert no_producer_thread()


def test_a_producer_exception_reaches_the_trainer_and_the_thread_is_joined(tmp_path, monkeypatch):
    boom = RuntimeError("environment pool crashed")

    def crash(self, *args, **kwargs):
        raise boom

    monkeypatch.setattr(AsyncRollouts, "produce", crash)
    result: list[BaseException] = []

    def target():
        try:
            train(config(tmp_path, 2, "trainer.max_staleness=1"), console=False, guard=Guard())
        except BaseException as exc:  # handed to the test
            result.append(exc)

    runner = threading.Thread(target=target)
    runner.start()
    runner.join(timeout=300)
    assert not runner.is_alive(), "the trainer hung on a failed producer"
    assert result and result[0] is boom
    assert no_producer_thread()


# -- the producer alone -------------------------------------------------------------------------


def wait_until(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.005)


@pytest.mark.parametrize("k", [0, 1, 2])
def test_the_producer_never_runs_more_than_k_updates_ahead(k):
    """With an idle trainer the producer plays exactly steps 1 … k+1 (each needs version ≥
    step − 1 − k, and version 0 is published) and then waits; every publication frees one more
    step, and every batch's staleness (step − 1 − version) is at most k."""
    started: list[tuple[int, int]] = []
    producer = Producer(
        lambda step, params, version: started.append((step, version)) or step,
        max_staleness=k,
        first_step=1,
        last_step=6,
        params=None,
        version=0,
    )
    try:
        wait_until(lambda: len(started) == k + 1)
        time.sleep(0.05)  # a producer that ignored the bound would have gone on by now
        assert [s for s, _ in started] == list(range(1, k + 2))
        for step in range(1, 7):
            produced, _ = producer.take(step)
            assert produced.value == step and (step - 1) - produced.version <= k
            producer.publish(None, step)
        assert all((s - 1) - v <= k for s, v in started) and len(started) == 6
    finally:
        producer.stop()


def test_a_producer_error_is_reraised_by_take_and_stop_joins():
    boom = ValueError("boom")

    def produce(step, params, version):
        if step == 2:
            raise boom
        return step

    producer = Producer(produce, max_staleness=1, first_step=1, last_step=3, params=None, version=0)
    assert producer.take(1)[0].value == 1
    with pytest.raises(ValueError) as info:
        producer.take(2)
    assert info.value is boom
    producer.stop()
    assert no_producer_thread()


def test_staleness_metrics_count_tokens_and_mixed_rows():
    """Versions per token: row a all version 1, row b versions 1, 2 (mixed) with its second
    token masked out of the loss... and a third token counted, row c recorded none (the batch's
    version 0 applies). Consumed by the update of step 4: behind = 3 − version."""

    class Row:
        def __init__(self, n, versions, loss_mask=None):
            self.response_ids, self.versions, self.loss_mask = [0] * n, versions, loss_mask

    rows = [Row(2, [1, 1]), Row(3, [1, 2, 2], [1, 0, 1]), Row(1, None)]
    m = staleness_metrics(rows, step=4, version=0)
    behind = [2, 2, 2, 1, 3]  # a: 2, 2; b: 2, (masked), 1; c: 3
    assert m["async/staleness_mean"] == pytest.approx(sum(behind) / len(behind), abs=1e-12)
    assert m["async/staleness_max"] == 3.0 and m["async/mixed_rows"] == 1.0


# -- the monitor's warning ----------------------------------------------------------------------


def test_the_monitor_warns_when_the_sampler_trainer_kl_grows():
    """Baseline: the median of the first 5 values (1e-3); the warning fires above max(10 ×
    1e-3, floor 1e-3) = 1e-2, i.e. at 0.02 and 0.05, not at 0.005; warnings never make a step
    bad (no rollback counting)."""
    monitor = StabilityMonitor(MonitorSettings(min_history=5))
    series = [1e-3, 1.2e-3, 0.8e-3, 1e-3, 1.1e-3, 5e-3, 2e-2, 5e-2]
    fired = []
    for step, kl in enumerate(series, 1):
        events = monitor.observe(step, {"actor/sampler_trainer_kl": kl})
        fired += [(e.step, e.kind) for e in events]
        assert monitor.healthy and monitor.consecutive_bad == 0
    assert fired == [(7, "sampler_kl_growth"), (8, "sampler_kl_growth")]
    assert monitor.metrics()["stability/sampler_kl_growth"] == 2.0
