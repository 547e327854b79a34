"""A sampler on each process's own devices, refreshed from a training mesh over all processes.

Started as ``python tests/helpers/distributed_sampler.py OUT_DIR`` with ``ARLARENA_COORDINATOR``,
``ARLARENA_NUM_PROCESSES`` and ``ARLARENA_PROCESS_ID`` set, it joins the multi-process runtime
(2 CPU devices per process). The trainer's parameters live on a (data=2, fsdp=2) mesh over both
processes; each process builds its engine on its own devices (``sampler_mesh``, a replica of
model seed 0 by ``replica_model``), decodes its own requests (:func:`requests`: a different
number, of different lengths, on each process, so continuous batching decides differently),
refreshes the weights to model seed 1 sharded on the training mesh (``replica_params``, timed)
and decodes them again. Each process writes ``OUT_DIR/process_<i>.npz``: its tokens and
log-probs per sample before and after the refresh, its engine's parameters after it and the
refresh's seconds; process 0 also the trainer's parameters of both seeds as gathered by
``to_host`` (the test's reference engines load these: an initialisation compiled in another
process may round differently) (``test_distributed_sampler.py``).
"""

from __future__ import annotations

import os
import sys
import time

if __name__ == "__main__":  # 2 devices; the suite's other XLA flags (-O0) stay
    from tests.helpers.xla_flags import set_device_count

    set_device_count(2)

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from arlarena_jax.models import QwenConfig, QwenForCausalLM, make_mesh, shard_model
from arlarena_jax.models.sharding import to_host
from arlarena_jax.sampler import GREEDY, Engine, EngineConfig, Request, generate
from arlarena_jax.sampler.placement import replica_model, replica_params, sampler_mesh

# the tiny decoder of this helper and of tests/sampler/test_sampler_placement.py
CONFIG = QwenConfig("qwen3", 256, 64, 128, 2, 4, 2, 16, max_position_embeddings=128)
ENGINE = EngineConfig(
    max_concurrent_decodes=2,
    max_prefill_length=16,
    max_new_tokens=10,
    steps_per_call=2,
    min_prefill_bucket=8,
)


def requests(process: int) -> list[Request]:
    """Process 0: three requests; process 1: five, of other lengths, one of two samples."""
    if process == 0:
        return [
            Request([5, 17, 3], max_new_tokens=10),
            Request(list(range(40, 53)), max_new_tokens=4),
            Request([9, 9], max_new_tokens=7),
        ]
    return [
        Request([200, 1, 77, 31, 4, 4, 90], n=2, max_new_tokens=6),
        Request(list(range(100, 116)), max_new_tokens=3),
        Request([7], max_new_tokens=10),
        Request([250, 3, 11, 12, 13], max_new_tokens=9),
        Request(list(range(60, 71)), max_new_tokens=5),
    ]


def decode(engine: Engine, process: int) -> tuple[list[list[int]], list[list[float]]]:
    """Greedy tokens and log-probs of every sample of ``requests(process)``."""
    samples = [s for group in generate(engine, requests(process), sampling=GREEDY) for s in group]
    return [s.token_ids for s in samples], [s.log_probs for s in samples]


def model(seed: int) -> QwenForCausalLM:
    return QwenForCausalLM(CONFIG, rngs=nnx.Rngs(seed))


def flat(params, prefix: str) -> dict[str, np.ndarray]:
    """``{prefix + path: array}`` of a (process-local) parameter tree."""
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    return {prefix + jax.tree_util.keystr(path): np.asarray(x) for path, x in leaves}


def loaded(seed: int, arrays: dict[str, np.ndarray]) -> QwenForCausalLM:
    """:func:`model` of ``seed`` holding the ``seed<seed>/…`` parameters of ``arrays``."""
    m = model(seed)
    graphdef, params = nnx.split(m)
    paths, treedef = jax.tree_util.tree_flatten_with_path(params)
    leaves = [jnp.asarray(arrays[f"seed{seed}/" + jax.tree_util.keystr(path)]) for path, _ in paths]
    return nnx.merge(graphdef, jax.tree.unflatten(treedef, leaves))


def ragged(rows: list[list], dtype) -> np.ndarray:
    """Rows padded with -1 into one array."""
    out = np.full((len(rows), max(map(len, rows))), -1, dtype)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def run(out_dir: str) -> None:
    process = jax.process_index()
    train = make_mesh(data=2, fsdp=2, devices=jax.devices())
    trained = shard_model(model(0), train)
    first = to_host(nnx.state(trained))
    local = sampler_mesh(train, trained, ENGINE)
    engine = Engine(replica_model(trained, train, local), ENGINE, sampling=GREEDY, mesh=local)
    before = decode(engine, process)
    new = nnx.state(shard_model(model(1), train))
    start = time.perf_counter()
    engine.update_params(jax.block_until_ready(replica_params(new, train, engine.param_layout)))
    seconds = time.perf_counter() - start
    after = decode(engine, process)
    out = flat(engine.params, "param/")
    if process == 0:
        out |= flat(first, "seed0/") | flat(to_host(new), "seed1/")
    for name, (tokens, log_probs) in (("before", before), ("after", after)):
        out[f"{name}/tokens"] = ragged(tokens, np.int32)
        out[f"{name}/log_probs"] = ragged(log_probs, np.float32)
    out["mesh"] = np.asarray(local.devices.shape)
    out["refresh_s"] = np.float64(seconds)
    np.savez(os.path.join(out_dir, f"process_{process}.npz"), **out)
    print(f"process {process}: refresh {seconds * 1e3:.1f} ms", flush=True)


def main(out_dir: str) -> None:
    from arlarena_jax.train.distributed import initialize_if_distributed

    if not initialize_if_distributed():
        raise SystemExit("set ARLARENA_COORDINATOR, ARLARENA_NUM_PROCESSES, ARLARENA_PROCESS_ID")
    run(out_dir)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
