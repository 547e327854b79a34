"""The RL update step over a device mesh, as one process or as one of several.

``run(mesh)`` builds a tiny model (fixed seed), shards it over ``mesh``, makes a fixed batch of
turn rows, recomputes the old log-probs, prepares GRPO advantages and runs two mini-batch AdamW
steps through the trainer's path (``put_rows`` placement, ``mesh``-jitted functions); it returns
the updated parameters and the metrics as NumPy on every process.

Started as ``python tests/helpers/distributed_update.py OUT.npz`` with ``ARLARENA_COORDINATOR``,
``ARLARENA_NUM_PROCESSES`` and ``ARLARENA_PROCESS_ID`` set, it joins the multi-process runtime
(2 CPU devices per process), runs on a (data=2, fsdp=2) mesh over all processes' devices and
process 0 writes the result to OUT.npz (``test_distributed_update.py``).
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # 2 devices; the suite's other XLA flags (-O0) stay
    from tests.helpers.xla_flags import set_device_count

    set_device_count(2)

import jax
import numpy as np
import optax
from flax import nnx

from arlarena_jax.models import QwenConfig, QwenForCausalLM, make_mesh, shard_model
from arlarena_jax.models.sharding import put_rows, to_host
from arlarena_jax.objectives import advantage, ratio
from arlarena_jax.objectives import aggregate as agg
from arlarena_jax.objectives.compose import chain
from arlarena_jax.train.update import (
    make_log_prob_fn,
    make_prepare_fn,
    make_update_step,
    run_update,
)
from tests.helpers.turn_rows import random_turn_rows

P, T, ROWS, MINI, MICRO = 8, 6, 16, 8, 4
CONFIG = QwenConfig(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=64,
)


def rows(seed: int = 0):
    """ROWS turn rows (host arrays): groups of four one-turn trajectories, returns 1,0,1,0."""
    return random_turn_rows(
        np.random.default_rng(seed),
        ROWS,
        vocab=64,
        group_size=4,
        prompt_length=P,
        response_length=T,
    )


def run(mesh) -> dict[str, np.ndarray]:
    """Updated parameters (``param/<path>``) and metrics (``metric/<key>``) as NumPy."""
    model = shard_model(QwenForCausalLM(CONFIG, rngs=nnx.Rngs(0)), mesh)
    graphdef, params = nnx.split(model)
    objective = chain(advantage.grpo(), ratio.vanilla(), agg.seq_mean_token_mean())
    optimizer = optax.adamw(1e-2)
    sequences, batch = rows()
    log_probs = make_log_prob_fn(graphdef, prompt_length=P, micro_batch_size=MICRO, mesh=mesh)
    old_lp, _ = to_host(log_probs(params, put_rows(sequences, mesh)))
    batch = batch._replace(old_log_probs=old_lp * np.asarray(batch.response_mask))
    batch, _, _ = make_prepare_fn(objective)(batch, objective.init_state())
    update = make_update_step(
        graphdef,
        objective,
        optimizer,
        prompt_length=P,
        mini_batch_size=MINI,
        micro_batch_size=MICRO,
        mesh=mesh,
    )
    place = lambda tree: put_rows(tree, mesh)  # noqa: E731
    params, _, history = run_update(
        update, params, optimizer.init(params), sequences, to_host(batch), place=place
    )
    out = {f"metric/{k}": np.stack([to_host(h[k]) for h in history]) for k in history[0]}
    flat = jax.tree_util.tree_flatten_with_path(to_host(params))[0]
    out |= {"param/" + jax.tree_util.keystr(path): leaf for path, leaf in flat}
    return out


def main(out_path: str) -> None:
    from arlarena_jax.train.distributed import initialize_if_distributed

    if not initialize_if_distributed():
        raise SystemExit("set ARLARENA_COORDINATOR, ARLARENA_NUM_PROCESSES, ARLARENA_PROCESS_ID")
    mesh = make_mesh(data=2, fsdp=2, devices=jax.devices())
    result = run(mesh)
    if jax.process_index() == 0:
        np.savez(out_path, **result)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
