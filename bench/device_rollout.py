"""Benchmark: the on-device Sokoban rollout against the host rollout, same policy, same batch.

Baseline (same run, same machine): :func:`arlarena_jax.rollout.loop.collect`, the host turn loop
(prompts rendered as text and tokenised on the host, the sampler driver, replies decoded and
projected on the host, the vmapped JAX Sokoban stepped once per turn). Measured: its turns per
second against :meth:`arlarena_jax.rollout.device.DeviceRollout.collect`, the whole episode
batch as one jitted program (rows built on the host from its arrays, included in the time).

The policy is the main job's (``configs/sokoban/sampo_tiny.yaml``): random tiny weights by
default, whose replies run to the 24-token budget and never solve a room (every episode plays all
15 turns: the decode-heavy case), or ``--model-dir`` a trained policy's Hugging Face export
(``<run_dir>/hf``), whose replies are 8 tokens and whose episodes end early. Batches: the main
job's 16 × 8 = 128 environments and 4× that. Both paths play the same rooms with the same seed
stream (they produce the same rows, tests/rollout/test_device_rollout.py); each is warmed up
(compiled) once, then timed.

    python bench/device_rollout.py [--batches 128 512] [--repeats 2] [--model-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import jax
from timing import median_seconds

from arlarena_jax.rollout.loop import collect
from arlarena_jax.train import build
from arlarena_jax.train.config_io import load_config

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "sokoban", "sampo_tiny.yaml")
GROUP_SIZE = 8


def build_parts(batch: int, model_dir: str | None, overrides: tuple[str, ...] = ()):
    """The main job's tokenizer, policy (random or ``model_dir``) and on-device rollout, with
    ``batch`` decode slots for the host path; ``overrides`` (``key.path=value``) go last."""
    settings = [f"sampler.max_concurrent_decodes={min(batch, 128)}"]
    if model_dir:
        settings += [f"model.path={model_dir}", f"model.tokenizer={model_dir}"]
    config = load_config(CONFIG, [*settings, *overrides])
    tokenizer = build.build_tokenizer(config)
    model = build.build_model(config, tokenizer, None, seed=0)
    _, policy = build.build_policy(config, model, tokenizer, None)
    return config, policy, build.build_device_rollout(config, policy)


def measure(
    batch: int, repeats: int, model_dir: str | None, overrides: tuple[str, ...] = ()
) -> dict[str, float]:
    """Turns per second of both paths at ``batch`` environments (config ``overrides`` last)."""
    config, policy, device = build_parts(batch, model_dir, overrides)
    envs, fmt = build.make_envs(config, batch), build.task_format(config)
    seeds = list(range(1000, 1000 + batch // GROUP_SIZE))
    kwargs = dict(group_seeds=seeds, group_size=GROUP_SIZE, max_turns=config.env.max_turns)
    rows: dict[str, int] = {}

    def host():
        policy.calls = 0
        rows["host"] = len(collect(envs, fmt, policy, **kwargs).rows)

    def on_device():
        policy.calls = 0
        rows["device"] = len(device.collect(envs, fmt, policy, **kwargs).rows)

    t_host = median_seconds(host, repeats)
    t_device = median_seconds(on_device, repeats)
    return {
        "rows": rows["host"],
        "same_rows": rows["host"] == rows["device"],
        "host": rows["host"] / t_host,
        "device": rows["device"] / t_device,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model-dir", default=None)
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"JAX {jax.__version__} on {jax.default_backend()}")  # fmt: skip
    print(f"policy: {args.model_dir or 'random tiny weights'}")
    print("| envs | turn rows | host rollout | on-device rollout | ratio |")
    print("|---|---|---|---|---|")
    for batch in args.batches:
        start = time.perf_counter()
        r = measure(batch, args.repeats, args.model_dir)
        ratio = r["device"] / r["host"]
        print(
            f"| {batch} | {r['rows']:,}{'' if r['same_rows'] else ' (counts differ!)'} | "
            f"{r['host']:,.0f} turns/s | {r['device']:,.0f} turns/s | {ratio:.2f}× |",
            flush=True,
        )
        print(f"  ({time.perf_counter() - start:.0f} s for this batch, compilation included)")


if __name__ == "__main__":
    main()
