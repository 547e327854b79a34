"""Model families declared in one place (``arlarena_jax.models.families``).

A toy family is registered from this file, no library file edited: a structural combination no
release has (q/k/v bias always, as Qwen2; o bias and MLP bias set by the config, as Llama; q/k
RMSNorm, as Qwen3; its own ``model_type``, class names and GGUF architecture). It

* loads from a Hugging Face directory this file writes (config.json + safetensors), exports
  (``save_pretrained``) and loads back equal, as a causal LM and as a critic;
* imports from a GGUF file written by ``gguf.GGUFWriter``;
* trains: GRPO updates raise the winners' log-probabilities (test_rl_update's check);
* shards: every one of its tensors has a partition rule of its own (none falls back to
  replication unnoticed).

Each registered family's declared parameter count equals the count of an instantiated model, and
the built-in families' declarations are what the code branched on before (Qwen2: q/k/v bias, no o
bias; Qwen3: q/k norm; Llama: GGUF q/k rows permuted, the MLP bias key). Registering a name twice
and an unknown ``model_type`` are one line each.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from arlarena_jax.models import families
from arlarena_jax.models.config import PRESETS, QwenConfig
from arlarena_jax.models.families import ModelFamily, family, register_family
from arlarena_jax.models.hf_io import load_pretrained, read_safetensors, save_pretrained
from arlarena_jax.models.lora import LoRAConfig, LoRAParam, add_lora
from arlarena_jax.models.qwen import QwenForCausalLM
from arlarena_jax.models.sharding import PARAMETER_RULES
from arlarena_jax.models.value import (
    load_value_pretrained,
    save_value_pretrained,
    value_model_from_policy,
)
from arlarena_jax.train import memory_estimate as me

TOY = ModelFamily(
    "toyfam",
    "ToyFam",
    qkv_bias=True,
    o_bias=None,
    mlp_bias=None,
    qk_norm=True,
    gguf_architecture="toyfam",
    description="a test's own family",
)
SMALL = dict(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=128,
)
IDS = np.array([[0, 0, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6]])
MASK = np.array([[0, 0, 1, 1, 1, 1], [1] * 6])


@pytest.fixture(scope="module", autouse=True)
def toy_family():
    register_family(TOY)
    yield TOY
    families.unregister_family(TOY.name)


def toy_config(**overrides) -> QwenConfig:
    base = dict(SMALL, attention_bias=False, mlp_bias=True, tie_word_embeddings=False)
    return QwenConfig("toyfam", **(base | overrides))


def real_count(config: QwenConfig) -> int:
    model = nnx.eval_shape(lambda: QwenForCausalLM(config, rngs=nnx.Rngs(0)))
    return int(sum(np.prod(p.shape) for p in jax.tree.leaves(nnx.state(model, nnx.Param))))


def variants(name: str):
    """Small configs of family ``name``: every bias setting it allows, tied and untied."""
    declared = family(name)
    for attention_bias in (False, True):
        for mlp_bias in (False, True) if declared.mlp_bias_key else (False,):
            for tie in (False, True):
                yield QwenConfig(
                    name,
                    **SMALL,
                    attention_bias=attention_bias,
                    mlp_bias=mlp_bias,
                    tie_word_embeddings=tie,
                )


# ---- the declarations ---------------------------------------------------------------------------


def test_the_toy_config_reads_its_traits_from_the_family():
    config = toy_config()
    assert config.family is TOY
    assert (config.qkv_bias, config.o_bias, config.qk_norm, config.mlp_bias) == (
        True,
        False,
        True,
        True,
    )
    assert toy_config(attention_bias=True).o_bias
    hf = config.to_hf_dict()
    assert hf["architectures"] == ["ToyFamForCausalLM"] and hf["model_type"] == "toyfam"
    assert "attention_bias" in hf and "mlp_bias" in hf  # both set per checkpoint
    assert QwenConfig.from_hf_dict(hf) == config


def test_built_in_families_declare_what_the_code_branched_on():
    qwen2, qwen3, llama = family("qwen2"), family("qwen3"), family("llama")
    assert (qwen2.qkv_bias, qwen2.o_bias, qwen2.qk_norm) == (True, False, False)
    assert (qwen3.qkv_bias, qwen3.o_bias, qwen3.qk_norm) == (None, None, True)
    assert (llama.qkv_bias, llama.o_bias, llama.qk_norm) == (None, None, False)
    assert [f.mlp_bias_key for f in (qwen2, qwen3, llama)] == [False, False, True]
    assert [f.gguf_permuted_qk for f in (qwen2, qwen3, llama)] == [False, False, True]
    assert [f.causal_lm_architecture() for f in (qwen2, qwen3, llama)] == [
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "LlamaForCausalLM",
    ]
    assert "attention_bias" not in PRESETS["qwen2.5-0.5b"].to_hf_dict()
    assert "mlp_bias" not in PRESETS["qwen3-0.6b"].to_hf_dict()
    assert llama.hf_defaults["rope_theta"] == 10000.0


@pytest.mark.parametrize("name", ["qwen2", "qwen3", "llama", "toyfam"])
def test_declared_parameter_count_is_the_instantiated_models(name):
    for config in variants(name):
        count = real_count(config)
        assert family(name).parameter_count(config) == count, config
        assert me.parameter_count(config) == count


def test_declared_counts_of_the_presets_are_the_instantiated_models():
    for name in ("tiny", "qwen3-0.6b", "qwen2.5-0.5b", "smollm2-135m"):
        assert me.parameter_count(PRESETS[name]) == real_count(PRESETS[name]), name


def test_lora_count_is_the_adapters_of_an_instantiated_toy():
    config = toy_config()
    lora = LoRAConfig(rank=4, targets=("q", "o", "down"))
    model = add_lora(QwenForCausalLM(config, rngs=nnx.Rngs(0)), lora)
    adapters = jax.tree.leaves(nnx.state(model, LoRAParam))
    assert me.lora_parameter_count(lora, config) == sum(a.size for a in adapters) > 0


def test_registering_a_name_twice_is_one_error():
    with pytest.raises(ValueError, match=r"^model family 'toyfam' is already registered$"):
        register_family(dataclasses.replace(TOY, qk_norm=False))
    with pytest.raises(ValueError, match=r"^model family 'llama' is already registered$"):
        register_family(ModelFamily("llama", "Llama"))
    with pytest.raises(ValueError, match=r"^GGUF architecture 'toyfam' is already registered$"):
        register_family(dataclasses.replace(TOY, name="toyfam2"))
    assert family("toyfam") is TOY and "toyfam2" not in families.family_names()


def test_an_unknown_model_type_is_one_line_naming_the_known_families(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(toy_config().to_hf_dict() | {"model_type": "gemma"})
    )
    with pytest.raises(ValueError) as info:
        load_pretrained(tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("config.json model_type 'gemma' is not a supported decoder (")
    for name in ("qwen2", "qwen3", "llama", "toyfam"):
        assert name in message
    assert "register_family" in message


# ---- the toy family end to end ------------------------------------------------------------------


def write_checkpoint(directory, config: QwenConfig) -> dict[str, np.ndarray]:
    """A Hugging Face directory as transformers would write one: config.json and
    model.safetensors of random tensors (the shapes the family declares)."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    tensors = {
        t.name: (rng.standard_normal(t.shape) * 0.1).astype(np.float32)
        for t in config.family.tensors(config)
    }
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config.to_hf_dict()))
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    return tensors


def test_the_toy_loads_exports_and_loads_back_equal(tmp_path):
    config = toy_config()
    written = write_checkpoint(tmp_path / "in", config)
    assert "model.layers.1.self_attn.q_norm.weight" in written
    assert "model.layers.0.mlp.down_proj.bias" in written and "lm_head.weight" in written
    assert "model.layers.0.self_attn.o_proj.bias" not in written
    model = load_pretrained(tmp_path / "in")
    assert model.config == config
    logits = np.asarray(model(jnp.asarray(IDS), jnp.asarray(MASK)))

    out = save_pretrained(model, tmp_path / "out")
    exported = json.loads((out / "config.json").read_text())
    assert exported["architectures"] == ["ToyFamForCausalLM"]
    assert exported["model_type"] == "toyfam"
    again = read_safetensors(out)
    assert set(again) == set(written)
    for name, value in written.items():
        np.testing.assert_array_equal(again[name], value)
    reloaded = load_pretrained(out)
    assert reloaded.config == config
    np.testing.assert_array_equal(np.asarray(reloaded(jnp.asarray(IDS), jnp.asarray(MASK))), logits)


def test_the_toy_critic_exports_as_its_token_classifier(tmp_path):
    policy = QwenForCausalLM(toy_config(attention_bias=True), rngs=nnx.Rngs(1))
    critic = value_model_from_policy(policy, seed=2)
    save_value_pretrained(critic, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == ["ToyFamForTokenClassification"]
    values = np.asarray(critic(jnp.asarray(IDS), jnp.asarray(MASK)))
    again = load_value_pretrained(tmp_path)
    np.testing.assert_array_equal(np.asarray(again(jnp.asarray(IDS), jnp.asarray(MASK))), values)


def test_the_toy_imports_from_gguf(tmp_path):
    from arlarena_jax.models.gguf_import import import_gguf
    from tests.helpers.gguf_files import SHAPE, TOKENS, write_gguf

    shape = dict(
        vocab_size=len(TOKENS),
        hidden_size=SHAPE["hidden"],
        intermediate_size=SHAPE["inter"],
        num_hidden_layers=SHAPE["layers"],
        num_attention_heads=SHAPE["heads"],
        num_key_value_heads=SHAPE["kv"],
        head_dim=SHAPE["head_dim"],
    )
    config = QwenConfig("toyfam", **shape, tie_word_embeddings=True, mlp_bias=True)
    rng = np.random.default_rng(4)
    weights = {
        t.name: (rng.standard_normal(t.shape) * 0.1).astype(np.float32) for t in TOY.tensors(config)
    }
    write_gguf(tmp_path / "m.gguf", "toyfam", weights)
    out = import_gguf(tmp_path / "m.gguf", tmp_path / "hf")
    imported = json.loads((out / "config.json").read_text())
    assert imported["model_type"] == "toyfam" and imported["attention_bias"] is False
    assert imported["mlp_bias"] is True
    got = read_safetensors(out)
    assert set(got) == set(weights)
    for name, value in weights.items():
        np.testing.assert_array_equal(got[name], value)
    assert load_pretrained(out).config.qk_norm


def test_the_toy_trains():
    """test_rl_update's check on the toy: GRPO steps raise the log-probability of the winners'
    responses and lower the losers'."""
    from tests.helpers.rl_rows import grpo_steps
    from tests.helpers.turn_rows import TINY_CONFIG

    config = dataclasses.replace(
        TINY_CONFIG,
        model_type="toyfam",
        attention_bias=True,
        mlp_bias=True,
        tie_word_embeddings=False,
    )
    graphdef, params = nnx.split(QwenForCausalLM(config, rngs=nnx.Rngs(0)))
    assert "q_norm" in str(jax.tree_util.tree_structure(params))
    _, before, after, _ = grpo_steps(graphdef, params)
    assert (after[::2] > before[::2]).all() and (after[1::2] < before[1::2]).all()


@pytest.mark.parametrize("name", ["qwen2", "qwen3", "llama", "toyfam"])
def test_every_declared_tensor_has_a_partition_rule(name):
    """No parameter of any family is replicated for want of a rule (norms are replicated by
    their own rule)."""
    import re

    for config in variants(name):
        for tensor in config.family.tensors(config):
            attribute = ".".join(str(k) for k in tensor.path)
            assert any(re.search(p, attribute) for p, _ in PARAMETER_RULES), attribute
