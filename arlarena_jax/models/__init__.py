"""Qwen2 / Qwen2.5 / Qwen3 / Llama policies in Flax NNX with Hugging Face checkpoints in and out."""

from arlarena_jax.models.config import PRESETS, DecoderConfig, QwenConfig, preset
from arlarena_jax.models.families import ModelFamily, register_family
from arlarena_jax.models.hf_io import (
    load_pretrained,
    load_state_dict,
    save_generation_config,
    save_pretrained,
    state_dict,
)
from arlarena_jax.models.logprobs import TokenStats, response_log_probs, token_log_probs
from arlarena_jax.models.qwen import DecoderForCausalLM, QwenForCausalLM
from arlarena_jax.models.sharding import make_mesh, parameter_spec, shard_model

__all__ = [
    "PRESETS",
    "DecoderConfig",
    "DecoderForCausalLM",
    "ModelFamily",
    "QwenConfig",
    "QwenForCausalLM",
    "TokenStats",
    "load_pretrained",
    "load_state_dict",
    "make_mesh",
    "parameter_spec",
    "preset",
    "register_family",
    "response_log_probs",
    "save_generation_config",
    "save_pretrained",
    "shard_model",
    "state_dict",
    "token_log_probs",
]
