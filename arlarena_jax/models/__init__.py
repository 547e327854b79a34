"""Qwen2 / Qwen2.5 / Qwen3 policies in Flax NNX with Hugging Face checkpoints in and out."""

from arlarena_jax.models.config import PRESETS, QwenConfig, preset
from arlarena_jax.models.hf_io import load_pretrained, load_state_dict, save_pretrained, state_dict
from arlarena_jax.models.qwen import QwenForCausalLM

__all__ = [
    "PRESETS",
    "QwenConfig",
    "QwenForCausalLM",
    "load_pretrained",
    "load_state_dict",
    "preset",
    "save_pretrained",
    "state_dict",
]
