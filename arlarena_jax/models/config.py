"""Decoder configuration (Qwen2 / Qwen2.5 / Qwen3 / Llama), read from a Hugging Face
``config.json``.

One decoder; the model types differ only in what this config declares (:attr:`qkv_bias`,
:attr:`o_bias`, :attr:`qk_norm`, :attr:`mlp_bias`, ``tie_word_embeddings``), resolved from the
family ``model_type`` names (:mod:`arlarena_jax.models.families`, where each family is declared):

* ``qwen2`` (Qwen2, Qwen2.5): bias on q/k/v, none on o, no q/k norm.
* ``qwen3``: RMSNorm on queries and keys per head, an explicit ``head_dim`` and
  ``attention_bias`` (False in every release) on all four projections.
* ``llama`` (Llama 2, 3, 3.x, SmolLM, SmolLM2, any decoder without q/k norm): ``attention_bias``
  on all four projections, ``mlp_bias`` on gate/up/down (both False in every release), no q/k norm.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from arlarena_jax.models import families
from arlarena_jax.models.families import ModelFamily
from arlarena_jax.models.rope import ROPE_TYPES, check_rope_scaling, rope_type_of

__all__ = [
    "PRESETS",
    "ROPE_TYPES",
    "DecoderConfig",
    "QwenConfig",
    "preset",
    "rope_type_of",
]


@dataclasses.dataclass(frozen=True)
class QwenConfig:
    """The architecture knobs of a dense decoder (names as in Hugging Face; see the module)."""

    model_type: str = "qwen3"
    vocab_size: int = 151936
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 28
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    rope_scaling: dict[str, Any] | None = None
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 40960
    attention_bias: bool = False
    mlp_bias: bool = False

    def __post_init__(self) -> None:
        declared = families.family(self.model_type)
        if self.mlp_bias and not declared.mlp_bias_key:
            options = ", ".join(
                n for n in families.family_names() if families.family(n).mlp_bias_key
            )
            raise ValueError(f"mlp_bias is a {options} option; {self.model_type} has no MLP bias")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        check_rope_scaling(self.rope_scaling, self.max_position_embeddings)

    def __hash__(self) -> int:
        # The generated hash fails on the rope_scaling dict; a model's graphdef (holding this
        # config) must hash to be a static jit argument.
        return hash(tuple(_frozen(getattr(self, f.name)) for f in dataclasses.fields(self)))

    @property
    def family(self) -> ModelFamily:
        """The declared family of :attr:`model_type` (:mod:`arlarena_jax.models.families`)."""
        return families.family(self.model_type)

    @property
    def qkv_bias(self) -> bool:
        """Bias on q/k/v: the family's (Qwen2: always), else ``attention_bias``."""
        fixed = self.family.qkv_bias
        return self.attention_bias if fixed is None else fixed

    @property
    def o_bias(self) -> bool:
        """Bias on o: the family's (Qwen2: never), else ``attention_bias``."""
        fixed = self.family.o_bias
        return self.attention_bias if fixed is None else fixed

    @property
    def qk_norm(self) -> bool:
        """Per-head RMSNorm on queries and keys (the family's: Qwen3)."""
        return self.family.qk_norm

    @classmethod
    def from_hf_dict(cls, raw: dict[str, Any]) -> QwenConfig:
        """Build from the dict of a Hugging Face ``config.json`` (unknown keys are ignored)."""
        try:
            declared = families.family(raw.get("model_type"))
        except ValueError as error:
            raise ValueError(f"config.json {error}") from None
        if raw.get("hidden_act", "silu") != "silu":
            raise ValueError(
                f"config.json hidden_act {raw['hidden_act']!r} is not supported (silu only)"
            )
        names = {f.name for f in dataclasses.fields(cls)}
        raw = dict(declared.hf_defaults) | {k: v for k, v in raw.items() if v is not None}
        values = {k: v for k, v in raw.items() if k in names}
        if "head_dim" not in raw:
            values["head_dim"] = raw["hidden_size"] // raw["num_attention_heads"]
        if "num_key_value_heads" not in raw:  # transformers: multi-head attention
            values["num_key_value_heads"] = raw["num_attention_heads"]
        if raw.get("rope_parameters") and not raw.get("rope_scaling"):
            # transformers v5 writes rope settings under rope_parameters.
            params = dict(raw["rope_parameters"])
            values["rope_theta"] = params.pop("rope_theta", values.get("rope_theta"))
            if rope_type_of(params) != "default":
                values["rope_scaling"] = params
        if values.get("rope_scaling") and rope_type_of(values["rope_scaling"]) == "default":
            values["rope_scaling"] = None
        return cls(**values)

    @classmethod
    def from_json(cls, path: str | Path) -> QwenConfig:
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"no config.json at {path}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from None
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not UTF-8 text") from None
        return cls.from_hf_dict(raw)

    def to_hf_dict(self) -> dict[str, Any]:
        """The ``config.json`` dict that ``transformers`` reads back into the same model."""
        out = dataclasses.asdict(self)
        out["architectures"] = [self.family.causal_lm_architecture()]
        out["hidden_act"] = "silu"
        if not self.family.attention_bias_key:
            out.pop("attention_bias")
        if not self.family.mlp_bias_key:
            out.pop("mlp_bias")
        return out


DecoderConfig = QwenConfig  # the same class under a name that fits every model type


def _frozen(value: Any) -> Any:
    """A hashable stand-in for nested dicts and lists (equal values give equal stand-ins)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


def _qwen3(hidden, inter, layers, heads, kv, vocab=151936, tie=True, head_dim=128) -> QwenConfig:
    return QwenConfig(
        "qwen3", vocab, hidden, inter, layers, heads, kv, head_dim, tie_word_embeddings=tie
    )


def _qwen25(hidden, inter, layers, heads, kv, tie, max_pos=32768) -> QwenConfig:
    return QwenConfig(
        "qwen2",
        151936 if hidden < 3584 else 152064,
        hidden,
        inter,
        layers,
        heads,
        kv,
        hidden // heads,
        rope_theta=1_000_000.0,
        tie_word_embeddings=tie,
        max_position_embeddings=max_pos,
    )


def _llama(hidden, inter, layers, heads, kv, vocab, theta, max_pos, scaling=None) -> QwenConfig:
    """A Llama-architecture shape: no biases, tied head, RMSNorm ε 1e-5 (every preset below)."""
    return QwenConfig(
        "llama",
        vocab,
        hidden,
        inter,
        layers,
        heads,
        kv,
        hidden // heads,
        rms_norm_eps=1e-5,
        rope_theta=theta,
        rope_scaling=dict(scaling) if scaling else None,
        tie_word_embeddings=True,
        max_position_embeddings=max_pos,
    )


# Llama 3.1/3.2's rope scaling, as in the published config.json files.
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

PRESETS: dict[str, QwenConfig] = {
    # Tiny Qwen3-architecture models for tests and the CPU main job (vocab set by the tokenizer).
    "tiny": QwenConfig("qwen3", 512, 128, 512, 4, 4, 2, 32, max_position_embeddings=2048),
    "small": QwenConfig("qwen3", 2048, 512, 1536, 10, 8, 2, 64, max_position_embeddings=4096),
    "qwen3-0.6b": _qwen3(1024, 3072, 28, 16, 8),
    "qwen3-1.7b": _qwen3(2048, 6144, 28, 16, 8),
    "qwen3-4b": _qwen3(2560, 9728, 36, 32, 8),
    "qwen3-8b": _qwen3(4096, 12288, 36, 32, 8, tie=False),
    "qwen2.5-0.5b": _qwen25(896, 4864, 24, 14, 2, tie=True),
    "qwen2.5-1.5b": _qwen25(1536, 8960, 28, 12, 2, tie=True),
    "qwen2.5-3b": _qwen25(2048, 11008, 36, 16, 2, tie=True),
    "qwen2.5-7b": _qwen25(3584, 18944, 28, 28, 4, tie=False),
    # The config.json of HuggingFaceTB/SmolLM2-{135M,360M,1.7B} and meta-llama/Llama-3.2-{1B,3B}
    # on the Hugging Face Hub (SmolLM2: vocabulary 49152, 8192 positions; Llama 3.2: 128256,
    # 131072 positions with llama3 rope scaling).
    "smollm2-135m": _llama(576, 1536, 30, 9, 3, 49152, 100_000.0, 8192),
    "smollm2-360m": _llama(960, 2560, 32, 15, 5, 49152, 100_000.0, 8192),
    "smollm2-1.7b": _llama(2048, 8192, 24, 32, 32, 49152, 130_000.0, 8192),
    "llama-3.2-1b": _llama(2048, 8192, 16, 32, 8, 128256, 500_000.0, 131072, LLAMA3_ROPE),
    "llama-3.2-3b": _llama(3072, 8192, 28, 24, 8, 128256, 500_000.0, 131072, LLAMA3_ROPE),
}


def preset(name: str, **overrides: Any) -> QwenConfig:
    """A named configuration, optionally with fields replaced (e.g. ``vocab_size``)."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; expected one of {sorted(PRESETS)}")
    return dataclasses.replace(PRESETS[name], **overrides)
