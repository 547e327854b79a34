"""Where the sampler runs, and how its weights follow the trainer's.

One process: the engine runs on the training mesh and takes the trainer's parameters as they are
(:meth:`~arlarena_jax.sampler.engine.Engine.update_params` casts and places them; nothing here
copies unless asked to).

Several processes (one per host of a pod): each process decodes only its own prompts, so
continuous batching decides inserts and evictions differently on each, and one SPMD decode
program over the global mesh would deadlock. Each process's engine runs instead on a mesh over
its own devices (:func:`sampler_mesh`) with a whole replica of the weights. After every update,
all processes call :func:`replica_params` at the same point of the main thread (it is a
collective): the parameters are all-gathered inside the training mesh (a jitted copy replicated
over it, :data:`CHUNK_BYTES` of whole arrays per program, one program in flight at a time), and
each process assembles its sampler arrays from the whole copies its own devices then hold
(``jax.make_array_from_single_device_arrays``; slices of them where the sampler splits over
``tensor``). No array is ever ``device_put`` from one mesh onto another
(marin-community/marin#3947: that fails on multi-host v5p).

The process-local mesh keeps the training mesh's ``tensor`` split where it can: tensor is the
largest divisor of gcd(training tensor, local devices) for which the parameters and the KV cache
divide (KV heads, attention heads, MLP width, vocabulary), and the other local devices are
``data``: decode slots are split over them and the weights replicated, so a decode step reads
its weights where it runs (``fsdp`` would all-gather every weight at every step). Slots
(``sampler.max_concurrent_decodes``) must be a multiple of that data size.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from arlarena_jax.models.sharding import make_mesh, parameter_shardings
from arlarena_jax.sampler.engine import EngineConfig, check_cache_shardable, param_layout

CHUNK_BYTES = 256 * 2**20  # gathered whole arrays per refresh program (each device holds them)


def sampler_mesh(
    train_mesh: Mesh | None,
    model: nnx.Module,
    config: EngineConfig,
    devices: Sequence[jax.Device] | None = None,
) -> Mesh | None:
    """The mesh the sampler engine of ``model`` runs on: the training mesh itself with one
    process; with several, a mesh over this process's devices (:func:`local_mesh`). ``devices``
    (tests): a mesh over these instead, whatever the process count."""
    if devices is None:
        if jax.process_count() == 1:
            return train_mesh
        devices = jax.local_devices()
    tensor = 1 if train_mesh is None else train_mesh.shape["tensor"]
    return local_mesh(devices, model, config, tensor)


def local_mesh(
    devices: Sequence[jax.Device], model: nnx.Module, config: EngineConfig, tensor: int = 1
) -> Mesh:
    """A ``(data, 1, t)`` mesh over ``devices``: t the largest divisor of gcd(``tensor``,
    devices) that the parameters and the KV cache of ``config``'s slots divide (module doc)."""
    devices = list(devices)
    n = len(devices)
    top = math.gcd(tensor, n)
    error: ValueError | None = None
    for t in (d for d in range(top, 0, -1) if top % d == 0):
        mesh = make_mesh(data=n // t, fsdp=1, tensor=t, devices=devices)
        try:
            parameter_shardings(model, mesh)
            check_cache_shardable(model.config, config, mesh)
        except ValueError as exc:
            error = exc
            continue
        return mesh
    raise ValueError(f"no sampler mesh over this process's {n} devices fits: {error}")


def replica_params(
    params: Any,
    train_mesh: Mesh | None,
    target: Any,
    *,
    copy: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
):
    """The trainer's ``params`` (on ``train_mesh``) as the sampler holds them: ``target``'s
    dtypes and shardings (``Engine.param_layout``, or :func:`~.engine.param_layout`).

    A leaf already on the target's devices (the sampler on the training mesh) is returned as it
    is, for ``Engine.update_params`` to cast and place; ``copy``: as a fresh copy, for a holder
    that outlives an update donating ``params`` (asynchronous RL's producer). Leaves on other
    devices (a process-local sampler mesh) are all-gathered over ``train_mesh`` (a collective:
    every process calls this at the same point) in chunks of at most ``chunk_bytes`` (whole
    arrays, cast to the target's dtypes: the extra memory on each device; a larger leaf is a
    chunk of its own) and assembled on the target's devices from the whole copies there:
    always fresh buffers.
    """
    leaves, treedef = jax.tree.flatten(params)
    targets = jax.tree.leaves(target)
    if len(targets) != len(leaves):
        raise ValueError(f"replica_params: {len(leaves)} parameters for {len(targets)} targets")
    moving = [i for i, (x, want) in enumerate(zip(leaves, targets, strict=True)) if _moves(x, want)]
    kept = set(range(len(leaves))) - set(moving)
    placed = [jnp.copy(x) if copy and i in kept else x for i, x in enumerate(leaves)]
    for chunk in _chunks(moving, targets, chunk_bytes):
        dtypes = tuple(jnp.dtype(targets[i].dtype) for i in chunk)
        wholes = _whole_copies(train_mesh)([leaves[i] for i in chunk], dtypes)
        # one gather in flight at a time: bounded memory, and XLA:CPU's in-process collectives
        # deadlock when several programs' all-gathers overlap
        jax.block_until_ready(wholes)
        for i, whole in zip(chunk, wholes, strict=True):
            placed[i] = _assemble(whole, targets[i].sharding)
    return jax.tree.unflatten(treedef, placed)


def replica_model(model: nnx.Module, train_mesh: Mesh | None, mesh: Mesh | None) -> nnx.Module:
    """``model`` itself when the sampler's ``mesh`` is the training mesh; else a new module of
    the same graph holding a replica of its parameters on ``mesh`` (:func:`replica_params`, a
    collective)."""
    if mesh is train_mesh or mesh is None:
        return model
    graphdef, params = nnx.split(model)
    target = param_layout(params, parameter_shardings(model, mesh))
    return nnx.merge(graphdef, replica_params(params, train_mesh, target))


def _moves(leaf: jax.Array, want: Any) -> bool:
    """Whether ``leaf`` lives on other devices than ``want``'s sharding names."""
    return leaf.sharding.device_set != want.sharding.device_set


def _chunks(indices: list[int], targets: list, limit: int) -> list[list[int]]:
    """``indices`` in order, cut into runs whose targets hold at most ``limit`` bytes (a larger
    leaf alone)."""
    chunks: list[list[int]] = []
    size = limit
    for i in indices:
        nbytes = math.prod(targets[i].shape) * jnp.dtype(targets[i].dtype).itemsize
        if size + nbytes > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(i)
        size += nbytes
    return chunks


@functools.cache
def _whole_copies(mesh: Mesh | None) -> Callable[[list, tuple], list]:
    """A jitted copy of a list of arrays, each cast to its dtype, whose outputs are replicated
    over ``mesh`` (every device holds each whole array: all-gathers inside the training
    program) and never an input's buffer (the update donates those)."""
    out = None if mesh is None else NamedSharding(mesh, PartitionSpec())

    def copies(xs: list, dtypes: tuple) -> list:
        return [jnp.copy(x.astype(d)) for x, d in zip(xs, dtypes, strict=True)]

    return jax.jit(copies, static_argnums=1, out_shardings=out)


def _assemble(whole: jax.Array, sharding: jax.sharding.Sharding) -> jax.Array:
    """The array of ``sharding`` from ``whole`` (a whole copy on each of its devices): each of
    this process's target devices takes its slice of the copy on that device, or of one copied
    from another of this process's devices when it holds none."""
    copies = {shard.device: shard.data for shard in whole.addressable_shards}
    spare = next(iter(copies.values()))
    pieces = []
    for device, index in sharding.addressable_devices_indices_map(whole.shape).items():
        local = copies.get(device)
        if local is None:
            local = jax.device_put(spare, device)
        pieces.append(local if _is_whole(index, whole.shape) else local[index])
    return jax.make_array_from_single_device_arrays(whole.shape, sharding, pieces)


def _is_whole(index: tuple, shape: tuple[int, ...]) -> bool:
    """Whether ``index`` (slices, one per dimension) covers the whole ``shape``."""
    return all(
        s.indices(n)[:2] == (0, n) and s.step in (None, 1)
        for s, n in zip(index, shape, strict=False)
    )
