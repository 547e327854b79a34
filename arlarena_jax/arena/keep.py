"""``arlarena keep-results RUNS -o DEST``: the results of a sweep's finished jobs, without their
checkpoints, in a folder small enough to commit.

A CPU sweep of a real model outlasts a session, and a session's machine may not keep its run
directories. What a report needs of a done job is small: its ``config.yaml``, ``sweep_state.json``,
``final.json``, ``sweep.log``, its TensorBoard events, its per-episode held-out outcomes
(``held_out/``) and its evaluations' ``metrics.json`` and ``episodes.jsonl`` (tens of kB against
gigabytes of checkpoints). This copies exactly those, for every job directory under ``RUNS``
whose state is ``done``, to the same relative path under ``DEST``:

- ``arlarena report DEST -o OUT`` reads the kept runs as it reads run directories;
- copied back under the sweep's ``out`` (``cp -r DEST/. runs/sweeps/NAME/``) the kept runs read
  as done, so ``arlarena sweep`` runs only the rest (and clones a shared start again only for a
  run that still needs it).

Jobs not done (running, stopped, failed) are left out: resuming them needs their checkpoints.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Iterator
from pathlib import Path

from arlarena_jax.arena.evaluate import EPISODES_FILE, METRICS_FILE
from arlarena_jax.arena.jobs import STATE_FILE, read_state
from arlarena_jax.errors import ConfigError
from arlarena_jax.train.held_out import HELD_OUT_DIR

# an evaluation's metrics.json and its per-episode outcomes (episodes.jsonl: the test split's
# paired comparisons at a protocol's end point)
KEPT_FILES = ("config.yaml", STATE_FILE, "final.json", "sweep.log", METRICS_FILE, EPISODES_FILE)
KEPT_DIRS = ("tensorboard", HELD_OUT_DIR)


def done_jobs(root: Path) -> Iterator[Path]:
    """Every job directory under ``root`` (``root`` included) whose sweep state is ``done``."""
    for state_file in sorted(root.rglob(STATE_FILE)):
        if read_state(state_file.parent)["state"] == "done":
            yield state_file.parent


def keep_results(root: Path, dest: Path) -> list[Path]:
    """Copy the results of every done job under ``root`` to ``dest`` (same relative paths);
    return the job directories written. Files already in ``dest`` are replaced."""
    root, dest = Path(root), Path(dest)
    if not root.is_dir():
        raise ConfigError(f"keep-results: {root} is not a directory")
    if dest.resolve().is_relative_to(root.resolve()):
        raise ConfigError(f"keep-results: {dest} lies inside {root}; keep the results elsewhere")
    written = []
    for job in done_jobs(root):
        target = dest / job.relative_to(root)
        target.mkdir(parents=True, exist_ok=True)
        for name in KEPT_FILES:
            if (job / name).is_file():
                shutil.copy2(job / name, target / name)
        for name in KEPT_DIRS:
            if (job / name).is_dir():
                shutil.copytree(job / name, target / name, dirs_exist_ok=True)
        written.append(target)
    return written


def keep_command(args: argparse.Namespace) -> int:
    written = []
    for root in args.runs:
        written += keep_results(root, args.out / root.name if len(args.runs) > 1 else args.out)
    size = sum(f.stat().st_size for d in written for f in d.rglob("*") if f.is_file())
    print(f"kept the results of {len(written)} done job(s) in {args.out} ({size / 1e3:.0f} kB)")
    return 0


def add_command(commands) -> None:
    """Register ``arlarena keep-results`` on the CLI's subparsers."""
    sub = commands.add_parser(
        "keep-results",
        help="copy the results of done runs (configs, states, TensorBoard events, evaluations; "
        "no checkpoints) to a folder to commit",
    )
    sub.add_argument("runs", nargs="+", type=Path, help="a sweep's folder (or run directories)")
    sub.add_argument("-o", "--out", type=Path, required=True, help="where to keep them")
    sub.set_defaults(handler=keep_command)
