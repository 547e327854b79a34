"""Stability monitor: every collapse signature fires on a synthetic stream and none fires on a
healthy one; rollback recommendations and last-good bookkeeping."""

from __future__ import annotations

import math

import numpy as np
import pytest

from arlarena_jax.train.monitor import KINDS, MonitorSettings, StabilityEvent, StabilityMonitor

STEPS = 200
COLLAPSE = 130  # CISPO on ALFWorld collapses around step 130 (the paper)


def healthy_stream(seed: int = 0) -> list[dict[str, float]]:
    """A noisy but stable run: grad norm ~1 (log-normal), format ratio rising to ~0.95,
    small KL and log-ratio, entropy slowly decreasing from 1.2 to 0.7."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(STEPS):
        out.append(
            {
                "actor/pg_loss": float(rng.normal(0, 0.05)),
                "actor/grad_norm": float(np.exp(rng.normal(0, 0.3))),
                "episode/valid_response_format_ratio": min(
                    1.0, 0.7 + 0.25 * t / STEPS + rng.normal(0, 0.02)
                ),
                "actor/ppo_kl": float(rng.normal(0, 2e-3)),
                "actor/kl_loss": float(abs(rng.normal(0.01, 3e-3))),
                "actor/delta_log_prob": float(rng.normal(0, 0.01)),
                "actor/new_log_prob_entropy": 1.2 - 0.5 * t / STEPS + rng.normal(0, 0.02),
                "actor/pg_clipfrac": float(abs(rng.normal(0.05, 0.01))),
                "actor/skipped_steps": 0.0,
                "episode/success_rate": 0.3 + 0.5 * t / STEPS,
            }
        )
    return out


def run(stream, settings=None) -> tuple[StabilityMonitor, list[StabilityEvent]]:
    monitor = StabilityMonitor(settings)
    events = []
    for step, metrics in enumerate(stream):
        events += monitor.observe(step, metrics)
    return monitor, events


def test_healthy_run_fires_nothing():
    for seed in range(3):
        monitor, events = run(healthy_stream(seed), MonitorSettings(clipfrac_bound=0.2))
        assert events == [], [e.message for e in events]
        assert monitor.healthy and monitor.consecutive_bad == 0
        assert all(monitor.metrics()[f"stability/{k}"] == 0 for k in KINDS)


def corrupt(key, fn, start=COLLAPSE, stop=STEPS):
    stream = healthy_stream()
    for t in range(start, stop):
        stream[t][key] = fn(t - start, stream[t][key])
    return stream


@pytest.mark.parametrize(
    ("kind", "stream"),
    [
        ("grad_norm_spike", corrupt("actor/grad_norm", lambda i, g: g * 10 * 1.5**i, stop=140)),
        ("format_drop", corrupt("episode/valid_response_format_ratio", lambda i, f: f - 0.3)),
        ("kl_drift", corrupt("actor/ppo_kl", lambda i, k: 0.02 * (i + 1))),
        ("kl_drift", corrupt("actor/kl_loss", lambda i, k: k + 0.01 * i)),
        ("log_ratio_drift", corrupt("actor/delta_log_prob", lambda i, d: -0.05 * (i + 1))),
        ("entropy_collapse", corrupt("actor/new_log_prob_entropy", lambda i, h: 0.1)),
        ("entropy_blowup", corrupt("actor/new_log_prob_entropy", lambda i, h: 4.0)),
        ("nonfinite", corrupt("actor/pg_loss", lambda i, x: math.nan, stop=COLLAPSE + 1)),
        ("nonfinite", corrupt("actor/grad_norm", lambda i, x: math.inf, stop=COLLAPSE + 1)),
        ("nonfinite", corrupt("actor/skipped_steps", lambda i, x: 1.0, stop=COLLAPSE + 1)),
        ("clipfrac_high", corrupt("actor/pg_clipfrac", lambda i, c: 0.5)),
    ],
)
def test_each_signature_fires(kind, stream):
    monitor, events = run(stream, MonitorSettings(clipfrac_bound=0.2, log_ratio_bound=0.2))
    assert events, kind
    assert {e.kind for e in events} == {kind}
    first = events[0]
    assert first.kind == kind and COLLAPSE <= first.step < COLLAPSE + 10
    assert first.message.startswith(f"step {first.step}: {kind}: ") and "\n" not in first.message
    assert str(first) == first.message
    assert monitor.metrics()[f"stability/{kind}"] == len(events)


def test_event_values_and_thresholds():
    stream = healthy_stream()
    stream[COLLAPSE]["actor/grad_norm"] = 100.0
    stream[COLLAPSE]["actor/new_log_prob_entropy"] = 0.05
    stream[COLLAPSE]["episode/valid_response_format_ratio"] = 0.2
    monitor = StabilityMonitor(MonitorSettings(window=10, grad_norm_spike_factor=4.0))
    for step, metrics in enumerate(stream[:COLLAPSE]):
        assert monitor.observe(step, metrics) == []
    median = float(np.median([m["actor/grad_norm"] for m in stream[COLLAPSE - 10 : COLLAPSE]]))
    best = max(m["episode/valid_response_format_ratio"] for m in stream[:COLLAPSE])
    events = {e.kind: e for e in monitor.observe(COLLAPSE, stream[COLLAPSE])}
    assert set(events) == {"grad_norm_spike", "entropy_collapse", "format_drop"}
    assert events["grad_norm_spike"].value == 100.0
    assert events["grad_norm_spike"].threshold == pytest.approx(4.0 * median)
    assert events["format_drop"].threshold == pytest.approx(best - 0.15)
    h0 = stream[0]["actor/new_log_prob_entropy"]
    assert events["entropy_collapse"].threshold == pytest.approx(0.2 * h0)
    assert not monitor.healthy and monitor.metrics()["stability/healthy"] == 0.0


def test_rollback_after_k_bad_steps_to_the_last_good_checkpoint():
    stream = corrupt("actor/ppo_kl", lambda i, k: 0.1)  # every step from 130 is bad
    monitor = StabilityMonitor(MonitorSettings(rollback=True, rollback_after=3))
    marks = {}
    for step, metrics in enumerate(stream[: COLLAPSE + 5]):
        monitor.observe(step, metrics)
        if step % 10 == 0 or step == COLLAPSE + 1:  # the trainer saves a checkpoint
            marks[step] = monitor.mark_checkpoint(step)
        assert monitor.should_rollback == (step >= COLLAPSE + 2)
    assert marks[120] and not marks[COLLAPSE] and not marks[COLLAPSE + 1]
    assert monitor.last_good_step == 120
    assert monitor.consecutive_bad == 5
    monitor.rolled_back(120)
    assert monitor.healthy and not monitor.should_rollback and monitor.consecutive_bad == 0
    assert monitor.metrics()["stability/rollbacks"] == 1.0
    assert monitor.observe(121, stream[121]) == []
    assert monitor.mark_checkpoint(121) and monitor.last_good_step == 121


def test_rollback_is_only_a_recommendation_when_enabled():
    stream = corrupt("actor/ppo_kl", lambda i, k: 0.1)
    monitor = StabilityMonitor()  # rollback=False by default
    for step, metrics in enumerate(stream):
        monitor.observe(step, metrics)
        if step == 100:
            monitor.mark_checkpoint(step)
    assert monitor.consecutive_bad == STEPS - COLLAPSE and not monitor.should_rollback
    unmarked = StabilityMonitor(MonitorSettings(rollback=True))
    for step, metrics in enumerate(stream):
        unmarked.observe(step, metrics)
    assert not unmarked.should_rollback  # no good checkpoint to go back to


def test_settings_are_validated():
    with pytest.raises(ValueError, match=r"grad_norm_spike_factor must be > 1 or null, got 0\.5"):
        StabilityMonitor(MonitorSettings(grad_norm_spike_factor=0.5))
    with pytest.raises(ValueError, match=r"entropy_collapse_fraction must lie in \(0, 1\)"):
        StabilityMonitor(MonitorSettings(entropy_collapse_fraction=1.5))
    off = MonitorSettings(kl_bound=None, grad_norm_spike_factor=None)
    _, events = run(corrupt("actor/ppo_kl", lambda i, k: 1.0), off)
    assert events == []


class RestoringCheckpointer:
    """The two calls ``roll_back`` makes: the last good step, and a restore of it."""

    def __init__(self, good: int, state):
        self.good, self.state, self.restored = good, state, []

    def last_good_step(self):
        return self.good

    def restore(self, target, step):
        self.restored.append(step)
        return self.state, {}


class ParamsSink:
    def update_params(self, params):
        self.params = params


def test_a_rollback_forgets_the_history_after_the_restored_step():
    """Steps 1-5 have gradient norm 1 and step 5 is a good checkpoint; steps 6-8 spike to 100,
    three bad steps in a row, so the trainer rolls back at step 8 to step 5. The monitor must
    forget steps 6-8: its window (6 values) then holds the norms of steps 3-5, median 1, and a
    norm of 10 at step 9 is a spike (> 5 × 1). Rolled back to the current step 8 instead, the
    window keeps [1, 1, 1, 100, 100, 100], median 50.5, and the spike at step 9 goes unseen."""
    import jax.numpy as jnp

    from arlarena_jax.train.learner import roll_back
    from arlarena_jax.train.run_state import TrainState

    settings = MonitorSettings(window=6, min_history=3, rollback=True, rollback_after=3)
    monitor = StabilityMonitor(settings)
    for step in range(1, 6):
        assert monitor.observe(step, {"actor/grad_norm": 1.0}) == []
    assert monitor.mark_checkpoint(5)
    for step in (6, 7, 8):
        assert [e.kind for e in monitor.observe(step, {"actor/grad_norm": 100.0})] == [
            "grad_norm_spike"
        ]
    assert monitor.should_rollback
    state = TrainState(params=jnp.zeros(2), opt_state=(), objective_state=())
    checkpointer, engine = RestoringCheckpointer(5, {"params": jnp.ones(2)}), ParamsSink()
    assert roll_back(checkpointer, monitor, state, engine, 8) == {"stability/rolled_back_to": 5.0}
    assert checkpointer.restored == [5] and float(engine.params[0]) == 1.0
    assert monitor.rollbacks == 1 and not monitor.should_rollback
    assert [e.kind for e in monitor.observe(9, {"actor/grad_norm": 10.0})] == ["grad_norm_spike"]


def test_a_disabled_monitor_judges_nothing():
    """``monitor.enabled: false``: a stream that fires ``nonfinite`` and ``kl_drift`` when enabled
    gives no event, no bad step and no rollback."""
    stream = corrupt("actor/ppo_kl", lambda i, k: float("nan") if i == 0 else 1.0)
    assert run(stream, MonitorSettings())[1]
    monitor, events = run(stream, MonitorSettings(enabled=False, rollback=True))
    assert events == [] and monitor.healthy and monitor.consecutive_bad == 0
    assert not monitor.should_rollback


def test_the_default_entropy_key_is_the_one_this_trainer_logs():
    """``actor/entropy`` (what the trainer logs) is judged by default: 1.0 for 5 steps, then
    0.1 < 0.2 · 1.0 fires entropy_collapse at step 5; ``actor/delta_log_prob`` is off by default
    (not logged here) even when it drifts."""
    monitor = StabilityMonitor(MonitorSettings())
    kinds = []
    for step in range(8):
        h = 1.0 if step < 5 else 0.1
        events = monitor.observe(step, {"actor/entropy": h, "actor/delta_log_prob": 5.0})
        kinds += [(e.step, e.kind) for e in events]
    assert kinds[0] == (5, "entropy_collapse") and {k for _, k in kinds} == {"entropy_collapse"}
