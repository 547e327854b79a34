"""LoRA: low-rank adapters on the decoder's linear layers (Hu et al., 2021).

A targeted linear ``y = x W (+ b)`` gets two :class:`LoRAParam` matrices, ``lora_a`` ``[in, r]``
(normal, std 1/r: PEFT's default init is Kaiming-uniform; any nonzero A works since B starts at
0) and ``lora_b`` ``[r, out]`` (zeros), and computes ``y = x W (+ b) + (alpha / r) · (x A) B``
(:func:`arlarena_jax.models.qwen.dense`). With B = 0 the model is the base model exactly.

The adapters sit on the ``nnx.Linear`` itself (``…q_proj.lora_a``), so every base parameter
keeps its name, Hugging Face mapping and partition rule. Under LoRA the trainable parameters are
the :class:`LoRAParam` leaves (the adapters, and a critic's value head, PEFT's
``modules_to_save``); the rest is frozen: :func:`split_trainable` separates them, the optimizer
and the checkpoints hold the trainable part only.

The sampler runs merged weights ``W + (alpha / r) A B`` (:func:`merge_params`, once per weight
sync): docs/models.md, "LoRA", has the measurement against the adapter-aware forward.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

Array = jax.Array

# config name → (sub-module of a decoder layer, linear, Hugging Face / PEFT module name)
TARGETS: dict[str, tuple[str, str]] = {
    "q": ("self_attn", "q_proj"),
    "k": ("self_attn", "k_proj"),
    "v": ("self_attn", "v_proj"),
    "o": ("self_attn", "o_proj"),
    "gate": ("mlp", "gate_proj"),
    "up": ("mlp", "up_proj"),
    "down": ("mlp", "down_proj"),
}
PEFT_CONFIG = "adapter_config.json"
PEFT_WEIGHTS = "adapter_model.safetensors"


class LoRAParam(nnx.Param):
    """A parameter that trains under LoRA: an adapter matrix, or a module kept trainable
    (a critic's value head)."""


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    """``model.lora``: adapter rank r, scale numerator alpha (the update is scaled by
    alpha / r) and the targeted linears of every decoder layer."""

    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down")

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def invalid_lora(lora: LoRAConfig) -> Iterator[tuple[str, str]]:
    """``(field, message)`` for every setting out of range."""
    if isinstance(lora.rank, bool) or not isinstance(lora.rank, int) or lora.rank < 1:
        yield "rank", f"must be an integer >= 1, got {lora.rank!r}"
    if not lora.alpha > 0:
        yield "alpha", f"must be > 0, got {lora.alpha!r}"
    unknown = [t for t in lora.targets if t not in TARGETS]
    if not lora.targets or unknown or len(set(lora.targets)) < len(lora.targets):
        yield (
            "targets",
            f"must be a non-empty subset of {list(TARGETS)} without repeats, got "
            f"{list(lora.targets)}",
        )


def _linears(model: nnx.Module, targets) -> Iterator[tuple[int, str, nnx.Linear]]:
    """``(layer index, target name, linear)`` of every targeted linear of a causal LM."""
    for index, layer in enumerate(model.model.layers):
        for target in targets:
            block, name = TARGETS[target]
            yield index, target, getattr(getattr(layer, block), name)


def add_lora(model: nnx.Module, lora: LoRAConfig, *, seed: int = 0) -> nnx.Module:
    """Attach fresh adapters (A normal with std 1/r, B zero) to ``model``'s targeted linears,
    in place, in the kernels' dtype and on their sharding's mesh."""
    key = jax.random.key(seed)
    for index, target, linear in _linears(model, lora.targets):
        kernel = linear.kernel.get_value()
        n_in, n_out = kernel.shape
        k = jax.random.fold_in(key, index * len(TARGETS) + list(TARGETS).index(target))
        a = jax.random.normal(k, (n_in, lora.rank), jnp.float32) / lora.rank
        linear.lora_a = LoRAParam(a.astype(kernel.dtype))
        linear.lora_b = LoRAParam(jnp.zeros((lora.rank, n_out), kernel.dtype))
        linear.lora_scale = lora.scale
    return model


def lora_delta(linear: nnx.Linear, x: Array) -> Array | None:
    """``(alpha / r) · (x A) B`` of ``x`` ``[tokens, in]``, or None without adapters."""
    a = getattr(linear, "lora_a", None)
    if a is None:
        return None
    dtype = x.dtype
    low = x @ a.get_value().astype(dtype)
    return (low @ linear.lora_b.get_value().astype(dtype)) * jnp.asarray(linear.lora_scale, dtype)


def has_lora(params: Any) -> bool:
    """Whether a parameter state holds :class:`LoRAParam` leaves."""
    leaves = jax.tree.leaves(params, is_leaf=lambda x: isinstance(x, nnx.Variable))
    return any(isinstance(leaf, LoRAParam) for leaf in leaves)


def split_trainable(params: Any) -> tuple[Any, Any]:
    """``(trainable, frozen)``: the :class:`LoRAParam` part and the rest under LoRA; without
    adapters everything trains: ``(params, None)``."""
    if not has_lora(params):
        return params, None
    return nnx.split_state(params, LoRAParam, ...)


def join_trainable(trainable: Any, frozen: Any) -> Any:
    """The inverse of :func:`split_trainable`."""
    return trainable if frozen is None else nnx.merge_state(trainable, frozen)


def trainable_part(params: Any) -> Any:
    return split_trainable(params)[0]


def frozen_part(params: Any) -> Any:
    return split_trainable(params)[1]


def merge_params(params: nnx.State, scale: float) -> nnx.State:
    """The base model's state with every adapter merged: ``kernel ← kernel + scale · A B``
    (computed in float32, cast to the kernel's dtype), the adapters dropped."""
    lora, base = nnx.split_state(params, LoRAParam, ...)
    flat = dict(nnx.to_flat_state(base))
    adapters = dict(nnx.to_flat_state(lora))
    for path, a in adapters.items():
        if path[-1] != "lora_a":
            continue
        b = adapters[(*path[:-1], "lora_b")].get_value()
        kernel = flat[(*path[:-1], "kernel")]
        w = kernel.get_value()
        delta = jnp.asarray(a.get_value(), jnp.float32) @ jnp.asarray(b, jnp.float32)
        merged = (w.astype(jnp.float32) + scale * delta).astype(w.dtype)
        flat[(*path[:-1], "kernel")] = kernel.replace(merged)
    return nnx.from_flat_state(list(flat.items()))


@functools.partial(jax.jit, static_argnums=1)
def _merge_jit(params: nnx.State, scale: float) -> nnx.State:
    return merge_params(params, scale)


def sampler_params(params: Any, lora: LoRAConfig | None) -> Any:
    """What the sampler runs of the trainer's ``params``: under ``lora`` the merged weights (one
    jitted merge per weight sync), else ``params`` themselves."""
    if lora is None or not has_lora(params):
        return params
    return _merge_jit(params, lora.scale)


def merged_model(model: nnx.Module) -> nnx.Module:
    """A copy of ``model`` without adapters whose kernels are the merged weights (the model
    itself when it has none)."""
    _, params = nnx.split(model)
    if not has_lora(params):
        return model
    scale = _scale_of(model)
    base = nnx.clone(model)
    for linear in _adapted(base):
        del linear.lora_a, linear.lora_b, linear.lora_scale
    nnx.update(base, merge_params(params, scale))
    return base


def _adapted(model: nnx.Module) -> list[nnx.Linear]:
    return [
        linear
        for _, _, linear in _linears(model, TARGETS)
        if getattr(linear, "lora_a", None) is not None
    ]


def _scale_of(model: nnx.Module) -> float:
    return float(_adapted(model)[0].lora_scale)


def peft_state_dict(model: nnx.Module) -> dict[str, np.ndarray]:
    """The adapters under PEFT's names and layouts: ``lora_A.weight`` ``[r, in]`` and
    ``lora_B.weight`` ``[out, r]`` (ours are ``[in, r]`` and ``[r, out]``), float32."""
    out = {}
    for index, target, linear in _linears(model, TARGETS):
        if getattr(linear, "lora_a", None) is None:
            continue
        block, name = TARGETS[target]
        prefix = f"base_model.model.model.layers.{index}.{block}.{name}"
        a = np.asarray(linear.lora_a.get_value(), np.float32)
        b = np.asarray(linear.lora_b.get_value(), np.float32)
        out[f"{prefix}.lora_A.weight"] = np.ascontiguousarray(a.T)
        out[f"{prefix}.lora_B.weight"] = np.ascontiguousarray(b.T)
    return out


def save_peft_adapter(
    model: nnx.Module, lora: LoRAConfig, directory: str | Path, base_model: str | None
) -> Path:
    """Write ``adapter_config.json`` and ``adapter_model.safetensors`` that
    ``peft.PeftModel.from_pretrained(base, directory)`` loads over the base model
    (``base_model``: its path or Hub name, recorded as ``base_model_name_or_path``)."""
    from safetensors.numpy import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_dropout": 0.0,
        "target_modules": sorted(TARGETS[t][1] for t in lora.targets),
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "inference_mode": True,
    }
    (directory / PEFT_CONFIG).write_text(json.dumps(config, indent=2))
    save_file(peft_state_dict(model), directory / PEFT_WEIGHTS, metadata={"format": "pt"})
    return directory
