"""A sweep's jobs, the state each leaves in its run directory, and the wrapper that runs one.

Every job, local or on a cluster, runs through the same wrapper::

    python -m arlarena_jax.arena.jobs RUN_DIR [--minutes M] -- train CONFIG key=value ...

It runs ``arlarena <command>`` with its output appended to ``RUN_DIR/sweep.log`` and keeps
``RUN_DIR/sweep_state.json`` up to date (written atomically): ``running`` (with the host and
process id), then ``done`` (exit status 0), ``stopped`` (75: SIGTERM or SIGINT, or the budget's
``--minutes`` ran out; the run saved and resumes when started again) or ``failed`` (any other
status, with the error line). A SIGTERM or SIGINT to the wrapper is passed on to the run. The
sweep reads these files, so the state of a run is on disk, wherever it ran.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

STATE_FILE = "sweep_state.json"
LOG_FILE = "sweep.log"
EXIT_STOPPED = 75  # arlarena_jax.train.loop.EXIT_STOPPED (not imported: this module stays light)
STATES = ("new", "queued", "running", "done", "stopped", "failed", "interrupted")


@dataclasses.dataclass(frozen=True)
class Job:
    """One command of a sweep: a shared start (``arlarena sft``), a run (``arlarena train``) or
    an evaluation of a done run (``arlarena eval-run``). ``needs``: the names of jobs that must be
    done before it starts. ``product``: a file the jobs that need it read (a start's cloned
    policy), which "done" also takes to exist."""

    name: str
    command: tuple[str, ...]
    run_dir: Path
    needs: tuple[str, ...] = ()
    product: Path | None = None


def lost_product(job: Job) -> bool:
    """Done, but its product is gone: e.g. a start whose results ``arlarena keep-results`` kept
    (without checkpoints) and that was copied back under ``runs/``."""
    if job.product is None or job.product.is_file():
        return False
    return read_state(job.run_dir)["state"] == "done"


def read_state(run_dir: Path) -> dict[str, Any]:
    """The job's recorded state (``{"state": "new"}`` when it never ran). A ``running`` record of
    this host whose processes are gone reads as ``interrupted`` (killed without a chance to say).
    A wrapper killed alone leaves its run going (an orphan that holds the run directory's lock):
    that still reads as ``running``, so a sweep waits for it rather than starting the job again
    into the lock; once it ends too, the job is ``interrupted`` and resumes."""
    try:
        record = json.loads((Path(run_dir) / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {"state": "new"}
    if not isinstance(record, dict) or record.get("state") not in STATES:
        return {"state": "new"}
    here = record.get("host") == socket.gethostname()
    gone = not (_alive(record.get("pid")) or _alive(record.get("child")))
    if record["state"] == "running" and here and gone:
        record["state"] = "interrupted"
    return record


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_state(run_dir: Path, **record: Any) -> None:
    """Replace the job's state record atomically (a reader sees the old or the new one)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{STATE_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(record, sort_keys=True) + "\n")
    os.replace(tmp, run_dir / STATE_FILE)


def error_line(log: Path) -> str:
    """The last ``arlarena: ...`` line of the job's log (the trainer's one-line error), else its
    last non-empty line."""
    try:
        lines = [x.strip() for x in log.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return "no log"
    tagged = [x for x in lines if x.startswith("arlarena:")]
    return (tagged or lines or ["no output"])[-1][:500]


def need_failed(need: str, need_dir: Path) -> str:
    """The error of a job whose needed job ``need`` (a shared start, or the run an evaluation
    reads) failed."""
    what = "its shared start" if need.startswith("start/") else "the run it evaluates,"
    return f"{what} {need} failed (see {Path(need_dir) / LOG_FILE})"


def state_of_exit(status: int) -> str:
    return {0: "done", EXIT_STOPPED: "stopped"}.get(status, "failed")


def _watch(child: subprocess.Popen, minutes: float | None, stop: threading.Event, asked) -> None:
    """SIGTERM the run once its wall-clock budget is spent (it saves and exits 75)."""
    if minutes is not None and not stop.wait(minutes * 60) and child.poll() is None:
        asked.append(signal.SIGTERM)
        child.send_signal(signal.SIGTERM)


def _record(status: int, asked: list[int], log: Path) -> dict[str, Any]:
    """The end state: done (0), stopped (75, or any status after a stop was asked: a run
    stopped before it could save resumes from what it saved), else failed with its error."""
    state = "stopped" if asked and status != 0 else state_of_exit(status)
    record: dict[str, Any] = dict(state=state, exit=status, ended=time.time())
    if state == "failed":
        killed = status < 0 and f"killed by {signal.Signals(-status).name}"
        record["error"] = killed or error_line(log)
    return record


def run_job(run_dir: Path, command: Sequence[str], *, minutes: float | None = None) -> int:
    """Run ``arlarena <command>`` as the job of ``run_dir``; its exit status (see module doc)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / LOG_FILE
    asked: list[int] = []  # the stop signals passed on to the run
    children: list[subprocess.Popen] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        asked.append(signum)
        for child in children:  # none yet: the run is started and stopped at once below
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    done = threading.Event()
    try:
        with log.open("a") as out:
            out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} arlarena {' '.join(command)}\n")
            out.flush()
            argv = [sys.executable, "-m", "arlarena_jax", *command]
            children.append(subprocess.Popen(argv, stdout=out, stderr=out))
        child = children[0]
        if asked:  # a stop that came before the run existed
            child.send_signal(asked[0])
        common = dict(command=list(command), host=socket.gethostname(), started=time.time())
        if os.environ.get("SLURM_JOB_ID", "").isdigit():  # a SLURM job: its id stays on record
            common["slurm_job_id"] = int(os.environ["SLURM_JOB_ID"])
        write_state(run_dir, state="running", pid=os.getpid(), child=child.pid, **common)
        watch = threading.Thread(target=_watch, args=(child, minutes, done, asked), daemon=True)
        watch.start()
        status = child.wait()
    finally:
        done.set()
        for s, handler in previous.items():
            signal.signal(s, handler)
    write_state(run_dir, **common, **_record(status, asked, log))
    return status


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m arlarena_jax.arena.jobs",
        description="run one job of a sweep: RUN_DIR [--minutes M] -- ARLARENA ARGS...",
    )
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--minutes", type=float, default=None, help="wall-clock budget")
    if "--" not in argv:
        parser.error("no command: put the arlarena arguments after --")
    split = argv.index("--")
    args, command = parser.parse_args(argv[:split]), argv[split + 1 :]
    if not command:
        parser.error("no command after --")
    with contextlib.suppress(KeyboardInterrupt):
        return run_job(args.run_dir, command, minutes=args.minutes)
    return EXIT_STOPPED


if __name__ == "__main__":
    sys.exit(main())
