"""Llama-family decoders (``model_type: llama``: Llama 2/3/3.x, SmolLM, SmolLM2) against Hugging
Face ``transformers``' ``LlamaForCausalLM`` / ``LlamaForTokenClassification`` (PyTorch CPU).

The decoder is the Qwen one with its differences declared by the config (no q/k norm; biases only
where ``attention_bias`` / ``mlp_bias`` say). Tiny random models (2 layers, width 64), float32:

* logits within 1e-4 absolute on the real positions of test_model's left-padded batch (tied and
  untied heads, grouped-query and multi-head attention, biases, ``llama3`` rope scaling), as
  test_model states for Qwen;
* our export loads in transformers with logits within 1e-4, and reads back into ours exactly;
* config.json files as published (Llama 2 without ``rope_theta``, Llama 3.2 with
  ``rope_scaling``) read as transformers reads them; preset sizes are the published counts;
* the critic exports as a ``LlamaForTokenClassification`` with our values (1e-4);
* the sampling engine's greedy tokens equal transformers' greedy ``generate`` (identical ids);
* an RL update raises the likelihood of positive-advantage responses (test_rl_update's check);
* the partition rules place a Llama's parameters, biases included (8 simulated devices).
"""

from __future__ import annotations

import copy
import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx
from jax.sharding import PartitionSpec

from arlarena_jax.models import DecoderConfig, DecoderForCausalLM, preset
from arlarena_jax.models.hf_io import load_pretrained, save_pretrained
from arlarena_jax.models.sharding import make_mesh, shard_model
from arlarena_jax.models.value import (
    load_value_pretrained,
    save_value_pretrained,
    value_model_from_policy,
)
from tests.helpers.hf_reference import IDS, MASK, REAL, TINY_HF, hf_logits

COMMON = TINY_HF
# Positions reach 6; with an original length of 16, every frequency whose wavelength exceeds 16
# (all but the fastest two of head_dim 16 at θ = 500000) is divided by 8 or smoothed.
LLAMA3 = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
CASES = {
    "untied-gqa": dict(tie_word_embeddings=False, rope_parameters={"rope_theta": 10000.0}),
    "tied-mha-eps1e-5": dict(
        tie_word_embeddings=True,
        num_key_value_heads=4,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_theta": 100000.0},
    ),
    "biases-head_dim32": dict(
        tie_word_embeddings=False, attention_bias=True, mlp_bias=True, head_dim=32
    ),
    "llama3-rope": dict(
        tie_word_embeddings=True, max_position_embeddings=128, rope_parameters=LLAMA3
    ),
}


def hf_llama(**overrides) -> transformers.LlamaForCausalLM:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**(COMMON | overrides))
    return transformers.LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_transformers(case, tmp_path):
    model = hf_llama(**CASES[case])
    model.save_pretrained(tmp_path, safe_serialization=True)
    ours = load_pretrained(tmp_path)
    assert ours.config.model_type == "llama"
    got = np.asarray(ours(jnp.asarray(IDS), jnp.asarray(MASK)))
    np.testing.assert_allclose(got[REAL], hf_logits(model)[REAL], atol=1e-4)


def test_llama3_scaling_changes_the_logits():
    """The rope case is not vacuous: the same weights without scaling differ by more than ten
    times the tolerance (measured: 4e-3; the logits of a 0.02-std random model are small)."""
    scaled = hf_llama(**CASES["llama3-rope"])
    plain = hf_llama(**(CASES["llama3-rope"] | {"rope_parameters": {"rope_theta": 500000.0}}))
    plain.load_state_dict(scaled.state_dict())
    gap = np.abs(hf_logits(scaled)[REAL] - hf_logits(plain)[REAL]).max()
    assert gap > 1e-3


ROUND_TRIP = {
    "tied-llama3": dict(tie_word_embeddings=True, rope_scaling=LLAMA3),
    "untied-biases": dict(tie_word_embeddings=False, attention_bias=True, mlp_bias=True),
}


def our_config(**overrides) -> DecoderConfig:
    scaling = overrides.pop("rope_scaling", None)
    if scaling is not None:
        scaling = {k: v for k, v in scaling.items() if k != "rope_theta"}
    base = dict(COMMON, head_dim=16, rope_theta=500000.0, max_position_embeddings=128)
    return DecoderConfig("llama", **(base | overrides), rope_scaling=scaling)


@pytest.mark.parametrize("case", sorted(ROUND_TRIP))
def test_our_export_loads_in_transformers_and_back(case, tmp_path):
    ours = DecoderForCausalLM(our_config(**ROUND_TRIP[case]), rngs=nnx.Rngs(3))
    save_pretrained(ours, tmp_path)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["architectures"] == ["LlamaForCausalLM"] and written["model_type"] == "llama"
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(theirs) is transformers.LlamaForCausalLM
    expected = np.asarray(ours(jnp.asarray(IDS), jnp.asarray(MASK)))
    np.testing.assert_allclose(hf_logits(theirs)[REAL], expected[REAL], atol=1e-4)
    reloaded = load_pretrained(tmp_path)
    assert reloaded.config == ours.config
    np.testing.assert_array_equal(
        np.asarray(reloaded(jnp.asarray(IDS), jnp.asarray(MASK))), expected
    )


# The published config.json of meta-llama/Llama-2-7b-hf (no rope_theta, no head_dim) and of
# meta-llama/Llama-3.2-1B (rope_scaling beside rope_theta, the transformers v4 layout).
LLAMA2_7B = {
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 11008,
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": 32000,
}
LLAMA32_1B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "vocab_size": 128256,
}


@pytest.mark.parametrize("raw", [LLAMA2_7B, LLAMA32_1B], ids=["llama-2-7b", "llama-3.2-1b"])
def test_published_config_files_read_as_transformers_reads_them(raw):
    ours = DecoderConfig.from_hf_dict(raw)
    theirs = transformers.LlamaConfig.from_dict(copy.deepcopy(raw))  # it edits rope_scaling
    for name in ("head_dim", "num_key_value_heads", "rms_norm_eps", "tie_word_embeddings"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.rope_theta == theirs.rope_parameters["rope_theta"]
    assert ours.rope_scaling == raw["rope_scaling"]
    assert not (ours.qkv_bias or ours.o_bias or ours.qk_norm or ours.mlp_bias)
    if raw is LLAMA32_1B:
        assert ours == preset("llama-3.2-1b")


def test_unsupported_llama_options_fail_in_one_line():
    with pytest.raises(ValueError, match=r"hidden_act 'gelu' is not supported \(silu only\)$"):
        DecoderConfig.from_hf_dict(LLAMA2_7B | {"hidden_act": "gelu"})
    with pytest.raises(ValueError, match="mlp_bias is a llama option; qwen3 has no MLP bias"):
        DecoderConfig("qwen3", mlp_bias=True)


def test_presets_have_the_published_parameter_counts():
    """Counted by hand from the shapes (embedding + layers × (q, k, v, o, gate/up/down, two
    norms) + final norm, tied heads): SmolLM2-135M 134,515,008; SmolLM2-360M 361,821,120;
    Llama-3.2-1B 1,235,814,400 (the counts their model cards and checkpoints give)."""

    def count(name):
        model = nnx.eval_shape(lambda: DecoderForCausalLM(preset(name), rngs=nnx.Rngs(0)))
        return int(sum(np.prod(p.shape) for p in jax.tree.leaves(nnx.state(model, nnx.Param))))

    assert count("smollm2-135m") == 134_515_008
    assert count("smollm2-360m") == 361_821_120
    assert count("llama-3.2-1b") == 1_235_814_400
    for name in ("smollm2-1.7b", "llama-3.2-3b"):
        config = preset(name)
        assert config.model_type == "llama" and config.tie_word_embeddings
        assert DecoderConfig.from_hf_dict(config.to_hf_dict()) == config


# ---- the critic ---------------------------------------------------------------------------------


def test_the_critic_exports_as_a_llama_token_classifier(tmp_path):
    policy = DecoderForCausalLM(
        our_config(tie_word_embeddings=False, attention_bias=True), rngs=nnx.Rngs(1)
    )
    critic = value_model_from_policy(policy, seed=2)
    save_value_pretrained(critic, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForTokenClassification"]
    hf = transformers.AutoModelForTokenClassification.from_pretrained(tmp_path).eval()
    assert type(hf) is transformers.LlamaForTokenClassification
    with torch.no_grad():
        out = hf(input_ids=torch.tensor(IDS), attention_mask=torch.tensor(MASK))
    ours = np.asarray(critic(jnp.asarray(IDS), jnp.asarray(MASK)))
    np.testing.assert_allclose(ours[REAL], out.logits[..., 0].numpy()[REAL], atol=1e-4)
    again = load_value_pretrained(tmp_path)
    np.testing.assert_array_equal(np.asarray(again(jnp.asarray(IDS), jnp.asarray(MASK))), ours)


# ---- the sampler --------------------------------------------------------------------------------


def test_greedy_sampling_equals_transformers_generate(tmp_path):
    from arlarena_jax.sampler import GREEDY, Engine, EngineConfig
    from tests.helpers.sampler_reference import BASE, COMMON, SHORT, hf_generate, run_slots

    torch.manual_seed(2)
    hf = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(**COMMON, rms_norm_eps=1e-5, tie_word_embeddings=True)
    ).eval()
    hf.generation_config.eos_token_id = None  # generate exactly max_new_tokens
    hf.generation_config.pad_token_id = 0
    hf.save_pretrained(tmp_path, safe_serialization=True)
    config = EngineConfig(**(BASE | {"max_prefill_length": 8, "max_new_tokens": 12}))
    engine = Engine(load_pretrained(tmp_path), config, sampling=GREEDY)
    # test_sampler_engine's four short prompts (2 to 7 tokens: one prefill bucket), four slots
    tokens, _, _ = run_slots(engine, SHORT, [12] * len(SHORT))
    assert tokens == hf_generate(hf, SHORT, 12, batched=False)
    assert tokens == hf_generate(hf, SHORT, 12, batched=True)


# ---- the trainer's update -----------------------------------------------------------------------


def test_an_rl_update_follows_the_advantage_sign():
    """test_rl_update's check on a Llama: GRPO steps raise the log-probability of the winners'
    responses and lower the losers'."""
    from tests.helpers.rl_rows import grpo_steps
    from tests.helpers.turn_rows import TINY_CONFIG

    config = dataclasses.replace(TINY_CONFIG, model_type="llama", attention_bias=True)
    graphdef, params = nnx.split(DecoderForCausalLM(config, rngs=nnx.Rngs(0)))
    _, before, after, _ = grpo_steps(graphdef, params)
    assert (after[::2] > before[::2]).all() and (after[1::2] < before[1::2]).all()


# ---- sharding -----------------------------------------------------------------------------------


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 simulated devices (tests/conftest.py)")
def test_the_partition_rules_place_a_llama_with_biases():
    """Parameter names are the Qwen ones (test_sharding runs the sharded forward); the MLP biases
    a Llama may add are split like their kernels' output dimension."""
    config = preset("tiny", model_type="llama", vocab_size=64, num_hidden_layers=1)
    config = dataclasses.replace(config, attention_bias=True, mlp_bias=True)
    model = shard_model(DecoderForCausalLM(config, rngs=nnx.Rngs(0)), make_mesh(1, 4, 2))
    mlp, attn = model.model.layers[0].mlp, model.model.layers[0].self_attn
    assert mlp.up_proj.bias.get_value().sharding.spec == PartitionSpec("tensor")
    assert mlp.gate_proj.bias.get_value().addressable_shards[0].data.shape == (512 // 2,)
    assert mlp.down_proj.bias.get_value().sharding.is_fully_replicated
    assert attn.o_proj.bias.get_value().sharding.is_fully_replicated
    assert attn.q_proj.kernel.get_value().sharding.spec == PartitionSpec("fsdp", "tensor")
