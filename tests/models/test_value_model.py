"""PPO's value models (arlarena_jax/models/value.py): verl's layout, a Qwen with a scalar head.

- Built from the policy, the critic's decoder is a copy of the policy's and its head is fresh.
- A response token's value is read at the position that predicts it, as its log-prob is.
- The export is a ``transformers`` token-classification model: loaded there, it gives our values
  (float32 on both sides, two layers: 1e-4 absolute, as the policy's export test's logits).
- Reading it back gives the same model; a directory that is not a one-label value model fails in
  one line.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from arlarena_jax.models import QwenConfig, QwenForCausalLM
from arlarena_jax.models.value import (
    QwenValueModel,
    ValueHead,
    load_value_pretrained,
    response_values,
    save_value_pretrained,
    value_model_from_policy,
)


def _config(model_type: str, tie: bool) -> QwenConfig:
    return QwenConfig(
        model_type,
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        tie_word_embeddings=tie,
    )


@pytest.fixture(scope="module", params=[("qwen3", False), ("qwen2", True)])
def policy(request):
    return QwenForCausalLM(_config(*request.param), rngs=nnx.Rngs(3))


@pytest.fixture(scope="module")
def ids():
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(1, 128, (2, 9)), jnp.int32)
    mask = jnp.asarray([[0, 0, 1, 1, 1, 1, 1, 1, 1], [1] * 9], jnp.int32)  # left padding
    return ids, mask


def test_the_critic_copies_the_policys_decoder_and_has_a_fresh_head(policy):
    critic = value_model_from_policy(policy, seed=0)
    same = jax.tree.map(
        lambda a, b: bool(jnp.array_equal(a, b)),
        nnx.state(policy.model, nnx.Param),
        nnx.state(critic.backbone.model, nnx.Param),
    )
    assert all(jax.tree.leaves(same))
    assert critic.backbone.lm_head is None  # a value model has no LM head
    kernel = np.asarray(critic.head.score.kernel.get_value())
    assert kernel.shape == (32, 1) and 0.0 < kernel.std() < 0.1  # N(0, 0.02²) draws
    assert not np.any(np.asarray(critic.head.score.bias.get_value()))
    # a copy, not shared arrays: changing the critic leaves the policy alone
    before = np.asarray(policy.model.norm.weight.get_value()).copy()
    critic.backbone.model.norm.weight.set_value(jnp.zeros(32))
    np.testing.assert_array_equal(np.asarray(policy.model.norm.weight.get_value()), before)


def test_the_values_are_the_head_on_the_policy_hidden_states(policy, ids):
    critic = value_model_from_policy(policy, seed=1)
    head = ValueHead(32, rngs=nnx.Rngs(0))
    nnx.update(head, nnx.state(critic.head, nnx.Param))
    on_trunk = head(policy.hidden_states(*ids))
    np.testing.assert_allclose(np.asarray(critic(*ids)), np.asarray(on_trunk), atol=1e-6)


def test_a_response_token_is_valued_at_the_position_that_predicts_it():
    full = jnp.arange(20.0).reshape(2, 10)  # V at positions 0..9
    # prompt width 4: response token 0 sits at position 4 and is valued at position 3
    np.testing.assert_array_equal(np.asarray(response_values(full, 4, 6)), np.asarray(full[:, 3:9]))


def test_the_export_is_a_transformers_token_classifier_with_our_values(policy, ids, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    critic = value_model_from_policy(policy, seed=2)
    save_value_pretrained(critic, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["num_labels"] == 1 and config["architectures"][0].endswith("TokenClassification")
    hf = transformers.AutoModelForTokenClassification.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        out = hf(
            input_ids=torch.tensor(np.asarray(ids[0])),
            attention_mask=torch.tensor(np.asarray(ids[1])),
        )
    theirs = out.logits[..., 0].numpy()
    ours = np.asarray(critic(*ids))
    real = np.asarray(ids[1]) > 0  # padded positions differ by convention only
    np.testing.assert_allclose(ours[real], theirs[real], atol=1e-4)


def test_reading_the_export_back_gives_the_same_model(policy, ids, tmp_path):
    critic = value_model_from_policy(policy, seed=4)
    save_value_pretrained(critic, tmp_path)
    again = load_value_pretrained(tmp_path)
    assert isinstance(again, QwenValueModel)
    np.testing.assert_array_equal(np.asarray(again(*ids)), np.asarray(critic(*ids)))


def test_a_directory_that_is_not_a_value_model_fails_in_one_line(policy, tmp_path):
    from arlarena_jax.models import save_pretrained

    save_pretrained(policy, tmp_path / "policy")
    with pytest.raises(ValueError, match=r"no 'score.weight' tensor: not a value model$"):
        load_value_pretrained(tmp_path / "policy")
    critic = value_model_from_policy(policy, seed=0)
    save_value_pretrained(critic, tmp_path / "two")
    path = tmp_path / "two" / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"num_labels": 2}))
    with pytest.raises(ValueError, match="a value model has one label, this one has 2"):
        load_value_pretrained(tmp_path / "two")
