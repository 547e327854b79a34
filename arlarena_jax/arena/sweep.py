"""``arlarena sweep SWEEP.yaml``: the runs of a sweep file, from shared cloned starts, resumable.

1. The sweep file (:mod:`arlarena_jax.arena.spec`) expands into runs and their shared starts
   (:mod:`arlarena_jax.arena.plan`); every run config is loaded and checked before anything runs.
2. Each start and each run is a job whose state lives in its run directory
   (:mod:`arlarena_jax.arena.jobs`). Done jobs are skipped; stopped or interrupted ones run again
   and resume from their checkpoints; failed ones are skipped (``--retry-failed`` runs them).
3. The executor runs what is left: ``local`` (a pool of worker processes, the default) or
   ``slurm`` (one job each through ``sbatch``). A run starts after its shared start is done; its
   evaluations under other settings (``evaluate_on``, :mod:`arlarena_jax.arena.evaluate`) after it.

``--dry-run`` prints the table of runs (name, overrides, shared start, status), the evaluations,
and runs nothing. The exit status is 0 when every run and evaluation is done, 1 when some failed,
75 when stopped by a signal (run the same command to go on), and 2 for a bad sweep file.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from arlarena_jax.arena import plan as planning
from arlarena_jax.arena.choice import choices, describe
from arlarena_jax.arena.jobs import EXIT_STOPPED, Job, lost_product, read_state, write_state
from arlarena_jax.arena.progress import Progress
from arlarena_jax.arena.spec import SweepSpec, load_sweep
from arlarena_jax.train.start import cloned_policy


def jobs_of(runs: Sequence[planning.PlannedRun]) -> list[Job]:
    """The jobs in the sweep file's order, each start followed at once by every run that shares it
    (in file order), each run by its evaluations; a run needs its start, an evaluation its run.
    One worker thus finishes a start's runs, its paired comparisons complete, before it clones the
    next start (a long cloning phase no longer holds up every run behind it, and a campaign cut
    short leaves whole cells rather than one arm of each); more workers take the next job whose
    needs are done."""
    jobs: list[Job] = []
    placed: set[str] = set()
    for run in runs:
        if run.start is None:
            jobs += _run_jobs(run, ())
        elif run.start.name not in placed:
            placed.add(run.start.name)
            product = cloned_policy(run.start.run_dir)
            jobs.append(Job(run.start.name, run.start.command(), run.start.run_dir, (), product))
            for sharing in (r for r in runs if r.start and r.start.name == run.start.name):
                jobs += _run_jobs(sharing, (run.start.name,))
    return jobs


def _run_jobs(run: planning.PlannedRun, needs: tuple[str, ...]) -> list[Job]:
    """A run's job, then its evaluations' (each needs the run)."""
    jobs = [Job(run.name, run.command(), run.run_dir, needs)]
    return jobs + [Job(e.job_name, e.command(), e.job_dir, (e.run_name,)) for e in run.evaluations]


def to_run(jobs: Sequence[Job], *, retry_failed: bool, executor: str = "local") -> list[Job]:
    """The jobs not done (nor failed, unless ``retry_failed``). Locally a job running in
    another process is left to it; the SLURM executor gets queued and running jobs too: it
    waits for those SLURM still knows and submits again those it lost. A job that other jobs
    need (a shared start) is not run when none of them is left: e.g. runs kept by
    ``arlarena keep-results`` and copied back, their start's checkpoints gone; a done start
    whose cloned policy is gone (its kept results copied back too) is run again when needed."""
    skip = {"done"} | ({"failed"} if not retry_failed else set())
    if executor == "local":
        skip |= {"running", "queued"}
    todo = [j for j in jobs if read_state(j.run_dir)["state"] not in skip or lost_product(j)]
    serving = {name for job in jobs for name in job.needs}
    needed = {name for job in todo for name in job.needs}
    return [job for job in todo if job.name not in serving or job.name in needed]


def _short(value: object) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def table(runs: Sequence[planning.PlannedRun]) -> str:
    """The dry-run table: run, axis values, shared start (and its state), status."""
    rows = [("run", "overrides", "shared start", "status")]
    for run in runs:
        values = " ".join(f"{k}={_short(v)}" for k, v in run.values.items()) or "-"
        start = "-"
        if run.start is not None:
            start = f"{run.start.run_dir} ({read_state(run.start.run_dir)['state']})"
        record = read_state(run.run_dir)
        status = record["state"] + (f": {record['error']}" if record.get("error") else "")
        rows.append((run.name, values, start, status))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3]
        for row in rows
    ]
    return "\n".join(lines)


def evaluation_table(runs: Sequence[planning.PlannedRun]) -> str:
    """The dry run's evaluations: job, overrides, status (empty without ``evaluate_on``)."""
    rows = [("evaluation", "overrides", "status")]
    for e in planning.evaluations(list(runs)):
        record = read_state(e.job_dir)
        status = record["state"] + (f": {record['error']}" if record.get("error") else "")
        rows.append((e.job_name, " ".join(_short(o) for o in e.overrides), status))
    if len(rows) == 1:
        return ""
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = [f"{row[0].ljust(widths[0])}  {row[1].ljust(widths[1])}  {row[2]}" for row in rows]
    return "\n".join(lines)


def _executor(args: argparse.Namespace, spec: SweepSpec, workers: int):
    minutes = spec.budget.minutes_per_run
    if args.executor == "slurm":
        from arlarena_jax.arena.slurm import SlurmExecutor

        return SlurmExecutor(spec.slurm, minutes=minutes, wait=not args.no_wait)
    from arlarena_jax.arena.local import LocalExecutor

    return LocalExecutor(workers, minutes=minutes)


def _summary(runs: Sequence[planning.PlannedRun], out: Path) -> tuple[str, int]:
    """The closing lines (runs and evaluations done and failed, then the report command once
    all are done) and the number of failed jobs."""
    evaluations = planning.evaluations(list(runs))
    kinds = [("runs", [(r.name, r.run_dir) for r in runs])]
    kinds += (
        [("evaluations", [(e.job_name, e.job_dir) for e in evaluations])] if evaluations else []
    )
    parts, complete, failed = [], True, []
    for noun, named in kinds:
        states = [(name, read_state(path)) for name, path in named]
        bad = [(name, s) for name, s in states if s["state"] == "failed"]
        done = sum(s["state"] == "done" for _, s in states)
        parts.append(f"{done} of {len(named)} {noun} done, {len(bad)} failed")
        complete, failed = complete and done == len(named), failed + bad
    lines = [f"sweep: {'; '.join(parts)}; runs in {out}"]
    lines += [f"  failed: {name}: {s.get('error', '?')}" for name, s in failed]
    if complete:
        lines.append(f"report: arlarena report {out} -o {out}/report")
    return "\n".join(lines), len(failed)


def sweep_command(args: argparse.Namespace) -> int:
    """Plan, print (``--dry-run``) or run the sweep; see the module doc for the exit status."""
    from arlarena_jax.arena.local import default_workers

    spec = load_sweep(args.sweep, out=args.out)
    if spec.recipe_from is not None:
        made = choices(spec.recipe_from)
        print(describe(spec.recipe_from, made))
        spec = planning.with_chosen_recipes(spec, made)
    runs = planning.plan(spec)
    jobs = jobs_of(runs)
    evaluations = len(planning.evaluations(runs))
    starts = len(jobs) - len(runs) - evaluations
    also = f" and {evaluations} evaluation(s)" if evaluations else ""
    print(f"sweep {spec.name}: {len(runs)} runs from {starts} shared start(s){also}, in {spec.out}")
    if args.dry_run:
        print(table(runs))
        extra = evaluation_table(runs)
        if extra:
            print(extra)
        return 0
    todo = to_run(jobs, retry_failed=args.retry_failed, executor=args.executor)
    for job in todo:  # a failed job run again is queued; its last error stays in the record
        record = read_state(job.run_dir)
        if record["state"] == "failed":
            write_state(job.run_dir, state="new", previous_error=record.get("error", "?"))
        elif lost_product(job):
            write_state(job.run_dir, state="new", previous_error=f"done, but {job.product} is gone")
    skipped = len(jobs) - len(todo)
    if skipped:
        print(f"sweep: {skipped} job(s) done, failed, running elsewhere or not needed: not run")
    queued = {job.name for job in todo}  # a start not needed stays out of the progress line
    jobs = [j for j in jobs if j.name in queued or read_state(j.run_dir)["state"] != "new"]
    workers = args.workers or default_workers()
    status = 0
    if todo:
        progress = Progress(jobs, workers if args.executor == "local" else len(todo))
        dirs = {job.name: job.run_dir for job in jobs}
        status = _executor(args, spec, workers).run(todo, progress, dirs)
    text, failed = _summary(runs, spec.out)
    print(text, flush=True)
    if status == EXIT_STOPPED:
        print("sweep: stopped; run the same command to resume", flush=True)
        return EXIT_STOPPED
    return 1 if failed else 0


def add_command(commands) -> None:
    """Register ``arlarena sweep`` on the CLI's subparsers, and ``arlarena eval-run``, the job
    of a sweep's evaluations (:mod:`arlarena_jax.arena.evaluate`)."""
    from arlarena_jax.arena import evaluate

    evaluate.add_command(commands)
    sub = commands.add_parser("sweep", help="run a sweep of training runs from shared starts")
    sub.add_argument("sweep", help="a sweep file, e.g. configs/sweeps/quick.yaml")
    sub.add_argument("--dry-run", action="store_true", help="print the runs; run nothing")
    sub.add_argument("--executor", choices=("local", "slurm"), default="local")
    sub.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local: runs at once, the cores split between them (default: one per core, at most 8)",
    )
    sub.add_argument("--out", default=None, help="the runs' parent directory (default: its out)")
    sub.add_argument("--retry-failed", action="store_true", help="run failed runs again")
    sub.add_argument(
        "--no-wait", action="store_true", help="slurm: submit and return; the job states tell"
    )
    sub.set_defaults(handler=sweep_command)
