"""Qwen2 / Qwen2.5 / Qwen3 model configuration, read from a Hugging Face ``config.json``.

Qwen2 and Qwen2.5 share ``model_type = "qwen2"``: bias on q/k/v, no q/k norm. Qwen3
(``model_type = "qwen3"``) has RMSNorm on queries and keys per head, an explicit ``head_dim`` and
``attention_bias`` (False in every release) on all four projections.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from arlarena_jax.models.rope import ROPE_TYPES, check_rope_scaling, rope_type_of

MODEL_TYPES = ("qwen2", "qwen3")
__all__ = ["MODEL_TYPES", "PRESETS", "ROPE_TYPES", "QwenConfig", "preset", "rope_type_of"]


@dataclasses.dataclass(frozen=True)
class QwenConfig:
    """The architecture knobs of a dense Qwen decoder (names as in Hugging Face)."""

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

    def __post_init__(self) -> None:
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"model_type {self.model_type!r} is not supported; {MODEL_TYPES}")
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
    def qkv_bias(self) -> bool:
        """Qwen2 always has q/k/v bias; Qwen3 follows ``attention_bias``."""
        return self.model_type == "qwen2" or self.attention_bias

    @property
    def o_bias(self) -> bool:
        return self.model_type == "qwen3" and self.attention_bias

    @property
    def qk_norm(self) -> bool:
        return self.model_type == "qwen3"

    @classmethod
    def from_hf_dict(cls, raw: dict[str, Any]) -> QwenConfig:
        """Build from the dict of a Hugging Face ``config.json`` (unknown keys are ignored)."""
        model_type = raw.get("model_type")
        if model_type not in MODEL_TYPES:
            raise ValueError(
                f"config.json model_type {model_type!r} is not a dense Qwen2/Qwen3 decoder"
            )
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in raw.items() if k in names}
        if "head_dim" not in raw or raw["head_dim"] is None:
            values["head_dim"] = raw["hidden_size"] // raw["num_attention_heads"]
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
        out["architectures"] = [
            "Qwen3ForCausalLM" if self.model_type == "qwen3" else "Qwen2ForCausalLM"
        ]
        out["hidden_act"] = "silu"
        if self.model_type == "qwen2":
            out.pop("attention_bias")
        return out


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
}


def preset(name: str, **overrides: Any) -> QwenConfig:
    """A named configuration, optionally with fields replaced (e.g. ``vocab_size``)."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; expected one of {sorted(PRESETS)}")
    return dataclasses.replace(PRESETS[name], **overrides)
