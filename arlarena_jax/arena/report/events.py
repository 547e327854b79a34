"""Read a run's TensorBoard event files: scalar series per tag and text summaries.

Event files are TFRecord streams of ``Event`` protos (8-byte little-endian length, masked CRC-32C
of it, payload, masked CRC-32C of the payload), parsed with tensorboardX's own protos, so neither
TensorFlow nor TensorBoard is needed (the reader is :mod:`arlarena_jax.train.metrics`'s). Files
are read oldest first (the creation time in their name), records in file order; a step written
again (a resumed run redoing the steps after its checkpoint) replaces the earlier write, so each
(tag, step) counts once. A record cut short (a run still writing, or killed) ends its file.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from tensorboardX.proto.event_pb2 import Event

from arlarena_jax.train.metrics import event_files, records, scalar_value


@dataclasses.dataclass(frozen=True)
class Series:
    """One scalar tag: ascending unique ``steps`` and their ``values``."""

    steps: np.ndarray  # int64
    values: np.ndarray  # float64

    def at(self, step: int) -> float | None:
        """The value logged at ``step``, None if none was."""
        i = int(np.searchsorted(self.steps, step))
        hit = i < len(self.steps) and self.steps[i] == step
        return float(self.values[i]) if hit else None


@dataclasses.dataclass(frozen=True)
class TextEvent:
    """A text summary: its step, tag (tensorboardX appends ``/text_summary``) and text."""

    step: int
    tag: str
    text: str


@dataclasses.dataclass(frozen=True)
class EventLog:
    """Everything read from one run's event files."""

    scalars: dict[str, Series]
    texts: list[TextEvent]


def read_events(log_dir: Path) -> EventLog:
    """Scalars and text summaries under ``log_dir``, each (tag, step) counted once: the last value
    written for a scalar; for texts, the ones of the last write of that step (one step may log
    several texts under one tag, e.g. two stability events; a redone step replaces them all)."""
    points: dict[str, dict[int, float]] = {}
    texts: dict[tuple[str, int], tuple[int, list[TextEvent]]] = {}
    write = 0  # counts writes of a step: a new file, or a record of another step
    last: tuple[Path, int] | None = None
    for path in event_files(log_dir):
        for record in records(path):
            event = Event.FromString(record)
            if last != (path, event.step):
                write, last = write + 1, (path, event.step)
            for value in event.summary.value:
                number = scalar_value(value)
                if number is not None:
                    points.setdefault(value.tag, {})[event.step] = number
                elif value.HasField("tensor") and value.tensor.string_val:
                    text = value.tensor.string_val[0].decode("utf-8", "replace")
                    key = (value.tag, event.step)
                    if texts.get(key, (None,))[0] != write:
                        texts[key] = (write, [])
                    texts[key][1].append(TextEvent(event.step, value.tag, text))
    scalars = {tag: _series(by_step) for tag, by_step in points.items()}
    groups = sorted(texts.values(), key=lambda written: written[0])  # in the order written
    return EventLog(scalars, [text for _, group in groups for text in group])


def _series(by_step: dict[int, float]) -> Series:
    steps = np.array(sorted(by_step), dtype=np.int64)
    return Series(steps, np.array([by_step[s] for s in steps], dtype=np.float64))
