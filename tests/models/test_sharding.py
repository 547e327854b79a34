"""Sharded forward on 8 simulated CPU devices equals the unsharded one (1e-5), and parameters
are laid out as the partition rules say."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from arlarena_jax.models import QwenForCausalLM, preset
from arlarena_jax.models.sharding import BATCH, make_mesh, parameter_spec, shard_model
from tests.helpers.hf_reference import TINY_HF
from tests.helpers.processes import ROOT

pytestmark = pytest.mark.skipif(
    jax.device_count() < 8, reason="needs XLA_FLAGS=--xla_force_host_platform_device_count=8"
)

IDS = jnp.asarray(np.random.default_rng(0).integers(0, 64, size=(8, 12)))
MASK = jnp.asarray((np.arange(12)[None, :] >= np.arange(8)[:, None] % 4).astype(np.int32))


def fresh(tie: bool = False) -> QwenForCausalLM:
    config = preset("tiny", vocab_size=64, num_hidden_layers=2, tie_word_embeddings=tie)
    return QwenForCausalLM(config, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("shape", [(8, 1, 1), (2, 2, 2), (1, 4, 2)])
@pytest.mark.parametrize("tie", [False, True])
def test_sharded_forward_equals_unsharded(shape, tie):
    expected = np.asarray(fresh(tie)(IDS, MASK))
    mesh = make_mesh(*shape)
    model = shard_model(fresh(tie), mesh)
    ids = jax.device_put(IDS, NamedSharding(mesh, BATCH))
    mask = jax.device_put(MASK, NamedSharding(mesh, BATCH))
    graphdef, params = nnx.split(model)

    @jax.jit
    def forward(params, ids, mask):
        return nnx.merge(graphdef, params)(ids, mask)

    got = forward(params, ids, mask)
    np.testing.assert_allclose(np.asarray(got), expected, atol=1e-5)


def test_parameters_are_sharded_as_the_rules_say():
    mesh = make_mesh(1, 4, 2)
    model = shard_model(fresh(), mesh)
    q = model.model.layers[0].self_attn.q_proj.kernel.get_value()
    assert q.sharding.spec == PartitionSpec("fsdp", "tensor")
    assert q.addressable_shards[0].data.shape == (128 // 4, 128 // 2)
    down = model.model.layers[1].mlp.down_proj.kernel.get_value()
    assert down.sharding.spec == PartitionSpec("tensor", "fsdp")
    assert down.addressable_shards[0].data.shape == (512 // 2, 128 // 4)
    norm = model.model.norm.weight.get_value()
    assert norm.sharding.is_fully_replicated
    embed = model.model.embed_tokens.embedding.get_value()
    assert embed.addressable_shards[0].data.shape == (64 // 2, 128 // 4)
    assert parameter_spec("model.layers.3.self_attn.k_proj.bias") == PartitionSpec("tensor")


@pytest.mark.parametrize("mesh", [(2, 2, 2), (4, 2, 1)])
def test_a_cloning_step_keeps_its_batch_split_on_a_data_and_fsdp_mesh(mesh):
    """On a mesh where both data and fsdp exceed 1, the embedding's gradient (the table's width
    split over fsdp) used to make XLA's partitioner replicate the whole [batch, length, width]
    cotangent on every device, with its warning "Involuntary full rematerialization" (one per
    program here; SmolLM2-135M's shapes too). The lookup now reads the table gathered over fsdp
    (sharding.table_for_lookup): no such warning. A fresh process, no compilation cache, so the
    step is compiled and XLA's stderr is read."""
    script = ROOT / "tests" / "helpers" / "sft_step_compile.py"
    env = os.environ | {"ARLARENA_XLA_CACHE": "off", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(script), *map(str, mesh)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]
    assert "Involuntary full rematerialization" not in done.stderr, done.stderr[-2000:]


def test_indivisible_mesh_fails_with_one_line():
    config = preset("tiny", vocab_size=63, num_hidden_layers=1)
    model = QwenForCausalLM(config, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"embed_tokens.embedding of shape \(63, 128\)"):
        shard_model(model, make_mesh(1, 4, 2))
    with pytest.raises(ValueError, match="does not match the 8 devices"):
        make_mesh(2, 2, 1)


def test_load_pretrained_straight_into_the_mesh(tmp_path):
    import transformers

    config = transformers.Qwen3Config(
        **TINY_HF | dict(vocab_size=64), head_dim=16, tie_word_embeddings=False
    )
    transformers.Qwen3ForCausalLM(config).save_pretrained(tmp_path, safe_serialization=True)
    from arlarena_jax.models.hf_io import load_pretrained

    reference = np.asarray(load_pretrained(tmp_path)(IDS, MASK))
    mesh = make_mesh(1, 4, 2)
    model = load_pretrained(tmp_path, mesh=mesh)
    up = model.model.layers[0].mlp.up_proj.kernel.get_value()
    assert up.sharding.spec == PartitionSpec("fsdp", "tensor")
    assert up.addressable_shards[0].data.shape == (64 // 4, 128 // 2)
    graphdef, params = nnx.split(model)
    got = jax.jit(lambda p, i, m: nnx.merge(graphdef, p)(i, m))(params, IDS, MASK)
    np.testing.assert_allclose(np.asarray(got), reference, atol=1e-5)
