"""Benchmark: a cloning step on a (data, fsdp, tensor) mesh with the embedding lookup reading the
table gathered over fsdp (``models.sharding.table_for_lookup``, the project's path) against the
lookup reading the table in its stored layout (width split over fsdp: the code before it).

Per mesh and variant, a fresh process on 8 simulated CPU devices compiles and runs the cloning
step of ``--model`` cut to ``--layers`` layers, batch ``--batch`` × ``--length`` tokens, and
reports:

- XLA's "Involuntary full rematerialization" warnings (each replicates a whole tensor on every
  device: here the [batch, length, width] cotangent of the lookup);
- the collectives of the compiled step (all-gather, all-reduce, reduce-scatter, all-to-all,
  collective-permute), MiB of results per device per step, from XLA's optimized HLO;
- the median seconds of ``--repeats`` steps after the first (CPU "devices" share this machine's
  cores and memory, so this is no estimate of an accelerator's time; the bytes are the portable
  figure).

The ratio column is gathered / stored, the baseline measured in the same run.

    python bench/embedding_lookup.py [--model smollm2-135m] [--layers 4] [--batch 16]
        [--length 512] [--meshes 2x2x2 4x2x1 1x8x1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from timing import machine  # this folder's helper

ROOT = Path(__file__).resolve().parents[1]
COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
BYTES = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "s8": 1, "u8": 1, "pred": 1}
WARNING = "Involuntary full rematerialization"


def collective_mib(hlo: str) -> float:
    """MiB of the results of every collective in an optimized HLO module's text."""
    pattern = re.compile(rf"= (.*?) ({'|'.join(COLLECTIVES)})(-start)?\(")
    total = 0
    for line in hlo.splitlines():
        found = pattern.search(line)
        if found is None:
            continue
        for dtype, dims in re.findall(r"(\w+)\[([\d,]*)\]", found.group(1)):
            count = 1
            for d in filter(None, dims.split(",")):
                count *= int(d)
            total += count * BYTES.get(dtype, 4)
    return total / 2**20


def worker(args: argparse.Namespace) -> None:
    """One variant in this process: compile, run, print a JSON line (seconds)."""
    import dataclasses
    import statistics
    import time

    import jax
    import numpy as np
    from flax import nnx

    from arlarena_jax.models import QwenForCausalLM, make_mesh, preset, qwen, shard_model
    from arlarena_jax.train.config import OptimConfig
    from arlarena_jax.train.optim import make_optimizer
    from arlarena_jax.train.sft import SFTBatch, make_sft_step

    if args.variant == "stored":
        qwen.table_for_lookup = lambda table: table  # the lookup before table_for_lookup
    data, fsdp, tensor = map(int, args.worker.split("x"))
    config = dataclasses.replace(preset(args.model), num_hidden_layers=args.layers)
    mesh = make_mesh(data, fsdp, tensor)
    model = shard_model(QwenForCausalLM(config, rngs=nnx.Rngs(0)), mesh)
    graphdef, params = nnx.split(model)
    optimizer = make_optimizer(OptimConfig(lr=1e-5), 100)
    step = make_sft_step(graphdef, optimizer, mesh=mesh, chunk_size=128)
    ids = np.random.default_rng(0).integers(0, config.vocab_size, (args.batch, args.length))
    batch = SFTBatch(
        *(np.asarray(x, np.int32) for x in (ids, np.ones_like(ids), np.ones_like(ids)))
    )
    state = (params, optimizer.init(params))
    seconds = []
    for _ in range(args.repeats + 1):
        began = time.perf_counter()
        *state, metrics = step(*state, batch)
        jax.block_until_ready(metrics)
        seconds.append(time.perf_counter() - began)
    print(json.dumps({"seconds": statistics.median(seconds[1:])}), flush=True)


def measure(args: argparse.Namespace, mesh: str, variant: str) -> dict:
    """Run :func:`worker` in a fresh process with XLA's dumps on; its numbers."""
    with tempfile.TemporaryDirectory() as dump:
        flags = f"--xla_force_host_platform_device_count=8 --xla_dump_to={dump} "
        flags += "--xla_dump_hlo_as_text --xla_dump_hlo_module_re=jit_step"
        env = os.environ | {"XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
        env["ARLARENA_XLA_CACHE"] = "off"
        argv = [sys.executable, __file__, "--worker", mesh, "--variant", variant]
        argv += ["--model", args.model, "--layers", str(args.layers), "--batch", str(args.batch)]
        argv += ["--length", str(args.length), "--repeats", str(args.repeats)]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            sys.exit(f"{mesh} {variant}: the worker failed:\n{done.stderr[-3000:]}")
        modules = sorted(Path(dump).glob("*jit_step*after_optimizations.txt"))
        hlo = "".join(p.read_text() for p in modules if "buffer" not in p.name)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return out | {"warnings": done.stderr.count(WARNING), "mib": collective_mib(hlo)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--meshes", nargs="+", default=["2x2x2", "4x2x1", "1x8x1"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="gathered", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    print(
        f"{machine()}; {args.model} cut to {args.layers} layers, batch {args.batch} × "
        f"{args.length}, 8 CPU devices"
    )
    print(
        "| mesh (data×fsdp×tensor) | rematerializations, stored → gathered | collectives "
        "MiB/device/step, stored → gathered | ratio | step s, stored → gathered | ratio |"
    )
    print("|---|---|---|---|---|---|")
    for mesh in args.meshes:
        stored, gathered = (measure(args, mesh, v) for v in ("stored", "gathered"))
        print(
            f"| {mesh} | {stored['warnings']} → {gathered['warnings']} | "
            f"{stored['mib']:.0f} → {gathered['mib']:.0f} | "
            f"{gathered['mib'] / stored['mib']:.2f}× | "
            f"{stored['seconds']:.2f} → {gathered['seconds']:.2f} | "
            f"{gathered['seconds'] / stored['seconds']:.2f}× |",
            flush=True,
        )


if __name__ == "__main__":
    main()
