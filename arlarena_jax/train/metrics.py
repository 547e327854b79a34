"""Training metrics: TensorBoard event files, a one-line console progress, timing splits.

Keys are the reference spec's: ``actor/pg_loss``, ``actor/grad_norm``,
``episode/success_rate``, ``critic/advantages/mean``, ``timing/rollout``, ``perf/tokens_per_s``,
``stability/<kind>`` … and are written as given, except that tensorboardX replaces characters
TensorBoard rejects by ``_`` (``webshop_task_score (not success_rate)`` becomes
``webshop_task_score__not_success_rate_``). Micro-batch metrics are reduced with
:func:`reduce_micro_batch_metrics`, each by the reduction its component declares
(docs/algorithms.md §1.4: mean, max or min; :class:`~arlarena_jax.objectives.declare.Reduction`).
Event files are TFRecord streams of ``Event`` protos (8-byte little-endian length, masked CRC-32C of
the length, payload, masked CRC-32C of the payload); :func:`read_scalars` reads them back without
TensorFlow or TensorBoard, each (tag, step) once: a step redone after a resume keeps the value
written last.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import os
import struct
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import jax
import numpy as np
from google.protobuf.message import DecodeError
from tensorboardX import SummaryWriter
from tensorboardX.proto.event_pb2 import Event
from tensorboardX.record_writer import masked_crc32c

from arlarena_jax.objectives.declare import Reduction

log = logging.getLogger(__name__)


_HOST_REDUCE: dict[Reduction, Callable[[list[float]], float]] = {
    Reduction.MEAN: lambda vals: float(np.mean(vals)),
    Reduction.MAX: max,
    Reduction.MIN: min,
    Reduction.SUM: lambda vals: float(sum(vals)),
}


def reduce_micro_batch_metrics(
    metrics: Sequence[Mapping[str, Any]], reductions: Mapping[str, Reduction]
) -> dict[str, float]:
    """One value per key over micro-batches, by the key's declared reduction
    (docs/algorithms.md §1.4; e.g. ``Objective.metric_reductions``), never by its text. A key
    missing from some micro-batches is reduced over the others; a key without a declaration
    raises."""
    values: dict[str, list[float]] = defaultdict(list)
    for one in jax.device_get(list(metrics)):
        for key, value in one.items():
            values[key].append(float(np.asarray(value)))
    missing = sorted(set(values) - set(reductions))
    if missing:
        raise ValueError(f"metrics {missing} have no declared reduction")
    return {key: _HOST_REDUCE[reductions[key]](vals) for key, vals in values.items()}


_WRITER_NUMBERS = itertools.count()


EVAL_PREFIX = "val/"  # an evaluation's metrics in memory (verl's names); written under its split


def split_tag(key: str, split: str | None) -> str:
    """The tag an evaluation metric is written as: ``val/x`` → ``<split>/x`` (``test/success_
    rate``, ``validation/success_rate``), so every logged evaluation names its split; any other
    key, or no split, unchanged."""
    if split and key.startswith(EVAL_PREFIX):
        return f"{split}/{key[len(EVAL_PREFIX) :]}"
    return key


def evaluation_key(tag: str, split: str | None) -> str:
    """:func:`split_tag` undone: ``<split>/x`` → ``val/x`` (a run's evaluation metrics under one
    name whatever its split; runs from before the splits logged ``val/x`` itself)."""
    if split and tag.startswith(f"{split}/"):
        return EVAL_PREFIX + tag[len(split) + 1 :]
    return tag


class _NoEvents:
    """A SummaryWriter that writes nothing."""

    def add_scalar(self, *args, **kwargs) -> None: ...

    def add_text(self, *args, **kwargs) -> None: ...

    def close(self) -> None: ...


class MetricsWriter:
    """Scalars and text into TensorBoard event files under ``log_dir`` (tensorboardX); the
    evaluation's ``val/…`` metrics are written as ``<eval_split>/…`` (:func:`split_tag`)."""

    def __init__(
        self, log_dir: str | Path | None, *, flush_secs: int = 30, eval_split: str | None = None
    ) -> None:
        """``log_dir`` None: check and count as usual but write nothing (the processes of a
        multi-process run other than process 0: one writer per run directory)."""
        self.log_dir = None if log_dir is None else Path(log_dir)
        self.eval_split = eval_split
        # a file of its own, even when another writer starts in the same second (a resume right
        # after a crash): tensorboardX names files by the second and host, and truncates
        suffix = f".{os.getpid()}.{next(_WRITER_NUMBERS)}"
        self._writer = (
            _NoEvents()
            if log_dir is None
            else SummaryWriter(str(self.log_dir), flush_secs=flush_secs, filename_suffix=suffix)
        )
        self.nonfinite: dict[str, int] = defaultdict(int)  # key -> values skipped

    def scalars(self, step: int, metrics: Mapping[str, Any]) -> int:
        """Write every finite scalar (Python, numpy or jax, fetched in one transfer); non-finite
        values are skipped and counted in ``nonfinite`` (a warning the first time per key).
        Returns how many were written."""
        written = 0
        for key, value in jax.device_get(dict(metrics)).items():
            arr = np.asarray(value)
            if arr.size != 1 or arr.dtype.kind not in "biuf":
                raise ValueError(
                    f"metric {key!r} must be one number, got {arr.dtype} of shape {arr.shape}"
                )
            number = float(arr.reshape(()))
            if not math.isfinite(number):
                if not self.nonfinite[key]:
                    log.warning("metric %s is %s at step %d; not written", key, number, step)
                self.nonfinite[key] += 1
                continue
            self._writer.add_scalar(split_tag(key, self.eval_split), number, global_step=int(step))
            written += 1
        return written

    def text(self, step: int, tag: str, text: str) -> None:
        self._writer.add_text(tag, text, global_step=int(step))

    def flush(self) -> None:
        """Write every scalar and text added so far to the event file and fsync it (and its
        directory), so a fresh reader sees them even if the process is killed right after.

        tensorboardX queues events for a background thread that flushes every ``flush_secs``;
        its own ``flush()`` skips the queue. Here the thread is stopped (it writes the queued
        events first), the file is flushed and fsynced, and a new thread takes over."""
        if isinstance(self._writer, _NoEvents):
            return
        events = getattr(self._writer.file_writer, "event_writer", None)
        worker = getattr(events, "_worker", None)
        if events is None or worker is None or getattr(events, "_closed", True):
            self._writer.flush()
            return
        worker.stop()
        events._ev_writer.flush()  # RecordWriter.flush: file flush + os.fsync
        events._worker = type(worker)(events._event_queue, events._ev_writer, events._flush_secs)
        events._worker.start()
        directory = os.open(events.get_logdir(), os.O_RDONLY)
        try:
            os.fsync(directory)  # the event file's directory entry
        finally:
            os.close(directory)

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def records(path: Path) -> Iterator[bytes]:
    """The payloads of a TFRecord file, up to its last complete record."""
    data = path.read_bytes()
    pos = 0
    while pos + 12 <= len(data):
        header, (crc,) = data[pos : pos + 8], struct.unpack("<I", data[pos + 8 : pos + 12])
        (length,) = struct.unpack("<Q", header)
        end = pos + 12 + length
        if crc != masked_crc32c(header) or end + 4 > len(data):
            return  # a record cut short by a crash: stop at the last complete one
        body, (body_crc,) = data[pos + 12 : end], struct.unpack("<I", data[end : end + 4])
        if body_crc != masked_crc32c(body):
            return
        yield body
        pos = end + 4


def _file_order(path: Path) -> tuple[float, str]:
    """Event files sort by the wall time of their first event (the file's creation, to the
    microsecond; the ``<unix time>`` of ``events.out.tfevents.<unix time>.<host>…`` where it has
    none), then by name."""
    parts = path.name.split(".")
    started = float(parts[3]) if len(parts) > 3 and parts[3].isdigit() else 0.0
    try:
        with path.open("rb") as f:
            header = f.read(12)
            (length,) = struct.unpack("<Q", header[:8]) if len(header) == 12 else (0,)
            if length and struct.unpack("<I", header[8:])[0] == masked_crc32c(header[:8]):
                started = Event.FromString(f.read(length)).wall_time or started
    except (OSError, DecodeError):  # unreadable, or a first record cut off
        pass
    return started, str(path)


def event_files(log_dir: str | Path) -> list[Path]:
    """The event files under ``log_dir`` (recursively), oldest first (the order they were
    written in: a resumed run's file after the one it continues)."""
    return sorted(Path(log_dir).rglob("events.out.tfevents.*"), key=_file_order)


def scalar_value(value: Any) -> float | None:
    """The number of a ``Summary.Value`` (a simple value or a one-float tensor), else None."""
    if value.HasField("simple_value"):
        return value.simple_value
    if value.HasField("tensor") and value.tensor.float_val:
        return value.tensor.float_val[0]
    return None


def read_scalars(log_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), …]}`` (ascending steps) from every event file under ``log_dir``.

    A step written again (a resumed run redoing the steps after its checkpoint) counts once,
    with the last value written: files oldest first (:func:`event_files`), records in order."""
    out: dict[str, dict[int, float]] = defaultdict(dict)
    for path in event_files(log_dir):
        for record in records(path):
            event = Event.FromString(record)
            for value in event.summary.value:
                number = scalar_value(value)
                if number is not None:
                    out[value.tag][event.step] = number
    return {tag: sorted(by_step.items()) for tag, by_step in out.items()}


class Timer:
    """Timing splits: ``with timer("rollout"): …`` adds the block's seconds to ``rollout``.

    A name with a slash (``rollout/env``) is a part of the split before the slash, counted in it
    already, so ``timing/total`` sums only the names without one. JAX dispatches asynchronously:
    end a timed block with ``jax.block_until_ready`` on its outputs, or the time lands in
    whichever later block waits for them."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def metrics(self, prefix: str = "timing/") -> dict[str, float]:
        """``{"timing/<name>": seconds}`` plus ``timing/total`` (the sum of the top-level
        splits)."""
        out = {f"{prefix}{name}": s for name, s in self.seconds.items()}
        out[f"{prefix}total"] = sum(s for name, s in self.seconds.items() if "/" not in name)
        return out

    def throughput(self, count: float, name: str | None = None) -> float:
        """``count`` per second of split ``name`` (default: all splits together)."""
        top = sum(s for n, s in self.seconds.items() if "/" not in n)
        seconds = self.seconds.get(name, 0.0) if name else top
        return count / seconds if seconds > 0 else 0.0

    def reset(self) -> None:
        self.seconds.clear()


@dataclasses.dataclass
class TimedEnvBatch:
    """An :class:`~envs.base.EnvBatch` whose ``reset`` and ``step`` seconds go to ``timer`` under
    ``name`` (the environment's share of a rollout), counting in ``steps`` the environment steps
    it took: one per episode still running at a batched step (an ended episode's environment,
    stepped along with the others, counts no more)."""

    envs: Any
    timer: Timer
    name: str = "rollout/env"
    steps: int = 0
    _running: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, bool))

    @property
    def num_envs(self) -> int:
        return self.envs.num_envs

    def reset(self, seeds):
        with self.timer(self.name):
            observations = self.envs.reset(seeds)
        self._running = np.ones(len(seeds), bool)
        return observations

    def step(self, actions):
        with self.timer(self.name):
            out = self.envs.step(actions)
        if self._running.size != len(actions):  # stepped before any reset: every one runs
            self._running = np.ones(len(actions), bool)
        self.steps += int(self._running.sum())
        self._running &= ~np.asarray(out.dones, bool)
        return out

    def close(self) -> None:
        self.envs.close()


# (label, candidate keys: the first present is shown)
DEFAULT_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("success", ("episode/success_rate", "val/success_rate")),
    ("reward", ("episode/reward/mean", "critic/score/mean")),
    ("valid", ("episode/valid_response_format_ratio",)),
    ("loss", ("actor/pg_loss", "sft/loss", "loss")),
    ("grad", ("actor/grad_norm", "grad_norm")),
    ("kl", ("actor/ppo_kl",)),
    ("kl_ref", ("actor/kl_loss",)),
    ("entropy", ("actor/entropy", "actor/entropy_loss", "actor/new_log_prob_entropy")),
)


def _number(value: float) -> str:
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.2e}"
    return f"{value:.4g}"


def _duration(seconds: float) -> str:
    minutes, sec = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{sec:02d}s"


class ConsoleProgress:
    """One compact line per step, e.g. ``[ 12/200] success 0.625 reward 3.1 loss -0.0123
    grad 0.84 kl 1.20e-04 | rollout 12.3s update 4.5s | 1.2e+03 tok/s | eta 38m20s``."""

    def __init__(
        self,
        total_steps: int,
        *,
        fields: Sequence[tuple[str, Sequence[str]]] = DEFAULT_FIELDS,
        stream: TextIO | None = None,
        every: int = 1,
    ) -> None:
        self.total, self.fields, self.every = total_steps, fields, every
        self.stream = stream
        self._start: tuple[int, float] | None = None

    def line(self, step: int, metrics: Mapping[str, Any]) -> str:
        values = {k: float(np.asarray(v)) for k, v in jax.device_get(dict(metrics)).items()}
        width = len(str(self.total))
        parts = [f"[{step:>{width}}/{self.total}]"]
        for label, keys in self.fields:
            key = next((k for k in keys if k in values), None)
            if key is not None:
                parts.append(f"{label} {_number(values[key])}")
        timing = [
            f"{k.removeprefix('timing/')} {v:.1f}s"
            for k, v in values.items()
            if k.startswith("timing/") and k != "timing/total"
        ]
        if timing:
            parts.append("| " + " ".join(timing))
        if "perf/tokens_per_s" in values:
            parts.append(f"| {_number(values['perf/tokens_per_s'])} tok/s")
        if values.get("stability/healthy", 1.0) == 0.0:
            parts.append("| UNSTABLE")
        now = time.monotonic()
        if self._start is None:
            self._start = (step, now)
        elif step > self._start[0]:
            per_step = (now - self._start[1]) / (step - self._start[0])
            parts.append(f"| eta {_duration(per_step * max(self.total - step, 0))}")
        return " ".join(parts)

    def update(self, step: int, metrics: Mapping[str, Any]) -> str | None:
        """Print (and return) the step's line every ``every`` steps and at the last step."""
        line = self.line(step, metrics)
        if step % self.every and step != self.total:
            return None
        stream = self.stream or sys.stdout
        print(line, file=stream, flush=True)
        return line
