"""Training collapse, recomputed offline from the logged metrics (older runs work too).

Four sources of events, each with the step it fires at:

- the trainer's :class:`~arlarena_jax.train.monitor.StabilityMonitor`, replayed: a fresh monitor
  (the run config's ``monitor`` section, defaults where absent) observes each logged RL step's
  metrics in order. Rollbacks are not replayed, and a non-finite metric is not logged at all, so
  ``nonfinite`` fires offline only through ``actor/skipped_steps`` > 0.
- ``success_collapse``: training success (``episode/success_rate``) averaged over the last
  ``window`` logged steps falls more than ``drop`` (absolute) below the best such average so far,
  once that best has reached ``min_best``. The average tames the noise of small batches; the
  event's step is the first step at which the average has fallen that far.
- ``held_out_format_drop``: the held-out evaluations' valid-format ratio
  (``val/valid_response_format_ratio``) falls more than the monitor's ``format_drop`` below its
  best so far (step 0, the start, included). The trainer's monitor reads each step's rollout,
  made before that step's update, so a policy broken by the last updates shows only here.
- ``held_out_success_drop``: a held-out evaluation's success (``val/success_rate``) falls more
  than the success rule's ``drop`` below the best evaluation before it (the start's included),
  once that best has reached ``min_best``. A real model's training batches are small (8 episodes
  a step): its training success is too noisy to judge alone, while an evaluation of 64 games is
  the policy the run hands on.

A run *collapsed* when a signature of a broken policy fired (:data:`COLLAPSE_KINDS`: its success,
valid format, numerics or entropy went); its first step and kinds are reported. The other events
(KL or log-ratio drift, gradient-norm spikes, a high clip fraction) are *warnings*: they often come
before a collapse, but a run can drift and recover, so they are reported apart. Which kinds count
as a collapse can be chosen (:func:`collapse_kinds`, the report's ``--collapse-on``): a real
model's small training batches trip the training-signal kinds in runs that end well, while the
held-out kinds judge the policy a run hands on.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import yaml

from arlarena_jax.arena.report.events import Series
from arlarena_jax.arena.report.runs import NOT_TRAINING, Run
from arlarena_jax.errors import ConfigError
from arlarena_jax.train.monitor import KINDS as MONITOR_KINDS
from arlarena_jax.train.monitor import MonitorSettings, StabilityMonitor

SUCCESS_KEY = "episode/success_rate"
HELD_OUT_FORMAT_KEY = "val/valid_response_format_ratio"
HELD_OUT_SUCCESS_KEY = "val/success_rate"
COLLAPSE_KINDS = frozenset(
    {
        "success_collapse",
        "held_out_success_drop",
        "format_drop",
        "held_out_format_drop",
        "nonfinite",
        "entropy_collapse",
        "entropy_blowup",
    }
)
OFFLINE_KINDS = ("success_collapse", "held_out_format_drop", "held_out_success_drop")
EVENT_KINDS = (*MONITOR_KINDS, *OFFLINE_KINDS)  # every kind :func:`detect` can report


@dataclasses.dataclass(frozen=True)
class SuccessCollapse:
    """Thresholds of the ``success_collapse`` signature (see the module docstring)."""

    drop: float = 0.25  # absolute fall of the windowed success below its running best
    min_best: float = 0.2  # the best must have reached this before a fall counts
    window: int = 5  # logged steps in the trailing average

    def __post_init__(self) -> None:
        if not (0 < self.drop <= 1 and 0 <= self.min_best <= 1 and self.window >= 1):
            raise ConfigError(
                f"success collapse: need 0 < drop <= 1, 0 <= min_best <= 1, window >= 1; got "
                f"drop={self.drop}, min_best={self.min_best}, window={self.window}"
            )


@dataclasses.dataclass(frozen=True)
class Event:
    """One collapse signature firing."""

    step: int
    kind: str
    message: str


@dataclasses.dataclass(frozen=True)
class Collapse:
    """A run's events. ``first_step`` and ``kinds`` (in order of first firing) summarise its
    collapse events (those of ``collapse_kinds``), ``first_warning_step`` and ``warning_kinds``
    the others."""

    events: tuple[Event, ...]
    collapse_kinds: frozenset[str] = COLLAPSE_KINDS

    def _of(self, collapse: bool) -> list[Event]:
        chosen = [e for e in self.events if (e.kind in self.collapse_kinds) == collapse]
        return sorted(chosen, key=lambda e: e.step)

    @property
    def collapsed(self) -> bool:
        return bool(self._of(True))

    @property
    def first_step(self) -> int | None:
        return min((e.step for e in self._of(True)), default=None)

    @property
    def kinds(self) -> list[str]:
        return list(dict.fromkeys(e.kind for e in self._of(True)))

    @property
    def first_warning_step(self) -> int | None:
        return min((e.step for e in self._of(False)), default=None)

    @property
    def warning_kinds(self) -> list[str]:
        return list(dict.fromkeys(e.kind for e in self._of(False)))


def _lists_as_tuples(values: Mapping[str, Any]) -> dict[str, Any]:
    """YAML lists as tuples (MonitorSettings' sequence fields are tuples)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


def collapse_kinds(names: Iterable[str]) -> frozenset[str]:
    """The event kinds that count as a collapse, from names or comma-separated lists of them
    (none given: :data:`COLLAPSE_KINDS`). An unknown kind raises one ConfigError naming it and
    the known ones."""
    chosen = [n.strip() for item in names for n in item.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in EVENT_KINDS]
    if unknown:
        raise ConfigError(
            f"collapse kinds: unknown {', '.join(unknown)}; known: {', '.join(EVENT_KINDS)}"
        )
    return frozenset(chosen) if chosen else COLLAPSE_KINDS


def monitor_overrides(items: Iterable[str]) -> dict[str, Any]:
    """``{setting: value}`` from ``SETTING=VALUE`` strings, the report's own stability-monitor
    thresholds over each run's (values read as YAML: ``null`` switches a detector off). A
    malformed item, an unknown setting or a value out of range raises one ConfigError naming it."""
    fields = {f.name for f in dataclasses.fields(MonitorSettings)}
    out: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(f"report --monitor {item!r}: expected SETTING=VALUE")
        if name not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"report --monitor {name}: not a monitor setting (one of {known})")
        out[name] = yaml.safe_load(text) if text.strip() else None
    out = _lists_as_tuples(out)
    try:
        StabilityMonitor(MonitorSettings(**out))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"report --monitor: {err}") from None
    return out


def monitor_settings(run: Run, overrides: Mapping[str, Any] | None = None) -> MonitorSettings:
    """The run config's ``monitor`` section (unknown keys ignored; lists become tuples), then
    ``overrides`` (:func:`monitor_overrides`) over it."""
    section = run.config.get("monitor") or {}
    fields = {f.name for f in dataclasses.fields(MonitorSettings)}
    values = _lists_as_tuples({k: v for k, v in section.items() if k in fields})
    values.update(overrides or {})
    try:
        settings = MonitorSettings(**values)
        StabilityMonitor(settings)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{run.path / 'config.yaml'}: monitor section: {err}") from None
    return settings


def step_metrics(scalars: Mapping[str, Series]) -> dict[int, dict[str, float]]:
    """``{step: {tag: value}}`` of the RL steps (no cloning or evaluation tags)."""
    out: dict[int, dict[str, float]] = defaultdict(dict)
    for tag, series in scalars.items():
        if tag.startswith(NOT_TRAINING):
            continue
        for step, value in zip(series.steps.tolist(), series.values.tolist(), strict=True):
            out[step][tag] = value
    return dict(sorted(out.items()))


def replay_monitor(run: Run, settings: MonitorSettings | None = None) -> list[Event]:
    """The events a fresh monitor raises on the run's logged metrics, step by step."""
    monitor = StabilityMonitor(settings or monitor_settings(run))
    events = []
    for step, metrics in step_metrics(run.scalars).items():
        events += [Event(e.step, e.kind, e.message) for e in monitor.observe(step, metrics)]
    return events


def first_fall(
    steps: list[int], values: list[float], drop: float, min_best: float = -np.inf
) -> tuple[int, float, float] | None:
    """The first ``(step, value, best)`` with value < best − drop, best the maximum of the values
    before it, once that best has reached ``min_best``; None if the values never fall so far."""
    best = -np.inf
    for step, value in zip(steps, values, strict=True):
        if best >= min_best and value < best - drop:
            return step, value, best
        best = max(best, value)
    return None


def _fall_event(
    kind: str, fall: tuple[int, float, float] | None, describe: Callable[[float, float], str]
) -> list[Event]:
    """``[Event]`` of a :func:`first_fall` (none without one); ``describe(value, best)``."""
    if fall is None:
        return []
    step, value, best = fall
    return [Event(step, kind, f"step {step}: {kind}: {describe(value, best)}")]


def success_collapse(series: Series | None, rule: SuccessCollapse) -> list[Event]:
    """The first ``success_collapse`` event of a training-success series (at most one)."""
    if series is None or not len(series.steps):
        return []
    values = series.values
    means = [
        float(np.mean(values[max(0, i - rule.window + 1) : i + 1])) for i in range(len(values))
    ]
    fall = first_fall(series.steps.tolist(), means, rule.drop, rule.min_best)
    return _fall_event(
        "success_collapse",
        fall,
        lambda mean, best: (
            f"{SUCCESS_KEY} mean over {rule.window} steps {mean:.3g} < best "
            f"{best:.3g} − {rule.drop:g}"
        ),
    )


def held_out_format_drop(series: Series | None, drop: float | None) -> list[Event]:
    """The first ``held_out_format_drop`` event of a held-out valid-format series (at most
    one): a value more than ``drop`` below the best before it (None: switched off)."""
    if series is None or drop is None:
        return []
    fall = first_fall(series.steps.tolist(), series.values.tolist(), drop)
    return _fall_event(
        "held_out_format_drop",
        fall,
        lambda value, best: f"{HELD_OUT_FORMAT_KEY} {value:.4g} < best {best:.4g} − {drop:g}",
    )


def held_out_success_drop(series: Series | None, rule: SuccessCollapse) -> list[Event]:
    """The first ``held_out_success_drop`` event of a held-out success series (at most one): a
    value more than ``rule.drop`` below the best before it, once that best reached
    ``rule.min_best``."""
    if series is None:
        return []
    fall = first_fall(series.steps.tolist(), series.values.tolist(), rule.drop, rule.min_best)
    return _fall_event(
        "held_out_success_drop",
        fall,
        lambda value, best: f"{HELD_OUT_SUCCESS_KEY} {value:.4g} < best {best:.4g} − {rule.drop:g}",
    )


def detect(
    run: Run,
    rule: SuccessCollapse | None = None,
    monitor: Mapping[str, Any] | None = None,
    kinds: frozenset[str] = COLLAPSE_KINDS,
) -> Collapse:
    """The four sources on one run; ``monitor``: settings over the run's own (see
    :func:`monitor_overrides`); ``kinds``: the event kinds that count as a collapse."""
    settings = monitor_settings(run, monitor)
    held_out_drop = settings.format_drop if settings.enabled else None
    rule = rule or SuccessCollapse()
    events = (
        replay_monitor(run, settings)
        + success_collapse(run.scalars.get(SUCCESS_KEY), rule)
        + held_out_format_drop(run.scalars.get(HELD_OUT_FORMAT_KEY), held_out_drop)
        + held_out_success_drop(run.scalars.get(HELD_OUT_SUCCESS_KEY), rule)
    )
    return Collapse(tuple(sorted(events, key=lambda e: (e.step, e.kind))), kinds)
