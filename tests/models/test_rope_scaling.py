"""RoPE scaling (linear, dynamic NTK, yarn, llama3) against Hugging Face transformers.

Inverse frequencies and yarn's attention factor are compared with transformers'
``ROPE_INIT_FUNCTIONS`` (1e-6 absolute; ours are computed in float64 and rounded to float32,
theirs in float32). Logits of tiny random Qwen3/Qwen2 models saved by transformers and loaded by
us are compared on the real positions of a left-padded batch (1e-4 absolute, float32), with
``original_max_position_embeddings`` (or, for dynamic NTK, ``max_position_embeddings``) 16 and
sequences of 40 tokens, so the scaling changes what every test sees.
"""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from arlarena_jax.models.config import QwenConfig, preset
from arlarena_jax.models.hf_io import load_pretrained, save_pretrained
from arlarena_jax.models.qwen import QwenForCausalLM
from arlarena_jax.models.rope import dynamic_ntk_frequencies, inverse_frequencies
from tests.helpers.hf_reference import TINY_HF

LENGTH = 40
_rng = np.random.default_rng(0)
IDS = _rng.integers(1, 97, size=(2, LENGTH))
MASK = np.ones((2, LENGTH), np.int64)
MASK[0, :6] = 0  # left padding: row 0 has 34 real tokens
IDS[0, :6] = 0
REAL = MASK.astype(bool)
COMMON = TINY_HF

LINEAR = {"rope_type": "linear", "factor": 2.5}
DYNAMIC = {"rope_type": "dynamic", "factor": 2.5}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
YARN_OPTIONS = {
    "rope_type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 16,
    "beta_fast": 8,
    "beta_slow": 2,
    "truncate": False,
    "mscale": 0.7,
    "mscale_all_dim": 1.0,
}
YARN_EXPLICIT = {
    "rope_type": "yarn",
    "factor": 3.0,
    "original_max_position_embeddings": 16,
    "attention_factor": 1.3,
}
# L/high = 8 > 2π: the highest frequency is kept, the next ones smoothed, the rest divided.
LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}
SCALINGS = {
    "linear": LINEAR,
    "dynamic": DYNAMIC,
    "yarn": YARN,
    "yarn-options": YARN_OPTIONS,
    "yarn-attention-factor": YARN_EXPLICIT,
    "llama3": LLAMA3,
}


def hf_config(kind: str, scaling: dict, max_positions: int, **extra):
    cls = transformers.Qwen3Config if kind == "qwen3" else transformers.Qwen2Config
    head = {"head_dim": 32} if kind == "qwen3" else {}
    params = dict(scaling, rope_theta=COMMON["rope_theta"])
    return cls(
        **COMMON, **head, **extra, max_position_embeddings=max_positions, rope_parameters=params
    )


def hf_model(kind: str, scaling: dict, max_positions: int):
    torch.manual_seed(0)
    config = hf_config(kind, scaling, max_positions, tie_word_embeddings=kind == "qwen2")
    cls = transformers.Qwen3ForCausalLM if kind == "qwen3" else transformers.Qwen2ForCausalLM
    return cls(config).eval()


def hf_logits(model, ids=IDS, mask=MASK) -> np.ndarray:
    positions = np.clip(mask.cumsum(-1) - 1, 0, None)
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(ids),
            attention_mask=torch.tensor(mask),
            position_ids=torch.tensor(positions),
        )
    return out.logits.numpy()


def max_positions_for(scaling: dict) -> int:
    # Dynamic NTK scales beyond max_position_embeddings; the others take their original length
    # from rope_scaling and may declare a longer context.
    return 16 if scaling["rope_type"] == "dynamic" else 64


FREQUENCY_CASES = SCALINGS | {
    # original_max_position_embeddings defaults to max_position_embeddings (64).
    "yarn-default-length": {"rope_type": "yarn", "factor": 4.0},
    # factor None: max_position_embeddings / original_max_position_embeddings = 4.
    "yarn-factor-none": {
        "rope_type": "yarn",
        "factor": None,
        "original_max_position_embeddings": 16,
    },
}


@pytest.mark.parametrize("name", list(FREQUENCY_CASES))
@pytest.mark.parametrize(("theta", "head_dim"), [(10000.0, 32), (1_000_000.0, 128)])
def test_inverse_frequencies_match_transformers(name, theta, head_dim):
    scaling = FREQUENCY_CASES[name]
    config = transformers.Qwen3Config(
        **(COMMON | {"rope_theta": theta}),
        head_dim=head_dim,
        max_position_embeddings=64,
        rope_parameters=dict(scaling, rope_theta=theta),
    )
    expected, expected_factor = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](config)
    ours = QwenConfig(
        head_dim=head_dim, rope_theta=theta, max_position_embeddings=64, rope_scaling=scaling
    )
    got, factor = inverse_frequencies(ours)
    assert got.dtype == np.float32 and got.shape == (head_dim // 2,)
    np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=1e-6)
    assert factor == pytest.approx(expected_factor, rel=1e-12)


@pytest.mark.parametrize("seq_len", [5, 16, 17, 40, 1000])
def test_dynamic_ntk_frequencies_match_transformers(seq_len):
    config = hf_config("qwen3", DYNAMIC, 16)
    expected, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, seq_len=torch.tensor(seq_len))
    got = dynamic_ntk_frequencies(10000.0, 32, 2.5, 16, jnp.asarray(seq_len))
    np.testing.assert_allclose(np.asarray(got), expected.numpy(), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("kind", "name"),
    [("qwen3", name) for name in SCALINGS] + [("qwen2", "yarn"), ("qwen2", "dynamic")],
)
def test_logits_match_transformers(kind, name, tmp_path):
    scaling = SCALINGS[name]
    model = hf_model(kind, scaling, max_positions_for(scaling))
    model.save_pretrained(tmp_path, safe_serialization=True)
    ours = load_pretrained(tmp_path)
    assert ours.config.rope_scaling["rope_type"] == scaling["rope_type"]
    got = np.asarray(ours(jnp.asarray(IDS), jnp.asarray(MASK)))
    np.testing.assert_allclose(got[REAL], hf_logits(model)[REAL], atol=1e-4)
    # The scaling matters at these lengths: plain RoPE on the same weights is off by more than
    # ten times the tolerance, so ignoring the scaling could not pass the comparison above.
    ours.config = dataclasses.replace(ours.config, rope_scaling=None)
    plain = np.asarray(ours(jnp.asarray(IDS), jnp.asarray(MASK)))
    assert np.abs(plain[REAL] - got[REAL]).max() > 1e-3


def test_dynamic_ntk_within_max_length_is_plain_rope(tmp_path):
    """Up to max_position_embeddings dynamic NTK is unscaled RoPE, in transformers and here."""
    model = hf_model("qwen3", DYNAMIC, 16)
    model.save_pretrained(tmp_path, safe_serialization=True)
    ours = load_pretrained(tmp_path)
    ids, mask = IDS[:, -16:], MASK[:, -16:].copy()
    mask[0, :3] = 0
    real = mask.astype(bool)
    got = np.asarray(ours(jnp.asarray(ids), jnp.asarray(mask)))
    np.testing.assert_allclose(got[real], hf_logits(model, ids, mask)[real], atol=1e-4)
    ours.config = dataclasses.replace(ours.config, rope_scaling=None)
    np.testing.assert_array_equal(np.asarray(ours(jnp.asarray(ids), jnp.asarray(mask))), got)


def test_jit_with_static_graphdef_and_round_trip(tmp_path):
    """A scaled config hashes (graphdef as a static jit argument); transformers reads ours."""
    config = preset("tiny", vocab_size=97, max_position_embeddings=64, rope_scaling=YARN)
    assert hash(config) == hash(dataclasses.replace(config, rope_scaling=dict(YARN)))
    ours = QwenForCausalLM(config, rngs=nnx.Rngs(1))
    graphdef, state = nnx.split(ours)

    @jax.jit
    def forward(state, ids, mask):
        return nnx.merge(graphdef, state)(ids, mask)

    expected = np.asarray(ours(jnp.asarray(IDS), jnp.asarray(MASK)))
    jitted = jax.jit(lambda g, s, i, m: nnx.merge(g, s)(i, m), static_argnums=0)
    got = np.asarray(jitted(graphdef, state, jnp.asarray(IDS), jnp.asarray(MASK)))
    np.testing.assert_allclose(got, expected, atol=1e-5)
    np.testing.assert_allclose(
        np.asarray(forward(state, jnp.asarray(IDS), jnp.asarray(MASK))), expected, atol=1e-5
    )
    save_pretrained(ours, tmp_path)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert theirs.config.rope_parameters["rope_type"] == "yarn"
    np.testing.assert_allclose(hf_logits(theirs)[REAL], expected[REAL], atol=1e-4)


@pytest.mark.parametrize(
    ("scaling", "message"),
    [
        ({"rope_type": "longrope", "factor": 2.0}, "rope_scaling type 'longrope' is not supported"),
        ({"type": "su"}, "rope_scaling type 'su' is not supported"),
        ({"rope_type": "yarn"}, "rope_scaling type 'yarn' requires the key 'factor'"),
        ({"rope_type": "linear"}, "rope_scaling type 'linear' requires the key 'factor'"),
        ({"rope_type": "dynamic"}, "rope_scaling type 'dynamic' requires the key 'factor'"),
        (
            {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0},
            "rope_scaling type 'llama3' requires the key 'high_freq_factor'",
        ),
        (
            {"rope_type": "linear", "factor": "2"},
            "rope_scaling 'factor' must be a positive number, got '2'",
        ),
        (
            {"rope_type": "dynamic", "factor": None},
            "rope_scaling 'factor' must be a positive number, got None",
        ),
        (
            {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1},
            "'high_freq_factor' \\(1\\) must be greater than 'low_freq_factor' \\(4.0\\)",
        ),
        (
            {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 0},
            "'original_max_position_embeddings' must be a positive int, got 0",
        ),
        (
            {"rope_type": "yarn", "factor": 2.0, "partial_rotary_factor": 0.5},
            "'partial_rotary_factor' 0.5 is not supported",
        ),
    ],
)
def test_bad_rope_scaling_fails_at_config_construction(scaling, message):
    with pytest.raises(ValueError, match=message) as err:
        QwenConfig(rope_scaling=scaling)
    assert "\n" not in str(err.value)


def test_bad_rope_parameters_in_config_json(tmp_path):
    """transformers v5 ``rope_parameters`` go through the same checks when loading."""
    model = hf_model("qwen3", YARN, 64)
    model.save_pretrained(tmp_path, safe_serialization=True)
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["rope_parameters"]["rope_type"] == "yarn"
    del raw["rope_parameters"]["factor"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="rope_scaling type 'yarn' requires the key 'factor'"):
        load_pretrained(tmp_path)
