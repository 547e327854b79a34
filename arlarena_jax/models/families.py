"""Model families: each decoder family declared once, read by everything that differs per family.

A :class:`ModelFamily` holds what the code used to branch on ``model_type`` strings for:

* structural traits: bias on q/k/v, on o and on the MLP (``True``/``False`` fixed by the family,
  ``None`` set per checkpoint by the config's ``attention_bias`` / ``mlp_bias``) and per-head
  q/k RMSNorm. The decoder (:mod:`arlarena_jax.models.qwen`) builds its modules from them through
  :class:`~arlarena_jax.models.config.QwenConfig`'s ``qkv_bias`` / ``o_bias`` / ``qk_norm`` /
  ``mlp_bias``. Everything else (grouped-query attention, rotate-half RoPE and its scalings, a
  tied or separate head) is per checkpoint in the config, the same for every family;
* Hugging Face names: ``model_type`` (:attr:`ModelFamily.name`), the ``transformers`` class
  prefix (``Qwen3`` → ``Qwen3ForCausalLM``, ``Qwen3ForTokenClassification``) and the defaults of
  keys a ``config.json`` may leave out;
* GGUF: llama.cpp's ``general.architecture`` and tensor names (per layer and global), and
  whether its converter permuted the query/key rows;
* the tensors (:meth:`ModelFamily.tensors`: Hugging Face name, module path, shape), from which
  the checkpoint I/O (:mod:`arlarena_jax.models.hf_io`) and the parameter count
  (:func:`parameter_count`, the memory estimate's) are derived.

Sharding rules and LoRA targets are keyed by module name (``q_proj``, ``mlp.down_proj.bias``,
``q_norm``), which every family shares: they cover every trait above without a per-family entry.

A family is registered once (:func:`register_family`), from the library or from outside it (a
test, a plugin); :func:`family` looks one up by ``model_type``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from arlarena_jax.models.config import QwenConfig

# llama.cpp's tensor names (after ``blk.N.``) → Hugging Face's (after ``model.layers.N.``).
GGUF_LAYER_TENSORS: Mapping[str, str] = MappingProxyType(
    {
        "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
        "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "attn_q_norm": "self_attn.q_norm",
        "attn_k_norm": "self_attn.k_norm",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
    }
)
GGUF_GLOBAL_TENSORS: Mapping[str, str] = MappingProxyType(
    {
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight",
    }
)


class Tensor(NamedTuple):
    """One parameter: its Hugging Face name, attribute path in the decoder, whether it is stored
    transposed there (a linear's ``[out, in]`` weight is our ``[in, out]`` kernel) and its
    Hugging Face shape."""

    name: str
    path: tuple[str | int, ...]
    transposed: bool
    shape: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """One decoder family (see the module doc). ``None`` for a bias: the config decides."""

    name: str  # Hugging Face ``model_type``
    architecture: str  # transformers class prefix: ``{architecture}ForCausalLM``
    qkv_bias: bool | None = None  # None: ``attention_bias``
    o_bias: bool | None = None  # None: ``attention_bias``
    mlp_bias: bool | None = False  # None: ``mlp_bias``; True is not supported
    qk_norm: bool = False
    hf_defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    gguf_architecture: str | None = None  # None: no GGUF import
    gguf_permuted_qk: bool = False  # llama.cpp's converter permuted the q/k rows
    gguf_layer_tensors: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: GGUF_LAYER_TENSORS, hash=False
    )
    gguf_global_tensors: Mapping[str, str] = dataclasses.field(
        default_factory=lambda: GGUF_GLOBAL_TENSORS, hash=False
    )
    description: str = ""  # the releases it covers, for docs and errors

    def __post_init__(self) -> None:
        if not self.name or not self.architecture:
            raise ValueError("a model family needs a name (model_type) and an architecture")
        if self.mlp_bias is True:
            raise ValueError(f"model family {self.name!r}: mlp_bias is False or None (config)")

    @property
    def attention_bias_key(self) -> bool:
        """Whether the Hugging Face config has an ``attention_bias`` key for this family."""
        return self.qkv_bias is None or self.o_bias is None

    @property
    def mlp_bias_key(self) -> bool:
        """Whether the Hugging Face config has an ``mlp_bias`` key for this family."""
        return self.mlp_bias is None

    def causal_lm_architecture(self) -> str:
        return f"{self.architecture}ForCausalLM"

    def token_classification_architecture(self) -> str:
        return f"{self.architecture}ForTokenClassification"

    def tensors(self, config: QwenConfig) -> Iterator[Tensor]:
        """Every parameter of the decoder ``config`` describes, in Hugging Face's order."""
        c = config
        h, d = c.hidden_size, c.head_dim
        q, kv = c.num_attention_heads * d, c.num_key_value_heads * d
        yield Tensor(
            "model.embed_tokens.weight",
            ("model", "embed_tokens", "embedding"),
            False,
            (c.vocab_size, h),
        )
        for i in range(c.num_hidden_layers):
            layer = ("model", "layers", i)
            prefix = f"model.layers.{i}"
            for proj, out, n_in, bias in (
                ("q_proj", q, h, c.qkv_bias),
                ("k_proj", kv, h, c.qkv_bias),
                ("v_proj", kv, h, c.qkv_bias),
                ("o_proj", h, q, c.o_bias),
            ):
                path = (*layer, "self_attn", proj)
                yield Tensor(
                    f"{prefix}.self_attn.{proj}.weight", (*path, "kernel"), True, (out, n_in)
                )
                if bias:
                    yield Tensor(f"{prefix}.self_attn.{proj}.bias", (*path, "bias"), False, (out,))
            if c.qk_norm:
                for norm in ("q_norm", "k_norm"):
                    yield Tensor(
                        f"{prefix}.self_attn.{norm}.weight",
                        (*layer, "self_attn", norm, "weight"),
                        False,
                        (d,),
                    )
            i_size = c.intermediate_size
            for proj, out, n_in in (
                ("gate_proj", i_size, h),
                ("up_proj", i_size, h),
                ("down_proj", h, i_size),
            ):
                path = (*layer, "mlp", proj)
                yield Tensor(f"{prefix}.mlp.{proj}.weight", (*path, "kernel"), True, (out, n_in))
                if c.mlp_bias:
                    yield Tensor(f"{prefix}.mlp.{proj}.bias", (*path, "bias"), False, (out,))
            for norm in ("input_layernorm", "post_attention_layernorm"):
                yield Tensor(f"{prefix}.{norm}.weight", (*layer, norm, "weight"), False, (h,))
        yield Tensor("model.norm.weight", ("model", "norm", "weight"), False, (h,))
        if not c.tie_word_embeddings:
            yield Tensor("lm_head.weight", ("lm_head", "kernel"), True, (c.vocab_size, h))

    def parameter_count(self, config: QwenConfig) -> int:
        """The decoder's weights: the sum of :meth:`tensors`' sizes."""
        return sum(math.prod(t.shape) for t in self.tensors(config))


_FAMILIES: dict[str, ModelFamily] = {}


def register_family(new: ModelFamily) -> ModelFamily:
    """Add ``new`` to the registry (its ``model_type`` and GGUF architecture must be unused)."""
    if new.name in _FAMILIES:
        raise ValueError(f"model family {new.name!r} is already registered")
    gguf = new.gguf_architecture
    if gguf is not None and any(f.gguf_architecture == gguf for f in _FAMILIES.values()):
        raise ValueError(f"GGUF architecture {gguf!r} is already registered")
    _FAMILIES[new.name] = new
    return new


def unregister_family(name: str) -> None:
    """Remove a registered family (tests registering one of their own clean up with this)."""
    del _FAMILIES[name]


def family_names() -> tuple[str, ...]:
    """The registered ``model_type`` names, in registration order."""
    return tuple(_FAMILIES)


def family(name: str) -> ModelFamily:
    """The family of a ``model_type``; an unknown one is one ValueError line naming the known."""
    try:
        return _FAMILIES[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"model_type {name!r} is not a supported decoder ({', '.join(_FAMILIES)}); "
            "arlarena_jax.models.families.register_family declares another"
        ) from None


def gguf_architectures() -> tuple[str, ...]:
    """The GGUF ``general.architecture`` names of the registered families, sorted."""
    return tuple(sorted(f.gguf_architecture for f in _FAMILIES.values() if f.gguf_architecture))


def family_of_gguf(arch: Any) -> ModelFamily:
    """The family whose GGUF architecture is ``arch``; another is one ValueError line."""
    for candidate in _FAMILIES.values():
        if candidate.gguf_architecture is not None and candidate.gguf_architecture == arch:
            return candidate
    raise ValueError(
        f"GGUF architecture {arch!r} is not supported "
        f"(supported: {', '.join(gguf_architectures())})"
    )


def parameter_count(config: QwenConfig) -> int:
    """The parameter count of the decoder ``config`` describes (its family's)."""
    return family(config.model_type).parameter_count(config)


QWEN2 = register_family(
    ModelFamily(
        "qwen2",
        "Qwen2",
        qkv_bias=True,
        o_bias=False,
        gguf_architecture="qwen2",
        description="Qwen2, Qwen2.5",
    )
)
QWEN3 = register_family(
    ModelFamily("qwen3", "Qwen3", qk_norm=True, gguf_architecture="qwen3", description="Qwen3")
)
LLAMA = register_family(
    ModelFamily(
        "llama",
        "Llama",
        mlp_bias=None,
        # transformers' LlamaConfig defaults (old Llama 2 files have no rope_theta); the
        # dataclass defaults are Qwen3's.
        hf_defaults=MappingProxyType(
            {
                "rope_theta": 10000.0,
                "rms_norm_eps": 1e-6,
                "tie_word_embeddings": False,
                "max_position_embeddings": 2048,
            }
        ),
        gguf_architecture="llama",
        gguf_permuted_qk=True,
        description="Llama 2, 3, 3.x, SmolLM, SmolLM2",
    )
)
