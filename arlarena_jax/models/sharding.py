"""One device mesh with axes ``data``, ``fsdp``, ``tensor`` and one table of partition rules.

Parameters: matrices are split over ``fsdp`` along the model width and over ``tensor`` along the
head / MLP / vocabulary dimension (Megatron layout: q/k/v and gate/up column-split, o/down
row-split); norms are replicated. Activations: the batch is split over ``data`` and ``fsdp``.
A rule applies to a parameter only if each named axis size divides the dimension it splits;
otherwise :func:`shard_model` fails with one line naming the parameter.

The embedding lookup reads whole rows: under a mesh set while the program is traced
(``jax.set_mesh``, as the training programs are), :func:`table_for_lookup` gathers the table
over ``fsdp`` first, as FSDP gathers every weight it uses. Without it XLA's partitioner, asked
for the lookup's gradient in the table's layout (width split over ``fsdp``) from a cotangent
whose batch is split over ``data`` × ``fsdp``, gives up and replicates the whole
``[batch, length, width]`` cotangent on every device ("Involuntary full rematerialization"),
on any mesh where both ``data`` and ``fsdp`` exceed 1 (docs/benchmarks.md).
"""

from __future__ import annotations

import re
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXES = ("data", "fsdp", "tensor")
BATCH = PartitionSpec(("data", "fsdp"))  # activations [B, ...]: batch over data × fsdp
LOOKUP = PartitionSpec("tensor", None)  # the embedding table as its lookup reads it: whole rows

# (regex on the dotted parameter path, partition spec); first match wins.
PARAMETER_RULES: tuple[tuple[str, PartitionSpec], ...] = (
    (r"embed_tokens\.embedding$", PartitionSpec("tensor", "fsdp")),
    (r"self_attn\.(q|k|v)_proj\.kernel$", PartitionSpec("fsdp", "tensor")),
    (r"self_attn\.(q|k|v)_proj\.bias$", PartitionSpec("tensor")),
    (r"self_attn\.o_proj\.kernel$", PartitionSpec("tensor", "fsdp")),
    (r"self_attn\.o_proj\.bias$", PartitionSpec()),
    (r"mlp\.(gate|up)_proj\.kernel$", PartitionSpec("fsdp", "tensor")),
    (r"mlp\.down_proj\.kernel$", PartitionSpec("tensor", "fsdp")),
    (r"mlp\.(gate|up)_proj\.bias$", PartitionSpec("tensor")),
    (r"mlp\.down_proj\.bias$", PartitionSpec()),
    (r"lm_head\.kernel$", PartitionSpec("fsdp", "tensor")),
    # LoRA adapters A [in, r], B [r, out]: in and out split as their kernel's, never the rank.
    (r"self_attn\.(q|k|v)_proj\.lora_a$", PartitionSpec("fsdp", None)),
    (r"self_attn\.(q|k|v)_proj\.lora_b$", PartitionSpec(None, "tensor")),
    (r"self_attn\.o_proj\.lora_a$", PartitionSpec("tensor", None)),
    (r"self_attn\.o_proj\.lora_b$", PartitionSpec(None, "fsdp")),
    (r"mlp\.(gate|up)_proj\.lora_a$", PartitionSpec("fsdp", None)),
    (r"mlp\.(gate|up)_proj\.lora_b$", PartitionSpec(None, "tensor")),
    (r"mlp\.down_proj\.lora_a$", PartitionSpec("tensor", None)),
    (r"mlp\.down_proj\.lora_b$", PartitionSpec(None, "fsdp")),
    (r"(norm|layernorm)\.weight$", PartitionSpec()),
)


def table_for_lookup(table: jax.Array) -> jax.Array:
    """The embedding table ``[vocab, width]`` as the lookup reads it: gathered over ``fsdp``
    (:data:`LOOKUP`) when traced under a ``(data, fsdp, tensor)`` mesh set with ``jax.set_mesh``
    (see module doc), else as it is. The values are the same either way."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or tuple(mesh.axis_names) != AXES:
        return table
    return jax.lax.with_sharding_constraint(table, LOOKUP)


def make_mesh(data: int = 1, fsdp: int = 1, tensor: int = 1, devices=None) -> Mesh:
    """A ``(data, fsdp, tensor)`` mesh over ``devices`` (default: all); sizes must multiply up."""
    devices = jax.devices() if devices is None else list(devices)
    if data * fsdp * tensor != len(devices):
        raise ValueError(
            f"mesh data*fsdp*tensor = {data}*{fsdp}*{tensor} = {data * fsdp * tensor} does not "
            f"match the {len(devices)} devices"
        )
    return Mesh(np.asarray(devices).reshape(data, fsdp, tensor), AXES)


def _path_name(path) -> str:
    """Dotted name of a state leaf: ``model.layers.0.mlp.gate_proj.kernel``."""
    parts = []
    for key in path:
        for attr in ("key", "idx", "name"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
    if parts and parts[-1] == "value":  # the array inside an nnx.Variable
        parts.pop()
    return ".".join(parts)


def parameter_spec(name: str) -> PartitionSpec:
    """The partition spec of the parameter at dotted path ``name`` (replicated if no rule)."""
    for pattern, spec in PARAMETER_RULES:
        if re.search(pattern, name):
            return spec
    return PartitionSpec()


def check_divisible(name: str, shape: tuple[int, ...], spec: PartitionSpec, mesh: Mesh) -> None:
    for dim, axis in zip(shape, spec, strict=False):
        if axis is None:
            continue
        size = int(np.prod([mesh.shape[a] for a in (axis if isinstance(axis, tuple) else (axis,))]))
        if dim % size:
            raise ValueError(
                f"parameter {name} of shape {shape}: dimension {dim} is not divisible by mesh "
                f"axis {axis!r} of size {size}"
            )


def parameter_shardings(model: nnx.Module, mesh: Mesh):
    """A pytree of ``NamedSharding`` matching ``nnx.state(model, nnx.Param)``."""
    state = nnx.state(model, nnx.Param)

    def sharding(path, leaf):
        name = _path_name(path)
        spec = parameter_spec(name)
        check_divisible(name, tuple(leaf.shape), spec, mesh)
        return NamedSharding(mesh, spec)

    return jax.tree_util.tree_map_with_path(sharding, state)


def tree_shardings(tree: Any, mesh: Mesh) -> Any:
    """``NamedSharding`` per leaf of a parameter-shaped tree (parameters, optimizer state) by the
    rules on the leaf's dotted path: optimizer moments inherit their parameter's layout; counts
    and hyperparameters (0-d) are replicated."""

    def sharding(path, leaf):
        name = _path_name(path)
        spec = parameter_spec(name) if np.ndim(leaf) else PartitionSpec()
        check_divisible(name, tuple(np.shape(leaf)), spec, mesh)
        return NamedSharding(mesh, spec)

    return jax.tree_util.tree_map_with_path(sharding, tree)


def put_rows(tree: Any, mesh: Mesh) -> Any:
    """Host arrays ``[N, ...]`` as global arrays with rows split over ``data`` × ``fsdp``.

    Every process passes the same full arrays (each keeps only its devices' rows), so this is
    the multi-process-safe way to feed a batch to a function jitted over the mesh. N must be a
    multiple of the data × fsdp size.
    """
    sharding = NamedSharding(mesh, BATCH)

    def put(x):
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(put, tree)


def to_host(tree: Any) -> Any:
    """NumPy copies of (possibly multi-process) arrays: all of each array on every process."""
    if jax.process_count() == 1:
        return jax.tree.map(np.asarray, tree)
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(tree, tiled=True)


def shard_model(model: nnx.Module, mesh: Mesh) -> nnx.Module:
    """Place every parameter of ``model`` on ``mesh`` by :data:`PARAMETER_RULES`, in place."""
    state = nnx.state(model, nnx.Param)
    placed = jax.device_put(state, parameter_shardings(model, mesh))
    nnx.update(model, placed)
    return model
