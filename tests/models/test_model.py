"""Qwen2/Qwen3 in Flax NNX against Hugging Face transformers (PyTorch CPU, a dev dependency).

Tiny random models are built from transformers configs and saved with save_pretrained; our
loader reads them. Logits are compared on real (non-padding) positions of a left-padded batch of
unequal lengths: tolerance 1e-4 absolute (float32, as the issue states).
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

from arlarena_jax.models.config import QwenConfig, preset
from arlarena_jax.models.hf_io import load_pretrained, save_pretrained
from arlarena_jax.models.qwen import QwenForCausalLM
from tests.helpers.hf_reference import IDS, MASK, REAL, TINY_HF, hf_logits

COMMON = TINY_HF


def hf_model(kind: str, tie: bool):
    torch.manual_seed(0)
    if kind == "qwen3":
        config = transformers.Qwen3Config(**COMMON, head_dim=32, tie_word_embeddings=tie)
        return transformers.Qwen3ForCausalLM(config).eval()
    config = transformers.Qwen2Config(**COMMON, tie_word_embeddings=tie)
    return transformers.Qwen2ForCausalLM(config).eval()


@pytest.mark.parametrize(("kind", "tie"), [("qwen3", False), ("qwen3", True), ("qwen2", True)])
def test_logits_match_transformers(kind, tie, tmp_path):
    model = hf_model(kind, tie)
    model.save_pretrained(tmp_path, safe_serialization=True)
    ours = load_pretrained(tmp_path)
    got = np.asarray(ours(jnp.asarray(IDS), jnp.asarray(MASK)))
    np.testing.assert_allclose(got[REAL], hf_logits(model)[REAL], atol=1e-4)


@pytest.mark.parametrize("kind", ["qwen3", "qwen2"])
def test_round_trip_through_transformers(kind, tmp_path):
    config = preset("tiny", model_type=kind, vocab_size=97, tie_word_embeddings=kind == "qwen2")
    ours = QwenForCausalLM(config, rngs=nnx.Rngs(3))
    save_pretrained(ours, tmp_path)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    expected = np.asarray(ours(jnp.asarray(IDS), jnp.asarray(MASK)))
    np.testing.assert_allclose(hf_logits(theirs)[REAL], expected[REAL], atol=1e-4)
    reloaded = load_pretrained(tmp_path)
    np.testing.assert_array_equal(
        np.asarray(reloaded(jnp.asarray(IDS), jnp.asarray(MASK))), expected
    )


def test_left_padding_equals_unpadded():
    """A left-padded row gives the logits of the same tokens without padding (1e-5)."""
    ours = QwenForCausalLM(preset("tiny", vocab_size=97), rngs=nnx.Rngs(0))
    padded = np.asarray(ours(jnp.asarray(IDS[:1]), jnp.asarray(MASK[:1])))[0, 3:]
    alone = np.asarray(ours(jnp.asarray(IDS[:1, 3:])))[0]
    np.testing.assert_allclose(padded, alone, atol=1e-5)


def test_bad_checkpoints_fail_with_one_line(tmp_path):
    ours = QwenForCausalLM(preset("tiny", vocab_size=97), rngs=nnx.Rngs(0))
    save_pretrained(ours, tmp_path)
    from safetensors.numpy import load_file, save_file

    tensors = load_file(tmp_path / "model.safetensors")
    missing = dict(tensors)
    del missing["model.layers.1.mlp.up_proj.weight"]
    save_file(missing, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"missing tensor 'model.layers.1.mlp.up_proj.weight'"):
        load_pretrained(tmp_path)
    wrong = dict(tensors)
    wrong["model.norm.weight"] = np.ones(7, np.float32)
    save_file(wrong, tmp_path / "model.safetensors")
    with pytest.raises(
        ValueError, match=r"'model.norm.weight' has shape \(7,\), expected \(128,\)"
    ):
        load_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config | {"model_type": "gemma"}))
    with pytest.raises(ValueError, match=r"model_type 'gemma' is not a supported decoder \(qwen2"):
        load_pretrained(tmp_path)


def test_unexpected_truncated_and_unreadable_checkpoints_name_what_is_wrong(tmp_path):
    """An extra tensor (attention biases for a model without them) is refused unless ignored by
    pattern; a truncated file names the file and the tensor; broken JSON names the line."""
    ours = QwenForCausalLM(preset("tiny", vocab_size=97), rngs=nnx.Rngs(0))
    save_pretrained(ours, tmp_path)
    from safetensors.numpy import load_file, save_file

    tensors = load_file(tmp_path / "model.safetensors")
    bias = "model.layers.0.self_attn.q_proj.bias"
    save_file(tensors | {bias: np.zeros(4, np.float32)}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=rf"1 tensor\(s\) the model does not use: '{bias}'"):
        load_pretrained(tmp_path)
    loaded = load_pretrained(tmp_path, ignore_unexpected=["*.q_proj.bias"])
    np.testing.assert_array_equal(
        np.asarray(loaded.model.norm.weight.get_value()), tensors["model.norm.weight"]
    )
    save_file(tensors | {"model.rotary_emb.inv_freq": np.ones(4, np.float32)}, tmp_path / "x")
    (tmp_path / "x").rename(tmp_path / "model.safetensors")
    load_pretrained(tmp_path)  # a buffer transformers skips too
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) - 100])
    with pytest.raises(ValueError, match=r"tensor '[^']+' in .*model\.safetensors is truncated"):
        load_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(data[:5])
    with pytest.raises(ValueError, match=r"model\.safetensors is not a safetensors file"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text('{\n  "model_type": "qwen3",\n  oops\n}')
    with pytest.raises(ValueError, match=r"config\.json: invalid JSON at line 3, column 3"):
        load_pretrained(tmp_path)


def test_presets_sizes():
    def count(name):
        model = nnx.eval_shape(lambda: QwenForCausalLM(preset(name), rngs=nnx.Rngs(0)))
        return sum(np.prod(p.shape) for p in jax.tree.leaves(nnx.state(model, nnx.Param)))

    assert 1e6 <= count("tiny") <= 5e6
    assert 25e6 <= count("small") <= 35e6
    assert 3.9e9 <= count("qwen3-4b") <= 4.1e9  # Qwen3-4B: 4.02 B parameters


def test_config_json_round_trip():
    config = preset("qwen2.5-7b")
    assert QwenConfig.from_hf_dict(config.to_hf_dict()) == config
    with pytest.raises(ValueError, match="rope_scaling type 'longrope' is not supported"):
        QwenConfig(rope_scaling={"rope_type": "longrope", "factor": 4.0})


def test_sharded_checkpoint_with_index(tmp_path):
    model = hf_model("qwen3", tie=False)
    model.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 1
    ours = load_pretrained(tmp_path)
    got = np.asarray(ours(jnp.asarray(IDS), jnp.asarray(MASK)))
    np.testing.assert_allclose(got[REAL], hf_logits(model)[REAL], atol=1e-4)


def test_padding_positions_stay_finite():
    """Fully masked (left-padding) query rows must not produce NaN that could spread."""
    ours = QwenForCausalLM(preset("tiny", vocab_size=97), rngs=nnx.Rngs(0))
    assert np.isfinite(np.asarray(ours(jnp.asarray(IDS), jnp.asarray(MASK)))).all()
