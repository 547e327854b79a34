"""``model.num_layers``: a checkpoint's first N decoder layers (load_pretrained(num_layers=N)).
The reference is independent: ``transformers`` with its layer list cut to the same N (a float32
forward on CPU; agreement to 1e-5 absolute, the two implementations' rounding)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from arlarena_jax.errors import ConfigError
from arlarena_jax.models.hf_io import load_pretrained
from arlarena_jax.train.config_io import load_config
from tests.helpers.hf_reference import TINY_HF


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A random 4-layer Llama (untied head) saved by ``transformers``, and the model itself."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        **TINY_HF | dict(vocab_size=128, num_hidden_layers=4, max_position_embeddings=128),
        initializer_range=0.2,
        tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    directory = tmp_path_factory.mktemp("llama4")
    model.save_pretrained(directory, safe_serialization=True)
    return directory, model


def test_first_layers_compute_what_the_cut_reference_computes(checkpoint):
    directory, reference = checkpoint
    ids = np.array([[1, 5, 9, 77, 3, 120, 64, 2]])
    ours = load_pretrained(directory, num_layers=2)
    assert ours.config.num_hidden_layers == 2 and len(ours.model.layers) == 2
    reference.model.layers = reference.model.layers[:2]
    reference.config.num_hidden_layers = 2
    with torch.no_grad():
        expected = reference(torch.tensor(ids)).logits.numpy()
    got = np.asarray(ours(jnp.asarray(ids)))
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    full = np.asarray(load_pretrained(directory)(jnp.asarray(ids)))
    assert np.abs(full - got).max() > 1e-2  # the two dropped layers did change the output


def test_more_layers_than_the_checkpoint_has_is_one_error(checkpoint):
    with pytest.raises(ValueError, match="cannot keep 5 layers of a model with 4"):
        load_pretrained(checkpoint[0], num_layers=5)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.num_layers=2"], "keeps the first layers of model.path, which is null"),
        (["model.path=/nowhere", "model.num_layers=0"], "must be >= 1 or null, got 0"),
    ],
)
def test_config_refuses_num_layers_without_a_path_or_below_one(overrides, message):
    with pytest.raises(ConfigError, match=r"model\.num_layers") as info:
        load_config("configs/sokoban/base_tiny.yaml", overrides)
    assert message in str(info.value)
