"""The end of a run, recorded: ``run_dir/final.json``, so a finished run started again does no work.

The trainer writes the record at the end of the schedule (``Run.finish``), atomically (a temporary
file renamed over it), on process 0:

- after the final evaluation: ``step`` (the last RL step), ``final_eval`` (its ``val/…``
  metrics), ``sft_success``, ``exported: false``, ``complete: false``; a start after a stop
  during the export reads the evaluation from here instead of evaluating again;
- after the export (``trainer.export_hf``) and the stop check after it: ``exported``, then
  ``complete: true`` with the summary's counts.

:func:`complete_record` is the record of a run that is complete for a config: ``complete``, its
step is the newest checkpoint's (which verifies) and at least ``trainer.total_steps`` (a raised
``total_steps`` continues the run), and exported when ``trainer.export_hf`` asks for it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from arlarena_jax.train.checkpoint_verify import verify_step
from arlarena_jax.train.layout import checkpoints_dir

FINAL_FILE = "final.json"


def read_final(run_dir: str | Path) -> dict[str, Any] | None:
    """The record in ``run_dir/final.json``; None when there is none or it is unreadable."""
    try:
        record = json.loads((Path(run_dir) / FINAL_FILE).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(record, dict) and isinstance(record.get("step"), int)
    return record if ok else None


def write_final(run_dir: str | Path, record: dict[str, Any]) -> None:
    """Write ``record`` to ``run_dir/final.json`` atomically."""
    path = Path(run_dir) / FINAL_FILE
    tmp = path.with_name(f".{FINAL_FILE}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def final_record(
    run_dir: str | Path, step: int, sft_success: float | None, untouched: bool
) -> dict[str, Any]:
    """The record to finish ``step`` with: ``run_dir/final.json`` when it is of that step and the
    run is ``untouched`` (this start resumed from it and trained no further: a stop during the
    export left it), else a new record of the step."""
    record = read_final(run_dir)
    if record is not None and record["step"] == step and untouched:
        return record | dict(complete=False)
    return dict(step=step, final_eval=None, sft_success=sft_success, exported=False, complete=False)


def valid_checkpoints(directory: str | Path) -> list[int]:
    """The step folders of ``directory`` that verify (metadata only; no arrays read), oldest
    first; none for a missing directory."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    steps = sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    return [s for s in steps if verify_step(directory / str(s)) is None]


def newest_checkpoint(directory: str | Path) -> int | None:
    """The newest step folder of ``directory`` that verifies (see :func:`valid_checkpoints`)."""
    steps = valid_checkpoints(directory)
    return steps[-1] if steps else None


def complete_record(run_dir: str | Path, total_steps: int, export_hf: bool) -> dict | None:
    """The record of a run in ``run_dir`` that is complete for ``total_steps`` and
    ``export_hf`` (see the module doc), else None."""
    record = read_final(run_dir)
    if record is None or record.get("complete") is not True or record["step"] < total_steps:
        return None
    if export_hf and record.get("exported") is not True:
        return None
    if newest_checkpoint(checkpoints_dir(run_dir)) != record["step"]:
        return None
    return record
