"""Benchmark: a multi-process CPU run started again over a warm compilation cache, with every
process storing its own programs (the command's cache, arlarena_jax/compile_cache_processes.py)
against JAX's writer alone (process 0 stores; on CPU the other processes' keys are their own, so
they compile everything on every start).

The main job's Sokoban shrunk to ``--steps`` RL steps of 4 groups of 2 (no cloning, evaluations
after the last step only), trained as N processes over 4 simulated CPU devices in all, the
(data=2, fsdp=2) mesh. Per N and writer: a cache folder of its own, filled by one first start;
then ``--repeats`` starts into fresh run directories, the writers alternating (so a change of the
machine's load hits both), each timed from the processes' start to the last one's exit. The
medians are printed with the ratio command / JAX. Baseline: JAX's writer, in the same run.

    python bench/process_cache.py [--processes 2 4] [--steps 2] [--repeats 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from timing import free_port, machine, run_processes  # this folder's helpers

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/sokoban/sampo_tiny.yaml"
DEVICES = 4
PROCESS_VARIABLES = ("ARLARENA_COORDINATOR", "ARLARENA_NUM_PROCESSES", "ARLARENA_PROCESS_ID")
SHRUNK = [
    "sft.enabled=false",
    "trainer.eval_at_start=false",
    "trainer.eval_every=0",
    "trainer.eval_episodes=8",
    "env.eval_batch_size=2",
    "env.train_batch_size=4",
    "env.group_size=2",
    "env.max_turns=3",
    "trainer.mini_batch_size=8",
    "trainer.micro_batch_size=4",
    "sampler.max_concurrent_decodes=4",
    "trainer.save_every=1",
    "trainer.export_hf=false",
    "mesh.data=2",
    "mesh.fsdp=2",
]
# JAX's writer alone: the command with the wrapper switched off before it starts.
JAX_WRITER = (
    "import sys, arlarena_jax.compile_cache as cache;"
    " cache.store_on_every_cpu_process = lambda: False;"
    " from arlarena_jax.cli import main; sys.exit(main(sys.argv[1:]))"
)
WRITERS = {"jax": ["-c", JAX_WRITER], "command": ["-m", "arlarena_jax"]}


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, nargs="+", choices=(2, 4), default=[2, 4])
    parser.add_argument("--steps", type=int, default=2, help="RL steps per start")
    parser.add_argument("--repeats", type=int, default=2, help="timed starts per writer")
    parser.add_argument("--keep", type=Path, help="keep caches and runs here (default: temp)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per start")
    return parser.parse_args()


def process_env(n: int, cache: Path) -> dict[str, str]:
    """The ``n`` processes' environment (``ARLARENA_PROCESS_ID`` aside), caching in ``cache``."""
    env = {k: v for k, v in os.environ.items() if k not in PROCESS_VARIABLES}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    flags = [f for f in env.pop("XLA_FLAGS", "").split() if "device_count" not in f]
    flags.append(f"--xla_force_host_platform_device_count={DEVICES // n}")
    env |= {"XLA_FLAGS": " ".join(flags), "JAX_PLATFORMS": "cpu", "ARLARENA_XLA_CACHE": str(cache)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    port = free_port()
    return env | {"ARLARENA_COORDINATOR": f"localhost:{port}", "ARLARENA_NUM_PROCESSES": str(n)}


def start(n: int, writer: str, cache: Path, run_dir: Path, args) -> float:
    """One start of the shrunk run as ``n`` processes; its wall seconds. A failure ends the
    bench with the processes' output tails (``run_dir.log.<i>``)."""
    argv = [sys.executable, *WRITERS[writer], "train", CONFIG, *SHRUNK]
    argv += [f"trainer.total_steps={args.steps}", f"trainer.run_dir={run_dir}"]
    env, logs = process_env(n, cache), [Path(f"{run_dir}.log.{i}") for i in range(n)]
    envs = [env | {"ARLARENA_PROCESS_ID": str(i)} for i in range(n)]
    return run_processes(argv, envs, logs, ROOT, args.timeout)


def measure(n: int, folder: Path, args) -> dict[str, list[float]]:
    """Per writer: the first (cache-filling) start, then the timed starts, writers alternating."""
    times: dict[str, list[float]] = {writer: [] for writer in WRITERS}
    for writer in WRITERS:
        first = start(n, writer, folder / f"cache-{n}-{writer}", folder / f"{n}-{writer}-0", args)
        print(f"  {n} processes, {writer} writer: first start {first:.1f} s (fills the cache)")
    for repeat in range(1, args.repeats + 1):
        for writer in WRITERS:
            cache, run_dir = folder / f"cache-{n}-{writer}", folder / f"{n}-{writer}-{repeat}"
            times[writer].append(start(n, writer, cache, run_dir, args))
    return times


def main() -> None:
    args = parse()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        rows = []
        for n in args.processes:
            times = measure(n, folder, args)
            jax_s, ours_s = (statistics.median(times[w]) for w in ("jax", "command"))
            shown = {w: ", ".join(f"{t:.1f}" for t in times[w]) for w in times}
            rows.append(
                f"| {n} | {jax_s:.1f} ({shown['jax']}) | {ours_s:.1f} ({shown['command']})"
                f" | {ours_s / jax_s:.2f} |"
            )
    print(
        "| processes | JAX's writer: median s (starts) | every process stores: median s | ratio |"
    )
    print("|---|---|---|---|")
    print("\n".join(rows))
    print(f"machine after: {machine()}")


if __name__ == "__main__":
    main()
