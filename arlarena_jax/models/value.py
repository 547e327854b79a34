"""Value models for PPO's critic: verl's layout, a Qwen with a scalar head, and a head on the
policy's trunk.

- :class:`QwenValueModel` is Hugging Face's ``Qwen2ForTokenClassification`` /
  ``Qwen3ForTokenClassification`` / ``LlamaForTokenClassification`` with ``num_labels = 1``
  (verl's critic: the decoder ``model.*`` without the LM head, then ``score``, a
  ``Linear(hidden, 1)`` with bias, on every position's final-norm hidden state).
  :func:`value_model_from_policy` builds one from the policy's weights and a fresh head;
  :func:`save_value_pretrained` / :func:`load_value_pretrained` write and read the
  ``transformers`` directory.
- :class:`ValueHead` alone reads the policy's hidden states (held constant): the cheap critic,
  one ``Linear(hidden, 1)`` of parameters, no second trunk in memory.

V(prefix up to position s) = score(h_s); the value of response token t is read at the position
that predicts it (h_{P+t−1} for a prompt of width P), as the log-probs are
(:func:`response_values`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from arlarena_jax.models.config import QwenConfig
from arlarena_jax.models.hf_io import (
    SAFETENSORS_SINGLE,
    load_state_dict,
    read_safetensors,
    state_dict,
)
from arlarena_jax.models.lora import LoRAParam
from arlarena_jax.models.qwen import QwenForCausalLM

Array = jax.Array
HEAD_INIT_STD = 0.02  # transformers' initializer_range for a fresh score head


class ValueHead(nnx.Module):
    """``score``: V = h·w + b, one scalar per position (float32)."""

    def __init__(self, hidden_size: int, *, param_dtype=jnp.float32, rngs: nnx.Rngs):
        self.score = nnx.Linear(
            hidden_size,
            1,
            use_bias=True,
            param_dtype=param_dtype,
            kernel_init=nnx.initializers.normal(HEAD_INIT_STD),
            rngs=rngs,
        )

    def __call__(self, hidden: Array) -> Array:
        return self.score(hidden.astype(self.score.kernel.get_value().dtype))[..., 0].astype(
            jnp.float32
        )


def _trunk_config(config: QwenConfig) -> QwenConfig:
    """The decoder without an LM head (tied embeddings: ``lm_head`` is None)."""
    return dataclasses.replace(config, tie_word_embeddings=True)


class QwenValueModel(nnx.Module):
    """A Qwen decoder (``backbone``, no LM head) and a :class:`ValueHead`: ``[B, S]`` values."""

    def __init__(
        self,
        config: QwenConfig,
        *,
        rngs: nnx.Rngs,
        dtype=jnp.float32,
        param_dtype=jnp.float32,
        remat: str | None = None,
    ):
        self.config = config
        self.backbone = QwenForCausalLM(
            _trunk_config(config), rngs=rngs, dtype=dtype, param_dtype=param_dtype, remat=remat
        )
        self.head = ValueHead(config.hidden_size, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, input_ids: Array, attention_mask: Array | None = None) -> Array:
        return self.head(self.backbone.hidden_states(input_ids, attention_mask))


def response_values(values: Array, prompt_length: int, response_length: int) -> Array:
    """The values ``[B, T]`` of the response tokens from per-position values ``[B, S]``: token t
    at position P + t is valued by the state before it, position P + t − 1 (verl's critic:
    ``values[:, -T − 1:-1]``)."""
    return values[:, prompt_length - 1 : prompt_length - 1 + response_length]


def value_model_from_policy(
    policy: QwenForCausalLM, *, seed: int, param_dtype=None, remat: str | None = None
) -> QwenValueModel:
    """A :class:`QwenValueModel` whose decoder is a copy of ``policy``'s (its base weights:
    LoRA adapters are not copied) and whose head is fresh (N(0, 0.02²) weights, zero bias), in
    the policy's dtypes."""
    layer = policy.model.embed_tokens
    param_dtype = param_dtype or layer.embedding.get_value().dtype
    critic = QwenValueModel(
        policy.config,
        rngs=nnx.Rngs(seed),
        dtype=layer.dtype,
        param_dtype=param_dtype,
        remat=remat,
    )
    trunk = nnx.state(policy.model, nnx.All(nnx.Param, nnx.Not(LoRAParam)))  # no adapters
    nnx.update(critic.backbone.model, jax.tree.map(jnp.copy, trunk))
    return critic


def _architecture(config: QwenConfig) -> str:
    return config.family.token_classification_architecture()


def value_state_dict(model: QwenValueModel) -> dict[str, np.ndarray]:
    """Hugging Face tensors: the decoder's ``model.*`` and ``score.weight`` ``[1, hidden]``,
    ``score.bias`` ``[1]`` (float32 NumPy)."""
    out = state_dict(model.backbone)
    score = model.head.score
    out["score.weight"] = np.ascontiguousarray(np.asarray(score.kernel.get_value(), np.float32).T)
    out["score.bias"] = np.asarray(score.bias.get_value(), np.float32)
    return out


def save_value_pretrained(model: QwenValueModel, directory: str | Path) -> Path:
    """``config.json`` (``*ForTokenClassification``, ``num_labels`` 1) and
    ``model.safetensors`` that ``transformers`` loads as a token-classification model."""
    from safetensors.numpy import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = model.config.to_hf_dict() | {
        "architectures": [_architecture(model.config)],
        "num_labels": 1,
        "id2label": {"0": "LABEL_0"},
        "label2id": {"LABEL_0": 0},
        "classifier_dropout": 0.0,
        "torch_dtype": "float32",
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    save_file(value_state_dict(model), directory / SAFETENSORS_SINGLE, metadata={"format": "pt"})
    return directory


def load_value_pretrained(
    directory: str | Path, *, dtype=jnp.float32, param_dtype=jnp.float32, remat: str | None = None
) -> QwenValueModel:
    """A :class:`QwenValueModel` from a token-classification directory with one label (what
    :func:`save_value_pretrained` writes, or a verl critic's export); one-line errors name a
    missing or misshapen tensor."""
    directory = Path(directory)
    config = QwenConfig.from_json(directory)
    labels = json.loads((directory / "config.json").read_text()).get("num_labels", 1)
    if labels != 1:
        raise ValueError(f"{directory}: a value model has one label, this one has {labels}")
    tensors = dict(read_safetensors(directory))
    head = {name: tensors.pop(name, None) for name in ("score.weight", "score.bias")}
    if head["score.weight"] is None:
        raise ValueError(f"{directory}: no 'score.weight' tensor: not a value model")
    model = QwenValueModel(
        config, rngs=nnx.Rngs(0), dtype=dtype, param_dtype=param_dtype, remat=remat
    )
    load_state_dict(model.backbone, tensors, ignore_unexpected=["lm_head.weight"])
    weight = np.asarray(head["score.weight"], np.float32)
    if weight.shape != (1, config.hidden_size):
        raise ValueError(
            f"tensor 'score.weight' has shape {weight.shape}, expected {(1, config.hidden_size)}"
        )
    score = model.head.score
    score.kernel.set_value(jnp.asarray(weight.T, param_dtype))
    bias = np.zeros(1) if head["score.bias"] is None else np.asarray(head["score.bias"])
    score.bias.set_value(jnp.asarray(bias.reshape(1), param_dtype))
    return model
