"""Read a run's TensorBoard event files: scalar series per tag and text summaries.

Event files are TFRecord streams of ``Event`` protos (8-byte little-endian length, masked CRC-32C
of it, payload, masked CRC-32C of the payload), parsed with tensorboardX's own protos, so neither
TensorFlow nor TensorBoard is needed. Files are read oldest first (the creation time in their
name), records in file order; a value written again for a step (a resumed run redoing it)
replaces the earlier one. A record cut short (a run still writing, or killed) ends its file.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from tensorboardX.proto.event_pb2 import Event
from tensorboardX.record_writer import masked_crc32c


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


def _records(path: Path) -> Iterator[bytes]:
    """The payloads of a TFRecord file, up to its last complete record."""
    data = path.read_bytes()
    pos = 0
    while pos + 12 <= len(data):
        header = data[pos : pos + 8]
        (length,), (crc,) = (
            struct.unpack("<Q", header),
            struct.unpack("<I", data[pos + 8 : pos + 12]),
        )
        end = pos + 12 + length
        if crc != masked_crc32c(header) or end + 4 > len(data):
            return
        body = data[pos + 12 : end]
        if struct.unpack("<I", data[end : end + 4])[0] != masked_crc32c(body):
            return
        yield body
        pos = end + 4


def _file_order(path: Path) -> tuple[int, str]:
    """``events.out.tfevents.<unix time>.<host>...`` sorts by its time, then by name."""
    parts = path.name.split(".")
    stamp = parts[3] if len(parts) > 3 and parts[3].isdigit() else "0"
    return int(stamp), str(path)


def event_files(log_dir: Path) -> list[Path]:
    """The event files under ``log_dir`` (recursively), oldest first."""
    return sorted(log_dir.rglob("events.out.tfevents.*"), key=_file_order)


def read_events(log_dir: Path) -> EventLog:
    """Scalars (the last value written per step) and text summaries under ``log_dir``."""
    points: dict[str, dict[int, float]] = {}
    texts: list[TextEvent] = []
    for path in event_files(log_dir):
        for record in _records(path):
            event = Event.FromString(record)
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    points.setdefault(value.tag, {})[event.step] = value.simple_value
                elif value.HasField("tensor") and value.tensor.float_val:
                    points.setdefault(value.tag, {})[event.step] = value.tensor.float_val[0]
                elif value.HasField("tensor") and value.tensor.string_val:
                    text = value.tensor.string_val[0].decode("utf-8", "replace")
                    texts.append(TextEvent(event.step, value.tag, text))
    scalars = {tag: _series(by_step) for tag, by_step in points.items()}
    return EventLog(scalars, texts)


def _series(by_step: dict[int, float]) -> Series:
    steps = np.array(sorted(by_step), dtype=np.int64)
    return Series(steps, np.array([by_step[s] for s in steps], dtype=np.float64))
