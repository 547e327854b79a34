"""The paper's collapse signatures as a host-side stability monitor
(docs/architecture.md, "One RL step").

ARLArena reports that tolerant clipping (SAPO, CISPO) gains fast and then collapses: CISPO on
ALFWorld around step 130, with the gradient norm exploding and the valid-format ratio dropping.
The reference spec lists the detectors implemented here, each on the step's reduced metrics:

- ``nonfinite``: a loss or gradient norm that is NaN/inf, or ``actor/skipped_steps`` > 0;
- ``grad_norm_spike``: g_t > factor · median(g_{t−W} … g_{t−1}) (after ``min_history`` steps);
- ``format_drop``: f_t < max_{s<t} f_s − drop, f = ``episode/valid_response_format_ratio``;
- ``kl_drift``: |``actor/ppo_kl``| or |``actor/kl_loss``| > bound;
- ``log_ratio_drift``: |``actor/delta_log_prob``| (mean of lp − lp_old) > bound; off by default:
  this trainer does not log that key (its masked mean is −``actor/ppo_kl``, which ``kl_drift``
  watches); it is for logs that carry it;
- ``entropy_collapse`` / ``entropy_blowup``: H_t < fraction · H_0 or H_t > factor · H_0, H_0 the
  first value of the first of ``actor/entropy`` (the policy's token entropy, as this trainer
  logs it), ``actor/new_log_prob_entropy`` or ``actor/entropy_loss`` (verl's names) present;
- ``clipfrac_high`` (off by default): ``actor/pg_clipfrac`` > bound;
- ``sampler_kl_growth`` (a *warning*): the sampler-trainer disagreement ``actor/sampler_trainer_kl``
  (k3 estimate of KL(π_sampler ‖ π_trainer), logged when lp_old is recomputed) above
  ``sampler_kl_growth_factor`` × its baseline (the median of its first ``min_history`` values)
  and above ``sampler_kl_floor``: off-policy drift growing, as an unclipped IS loss at staleness
  3 shows (tinker-cookbook#822, about 30×).

A step with an event other than a warning is bad (warnings are logged and counted only).
After ``rollback_after`` bad steps in a row the monitor recommends a
rollback (``should_rollback``, if enabled) to ``last_good_step``: the newest checkpoint the
trainer marked (:meth:`StabilityMonitor.mark_checkpoint`) with no event since the one before.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

KINDS = (
    "nonfinite",
    "grad_norm_spike",
    "format_drop",
    "kl_drift",
    "log_ratio_drift",
    "entropy_collapse",
    "entropy_blowup",
    "clipfrac_high",
    "sampler_kl_growth",
)
WARNINGS = frozenset({"sampler_kl_growth"})  # reported and counted, never make a step bad


@dataclasses.dataclass(frozen=True)
class MonitorSettings:
    """Thresholds of the collapse detectors (``None`` switches a bound off); the config's
    ``monitor`` section. :func:`invalid_monitor` is its one validator."""

    enabled: bool = True  # false: no detector runs (no events, no rollbacks)
    window: int = 20  # W: steps in the running median of the gradient norm
    min_history: int = 5  # grad-norm values needed before spikes are judged
    grad_norm_spike_factor: float | None = 5.0
    format_drop: float | None = 0.15  # below the running best by more than this
    kl_bound: float | None = 0.05
    log_ratio_bound: float | None = None  # actor/delta_log_prob is not logged here (see above)
    entropy_collapse_fraction: float | None = 0.2  # of the first value
    entropy_blowup_factor: float | None = 3.0  # times the first value
    clipfrac_bound: float | None = None
    # warning: sampler-trainer KL above factor x its baseline and above the floor
    sampler_kl_growth_factor: float | None = 10.0
    sampler_kl_floor: float = 1e-3
    rollback: bool = False  # recommend rollbacks at all
    rollback_after: int = 3  # K bad steps in a row
    grad_norm_key: str = "actor/grad_norm"
    format_key: str = "episode/valid_response_format_ratio"
    kl_keys: tuple[str, ...] = ("actor/ppo_kl", "actor/kl_loss")
    log_ratio_key: str = "actor/delta_log_prob"
    entropy_keys: tuple[str, ...] = (
        "actor/entropy",
        "actor/new_log_prob_entropy",
        "actor/entropy_loss",
    )
    clipfrac_key: str = "actor/pg_clipfrac"
    sampler_kl_key: str = "actor/sampler_trainer_kl"
    finite_keys: tuple[str, ...] = (
        "actor/pg_loss",
        "actor/kl_loss",
        "actor/entropy_loss",
        "actor/grad_norm",
        "critic/vf_loss",
        "critic/grad_norm",
    )
    skipped_key: str = "actor/skipped_steps"


def invalid_monitor(s: MonitorSettings) -> Iterator[tuple[str, str]]:
    """``(field, message)`` for every setting out of range (NaN fails every rule)."""
    for name in ("window", "min_history", "rollback_after"):
        if not getattr(s, name) >= 1:
            yield name, f"must be >= 1, got {getattr(s, name)!r}"
    for name in ("grad_norm_spike_factor", "entropy_blowup_factor", "sampler_kl_growth_factor"):
        value = getattr(s, name)
        if value is not None and not value > 1:
            yield name, f"must be > 1 or null, got {value!r}"
    for name in ("format_drop", "kl_bound", "log_ratio_bound", "clipfrac_bound"):
        value = getattr(s, name)
        if value is not None and not value > 0:
            yield name, f"must be > 0 or null, got {value!r}"
    if not s.sampler_kl_floor >= 0:
        yield "sampler_kl_floor", f"must be >= 0, got {s.sampler_kl_floor!r}"
    fraction = s.entropy_collapse_fraction
    if fraction is not None and not 0 < fraction < 1:
        yield "entropy_collapse_fraction", f"must lie in (0, 1) or null, got {fraction!r}"


@dataclasses.dataclass(frozen=True)
class StabilityEvent:
    """One detector firing at one step; ``message`` is a single line."""

    step: int
    kind: str
    message: str
    value: float
    threshold: float

    def __str__(self) -> str:
        return self.message


Fire = Callable[[str, float, float, str], None]  # (kind, value, threshold, detail)


def _scalar(value: Any) -> float | None:
    """A metric as a float; None for anything that is not one number (ignored)."""
    arr = np.asarray(value)
    return float(arr.reshape(())) if arr.size == 1 and arr.dtype.kind in "biuf" else None


def _g(x: float) -> str:
    return f"{x:.4g}"


class StabilityMonitor:
    """Feed each step's metrics to :meth:`observe`; read ``healthy``, ``should_rollback``,
    ``last_good_step`` and :meth:`metrics` (``stability/<kind>`` counts for TensorBoard)."""

    def __init__(self, settings: MonitorSettings | None = None) -> None:
        self.settings = settings or MonitorSettings()
        for field, message in invalid_monitor(self.settings):
            raise ValueError(f"monitor {field} {message}")
        self.counts = dict.fromkeys(KINDS, 0)
        self.healthy = True
        self.consecutive_bad = 0
        self.clean_since_mark = True
        self.last_good_step: int | None = None
        self.rollbacks = 0
        self._grad_norms: deque[tuple[int, float]] = deque(maxlen=self.settings.window)
        self._formats: list[tuple[int, float]] = []
        self._entropy_start: dict[str, float] = {}
        self._sampler_kls: list[float] = []  # the first min_history values: the baseline

    @property
    def should_rollback(self) -> bool:
        s = self.settings
        return (
            s.rollback
            and self.consecutive_bad >= s.rollback_after
            and self.last_good_step is not None
        )

    def observe(self, step: int, metrics: Mapping[str, Any]) -> list[StabilityEvent]:
        """Judge one step's (reduced) metrics; returns the events that fired, one per kind."""
        m = {k: v for k, v in ((k, _scalar(v)) for k, v in metrics.items()) if v is not None}
        events: list[StabilityEvent] = []

        def fire(kind: str, value: float, threshold: float, detail: str) -> None:
            msg = f"step {step}: {kind}: {detail}"
            events.append(StabilityEvent(step, kind, msg, value, threshold))

        if self.settings.enabled:
            for detector in (
                self._nonfinite,
                self._grad_norm_spike,
                self._format_drop,
                self._drift,
                self._entropy,
                self._sampler_kl_growth,
            ):
                detector(step, m, fire)
        for event in events:
            self.counts[event.kind] += 1
        self.healthy = not [e for e in events if e.kind not in WARNINGS]
        self.consecutive_bad = 0 if self.healthy else self.consecutive_bad + 1
        self.clean_since_mark = self.clean_since_mark and self.healthy
        return events

    def _nonfinite(self, step: int, m: dict[str, float], fire: Fire) -> None:
        s = self.settings
        bad = [k for k in s.finite_keys if k in m and not math.isfinite(m[k])]
        if bad:
            fire("nonfinite", m[bad[0]], math.inf, f"{', '.join(bad)} not finite")
        elif m.get(s.skipped_key, 0.0) > 0:
            n = m[s.skipped_key]
            fire("nonfinite", n, 0.0, f"{s.skipped_key} = {_g(n)}: non-finite updates skipped")

    def _grad_norm_spike(self, step: int, m: dict[str, float], fire: Fire) -> None:
        """g_t > factor · median of the last W norms (after ``min_history`` of them)."""
        s = self.settings
        g = m.get(s.grad_norm_key)
        if g is None or not math.isfinite(g):
            return
        history = [v for _, v in self._grad_norms]
        if s.grad_norm_spike_factor is not None and len(history) >= s.min_history:
            median = float(np.median(history))
            limit = s.grad_norm_spike_factor * median
            if g > limit:
                fire(
                    "grad_norm_spike",
                    g,
                    limit,
                    f"{s.grad_norm_key} {_g(g)} > {_g(s.grad_norm_spike_factor)} × running "
                    f"median {_g(median)} = {_g(limit)}",
                )
        self._grad_norms.append((step, g))

    def _format_drop(self, step: int, m: dict[str, float], fire: Fire) -> None:
        """f_t < max_{s<t} f_s − drop."""
        s = self.settings
        f = m.get(s.format_key)
        if f is None or not math.isfinite(f):
            return
        if s.format_drop is not None and self._formats:
            best = max(v for _, v in self._formats)
            if f < best - s.format_drop:
                detail = f"{s.format_key} {_g(f)} < best {_g(best)} − {_g(s.format_drop)}"
                fire("format_drop", f, best - s.format_drop, detail)
        self._formats.append((step, f))

    def _drift(self, step: int, m: dict[str, float], fire: Fire) -> None:
        """|KL|, |mean log-ratio| or the clip fraction above its bound."""
        s = self.settings
        for kind, keys, bound in (
            ("kl_drift", s.kl_keys, s.kl_bound),
            ("log_ratio_drift", (s.log_ratio_key,), s.log_ratio_bound),
            ("clipfrac_high", (s.clipfrac_key,), s.clipfrac_bound),
        ):
            over = [k for k in keys if bound is not None and abs(m.get(k, 0.0)) > bound]
            if over:
                v = m[over[0]]
                fire(kind, v, bound, f"|{over[0]}| = {_g(abs(v))} > {_g(bound)}")

    def _entropy(self, step: int, m: dict[str, float], fire: Fire) -> None:
        """H_t < fraction · H_0 or H_t > factor · H_0 on the first entropy key present."""
        s = self.settings
        for key in (k for k in s.entropy_keys if k in m and math.isfinite(m[k])):
            if key not in self._entropy_start and m[key] > 0:
                self._entropy_start[key] = m[key]
            if key in self._entropy_start:
                break  # the first entropy key with a start value is the one judged
        else:
            return
        h, h0 = m[key], self._entropy_start[key]
        low = None if s.entropy_collapse_fraction is None else s.entropy_collapse_fraction * h0
        high = None if s.entropy_blowup_factor is None else s.entropy_blowup_factor * h0
        if low is not None and h < low:
            fire("entropy_collapse", h, low, f"{key} {_g(h)} < {_g(low)} (initial {_g(h0)})")
        elif high is not None and h > high:
            fire("entropy_blowup", h, high, f"{key} {_g(h)} > {_g(high)} (initial {_g(h0)})")

    def _sampler_kl_growth(self, step: int, m: dict[str, float], fire: Fire) -> None:
        """KL_t > factor · baseline and KL_t > floor, the baseline the median of the first
        ``min_history`` values (a warning)."""
        s = self.settings
        kl = m.get(s.sampler_kl_key)
        if kl is None or not math.isfinite(kl) or s.sampler_kl_growth_factor is None:
            return
        if len(self._sampler_kls) < s.min_history:
            self._sampler_kls.append(kl)
            return
        base = float(np.median(self._sampler_kls))
        limit = max(s.sampler_kl_growth_factor * base, s.sampler_kl_floor)
        if kl > limit:
            detail = (
                f"{s.sampler_kl_key} {_g(kl)} > max({_g(s.sampler_kl_growth_factor)} × baseline "
                f"{_g(base)}, floor {_g(s.sampler_kl_floor)}) (warning)"
            )
            fire("sampler_kl_growth", kl, limit, detail)

    def mark_checkpoint(self, step: int) -> bool:
        """Call when a checkpoint of ``step`` is saved: it is good if no event fired since the
        previous mark (then it becomes ``last_good_step``). Returns whether it is good."""
        good = self.clean_since_mark
        if good:
            self.last_good_step = step
        self.clean_since_mark = True
        return good

    def rolled_back(self, step: int) -> None:
        """The trainer restored the checkpoint of ``step``: forget what came after it."""
        self.rollbacks += 1
        self.healthy, self.consecutive_bad, self.clean_since_mark = True, 0, True
        kept = [(t, v) for t, v in self._grad_norms if t <= step]
        self._grad_norms = deque(kept, maxlen=self.settings.window)
        self._formats = [(t, v) for t, v in self._formats if t <= step]

    def metrics(self) -> dict[str, float]:
        """``stability/<kind>``: events so far; ``healthy``, ``consecutive_bad``, ``rollbacks``."""
        out = {f"stability/{kind}": float(n) for kind, n in self.counts.items()}
        out["stability/healthy"] = float(self.healthy)
        out["stability/consecutive_bad"] = float(self.consecutive_bad)
        out["stability/rollbacks"] = float(self.rollbacks)
        return out
