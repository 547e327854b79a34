"""Where a run directory keeps its checkpoints: names shared by the checkpointer and by code that
must not import orbax or JAX (sweep planning, preflight checks, the final record).

``<run_dir>/checkpoints/<step>/`` holds one saved step; orbax writes :data:`COMMIT_MARKER` into
the step's folder last, so a step without it was never committed.
"""

from __future__ import annotations

from pathlib import Path

CHECKPOINTS = "checkpoints"
COMMIT_MARKER = "commit_success.txt"


def checkpoints_dir(run_dir: str | Path) -> Path:
    """The folder of a run's checkpoint steps."""
    return Path(run_dir) / CHECKPOINTS


def commit_marker(run_dir: str | Path, step: int) -> Path:
    """The file whose presence marks checkpoint ``step`` of the run as committed."""
    return checkpoints_dir(run_dir) / str(step) / COMMIT_MARKER
