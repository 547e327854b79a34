"""Compile and run one cloning step of a 2-layer tiny model on a (data, fsdp, tensor) mesh of 8
CPU devices: ``python tests/helpers/sft_step_compile.py DATA FSDP TENSOR``. It prints ``done``;
XLA's partitioner writes its warnings to stderr (``tests/models/test_sharding.py``).

Run without the persistent compilation cache, so every program is compiled and warned about."""

from __future__ import annotations

import sys

if __name__ == "__main__":  # 8 devices; the suite's other XLA flags (-O0) stay
    from tests.helpers.xla_flags import set_device_count

    set_device_count(8)

import dataclasses

import jax
import numpy as np
from flax import nnx

from arlarena_jax.models import QwenForCausalLM, make_mesh, preset, shard_model
from arlarena_jax.train.config import OptimConfig
from arlarena_jax.train.optim import make_optimizer
from arlarena_jax.train.sft import SFTBatch, make_sft_step


def main(data: int, fsdp: int, tensor: int) -> None:
    config = dataclasses.replace(preset("tiny"), num_hidden_layers=2)
    mesh = make_mesh(data, fsdp, tensor)
    model = shard_model(QwenForCausalLM(config, rngs=nnx.Rngs(0)), mesh)
    graphdef, params = nnx.split(model)
    optimizer = make_optimizer(OptimConfig(lr=1e-3), 10)
    step = make_sft_step(graphdef, optimizer, mesh=mesh, chunk_size=64)
    ids = np.ones((16, 128), np.int32)
    jax.block_until_ready(step(params, optimizer.init(params), SFTBatch(ids, ids, ids)))
    print("done", flush=True)


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]))
