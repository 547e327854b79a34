"""The sampler's mesh and its weight refresh (``sampler/placement.py``) in one process.

With one process the sampler runs on the training mesh and the refresh hands the trainer's arrays
through untouched. A process-local sampler mesh is simulated here by naming a sub-set of the 8
host devices: the engine runs on 2 of them while the trainer's parameters live on a (data=2,
fsdp=2, tensor=2) mesh over all 8. After a refresh the engine holds the trainer's parameters
exactly (a gather and slices: no arithmetic), in fresh buffers, and greedy decoding through the
continuous-batching driver gives the same tokens as the engine on the whole training mesh and
the unsharded engine. Log-probs agree to 1e-5: the same float32 program partitioned
differently, whose only difference is the order of the partial sums over ``tensor`` (as
``test_sampler_engine``'s sharded-versus-unsharded check).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding

from arlarena_jax.models.qwen import QwenForCausalLM
from arlarena_jax.models.sharding import make_mesh, shard_model
from arlarena_jax.sampler import GREEDY, Engine, EngineConfig, Request, generate
from arlarena_jax.sampler.engine import param_layout
from arlarena_jax.sampler.placement import local_mesh, replica_model, replica_params, sampler_mesh
from tests.helpers.distributed_sampler import CONFIG  # the tiny decoder both tests use

pytestmark = pytest.mark.skipif(
    jax.device_count() < 8, reason="needs XLA_FLAGS=--xla_force_host_platform_device_count=8"
)

ENGINE = EngineConfig(
    max_concurrent_decodes=4,
    max_prefill_length=16,
    max_new_tokens=12,
    steps_per_call=2,
    min_prefill_bucket=8,
)
# Seven requests (one of two samples) for four slots: slots are refilled as samples end.
REQUESTS = [
    Request([5, 17, 3], max_new_tokens=12),
    Request(list(range(40, 53)), max_new_tokens=5),
    Request([200, 1, 77, 31, 4, 4, 90], n=2, max_new_tokens=9),
    Request(list(range(100, 116)), max_new_tokens=3),
    Request([7, 7, 7, 7], max_new_tokens=12),
    Request([250, 3], max_new_tokens=7),
    Request(list(range(60, 71)), max_new_tokens=10),
]


def train_mesh():
    return make_mesh(2, 2, 2)


def model(seed: int, mesh=None) -> QwenForCausalLM:
    m = QwenForCausalLM(CONFIG, rngs=nnx.Rngs(seed))
    return m if mesh is None else shard_model(m, mesh)


def buffers(x: jax.Array) -> set[int]:
    """The addresses of ``x``'s device buffers on this process."""
    return {s.data.unsafe_buffer_pointer() for s in x.addressable_shards}


def decoded(engine: Engine) -> tuple[list[list[int]], list[list[float]]]:
    """Every sample's greedy tokens and log-probs through the continuous-batching driver."""
    samples = [s for group in generate(engine, REQUESTS, sampling=GREEDY) for s in group]
    return [s.token_ids for s in samples], [s.log_probs for s in samples]


def test_one_process_samples_on_the_training_mesh_and_refreshes_without_copies():
    mesh = train_mesh()
    trained = model(0, mesh)
    assert sampler_mesh(mesh, trained, ENGINE) is mesh
    assert sampler_mesh(None, model(0), ENGINE) is None
    engine = Engine(replica_model(trained, mesh, mesh), ENGINE, mesh=mesh)
    params = nnx.state(trained)
    passed = replica_params(params, mesh, engine.param_layout)
    for a, b in zip(jax.tree.leaves(passed), jax.tree.leaves(params), strict=True):
        assert a is b  # today's path: update_params casts and places
    copied = replica_params(params, mesh, engine.param_layout, copy=True)
    for a, b in zip(jax.tree.leaves(copied), jax.tree.leaves(params), strict=True):
        assert a.sharding == b.sharding and np.array_equal(a, b)
        assert not buffers(a) & buffers(b)


def test_local_mesh_keeps_the_training_tensor_split_where_it_divides():
    m, devices = model(0), jax.devices()
    assert dict(local_mesh(devices[:2], m, ENGINE, tensor=2).shape) == {
        "data": 1,
        "fsdp": 1,
        "tensor": 2,
    }
    assert local_mesh(devices, m, ENGINE, tensor=2).devices.shape == (4, 1, 2)
    # 4 does not divide the 2 KV heads: tensor 2, the rest data
    assert local_mesh(devices, m, ENGINE, tensor=4).devices.shape == (4, 1, 2)
    assert local_mesh(devices[:4], m, ENGINE, tensor=3).devices.shape == (4, 1, 1)
    assert local_mesh(devices[:4], m, ENGINE).devices.tolist() == [[[d]] for d in devices[:4]]
    with pytest.raises(ValueError, match=r"no sampler mesh over this process's 8 devices.*kv"):
        local_mesh(devices, m, ENGINE, tensor=1)  # 4 slots over 8 data devices


def test_refresh_onto_a_sub_mesh_holds_the_trainer_params_and_decodes_the_same():
    mesh = train_mesh()
    local = sampler_mesh(mesh, model(0), ENGINE, devices=jax.devices()[6:])
    assert local.devices.shape == (1, 1, 2)
    engine = Engine(replica_model(model(0, mesh), mesh, local), ENGINE, mesh=local)
    trained = nnx.state(model(1, mesh))  # new weights on the training mesh
    engine.update_params(replica_params(trained, mesh, engine.param_layout))
    for got, want in zip(jax.tree.leaves(engine.params), jax.tree.leaves(trained), strict=True):
        assert got.sharding.device_set == set(jax.devices()[6:])
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        assert not buffers(got) & buffers(want)
    tokens, log_probs = decoded(engine)
    for reference in (Engine(model(1, mesh), ENGINE, mesh=mesh), Engine(model(1), ENGINE)):
        want_tokens, want_lp = decoded(reference)
        assert tokens == want_tokens
        for a, b in zip(log_probs, want_lp, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5)
    assert [len(t) for t in tokens] == [12, 5, 9, 9, 3, 12, 7, 10]


def test_refresh_casts_to_the_sampler_dtype_chunk_by_chunk():
    """bfloat16 targets, gathered in chunks of at most 20 kB (the 32 kB embedding alone)."""
    mesh = train_mesh()
    params = nnx.state(model(1, mesh))
    local = make_mesh(1, 1, 2, devices=jax.devices()[:2])
    shardings = jax.tree.map(lambda x: NamedSharding(local, x.sharding.spec), params)
    target = param_layout(jax.tree.map(lambda x: x.astype(jnp.bfloat16), params), shardings)
    placed = replica_params(params, mesh, target, chunk_bytes=20_000)
    for got, want in zip(jax.tree.leaves(placed), jax.tree.leaves(params), strict=True):
        assert got.dtype == jnp.bfloat16 and got.sharding.mesh is local
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want.astype(jnp.bfloat16)))
