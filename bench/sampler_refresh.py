"""Benchmark: the sampler's weight refresh onto a process-local mesh (``sampler/placement.py``).

Ours: ``engine.update_params(replica_params(params, train_mesh, engine.param_layout))``, the
trainer's parameters all-gathered inside the training mesh (chunks of 256 MiB) and assembled on
the sampler's devices. Baseline (same run, same weights): the host round trip, the other way that
never puts an array of one mesh onto another: every parameter gathered to host NumPy
(``sharding.to_host``) and put onto the sampler's shardings. Also shown: the one-process sync of
today (engine on the training mesh: ``update_params`` alone, and the asynchronous producer's
on-device copy, ``jnp.copy`` per parameter). Times: median of ``--repeats`` after one untimed
refresh (compiles).

* ``--processes 1`` (default): one process with 8 simulated CPU devices, the training mesh
  ``--mesh`` over all 8 and the sampler on the last ``--local`` of them (its ``sampler_mesh``);
  the in-process cross-mesh ``jax.device_put`` is timed too (what a pod cannot do);
* ``--processes 2``: two ``jax.distributed`` processes on localhost with 2 CPU devices each, a
  (data=2, fsdp=2) training mesh over both and each sampler on its own 2 devices.

    python bench/sampler_refresh.py [--preset smollm2-135m] [--repeats 5]
                                    [--processes 1|2] [--mesh 4 2 1] [--local 2]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--processes", type=int, choices=(1, 2), default=1)
    parser.add_argument("--mesh", type=int, nargs=3, default=(4, 2, 1))
    parser.add_argument("--local", type=int, default=2)
    return parser.parse_args()


def measure(args: argparse.Namespace, mesh_shape, local_devices) -> dict[str, float]:
    """Milliseconds per refresh: ours, the host round trip and (one process) the rest."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from timing import median_seconds

    from arlarena_jax.models import QwenForCausalLM, make_mesh, preset, shard_model
    from arlarena_jax.models.sharding import to_host
    from arlarena_jax.sampler import Engine, EngineConfig
    from arlarena_jax.sampler.placement import replica_model, replica_params, sampler_mesh

    train = make_mesh(*mesh_shape)
    model = shard_model(QwenForCausalLM(preset(args.preset), rngs=nnx.Rngs(0)), train)
    config = EngineConfig(max_concurrent_decodes=8, max_prefill_length=64, max_new_tokens=64)
    local = sampler_mesh(train, model, config, devices=local_devices)
    engine = Engine(replica_model(model, train, local), config, mesh=local)
    params, layout = jax.block_until_ready(nnx.state(model)), engine.param_layout
    shardings = jax.tree.map(lambda t: t.sharding, layout)

    def ours():
        engine.update_params(replica_params(params, train, layout))
        jax.block_until_ready(engine.params)

    def host():
        engine.update_params(jax.device_put(to_host(params), shardings))
        jax.block_until_ready(engine.params)

    times = {"ours": ours, "host round trip": host}
    if jax.process_count() == 1:
        same = Engine(model, config, mesh=train)
        times["device_put across meshes"] = lambda: jax.block_until_ready(
            jax.device_put(params, shardings)
        )
        times["one process: update_params"] = lambda: (
            same.update_params(params),
            jax.block_until_ready(same.params),
        )
        times["one process: on-device copy"] = lambda: jax.block_until_ready(
            jax.tree.map(jnp.copy, params)
        )
    out = {name: 1e3 * median_seconds(fn, args.repeats) for name, fn in times.items()}
    out["mesh"] = str(dict(local.shape))
    out["mib"] = sum(x.nbytes for x in jax.tree.leaves(params)) / 2**20
    return out


def report(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    print(f"sampler mesh {rows[0]['mesh']}, {rows[0]['mib']:.0f} MiB of parameters")
    print("| refresh | " + " | ".join(f"process {i} ms" for i in range(len(rows))) + " |")
    print("|---|" + "---|" * len(rows))
    for name in (k for k in rows[0] if k not in ("mesh", "mib")):
        print(f"| {name} | " + " | ".join(f"{r[name]:.1f}" for r in rows) + " |")
    ratios = ", ".join(f"{r['ours'] / r['host round trip']:.2f}" for r in rows)
    print(f"ours / host round trip: {ratios}")


def one_process(args: argparse.Namespace) -> None:
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax

    rows = [measure(args, args.mesh, jax.devices()[-args.local :])]
    report(f"{args.preset}: training mesh {tuple(args.mesh)} over 8 CPU devices, one process", rows)


def worker(args: argparse.Namespace) -> None:
    """One of the two processes: join, measure, print a line the parent reads."""
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax

    from arlarena_jax.train.distributed import initialize_if_distributed

    initialize_if_distributed()
    result = measure(args, (2, 2, 1), None)
    print("RESULT", json.dumps(result), flush=True)
    jax.distributed.shutdown()


def two_processes(args: argparse.Namespace) -> None:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JAX_PLATFORMS="cpu", ARLARENA_NUM_PROCESSES="2")
    env |= {"ARLARENA_COORDINATOR": f"localhost:{port}", "BENCH_WORKER": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, *sys.argv[1:]],
            env=env | {"ARLARENA_PROCESS_ID": str(i)},
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=1800)[0] for p in procs]
    rows = [
        json.loads(line[7:]) for out in outs for line in out.splitlines() if line[:7] == "RESULT "
    ]
    if len(rows) != 2:
        raise SystemExit("a worker failed:\n" + "\n".join(o[-2000:] for o in outs))
    report(f"{args.preset}: training mesh (2, 2, 1) over two processes of 2 CPU devices", rows)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "bench"))
    arguments = parse()
    if os.environ.get("BENCH_WORKER"):
        worker(arguments)
    elif arguments.processes == 2:
        two_processes(arguments)
    else:
        one_process(arguments)
