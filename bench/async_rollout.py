"""Benchmark: wall time per RL step, synchronous (``trainer.max_staleness: 0``) against
asynchronous (k = 1, 2), and how long each side sits idle.

Baseline (same run, same machine, same config and seeds): the synchronous loop, k = 0. Ours: the
producer thread rolling out under the staleness bound k (docs/architecture.md, "Asynchronous
RL"). Cases:

* ``text``: a text environment through real pool worker processes: TextWorld when ``textworld``
  imports, else WebShop on its synthetic catalogue (configs/webshop/base_tiny.yaml, sizes cut);
* ``sokoban``: the main job's config (configs/sokoban/base_tiny.yaml), batch cut by
  ``--sokoban-groups``.

Both start from the random tiny policy (no cloning: its replies run to the token budget, the
episodes to ``max_turns``), ``use_rollout_log_probs: false`` (lp_old recomputed, so the
sampler-trainer KL is measured). Each case first runs ``--steps`` untimed synchronous steps that
fill the compilation cache (packed widths differ per batch, and a later run must not be the one
paying for them); each timed run's step 1 (the producer's start, any compile left) is excluded:
seconds per step = the median of the intervals between consecutive step ends after step 1.

Idle time per step: *update idle* is the time the trainer waits for a batch (sync: the whole
rollout; async: ``async/trainer_wait_s``); *rollout idle* is the time the rollout side waits
(sync: update and weight sync; async: ``async/producer_wait_s``, on the staleness bound). On a
CPU the "device" is the same 2 cores for both sides: the overlap gained is the environment
workers' and host Python's time hidden behind device compute, bounded by the cores.

    python bench/async_rollout.py [--steps 8] [--ks 0 1 2] [--cases text sokoban]
                                  [--sokoban-groups 4] [--text-turns 4]

A mean over a short window is distorted: the producer starts the next batch during step 1, so
the first timed steps draw on a head start, and a step that compiles a new packed width is an
outlier. Seconds per step are therefore the *median* interval between step ends, and the splits
and idle times medians over the steps (docs/benchmarks.md lists how far earlier mean-based runs
moved). The default, 8 steps, takes about 12 minutes on 2 idle cores.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import os
import platform
import statistics
import tempfile
import time
from typing import Any

from arlarena_jax.compile_cache import enable_compilation_cache
from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.run import Run

COMMON = [
    "sft.enabled=false",
    "trainer.eval_at_start=false",
    "trainer.eval_every=0",
    "trainer.save_every=0",
    "trainer.export_hf=false",
    "trainer.use_rollout_log_probs=false",
    "monitor.rollback=false",
]


def case_overrides(case: str, args: argparse.Namespace) -> tuple[str, list[str]]:
    """(config file, overrides) of a case."""
    if case == "sokoban":
        return "configs/sokoban/base_tiny.yaml", [
            f"env.train_batch_size={args.sokoban_groups}",
            "env.group_size=8",
            "trainer.mini_batch_size=128",
        ]
    small = [
        "env.train_batch_size=2",
        "env.group_size=4",
        f"env.max_turns={args.text_turns}",
        "env.num_workers=2",
        "sampler.max_concurrent_decodes=8",
        "trainer.mini_batch_size=32",
        "trainer.micro_batch_size=8",
    ]
    if importlib.util.find_spec("textworld") is not None:  # games generated on first use
        return "configs/textworld/base_tiny.yaml", small
    return "configs/webshop/base_tiny.yaml", [*small, "env.webshop.num_products=100"]


def timed_run(path: str, overrides: list[str], k: int, steps: int, run_dir: str) -> dict:
    """One run of ``steps`` RL steps at staleness ``k``: seconds per step (the median interval
    between step ends after step 1) and the per-step idle times and splits (medians over steps
    2 …)."""
    extra = [f"trainer.max_staleness={k}", f"trainer.total_steps={steps}"]
    config = load_config(path, [*COMMON, *overrides, *extra, f"trainer.run_dir={run_dir}"])
    ends: list[float] = []
    with Run(config, console=False) as run:
        run.start()
        while not run.done:
            run.step()
            ends.append(time.perf_counter())
        run.async_rollouts.stop()
        history = run.history[1:]
    per_step = (
        statistics.median(b - a for a, b in itertools.pairwise(ends)) if len(ends) > 1 else 0.0
    )

    def median(key: str, default: float = 0.0) -> float:  # robust to the head start
        return statistics.median(row.get(key, default) for row in history) if history else 0.0

    if k == 0:
        update_idle = median("timing/rollout")
        rollout_idle = median("timing/update") + median("timing/sync")
    else:
        update_idle, rollout_idle = median("async/trainer_wait_s"), median("async/producer_wait_s")
    return {
        "s_per_step": per_step,
        "rollout_s": median("timing/rollout"),
        "env_s": median("timing/rollout/env"),
        "update_s": median("timing/update"),
        "update_idle_s": update_idle,
        "rollout_idle_s": rollout_idle,
        "staleness": median("async/staleness_mean"),
        "kl": median("actor/sampler_trainer_kl", float("nan")),
    }


def report(case: str, results: dict[int, dict[str, Any]]) -> None:
    base = results.get(0)
    print(f"\n{case}: seconds per RL step (steps 2..N), idle per step")
    print(
        "| k | s/step | vs sync | rollout s | env s | update s | update idle s | rollout idle s "
        "| staleness | sampler-trainer KL |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for k, r in results.items():
        ratio = f"{base['s_per_step'] / r['s_per_step']:.2f}x" if base else "n/a"
        print(
            f"| {k} | {r['s_per_step']:.2f} | {ratio} | {r['rollout_s']:.2f} | {r['env_s']:.2f} "
            f"| {r['update_s']:.2f} | {r['update_idle_s']:.2f} "
            f"({100 * r['update_idle_s'] / r['s_per_step']:.0f}%) | {r['rollout_idle_s']:.2f} "
            f"| {r['staleness']:.2f} | {r['kl']:.2e} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="RL steps per run (step 1 untimed)")
    parser.add_argument("--ks", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cases", nargs="+", default=["text", "sokoban"])
    parser.add_argument("--sokoban-groups", type=int, default=4, help="task groups of 8")
    parser.add_argument("--text-turns", type=int, default=4)
    args = parser.parse_args()
    enable_compilation_cache()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.2f} at the start"
    )
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-async-") as tmp:
        for case in args.cases:
            path, overrides = case_overrides(case, args)
            print(f"{case}: {path} {' '.join(overrides)}", flush=True)
            timed_run(path, overrides, 0, args.steps, f"{tmp}/{case}-warm")  # fills the cache
            results = {
                k: timed_run(path, overrides, k, args.steps, f"{tmp}/{case}-{k}") for k in args.ks
            }
            report(case, results)
    print(
        f"\ntotal {time.perf_counter() - start:.0f} s; load average {os.getloadavg()[0]:.2f} at "
        "the end (other jobs share the cores: compare ratios, not seconds)"
    )


if __name__ == "__main__":
    main()
