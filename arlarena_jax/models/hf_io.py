"""Hugging Face checkpoints in and out: ``config.json`` + safetensors (single or sharded).

Tensor names are Hugging Face's (``model.layers.0.mlp.gate_proj.weight``); linear weights are
stored ``[out, in]`` there and ``[in, out]`` (``kernel``) here. A checkpoint that lacks a tensor,
has one of the wrong shape, or is of another architecture fails with one line naming it.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from arlarena_jax.models.config import QwenConfig
from arlarena_jax.models.qwen import QwenForCausalLM
from arlarena_jax.models.sharding import check_divisible, parameter_spec

SAFETENSORS_INDEX = "model.safetensors.index.json"
SAFETENSORS_SINGLE = "model.safetensors"


def tensor_layout(config: QwenConfig) -> Iterator[tuple[str, tuple[str | int, ...], bool]]:
    """(HF tensor name, attribute path in :class:`QwenForCausalLM`, transposed) for each tensor,
    as the config's family declares them
    (:meth:`~arlarena_jax.models.families.ModelFamily.tensors`)."""
    for tensor in config.family.tensors(config):
        yield tensor.name, tensor.path, tensor.transposed


def _variable(model: QwenForCausalLM, path: tuple[str | int, ...]) -> nnx.Variable:
    node = model
    for key in path:
        node = node[key] if isinstance(key, int) else getattr(node, key)
    return node


def unexpected_tensors(
    model: QwenForCausalLM, names: Iterable[str], ignore: Sequence[str] = ()
) -> list[str]:
    """The tensor names the model has no parameter for, except those matching an ``ignore``
    shell pattern (``fnmatch``) or one ``transformers`` skips too: rotary-embedding buffers of
    older checkpoints and the output matrix of a model with tied embeddings. Sorted."""
    known = {name for name, _, _ in tensor_layout(model.config)}
    ignore = (*ignore, "*.rotary_emb.inv_freq")
    if model.config.tie_word_embeddings:
        ignore = (*ignore, "lm_head.weight")
    return sorted(
        n for n in names if n not in known and not any(fnmatch.fnmatch(n, p) for p in ignore)
    )


def load_state_dict(
    model: QwenForCausalLM,
    tensors: Mapping[str, np.ndarray],
    mesh: Mesh | None = None,
    *,
    ignore_unexpected: Sequence[str] = (),
) -> None:
    """Copy Hugging Face tensors into ``model`` in place, checking every name and shape.

    A tensor the model has no parameter for (attention biases for a model without them, a
    different architecture) is an error unless it matches an ``ignore_unexpected`` pattern, so a
    checkpoint never loads partly. With a ``mesh``, each tensor goes straight to its sharding from
    the partition rules, so no device ever holds a whole parameter it should only hold a shard of.
    """
    extra = unexpected_tensors(model, tensors, ignore_unexpected)
    if extra:
        shown = ", ".join(repr(n) for n in extra[:3]) + (" ..." if len(extra) > 3 else "")
        raise ValueError(
            f"checkpoint has {len(extra)} tensor(s) the model does not use: {shown} "
            "(pass ignore_unexpected=[pattern] to load it anyway)"
        )
    for name, path, transposed in tensor_layout(model.config):
        if name not in tensors:
            raise ValueError(f"checkpoint is missing tensor {name!r}")
        value = np.asarray(tensors[name])
        if transposed:
            value = value.T
        variable = _variable(model, path)
        expected = tuple(variable.get_value().shape)
        if value.shape != expected:
            hf_shape = value.shape[::-1] if transposed else value.shape
            want = expected[::-1] if transposed else expected
            raise ValueError(f"tensor {name!r} has shape {hf_shape}, expected {want}")
        value = value.astype(variable.get_value().dtype)
        if mesh is None:
            variable.set_value(jnp.asarray(value))
        else:
            attribute = ".".join(str(k) for k in path)
            check_divisible(attribute, value.shape, parameter_spec(attribute), mesh)
            placed = jax.device_put(value, NamedSharding(mesh, parameter_spec(attribute)))
            variable.set_value(placed)


def state_dict(model: QwenForCausalLM) -> dict[str, np.ndarray]:
    """The model's parameters under Hugging Face names and layouts (float32 NumPy)."""
    out = {}
    for name, path, transposed in tensor_layout(model.config):
        value = np.asarray(_variable(model, path).get_value(), np.float32)
        out[name] = np.ascontiguousarray(value.T if transposed else value)
    return out


# safetensors dtype names → NumPy dtypes; BF16 through ml_dtypes (jnp.bfloat16), which
# ``safetensors.numpy`` cannot represent ("data type 'bfloat16' not understood").
SAFETENSORS_DTYPES = {
    "BOOL": np.bool_,
    "U8": np.uint8,
    "I8": np.int8,
    "I16": np.int16,
    "U16": np.uint16,
    "I32": np.int32,
    "U32": np.uint32,
    "I64": np.int64,
    "U64": np.uint64,
    "F16": np.float16,
    "BF16": jnp.bfloat16,
    "F32": np.float32,
    "F64": np.float64,
}


def load_safetensors_file(path: Path) -> dict[str, np.ndarray]:
    """The tensors of one safetensors file as (memory-mapped, read-only) NumPy arrays.

    Format: an 8-byte little-endian header length n, n bytes of JSON ``{name: {dtype, shape,
    data_offsets: [begin, end]}}`` (offsets from the end of the header), then the data.
    """
    data = np.memmap(path, dtype=np.uint8, mode="r")
    header, start = _safetensors_header(path, data)
    tensors = {}
    for name, info in header.items():
        if info["dtype"] not in SAFETENSORS_DTYPES:
            raise ValueError(f"tensor {name!r} in {path} has unsupported dtype {info['dtype']}")
        dtype = np.dtype(SAFETENSORS_DTYPES[info["dtype"]])
        begin, end = info["data_offsets"]
        size = math.prod(info["shape"]) * dtype.itemsize
        if end - begin != size or start + end > data.size:
            raise ValueError(
                f"tensor {name!r} in {path} is truncated or corrupt: it needs bytes "
                f"{start + begin}..{start + begin + size} of a {data.size}-byte file"
            )
        tensors[name] = data[start + begin : start + end].view(dtype).reshape(info["shape"])
    return tensors


def _safetensors_header(path: Path, data: np.ndarray) -> tuple[dict[str, Any], int]:
    """The JSON header (without ``__metadata__``) and where the data begin; a file too short or
    with an unreadable header is one ValueError naming it."""
    n = int(data[:8].view("<u8")[0]) if data.size >= 8 else -1
    if n < 0 or 8 + n > data.size:
        raise ValueError(f"{path} is not a safetensors file (truncated header)")
    try:
        header = json.loads(bytes(data[8 : 8 + n]))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{path} has an unreadable safetensors header") from None
    header.pop("__metadata__", None)
    return header, 8 + n


def read_safetensors(directory: Path) -> dict[str, np.ndarray]:
    """All tensors of a single-file or sharded (with index) safetensors checkpoint."""
    index = directory / SAFETENSORS_INDEX
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (directory / SAFETENSORS_SINGLE).exists():
        shards = [SAFETENSORS_SINGLE]
    else:
        raise FileNotFoundError(f"no {SAFETENSORS_SINGLE} or {SAFETENSORS_INDEX} in {directory}")
    tensors: dict[str, np.ndarray] = {}
    for shard in shards:
        tensors.update(load_safetensors_file(directory / shard))
    return tensors


def load_pretrained(
    directory: str | Path,
    *,
    dtype=jnp.float32,
    param_dtype=jnp.float32,
    mesh: Mesh | None = None,
    remat: str | None = None,
    ignore_unexpected: Sequence[str] = (),
    num_layers: int | None = None,
) -> QwenForCausalLM:
    """Build the model described by ``directory/config.json`` and load its safetensors.

    The model is built abstractly (``nnx.eval_shape``: no random weights are ever allocated),
    then every tensor is placed, on ``mesh`` with its partition-rule sharding if one is given.
    Tensors the model does not use are an error unless they match an ``ignore_unexpected``
    pattern (:func:`load_state_dict`). ``num_layers`` keeps the first decoder layers only
    (:func:`first_layers`).
    """
    directory = Path(directory)
    config = QwenConfig.from_json(directory)
    tensors = read_safetensors(directory)
    if num_layers is not None:
        config, tensors = first_layers(config, tensors, num_layers)
    model = nnx.eval_shape(
        lambda: QwenForCausalLM(
            config, rngs=nnx.Rngs(0), dtype=dtype, param_dtype=param_dtype, remat=remat
        )
    )
    load_state_dict(model, tensors, mesh, ignore_unexpected=ignore_unexpected)
    return model


def first_layers(
    config: QwenConfig, tensors: dict[str, np.ndarray], num_layers: int
) -> tuple[QwenConfig, dict[str, np.ndarray]]:
    """The config and tensors of the checkpoint's first ``num_layers`` decoder layers (with its
    embeddings, final norm and head); more layers than it has is one ValueError."""
    if not 1 <= num_layers <= config.num_hidden_layers:
        raise ValueError(
            f"cannot keep {num_layers} layers of a model with {config.num_hidden_layers}"
        )
    dropped = {f"model.layers.{i}." for i in range(num_layers, config.num_hidden_layers)}
    kept = {
        name: value
        for name, value in tensors.items()
        if not any(name.startswith(prefix) for prefix in dropped)
    }
    return dataclasses.replace(config, num_hidden_layers=num_layers), kept


def save_pretrained(model: QwenForCausalLM, directory: str | Path) -> Path:
    """Write ``config.json`` and ``model.safetensors`` that ``transformers`` loads as is."""
    from safetensors.numpy import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = model.config.to_hf_dict() | {"torch_dtype": "float32"}
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    save_file(state_dict(model), directory / SAFETENSORS_SINGLE, metadata={"format": "pt"})
    return directory


GENERATION_CONFIG = "generation_config.json"


def save_generation_config(
    directory: str | Path,
    *,
    eos_token_ids: tuple[int, ...],
    pad_token_id: int | None,
    bos_token_id: int | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    max_new_tokens: int | None = None,
) -> Path:
    """Write ``generation_config.json`` as a Qwen release ships it: the ids that end a reply
    (``generate`` stops at any of them) and the sampling defaults. ``temperature == 0`` means
    greedy (``do_sample: false``, no sampling keys); ``top_k == 0`` leaves top-k off, in
    ``transformers`` as here."""
    if not eos_token_ids:
        raise ValueError("a generation config needs at least one eos token id")
    config: dict[str, object] = {"eos_token_id": [int(i) for i in eos_token_ids]}
    if pad_token_id is not None:
        config["pad_token_id"] = int(pad_token_id)
    if bos_token_id is not None:
        config["bos_token_id"] = int(bos_token_id)
    config["do_sample"] = temperature > 0
    if temperature > 0:
        config |= {"temperature": float(temperature), "top_p": float(top_p), "top_k": int(top_k)}
    if max_new_tokens is not None:
        config["max_new_tokens"] = int(max_new_tokens)
    path = Path(directory) / GENERATION_CONFIG
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path
