"""LoRA adapters (``model.lora``, arlarena_jax/models/lora.py).

Expected values from the definition y = x W + (alpha / r) x A B: with B = 0 the adapted model
computes exactly the base model's logits (x A B is exactly 0, and y + 0 = y); merging W + (alpha
/ r) A B computes the same function (float32 reassociation: 1e-4 on logits); an update step moves
the adapters only (the base bitwise unchanged, the optimizer state over the adapters only);
a checkpoint of the adapters restored over a fresh base continues bitwise; the partition rules
split A's input and B's output as their kernel's, never the rank.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from arlarena_jax.errors import ConfigError
from arlarena_jax.models import QwenForCausalLM, preset, save_pretrained
from arlarena_jax.models.lora import (
    LoRAConfig,
    LoRAParam,
    add_lora,
    has_lora,
    merged_model,
    sampler_params,
    save_peft_adapter,
    split_trainable,
    trainable_part,
)
from arlarena_jax.models.sharding import BATCH, make_mesh, shard_model
from arlarena_jax.objectives import advantage, ratio
from arlarena_jax.objectives import aggregate as agg
from arlarena_jax.objectives.compose import chain
from arlarena_jax.train.checkpoint import Checkpointer, abstract_like
from arlarena_jax.train.config import Config
from arlarena_jax.train.config_io import config_from_dict
from arlarena_jax.train.critic import build_value_module
from arlarena_jax.train.run_state import TrainState
from arlarena_jax.train.update import make_log_prob_fn, make_prepare_fn, make_update_step
from tests.helpers.turn_rows import random_turn_rows

CONFIG = preset(  # tiny's architecture, smaller: the tests compile less
    "tiny",
    vocab_size=64,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    head_dim=16,
    tie_word_embeddings=False,
)
LORA = LoRAConfig(rank=4, alpha=8.0)
IDS = jnp.asarray(np.random.default_rng(0).integers(0, 64, size=(2, 10)))
P, T = 6, 5


def base_model() -> QwenForCausalLM:
    return QwenForCausalLM(CONFIG, rngs=nnx.Rngs(0))


def lora_model(*, trained: bool = False, seed: int = 1) -> QwenForCausalLM:
    """The base model with adapters; ``trained``: B random (as after training), not zero."""
    model = add_lora(base_model(), LORA, seed=seed)
    if trained:
        key = jax.random.key(7)
        for layer in model.model.layers:
            for linear in (layer.self_attn.q_proj, layer.self_attn.o_proj, layer.mlp.down_proj):
                key, sub = jax.random.split(key)
                shape = linear.lora_b.get_value().shape
                linear.lora_b.set_value(0.05 * jax.random.normal(sub, shape))
    return model


def test_a_zero_adapter_gives_the_base_logits_exactly():
    expected = np.asarray(base_model()(IDS))
    np.testing.assert_array_equal(np.asarray(lora_model()(IDS)), expected)
    assert not np.allclose(np.asarray(lora_model(trained=True)(IDS)), expected, atol=1e-3)


def test_merged_weights_compute_the_adapted_model():
    model = lora_model(trained=True)
    merged = merged_model(model)
    assert not has_lora(nnx.state(merged)) and has_lora(nnx.state(model))
    np.testing.assert_allclose(np.asarray(merged(IDS)), np.asarray(model(IDS)), atol=1e-4)
    _, params = nnx.split(model)
    _, merged_params = nnx.split(merged)
    synced = sampler_params(params, LORA)  # what the sampler receives per weight sync
    assert jax.tree.structure(synced) == jax.tree.structure(merged_params)
    for a, b in zip(jax.tree.leaves(synced), jax.tree.leaves(merged_params), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def rows(n: int = 4):
    sequences, batch = random_turn_rows(
        np.random.default_rng(1), n, vocab=64, group_size=2, prompt_length=P, response_length=T
    )
    return jax.tree.map(jnp.asarray, sequences), batch


OBJECTIVE = chain(advantage.grpo(), ratio.vanilla(), agg.seq_mean_token_mean())
OPTIMIZER = optax.adam(1e-2)


def prepared(graphdef, params, sequences, batch):
    lp, ent = make_log_prob_fn(graphdef, prompt_length=P, micro_batch_size=2)(params, sequences)
    batch = batch._replace(old_log_probs=lp * batch.response_mask, old_entropy=ent)
    return make_prepare_fn(OBJECTIVE)(batch, None)[0]


def update_step(graphdef, mesh=None, rows_per_step=4):
    return make_update_step(
        graphdef,
        OBJECTIVE,
        OPTIMIZER,
        prompt_length=P,
        mini_batch_size=rows_per_step,
        micro_batch_size=rows_per_step // 2,
        donate=False,
        mesh=mesh,
    ).step


def test_gradients_reach_the_adapters_only():
    graphdef, params = nnx.split(lora_model())
    sequences, batch = rows()
    batch = prepared(graphdef, params, sequences, batch)
    trainable, frozen = split_trainable(params)
    opt_state = OPTIMIZER.init(trainable)
    adapters = len(jax.tree.leaves(trainable))
    assert adapters == 2 * 7 * CONFIG.num_hidden_layers  # A and B of 7 linears per layer
    assert len(jax.tree.leaves(opt_state)) == 1 + 2 * adapters  # count, mu and nu: adapters only
    new, _, metrics = update_step(graphdef)(params, opt_state, sequences, batch)
    assert float(metrics["grad_norm"]) > 0
    new_trainable, new_frozen = split_trainable(new)
    for a, b in zip(jax.tree.leaves(new_frozen), jax.tree.leaves(frozen), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # the base: untouched
    old = dict(nnx.to_flat_state(trainable))
    for path, variable in nnx.to_flat_state(new_trainable):
        before = np.asarray(old[path].get_value())
        after = np.asarray(variable.get_value())
        if path[-1] == "lora_b":  # ∂L/∂B = (alpha/r) (x A)ᵀ g ≠ 0
            assert not np.array_equal(after, before), path
        else:  # ∂L/∂A = (alpha/r) xᵀ g Bᵀ = 0 while B = 0: Adam moves A by 0
            np.testing.assert_array_equal(after, before)


def test_checkpoint_holds_the_adapters_and_resume_is_exact(tmp_path):
    graphdef, params = nnx.split(lora_model())
    sequences, batch = rows()
    batch = prepared(graphdef, params, sequences, batch)
    step = update_step(graphdef)
    state = TrainState(params, OPTIMIZER.init(trainable_part(params)), None)
    state.params, state.opt_state, _ = step(state.params, state.opt_state, sequences, batch)
    with Checkpointer(tmp_path / "checkpoints", keep=2) as checkpointer:
        checkpointer.save(1, state.as_tree(), {"step": 1}, force=True)
        checkpointer.wait()
        saved = state.as_tree()["params"]
        assert all(isinstance(v, LoRAParam) for _, v in nnx.to_flat_state(saved))  # no base
        # a fresh start: the same base (model.path / preset), other adapters, then restored
        _, fresh = nnx.split(lora_model(seed=5))
        start = TrainState(fresh, OPTIMIZER.init(trainable_part(fresh)), None)
        tree, _ = checkpointer.restore(abstract_like(start.as_tree()), 1)
    resumed = start.restored(tree)
    for a, b in zip(
        jax.tree.leaves(resumed.as_tree()), jax.tree.leaves(state.as_tree()), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    after, opt_after, metrics = step(state.params, state.opt_state, sequences, batch)
    again, opt_again, metrics_again = step(resumed.params, resumed.opt_state, sequences, batch)
    for a, b in zip(
        jax.tree.leaves((after, opt_after)), jax.tree.leaves((again, opt_again)), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert float(metrics["grad_norm"]) == float(metrics_again["grad_norm"])


def test_the_hf_export_is_the_merge(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = lora_model(trained=True)
    directory = save_pretrained(merged_model(model), tmp_path / "merged")
    hf = transformers.AutoModelForCausalLM.from_pretrained(directory).eval()
    with torch.no_grad():
        logits = hf(torch.as_tensor(np.array(IDS))).logits.numpy()
    np.testing.assert_allclose(logits, np.asarray(model(IDS)), atol=1e-4)


def test_the_peft_adapter_loads_in_peft(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    model = lora_model(trained=True)
    base_dir = save_pretrained(base_model(), tmp_path / "base")
    adapter_dir = save_peft_adapter(model, LORA, tmp_path / "adapter", str(base_dir))
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir)
    adapted = peft.PeftModel.from_pretrained(base, adapter_dir).eval()
    with torch.no_grad():
        logits = adapted(torch.as_tensor(np.array(IDS))).logits.numpy()
    np.testing.assert_allclose(logits, np.asarray(model(IDS)), atol=1e-4)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_adapters_shard_on_8_devices_and_the_sharded_step_equals_the_unsharded():
    mesh = make_mesh(2, 2, 2)
    model = shard_model(lora_model(trained=True), mesh)
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    assert attn.q_proj.lora_a.get_value().sharding.spec == PartitionSpec("fsdp", None)
    assert attn.q_proj.lora_b.get_value().sharding.spec == PartitionSpec(None, "tensor")
    assert attn.o_proj.lora_a.get_value().sharding.spec == PartitionSpec("tensor", None)
    assert mlp.down_proj.lora_b.get_value().sharding.spec == PartitionSpec(None, "fsdp")
    assert mlp.up_proj.lora_a.get_value().addressable_shards[0].data.shape == (64 // 2, 4)
    graphdef, params = nnx.split(model)
    _, plain = nnx.split(lora_model(trained=True))
    sequences, batch = rows(8)
    batch = prepared(graphdef, plain, sequences, batch)
    opt_state = OPTIMIZER.init(trainable_part(plain))
    expected, _, _ = update_step(graphdef, rows_per_step=8)(plain, opt_state, sequences, batch)
    put = lambda x: jax.device_put(x, NamedSharding(mesh, BATCH))  # noqa: E731
    got, _, _ = update_step(graphdef, mesh, rows_per_step=8)(
        params, OPTIMIZER.init(trainable_part(params)), *jax.tree.map(put, (sequences, batch))
    )
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def test_a_separate_critic_gets_its_own_adapters_and_a_trainable_head():
    config = config_from_dict({"model": {"lora": {"rank": 4, "alpha": 8.0}}})
    policy = lora_model(trained=True)
    critic = build_value_module(config, policy, None)
    trainable, frozen = split_trainable(nnx.state(critic))
    names = {".".join(map(str, path)) for path, _ in nnx.to_flat_state(trainable)}
    assert {"head.score.kernel", "head.score.bias"} <= names
    assert len(names) == 2 + 2 * 7 * CONFIG.num_hidden_layers
    assert not any(path[0] == "head" for path, _ in nnx.to_flat_state(frozen))
    # the critic's trunk is the policy's base (its adapters fresh, B = 0), not its adapted weights
    b = critic.backbone.model.layers[0].self_attn.q_proj.lora_b.get_value()
    np.testing.assert_array_equal(np.asarray(b), 0.0)
    base_q = base_model().model.layers[0].self_attn.q_proj.kernel.get_value()
    q = critic.backbone.model.layers[0].self_attn.q_proj.kernel.get_value()
    np.testing.assert_array_equal(np.asarray(q), np.asarray(base_q))


@pytest.mark.parametrize(
    ("lora", "key"),
    [
        ({"rank": 0}, "model.lora.rank"),
        ({"alpha": 0}, "model.lora.alpha"),
        ({"alpha": -1.0}, "model.lora.alpha"),
        ({"targets": []}, "model.lora.targets"),
        ({"targets": ["q", "qkv"]}, "model.lora.targets"),
        ({"targets": ["q", "q"]}, "model.lora.targets"),
        ({"rank": 2.5}, "model.lora.rank"),
    ],
)
def test_invalid_lora_settings_are_one_line_naming_the_key(lora, key):
    with pytest.raises(ConfigError) as error:
        config_from_dict({"model": {"lora": lora}})
    message = str(error.value)
    assert message.startswith(f"config key {key!r}:") and "\n" not in message


def test_lora_defaults_and_full_fine_tuning_by_default():
    assert Config().model.lora is None
    config = config_from_dict({"model": {"lora": {"rank": 16}}})
    assert config.model.lora == LoRAConfig(16, 16.0, ("q", "k", "v", "o", "gate", "up", "down"))
    assert config.model.lora.scale == 1.0


def test_the_memory_estimate_counts_the_adapters_moments_only():
    from arlarena_jax.train import memory_estimate as me

    _, params = nnx.split(lora_model())
    counted = sum(x.size for x in jax.tree.leaves(trainable_part(params)))
    assert me.lora_parameter_count(LORA, CONFIG) == counted
    full = config_from_dict({})
    lora = config_from_dict({"model": {"lora": {"rank": 4, "alpha": 8.0}}})
    kinds = dict(training=True, reference=True, critic=True)
    full_bytes = sum(t.bytes for t in me.state_terms(full, CONFIG, **kinds))
    lora_bytes = sum(t.bytes for t in me.state_terms(lora, CONFIG, **kinds))
    weights = me.parameter_count(CONFIG) * 4  # float32
    assert full_bytes == 13 * weights  # (5 + 1) × 2 + the sampler's copy
    assert lora_bytes == 5 * weights + 5 * 2 * counted * 4  # 4 trunks + sampler; adapters × 2
