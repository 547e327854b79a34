"""``arlarena eval-run RUN_DIR NAME [key=value ...]``: a finished run's policy evaluated again
under other settings (another environment tier, more turns), its metrics stored beside the run.

A sweep's ``evaluate_on`` (:mod:`arlarena_jax.arena.spec`) makes one such job per run and entry,
started once the run is done; any run directory can be evaluated the same way by hand. It:

1. loads the run's own ``config.yaml`` with the overrides, at ``trainer.run_dir=RUN_DIR`` and
   without its shared start (``sft.init_from=null``: the run's checkpoint is restored, nothing is
   cloned), and checks it as ``arlarena eval`` does (paths, checkpoints of the same model and
   objective, the data: missing games of a new tier are generated then);
2. keeps the run's tokenizer: a ``tiny-<env>`` tokenizer is built from the environment's expert
   episodes, so under other environment settings it would learn other merges and give the policy
   other token ids. It is built from the run's settings instead and saved in
   ``RUN_DIR/evaluations/NAME/tokenizer``, which the evaluation reads;
3. takes the run directory (waiting up to :data:`LOCK_WAIT_S` while another process holds it:
   a sweep's evaluations of one run start together once the run is done, and take it one after
   another; a training that still holds it past the wait is one line, exit 2), restores the
   newest checkpoint and evaluates it on the held-out seeds of the new settings
   (``Run.evaluate``: the trainer's own evaluation, its sampling and seeds);
4. writes ``RUN_DIR/evaluations/NAME/metrics.json`` atomically: ``name``, ``overrides``, the
   checkpoint ``step``, the ``split`` it played (``trainer.eval_split``), the ``episodes`` and
   the ``metrics`` (``val/…``), and the per-episode outcomes beside it in ``episodes.jsonl``
   (``arlarena_jax.train.held_out``'s records: paired comparisons between runs).

``RUN_DIR/evaluations/NAME`` is also the job's directory in a sweep (``sweep_state.json``,
``sweep.log``). ``arlarena report`` reads the records (:func:`read_evaluations`) and shows their
held-out success as ``val/success_rate@NAME`` columns.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from arlarena_jax.errors import ConfigError

EVALUATIONS_DIR, METRICS_FILE, TOKENIZER_DIR = "evaluations", "metrics.json", "tokenizer"
EPISODES_FILE = "episodes.jsonl"
LOCK_WAIT_S = 3600.0  # how long an evaluation waits for a run directory another process holds
# set by the evaluation itself: it reads the run's own checkpoint, from no shared start
NOT_EVALUATION_KEYS = ("trainer.run_dir", "sft.init_from")


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name an evaluation (it is a directory name), or None."""
    if not name or name.startswith(".") or not all(c.isalnum() or c in "-_." for c in name):
        return f"an evaluation name is letters, digits, '-', '_' and '.', got {name!r}"
    return None


def read_evaluation(job_dir: Path) -> dict[str, Any] | None:
    """The record in ``job_dir/metrics.json``; None when there is none (or it is unreadable)."""
    try:
        record = json.loads((Path(job_dir) / METRICS_FILE).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(record, dict) and isinstance(record.get("metrics"), dict)
    return record if ok else None


def read_evaluations(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Every evaluation recorded under ``run_dir/evaluations``, by name (sorted)."""
    folder = Path(run_dir) / EVALUATIONS_DIR
    if not folder.is_dir():
        return {}
    found = {p.name: read_evaluation(p) for p in sorted(folder.iterdir()) if p.is_dir()}
    return {name: record for name, record in found.items() if record is not None}


def write_evaluation(job_dir: Path, record: dict[str, Any]) -> Path:
    """Write ``record`` as ``job_dir/metrics.json``, atomically."""
    job_dir.mkdir(parents=True, exist_ok=True)
    tmp = job_dir / f".{METRICS_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, job_dir / METRICS_FILE)
    return job_dir / METRICS_FILE


def _check_request(run_dir: Path, name: str, overrides: list[str]) -> None:
    """A run directory, a usable name, and no override of what the evaluation sets."""
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no config.yaml)")
    problem = name_problem(name)
    if problem:
        raise ConfigError(problem)
    for item in overrides:
        key = item.partition("=")[0].strip()
        if key in NOT_EVALUATION_KEYS:
            raise ConfigError(f"config key {key!r}: set by arlarena eval-run itself")


def _keep_tokenizer(trained: Any, config: Any, job_dir: Path) -> Any:
    """``config`` reading the run's own tokenizer where it is a built ``tiny-<env>`` one
    (saved in ``job_dir/tokenizer``; see module doc, 2.); unchanged otherwise."""
    from arlarena_jax.train import build
    from arlarena_jax.train.config_io import apply_overrides
    from arlarena_jax.train.kept_tokenizer import kept_tokenizer
    from arlarena_jax.train.resolution import is_built_tokenizer

    name = config.model.tokenizer
    if not is_built_tokenizer(name) or name != trained.model.tokenizer:
        return config
    folder = job_dir / TOKENIZER_DIR
    kept = kept_tokenizer(trained)  # the run's own (None for a run from before it kept one)
    (kept or build.build_tokenizer(trained)).save_pretrained(str(folder))
    return apply_overrides(config, [f"model.tokenizer={folder}"])


def evaluation_config(run_dir: Path, name: str, overrides: list[str]) -> Any:
    """The checked config of the evaluation (module doc, 1. and 2.)."""
    from arlarena_jax.train import build, preflight
    from arlarena_jax.train.config_checks import ignored_env_keys
    from arlarena_jax.train.config_io import load_config

    _check_request(run_dir, name, overrides)
    fixed = [f"trainer.run_dir={run_dir}", "sft.init_from=null"]
    trained = load_config(run_dir / "config.yaml", fixed)
    config = load_config(run_dir / "config.yaml", [*overrides, *fixed])
    for warning in ignored_env_keys(config):
        print(f"arlarena: warning: {warning}", file=sys.stderr)
    preflight.check_paths(config)
    preflight.check_checkpoints(config)
    config = _keep_tokenizer(trained, config, run_dir / EVALUATIONS_DIR / name)
    build.check_data(config, training=False)
    return config


def evaluate_run(run_dir: Path, name: str, overrides: list[str]) -> dict[str, Any]:
    """Evaluate the run's newest checkpoint under ``overrides`` and record it (module doc);
    the record."""
    from arlarena_jax.train.build import eval_episodes
    from arlarena_jax.train.held_out import write_records
    from arlarena_jax.train.run import Run

    config = evaluation_config(run_dir, name, overrides)
    with Run(config, console=False, lock_wait_s=LOCK_WAIT_S) as run:
        step = run.resume()
        if step is None:
            raise ConfigError(f"{run_dir} has no checkpoint to evaluate")
        metrics = run.evaluate()
        episodes = run.last_eval_episodes
    job_dir = run_dir / EVALUATIONS_DIR / name
    write_records(job_dir / EPISODES_FILE, episodes)
    record = {
        "name": name,
        "run_dir": str(run_dir),
        "overrides": list(overrides),
        "step": step,
        "split": config.trainer.eval_split,
        "episodes": eval_episodes(config),
        "metrics": {k: float(v) for k, v in sorted(metrics.items())},
    }
    write_evaluation(job_dir, record)
    return record


def eval_run_command(args: argparse.Namespace) -> int:
    """Run :func:`evaluate_run` and print its metrics (named by the split they played)."""
    from arlarena_jax.train.metrics import split_tag

    run_dir = Path(args.run_dir)
    args.run_dir = str(run_dir / EVALUATIONS_DIR / args.name)  # the error boundary's log
    record = evaluate_run(run_dir, args.name, list(args.overrides))
    print(
        f"{run_dir} checkpoint step {record['step']}, evaluation {args.name!r} "
        f"({' '.join(args.overrides) or 'no overrides'}), {record['episodes']} episodes of the "
        f"{record['split']} split:"
    )
    for key, value in record["metrics"].items():
        print(f"  {split_tag(key, record['split']):<40} {value:.4f}")
    print(f"wrote {run_dir / EVALUATIONS_DIR / args.name / METRICS_FILE}")
    return 0


def add_command(commands) -> None:
    """Register ``arlarena eval-run`` on the CLI's subparsers."""
    sub = commands.add_parser(
        "eval-run",
        help="evaluate a run's newest checkpoint under other settings (e.g. another tier); "
        "writes RUN_DIR/evaluations/NAME/metrics.json",
    )
    sub.add_argument("run_dir", help="a run directory (holds config.yaml and checkpoints/)")
    sub.add_argument("name", help="the evaluation's name, e.g. w4-o6-q8")
    sub.add_argument("overrides", nargs="*", help="dotted overrides, key=value")
    sub.set_defaults(handler=eval_run_command)
