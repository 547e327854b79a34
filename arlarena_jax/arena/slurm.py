"""The cluster executor: each job of the sweep is one ``sbatch`` submission.

Every job runs ``launch/sweep_job.sbatch`` (the job wrapper of :mod:`arlarena_jax.arena.jobs`,
with this process's Python, in the batch step), its output in ``RUN_DIR/slurm-<id>.out``. The
sweep file's ``slurm:`` mapping becomes sbatch options (``gpus_per_node: 1`` is
``--gpus-per-node=1``; ``exclusive: true`` is ``--exclusive``); ``time`` defaults to the budget's
``minutes_per_run`` plus :data:`MARGIN_MINUTES`. A run whose shared start is submitted in the same
call (or still queued from an earlier one) waits for it with ``--dependency=afterok:<id>``
(``--kill-on-invalid-dep=yes``: a failed start cancels it); a start that is stopped and requeued
keeps its id, so its runs keep waiting. An evaluation (``evaluate_on``) waits for its run the
same way.

After submission a job's state is ``queued`` with its ``slurm_job_id``; a job queued or running
under an id ``squeue`` still knows is never submitted twice. With ``wait`` the executor polls
until every job left the queue; a job that left without its wrapper having recorded an end is
marked failed (``slurm job N ended without a state``, or ``its shared start ... failed``).
"""

from __future__ import annotations

import contextlib
import math
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from arlarena_jax.arena.jobs import EXIT_STOPPED, Job, need_failed, read_state, write_state
from arlarena_jax.arena.progress import Progress
from arlarena_jax.errors import ConfigError

TEMPLATE = Path(__file__).resolve().parents[2] / "launch" / "sweep_job.sbatch"
MARGIN_MINUTES = 15  # start-up, compilation and the final save, beyond minutes_per_run
ID_FILE = (
    "slurm_job_id"  # RUN_DIR/slurm_job_id: the last submission (the wrapper's record lacks it)
)
RESERVED = (
    "job_name",
    "output",
    "error",
    "chdir",
    "dependency",
    "kill_on_invalid_dep",
    "parsable",
    "wrap",
    "array",
)
ONE_PROCESS = ("nodes", "ntasks", "ntasks_per_node")  # the wrapper runs one process on one node
ACTIVE = ("queued", "running", "interrupted")  # states a job in SLURM's queue may still change
SBATCH_MISSING = (
    "the slurm executor needs sbatch on PATH (SLURM client tools); run on a cluster's login node, "
    "or start a local test cluster with launch/slurm_local.sh"
)


class SlurmError(RuntimeError):
    """A SLURM client tool failed (the controller unreachable, a refused submission)."""


def _option(key: Any, value: Any) -> list[str]:
    """The sbatch arguments of one ``slurm:`` entry of the sweep file."""
    where = f"sweep key 'slurm.{key}'"
    if not isinstance(key, str) or not re.fullmatch(r"[a-z][a-z0-9_-]*", key):
        raise ConfigError(f"{where}: expected an sbatch option name like 'gpus_per_node'")
    norm = key.replace("-", "_")
    if norm in RESERVED:
        raise ConfigError(f"{where}: set by the sweep for every job; remove it")
    if isinstance(value, bool):
        return [f"--{norm.replace('_', '-')}"] if value else []
    if not isinstance(value, str | int):
        raise ConfigError(f"{where}: expected a string or an integer, got {value!r}")
    text = str(value)
    if not text or any(c in text for c in "\n\r\0"):
        raise ConfigError(f"{where}: expected a non-empty one-line value, got {value!r}")
    if norm in ONE_PROCESS and text != "1":
        raise ConfigError(f"{where}: a sweep job is one process on one node (only 1 allowed)")
    return [f"--{norm.replace('_', '-')}={text}"]


def sbatch_options(options: dict[str, Any], minutes: float | None = None) -> list[str]:
    """The sbatch arguments of the sweep file's ``slurm:`` mapping; ``--time`` from ``minutes``
    (plus :data:`MARGIN_MINUTES`) unless the mapping sets ``time``."""
    if not isinstance(options, dict):
        raise ConfigError(
            f"sweep key 'slurm': expected a mapping of sbatch options, got {options!r}"
        )
    args = [arg for key, value in options.items() for arg in _option(key, value)]
    if minutes is not None and "time" not in options:
        args.append(f"--time={math.ceil(minutes) + MARGIN_MINUTES}")
    return args


def _last_line(text: str) -> str:
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    return lines[-1][:300] if lines else "no output"


def alive_jobs(ids: Iterable[int]) -> set[int]:
    """The ids among ``ids`` that ``squeue`` still lists (pending, running, requeued, completing);
    :class:`SlurmError` when it cannot tell."""
    ids = sorted({int(i) for i in ids})
    if not ids:
        return set()
    argv = ["squeue", "-h", "-o", "%i", "-j", ",".join(map(str, ids))]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SlurmError(f"squeue failed: {error}") from None
    if result.returncode != 0:
        if "invalid job id" in result.stderr.lower():  # every id long gone
            return set()
        raise SlurmError(f"squeue failed: {_last_line(result.stderr)}")
    alive = set()
    for word in result.stdout.split():
        with contextlib.suppress(ValueError):
            alive.add(int(word.split("_")[0]))
    return alive & set(ids)


def slurm_job_id(run_dir: Path, record: dict[str, Any] | None = None) -> int | None:
    """The SLURM job id of the job's last submission: its state record's ``slurm_job_id`` (the
    executor's ``queued`` record and the wrapper's own), else ``RUN_DIR/slurm_job_id``, written
    at submission (a record from before the wrapper knew its id)."""
    record = read_state(run_dir) if record is None else record
    value = record.get("slurm_job_id")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    with contextlib.suppress(OSError, ValueError):
        return int((Path(run_dir) / ID_FILE).read_text().strip())
    return None


def submit(argv: Sequence[str]) -> int:
    """Run ``sbatch --parsable ...``; the new job's id."""
    try:
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SlurmError(f"sbatch failed: {error}") from None
    if result.returncode != 0:
        raise SlurmError(f"sbatch failed: {_last_line(result.stderr or result.stdout)}")
    try:
        return int(result.stdout.strip().split(";")[0])
    except ValueError:
        raise SlurmError(f"sbatch said {result.stdout.strip()!r}, not a job id") from None


class SlurmExecutor:
    """Submit jobs to SLURM, one ``sbatch`` each, and wait for them (see module doc)."""

    def __init__(
        self,
        options: dict[str, Any],
        *,
        minutes: float | None = None,
        wait: bool = True,
        poll_s: float = 10.0,
        template: Path = TEMPLATE,
    ) -> None:
        self.args = sbatch_options(options, minutes)
        self.minutes, self.wait, self.poll_s, self.template = minutes, wait, poll_s, template
        if shutil.which("sbatch") is None:
            raise ConfigError(SBATCH_MISSING)
        if not Path(template).is_file():
            raise ConfigError(f"the slurm executor's batch script is missing: {template}")
        self._stop: int | None = None

    def sbatch_argv(self, job: Job, after: Sequence[int] = ()) -> list[str]:
        """The ``sbatch`` command that submits ``job``, after the jobs ``after`` succeeded."""
        run_dir = Path(job.run_dir).resolve()
        deps = [f"--dependency=afterok:{':'.join(map(str, after))}", "--kill-on-invalid-dep=yes"]
        minutes = []
        if self.minutes is not None and not job.name.startswith("start/"):
            minutes = ["--minutes", str(self.minutes)]
        return [
            "sbatch",
            "--parsable",
            f"--job-name={job.name}",
            f"--output={run_dir}/slurm-%j.out",
            f"--chdir={Path.cwd()}",
            *(deps if after else []),
            *self.args,
            str(self.template),
            sys.executable,
            str(run_dir),
            *minutes,
            "--",
            *job.command,
        ]

    def run(self, jobs: Sequence[Job], progress: Progress, dirs: dict[str, Path]) -> int:
        """Submit ``jobs`` (``dirs``: the run directory of every job name a job may need) and,
        with ``wait``, wait until they left the queue: 0, or :data:`EXIT_STOPPED` when a signal
        stopped the waiting (the jobs stay queued)."""
        waiting = self._submit_all(jobs, dirs)
        progress.update(force=True)
        if not self.wait or not waiting:
            return 0
        handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            self._wait(waiting, progress, dirs)
        finally:
            for s, handler in handlers.items():
                signal.signal(s, handler)
        progress.update(force=True)
        if self._stop is not None:
            print(
                f"sweep: stopped waiting; {len(waiting)} job(s) stay in SLURM's queue (squeue)",
                flush=True,
            )
            return EXIT_STOPPED
        return 0

    def _on_signal(self, signum: int, _frame) -> None:
        self._stop = signum

    def _known(self, jobs: Sequence[Job], dirs: dict[str, Path]) -> dict[str, int]:
        """Job name → SLURM id of every job (or need) that ``squeue`` still lists (queued,
        running or requeued): never submitted twice."""
        names = {job.name: job.run_dir for job in jobs}
        names |= {n: dirs[n] for job in jobs for n in job.needs}
        ids = {}
        for name, run_dir in names.items():  # any state: a stopped job may be requeued
            job_id = slurm_job_id(run_dir)
            if job_id is not None:
                ids[name] = job_id
        try:
            alive = alive_jobs(ids.values())
        except SlurmError as error:
            raise ConfigError(f"cannot tell which jobs are queued: {error}") from None
        return {name: i for name, i in ids.items() if i in alive}

    def _submit_all(self, jobs: Sequence[Job], dirs: dict[str, Path]) -> dict[str, tuple]:
        """Submit every job not already in the queue, needs first; name → (job, id, record
        before submission) of every job to wait for."""
        live = self._known(jobs, dirs)
        waiting: dict[str, tuple] = {}
        pending = list(jobs)
        while pending:
            ready = [j for j in pending if not any(n in {p.name for p in pending} for n in j.needs)]
            for job in list(ready or pending):  # a need cycle: submit the rest as they are
                pending.remove(job)
                if job.name in live:  # if it never starts, the next sweep submits it
                    waiting[job.name] = (job, live[job.name], {"state": "new"})
                    continue
                after = self._after(job, dirs, live)
                if after is not None:
                    job_id, previous = self._submit(job, after)
                    live[job.name] = job_id
                    waiting[job.name] = (job, job_id, previous)
        return waiting

    def _after(self, job: Job, dirs: dict[str, Path], live: dict[str, int]) -> list[int] | None:
        """The ids ``job`` must wait for; None when it cannot run now (a need failed: marked
        failed; a need neither done nor queued: left for the next sweep)."""
        after = []
        for need in job.needs:
            if need in live:
                after.append(live[need])
                continue
            state = read_state(dirs[need])["state"]
            if state == "failed":
                _fail_need(job, need, dirs)
                return None
            if state != "done":
                return None
        return after

    def _submit(self, job: Job, after: Sequence[int]) -> tuple[int, dict[str, Any]]:
        previous = read_state(job.run_dir)
        command = list(job.command)
        write_state(job.run_dir, state="queued", command=command, submitted=time.time())
        try:
            job_id = submit(self.sbatch_argv(job, after))
        except SlurmError as error:
            write_state(job.run_dir, **previous)
            raise ConfigError(f"cannot submit {job.name}: {error}") from None
        (Path(job.run_dir) / ID_FILE).write_text(f"{job_id}\n")
        record = read_state(job.run_dir)
        if record["state"] == "queued" and "slurm_job_id" not in record:  # not started yet
            write_state(job.run_dir, **record, slurm_job_id=job_id)
        return job_id, previous

    def _wait(self, waiting: dict[str, tuple], progress: Progress, dirs: dict[str, Path]) -> None:
        """Poll until every job left the queue (or a signal came), settling each that left."""
        missing: dict[str, int] = {}
        warned = False
        while waiting and self._stop is None:
            try:
                alive = alive_jobs(job_id for _job, job_id, _prev in waiting.values())
            except SlurmError as error:
                if not warned:
                    print(f"sweep: {error}; retrying", flush=True)
                warned = True
                time.sleep(self.poll_s)
                continue
            warned = False
            for name, (job, job_id, previous) in list(waiting.items()):
                gone = job_id not in alive
                missing[name] = missing.get(name, 0) + 1 if gone else 0
                if missing[name] >= 2:  # twice: a shared file system may lag behind
                    _settle(job, job_id, previous, dirs)
                    del waiting[name]
            progress.update()
            if waiting:
                time.sleep(self.poll_s)


def _fail_need(job: Job, need: str, dirs: dict[str, Path]) -> None:
    error = need_failed(need, dirs[need])
    write_state(job.run_dir, state="failed", error=error, command=list(job.command))


def _settle(job: Job, job_id: int, previous: dict[str, Any], dirs: dict[str, Path]) -> None:
    """Record the end of a job that left the queue without its wrapper recording one."""
    record = read_state(job.run_dir)
    if record["state"] not in ACTIVE or slurm_job_id(job.run_dir, record) not in (job_id, None):
        return
    if record["state"] == "queued":  # it never started: a need ended first
        needs = {n: read_state(dirs[n])["state"] for n in job.needs}
        failed = [n for n, state in needs.items() if state == "failed"]
        if failed:
            _fail_need(job, failed[0], dirs)
            return
        if any(state != "done" for state in needs.values()):  # stopped, not requeued: next sweep
            write_state(job.run_dir, **previous)
            return
    out = Path(job.run_dir) / f"slurm-{job_id}.out"
    error = f"slurm job {job_id} ended without a state (see {out})"
    write_state(
        job.run_dir, **{**record, "state": "failed", "error": error, "slurm_job_id": job_id}
    )
