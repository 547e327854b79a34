"""Benchmark: how a run's work splits over 1, 2 and 4 ``jax.distributed`` processes (issue 65,
the pod path run on localhost).

One config trains as N = 1, 2 and 4 processes of 4 / N simulated CPU devices each, the
(data=2, fsdp=2) training mesh over the 4 devices in all, the way a pod runs one process per host
(``ARLARENA_COORDINATOR`` / ``ARLARENA_NUM_PROCESSES`` / ``ARLARENA_PROCESS_ID``): TextWorld on
the real engine (w2-o3-q4 games built first into ``--data``), the tiny model from its random
initialisation, no cloning, ``--steps`` RL steps of 4 groups of 2 with up to 3 turns. Each process
plays its block of 4 / N groups in its own pool (one worker), decodes it on its own devices,
gathers the whole rollout through the host exchange and refreshes its sampler's weights from the
training mesh after every update.

Every process's share of every step is read from the run's TensorBoard: ``process/<i>/…``, which
process 0 logs for each process (arlarena_jax/train/process_stats.py). Per N, means over the
processes and the steps (timings over the steps after the first, which compiles):

* env steps: the environment steps a process took (episodes still running);
* env s: its host time inside its environments (reset and step);
* rollout s: its whole rollout (prompts, decoding on its devices, environments, the gather);
* exchange s / KiB: its time inside the host exchange (pickling, sending, waiting for the slowest
  process, reading) and what it sent, over the step;
* refresh s: the weight refresh (``timing/sync``: ``replica_params``, an all-gather inside the
  training mesh, then ``update_params``; one process: ``update_params`` on the training mesh).

Baseline: N = 1 in the same run; ratios against it. The environment steps per process must be
the one process's / N exactly (every step, the processes' counts add up to the one process's:
the same episodes, split); the script says so, or flags it and exits 1. Host times fall as 1/N
only where every process has cores of its own: on a machine with fewer cores than processes (and
their pool workers) the processes share the cores and the absolute times do not scale; the work
split (env steps) must.

    python bench/multihost.py [--processes 1 2 4] [--steps 3] [--data DIR] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from timing import free_port, machine, run_processes  # noqa: E402 (this folder's helpers)

from arlarena_jax.train.metrics import read_scalars  # noqa: E402
from arlarena_jax.train.process_stats import NAMES  # noqa: E402

CONFIG = "configs/textworld/base_tiny.yaml"
DEVICES = 4  # simulated CPU devices in all, (data=2, fsdp=2)
GAMES = {"train": 16, "validation": 4, "test": 4}
PROCESS_VARIABLES = ("ARLARENA_COORDINATOR", "ARLARENA_NUM_PROCESSES", "ARLARENA_PROCESS_ID")
SHRUNK = [
    "sft.enabled=false",
    "trainer.eval_at_start=false",
    "trainer.eval_every=0",
    "trainer.eval_episodes=4",
    "env.eval_batch_size=4",
    "trainer.save_every=0",
    "trainer.export_hf=false",
    "env.train_batch_size=4",  # 4 groups: whole groups for 1, 2 and 4 processes
    "env.group_size=2",
    "env.max_turns=3",
    "env.history_length=0",
    "env.num_workers=1",  # one pool worker per process
    "env.textworld.auto_build=false",
    *(f"env.textworld.{split}_games={n}" for split, n in GAMES.items()),
    "mesh.data=2",
    "mesh.fsdp=2",
    "sampler.max_concurrent_decodes=8",
    "sampler.max_new_tokens=24",
    "algorithm.use_kl_loss=false",  # no reference pass: the update is not what is measured
    "trainer.use_rollout_log_probs=true",
    "trainer.mini_batch_size=24",
    "trainer.micro_batch_size=8",
]


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, nargs="+", choices=(1, 2, 4), default=[1, 2, 4])
    parser.add_argument("--steps", type=int, default=3, help="RL steps per run")
    parser.add_argument("--data", type=Path, help="TextWorld game root (default: a temp folder)")
    parser.add_argument("--keep", type=Path, help="keep the runs here (default: a temp folder)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    return parser.parse_args()


def build_games(data: Path) -> None:
    """The train, validation and test games the config plays (generated where missing)."""
    counts = [f"--{split}-games={n}" for split, n in GAMES.items()]
    command = [sys.executable, "-m", "arlarena_jax", "textworld", "build", str(data), *counts]
    subprocess.run([*command, "--workers=1"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def process_env(n: int, port: int) -> dict[str, str]:
    """The environment of the ``n`` processes (``ARLARENA_PROCESS_ID`` aside); one process is
    started as a plain ``arlarena train`` (no coordinator)."""
    env = {k: v for k, v in os.environ.items() if k not in PROCESS_VARIABLES}
    flags = [f for f in env.pop("XLA_FLAGS", "").split() if "device_count" not in f]
    flags.append(f"--xla_force_host_platform_device_count={DEVICES // n}")
    env |= {"XLA_FLAGS": " ".join(flags), "JAX_PLATFORMS": "cpu"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if n > 1:
        env |= {"ARLARENA_COORDINATOR": f"localhost:{port}", "ARLARENA_NUM_PROCESSES": str(n)}
    return env


def train(n: int, run_dir: Path, data: Path, steps: int, timeout: float) -> float:
    """Train the shrunk config as ``n`` processes into ``run_dir``; its wall seconds. Each
    process's output goes to ``run_dir.log.<i>``; a failure ends the bench with their tails."""
    argv = [sys.executable, "-m", "arlarena_jax", "train", CONFIG, *SHRUNK]
    argv += [f"env.data_path={data}", f"trainer.total_steps={steps}", f"trainer.run_dir={run_dir}"]
    env, logs = process_env(n, free_port()), [Path(f"{run_dir}.log.{i}") for i in range(n)]
    envs = [env | ({"ARLARENA_PROCESS_ID": str(i)} if n > 1 else {}) for i in range(n)]
    return run_processes(argv, envs, logs, ROOT, timeout)


def shares(run_dir: Path, n: int) -> dict[str, np.ndarray]:
    """``{name: [steps, processes]}`` of the run's ``process/<i>/<name>`` scalars."""
    scalars = read_scalars(run_dir / "tensorboard")
    return {
        name: np.array([[v for _, v in scalars[f"process/{i}/{name}"]] for i in range(n)]).T
        for name in NAMES
    }


def summary(n: int, numbers: dict[str, np.ndarray], wall_s: float) -> dict[str, float]:
    """Means over processes and steps (timings: the steps after the first, when there are), the
    spread of the environment steps over the processes, and the per-step totals."""
    timed = slice(1, None) if len(numbers["env_steps"]) > 1 else slice(None)
    out = {name: float(values[timed].mean()) for name, values in numbers.items()}
    per_process = numbers["env_steps"].mean(axis=0)
    out |= {"env_steps": float(per_process.mean()), "wall_min": wall_s / 60, "processes": n}
    out |= {"env_steps_min": float(per_process.min()), "env_steps_max": float(per_process.max())}
    out["totals"] = numbers["env_steps"].sum(axis=1).tolist()  # every step, over the processes
    return out


def table(rows: list[dict]) -> None:
    """The measured means, one row per process count."""
    print(
        "\n| processes | devices each | env steps / process (min-max) | env s | rollout s "
        "| exchange s | exchange KiB | refresh s | update s | run min |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        n = r["processes"]
        spread = f"{r['env_steps']:.1f} ({r['env_steps_min']:.0f}-{r['env_steps_max']:.0f})"
        print(
            f"| {n} | {DEVICES // n} | {spread} | {r['env_s']:.2f} | {r['rollout_s']:.2f} "
            f"| {r['exchange_s']:.2f} | {1024 * r['exchange_mib']:.1f} | {r['sync_s']:.3f} "
            f"| {r['update_s']:.1f} | {r['wall_min']:.1f} |"
        )


def ratios(rows: list[dict]) -> bool:
    """Each row against the first (the baseline); whether every environment-step share is the
    baseline's / N exactly (the processes' counts add up to the baseline's, every step)."""
    base, exact = rows[0], True
    print(f"\nagainst {base['processes']} process(es), the baseline of this run:")
    print("| processes | 1/N | env steps | env s | rollout s | env steps split |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        share = base["processes"] / r["processes"]
        same = r["totals"] == base["totals"]  # so the mean per process is the baseline's * 1/N
        same &= math.isclose(r["env_steps"], base["env_steps"] * share, rel_tol=1e-9)
        exact &= same
        print(
            f"| {r['processes']} | {share:.3f} | {r['env_steps'] / base['env_steps']:.3f} "
            f"| {r['env_s'] / base['env_s']:.2f} | {r['rollout_s'] / base['rollout_s']:.2f} "
            f"| {'exactly 1/N' if same else 'NOT 1/N: ' + str(r['totals'])} |"
        )
    return exact


def main() -> None:
    args = parse()
    print(f"{machine()}; {CONFIG}, {args.steps} RL steps, {DEVICES} CPU devices in all")
    with tempfile.TemporaryDirectory(prefix="multihost-") as scratch:
        data = args.data or Path(scratch) / "data"
        keep = args.keep or Path(scratch) / "runs"
        keep.mkdir(parents=True, exist_ok=True)
        build_games(data)
        rows = []
        for n in args.processes:
            run_dir = keep / f"processes{n}"
            wall = train(n, run_dir, data, args.steps, args.timeout)
            rows.append(summary(n, shares(run_dir, n), wall))
            load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
            print(f"{n} process(es): {wall / 60:.1f} min, then load average {load}", flush=True)
    table(rows)
    if not ratios(rows):
        raise SystemExit("FLAG: the environment steps did not split as 1/N (totals above)")
    print(
        "the work split is the env-steps column; host times fall as 1/N only where each "
        "process has cores of its own"
    )


if __name__ == "__main__":
    main()
