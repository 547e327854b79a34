"""The trainer: behaviour cloning, then RL, with evaluation, metrics, checkpoints and export.

``train(config)`` runs, under ``trainer.run_dir`` (null: ``runs/<env>/<method>_seed<seed>``):

1. cloning (``sft.enabled``): expert demonstrations of tasks from their own seed block, through
   the RL prompts; evaluation on the held-out seeds afterwards (``sft/…`` and ``val/…`` at step 0);
2. RL for ``trainer.total_steps`` iterations (:meth:`Run.step`): rollout with the objective's
   dynamic sampling, old and reference log-probs (when the objective reads them), advantages,
   mini-batch updates, ``update_params`` into the sampler; timing split, throughput, environment
   and actor metrics to TensorBoard; the stability monitor; evaluation every
   ``trainer.eval_every`` steps; with ``trainer.max_staleness`` k > 0 the rollouts come from a
   producer thread, at most k updates behind (``arlarena_jax.train.producer``);
3. orbax checkpoints every ``trainer.save_every`` steps; a run started again in the same
   directory resumes from the newest checkpoint and continues as the uninterrupted run would
   (parameters, optimizer and objective state, the task-seed RNG and the sampler's call counter
   are all restored);
4. the final evaluation, a Hugging Face export (``trainer.export_hf``), the record of a complete
   run and a summary.

SIGTERM or SIGINT (a second SIGINT interrupts at once) stops the run at the next safe point of
whatever phase it is in: between demonstration chunks, after a cloning step, between evaluation
chunks, after an RL step, before and after the export. What a resumed run needs is saved first
(a stopped cloning in ``run_dir/checkpoints_sft``, the RL state in ``run_dir/checkpoints``), and
the summary carries ``stopped`` (e.g. ``"SIGTERM during cloning at step 37 of 260"``);
``arlarena train`` then prints :func:`stop_line` and exits with :data:`EXIT_STOPPED`. Running the
same command resumes.
A hard kill loses little: cloning also saves every ``sft.save_every_s`` seconds and keeps its
demonstrations, RL every ``trainer.save_every`` steps. A finished run is recorded as complete in
``run_dir/final.json`` (``arlarena_jax.train.final``) once its export is done (a stop during the
export stops it, and the next start exports again); started again, :func:`train` returns its
summary with ``already_complete`` and does nothing (``arlarena train`` prints
:func:`complete_line`, status 0), unless ``trainer.total_steps`` was raised.

The pieces live in :class:`~arlarena_jax.train.run.Run`; this module reads top to bottom.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from arlarena_jax.train import build
from arlarena_jax.train.config import Config
from arlarena_jax.train.finish import Summary, complete_summary
from arlarena_jax.train.held_out import describe, run_change
from arlarena_jax.train.preemption import PreemptionGuard
from arlarena_jax.train.resolution import Resolved, resolve_run
from arlarena_jax.train.run import Run
from arlarena_jax.train.stops import Stopped

EXIT_STOPPED = 75  # EX_TEMPFAIL: stopped by a signal after saving; run the same command again


def train(config: Config | Resolved, *, console: bool = True, guard: Any = None) -> Summary:
    """Run (or resume) the whole job described by ``config`` (see module doc), resolved once
    (a :class:`~arlarena_jax.train.resolution.Resolved` is used as it is). ``guard``: what
    tells a stop was asked (``requested``, ``signal``); default a :class:`PreemptionGuard` on
    SIGTERM and SIGINT for the duration of the run."""
    resolved = resolve_run(config)
    finished = complete_summary(resolved)  # a complete run started again: nothing to do
    if finished is not None:
        return finished
    build.check_splits_disjoint(resolved)  # the CLI checked it already; a library caller too
    own = PreemptionGuard(sigint=True) if guard is None else contextlib.nullcontext(guard)
    with own as guard, Run(resolved, console=console, guard=guard) as run:
        try:
            run.start()
            while not run.done:
                run.step()
                run.save(force=run.done)
                run.check_stop()
            return run.finish()
        except Stopped as stop:
            return run.stopped(stop)


def stop_line(summary: Summary) -> str:
    """The one line of a stopped run."""
    return f"arlarena: stopped by {summary.stopped}; run the same command to resume"


def complete_line(summary: Summary) -> str:
    """The one line of a run that was complete before it was started again."""
    return f"arlarena: run {summary.run_dir} is complete (step {summary.steps}); nothing to do"


def summary_table(summary: Summary, cloned: bool = True, split: str = "test") -> str:
    """The end-of-run table (markdown). ``cloned``: the run cloned before RL (``sft.enabled``);
    else its step-0 evaluation is labelled "before RL", since no cloning preceded it. ``split``:
    the split its evaluations played (``trainer.eval_split``), named in every success row."""

    def pct(x: Any) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    def se(key: str) -> str:  # the final evaluation's standard error, where it has one
        value = summary.final_eval.get(key)
        return "" if value is None else f" ± {100 * value:.1f}"

    rows = [
        (
            f"held-out success {'after cloning' if cloned else 'before RL'} ({split})",
            pct(summary.success_after_cloning),
        ),
        (
            f"held-out success after RL ({split})",
            pct(summary.success_after_rl) + se("val/success_rate_se"),
        ),
        ("RL steps", str(summary.steps)),
        ("stability events", str(summary.stability_events)),
        ("skipped (non-finite) updates", str(summary.skipped_updates)),
        ("wall time", f"{summary.seconds / 60:.1f} min"),
        ("run directory", summary.run_dir),
    ]
    per_task = sorted(
        (key, value)
        for key, value in summary.final_eval.items()
        if key.endswith("_success_rate") and key != "val/success_rate"
    )
    rows[2:2] = [(f"  {key[len('val/') :]}", pct(value)) for key, value in per_task]
    scores = [
        (key, value)
        for key, value in summary.final_eval.items()
        if "task_score" in key and not key.endswith("_se")
    ]
    rows[2:2] = [
        (f"held-out mean task score (x100, {split})", f"{100 * value:.1f}" + se(f"{key}_se"))
        for key, value in scores
    ]
    change = run_change(Path(summary.run_dir)) if summary.steps else None
    if change is not None:  # the same held-out games before and after RL
        rows.insert(2, ("change over the start (paired)", describe(change)))
    if summary.stopped is not None:  # not finished: resumable
        rows.insert(0, ("stopped (resumable)", f"by {summary.stopped}"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"| {k.ljust(width)} | {v} |" for k, v in rows)
