"""GGUF files (llama.cpp's format) into Hugging Face model directories.

:func:`import_gguf` reads a GGUF of a registered family (``llama``, ``qwen2``, ``qwen3``:
:attr:`~arlarena_jax.models.families.ModelFamily.gguf_architecture`) and writes ``config.json``,
``model.safetensors`` (every tensor float32: quantized ones are dequantized by ``gguf``'s own
``gguf.quants.dequantize``), ``generation_config.json`` and the tokenizer built from the file's
vocabulary, merges and chat template (:mod:`arlarena_jax.tokenization.gguf_tokenizer`).

Two differences from a Hugging Face checkpoint are undone here:

* tensor names: llama.cpp's ``blk.N.attn_q.weight`` is ``model.layers.N.self_attn.q_proj.weight``;
* llama.cpp's converter permutes the rows of the query and key projections of ``llama`` models
  (each head's two rotary halves interleaved, for its own rotary kernel), not of ``qwen2`` or
  ``qwen3`` (the family's ``gguf_permuted_qk``); :func:`unpermute_rows` restores Hugging Face's
  order.

An architecture, tensor type or tensor this decoder cannot use is one ``ValueError`` line naming it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from arlarena_jax.models.families import (
    GGUF_GLOBAL_TENSORS,
    GGUF_LAYER_TENSORS,
    ModelFamily,
    family_of_gguf,
)

# Tensor types ``gguf.quants.dequantize`` turns into float32 (the K-quants included).
SUPPORTED_TYPES = (
    "F32",
    "F16",
    "BF16",
    "Q8_0",
    "Q5_0",
    "Q5_1",
    "Q4_0",
    "Q4_1",
    "Q2_K",
    "Q3_K",
    "Q4_K",
    "Q5_K",
    "Q6_K",
)
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


def _reader(path: str | Path):
    from gguf import GGUFReader

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    try:
        return GGUFReader(path)
    except (ValueError, KeyError, IndexError) as error:
        raise ValueError(f"{path} is not a readable GGUF file: {error}") from None


def metadata(reader) -> dict[str, Any]:
    """Every metadata key → its value (strings decoded, arrays as lists)."""
    return {key: field.contents() for key, field in reader.fields.items()}


def architecture(meta: dict[str, Any]) -> str:
    """``general.architecture``, if a registered family declares it
    (:attr:`~arlarena_jax.models.families.ModelFamily.gguf_architecture`)."""
    return family_of_gguf(meta.get("general.architecture")).gguf_architecture


def hf_name(gguf_name: str, declared: ModelFamily | None = None) -> str:
    """The Hugging Face name of a llama.cpp tensor name (by ``declared``'s GGUF tensor map, the
    shared one without); an unknown one is an error."""
    layers = GGUF_LAYER_TENSORS if declared is None else declared.gguf_layer_tensors
    globals_ = GGUF_GLOBAL_TENSORS if declared is None else declared.gguf_global_tensors
    if gguf_name in globals_:
        return globals_[gguf_name]
    match = _LAYER_NAME.fullmatch(gguf_name)
    if match is None or match[2] not in layers:
        raise ValueError(f"GGUF tensor {gguf_name!r} has no counterpart in this decoder")
    return f"model.layers.{match[1]}.{layers[match[2]]}.{match[3]}"


def unpermute_rows(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's ``permute`` of a llama query/key weight or bias (rows = output features).

    llama.cpp's converter reshapes the rows as ``(n_head, 2, head_dim // 2)`` and swaps the last two
    axes; this reshapes them as ``(n_head, head_dim // 2, 2)`` and swaps back."""
    rows = weight.shape[0]
    half = rows // n_head // 2
    return weight.reshape(n_head, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def dequantized(tensor) -> np.ndarray:
    """A reader tensor as float32 in Hugging Face's layout (``[out, in]`` for a matrix)."""
    from gguf.quants import dequantize

    kind = tensor.tensor_type.name
    if kind not in SUPPORTED_TYPES:
        raise ValueError(
            f"GGUF tensor {tensor.name!r} has type {kind}, which the importer does not read "
            f"(supported: {', '.join(SUPPORTED_TYPES)})"
        )
    values = dequantize(tensor.data, tensor.tensor_type)
    shape = tuple(int(n) for n in reversed(tensor.shape))  # GGUF lists the fastest axis first
    return np.ascontiguousarray(values.reshape(shape), dtype=np.float32)


def read_tensors(reader, arch: str, config: dict[str, Any]) -> dict[str, np.ndarray]:
    """Every tensor under its Hugging Face name, dequantized, the q/k rows restored where the
    family of GGUF architecture ``arch`` says llama.cpp permuted them (llama)."""
    declared = family_of_gguf(arch)
    tensors = {}
    for tensor in reader.tensors:
        if tensor.name == "rope_freqs.weight":
            raise ValueError(
                "GGUF tensor 'rope_freqs.weight' (per-frequency rope factors, e.g. Llama 3.1's "
                "rope scaling) is not supported"
            )
        name = hf_name(tensor.name, declared)
        values = dequantized(tensor)
        if declared.gguf_permuted_qk and ".attn_q." in tensor.name:
            values = unpermute_rows(values, config["num_attention_heads"])
        elif declared.gguf_permuted_qk and ".attn_k." in tensor.name:
            values = unpermute_rows(values, config["num_key_value_heads"])
        tensors[name] = values
    return tensors


def _rope_scaling(meta: dict[str, Any], arch: str) -> dict[str, Any] | None:
    """``rope_scaling`` from ``{arch}.rope.scaling.*`` (linear or yarn), None when absent."""
    kind = meta.get(f"{arch}.rope.scaling.type", "none")
    if kind == "none":
        return None
    if kind not in ("linear", "yarn"):
        raise ValueError(f"GGUF {arch}.rope.scaling.type {kind!r} is not supported (linear, yarn)")
    scaling: dict[str, Any] = {
        "rope_type": kind,
        "factor": _f32(meta[f"{arch}.rope.scaling.factor"]),
    }
    original = meta.get(f"{arch}.rope.scaling.original_context_length")
    if kind == "yarn" and original is not None:
        scaling["original_max_position_embeddings"] = int(original)
    return scaling


def _f32(value: Any) -> float:
    """A float32 metadata value as the shortest decimal that reads back to it (1e-05, not
    9.999999747378752e-06)."""
    return float(str(np.float32(value)))


def hf_config(meta: dict[str, Any], tensor_names: set[str]) -> dict[str, Any]:
    """The ``config.json`` dict of the model a GGUF's metadata and tensor names describe."""
    declared = family_of_gguf(meta.get("general.architecture"))
    arch = declared.gguf_architecture

    def key(name: str, default: Any = None) -> Any:
        value = meta.get(f"{arch}.{name}", default)
        if value is None:
            raise ValueError(f"GGUF metadata has no {arch}.{name}")
        return value

    hidden, heads = int(key("embedding_length")), int(key("attention.head_count"))
    head_dim = meta.get(f"{arch}.attention.key_length") or meta.get(f"{arch}.rope.dimension_count")
    vocab = meta.get(f"{arch}.vocab_size") or len(meta.get("tokenizer.ggml.tokens") or ())
    config = {
        "model_type": declared.name,
        "vocab_size": int(vocab or key("vocab_size")),
        "hidden_size": hidden,
        "intermediate_size": int(key("feed_forward_length")),
        "num_hidden_layers": int(key("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(key("attention.head_count_kv", heads)),
        "head_dim": int(head_dim or hidden // heads),
        "rms_norm_eps": _f32(key("attention.layer_norm_rms_epsilon")),
        "rope_theta": _f32(key("rope.freq_base", 10000.0)),
        "rope_scaling": _rope_scaling(meta, arch),
        "max_position_embeddings": int(key("context_length")),
        "tie_word_embeddings": "output.weight" not in tensor_names,
    }
    if declared.attention_bias_key:  # qwen2's q/k/v bias is implied by its model type
        # the biases attention_bias sets (the family fixes the others)
        free = (("attn_q", declared.qkv_bias), ("attn_output", declared.o_bias))
        biases = [name for name, fixed in free if fixed is None]
        config["attention_bias"] = any(f"blk.0.{n}.bias" in tensor_names for n in biases)
    if declared.mlp_bias_key:
        config["mlp_bias"] = "blk.0.ffn_gate.bias" in tensor_names
    return config


def import_gguf(path: str | Path, out: str | Path) -> Path:
    """Write the Hugging Face directory ``out`` of the GGUF at ``path`` (see module doc)."""
    from safetensors.numpy import save_file

    from arlarena_jax.models.config import QwenConfig
    from arlarena_jax.models.hf_io import SAFETENSORS_SINGLE, save_generation_config
    from arlarena_jax.tokenization.gguf_tokenizer import gguf_tokenizer, special_ids

    reader = _reader(path)
    meta = metadata(reader)
    raw = hf_config(meta, {t.name for t in reader.tensors})
    config = QwenConfig.from_hf_dict(raw)  # checks the shape before any tensor is read
    tokenizer = gguf_tokenizer(meta)
    tensors = read_tensors(reader, architecture(meta), raw)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ids = special_ids(meta)
    hf = config.to_hf_dict() | {"torch_dtype": "float32"}
    hf |= {k: ids[k] for k in ("bos_token_id", "eos_token_id") if ids[k] is not None}
    (out / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
    save_file(tensors, out / SAFETENSORS_SINGLE, metadata={"format": "pt"})
    tokenizer.save_pretrained(out)
    save_generation_config(
        out,
        eos_token_ids=ids["stop_ids"],
        pad_token_id=ids["pad_token_id"],
        bos_token_id=ids["bos_token_id"],
        temperature=0.0,
    )
    return out
