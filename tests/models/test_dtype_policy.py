"""The dtype policy: parameters in float32 or bfloat16, compute in bfloat16 or float32, logits and
log-probs always float32.

``QwenForCausalLM(..., dtype=compute, param_dtype=params)`` keeps its parameters in ``params``,
runs every matmul in ``compute`` (checked on the traced program) and returns float32 logits;
``token_log_probs`` returns float32 log-probs and entropies; checkpoints convert between bfloat16
and float32 on load; gradients come back in the parameter dtype.
"""

from __future__ import annotations

import copy
import functools
import json
import struct

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from arlarena_jax.models import QwenForCausalLM, preset, token_log_probs
from arlarena_jax.models.hf_io import load_pretrained, save_pretrained, state_dict

F32, BF16 = jnp.float32, jnp.bfloat16
DTYPES = [pytest.param(F32, id="f32"), pytest.param(BF16, id="bf16")]
VOCAB = 61
_rng = np.random.default_rng(0)
IDS = _rng.integers(1, VOCAB, size=(2, 24))
MASK = np.ones((2, 24), np.int32)
MASK[0, :5] = 0  # a left-padded row
IDS[0, :5] = 0
REAL = MASK.astype(bool)

# bfloat16 keeps 8 significant bits: each rounding is off by at most u = 2^-8 (relative). A logit
# goes through a chain of roundings (embedding, then per layer the norms, q/k/v, attention, o_proj,
# the MLP and two residual sums; two layers here), so its error scales with the logits' magnitude:
# measured, the bf16-compute log-softmax is off from float32 (same weights) by 3.4u to 4.5u times
# the largest |logit|. The tolerance, 16u times the largest |logit| (0.046 for the tied model,
# whose logits stay within ±0.75; 0.23 untied, ±3.7), leaves a margin above 3.5× while still
# catching a wrong or misapplied weight (errors of the order of the logits themselves).
BF16_UNIT_ROUNDOFF = 2.0**-8
BF16_TOLERANCE_IN_UNITS = 16


def tiny(tie: bool = True):
    return preset("tiny", vocab_size=VOCAB, tie_word_embeddings=tie, num_hidden_layers=2)


@functools.cache
def float32_weights(tie: bool) -> nnx.State:
    return nnx.state(QwenForCausalLM(tiny(tie), rngs=nnx.Rngs(0)), nnx.Param)


def param_dtypes(m: QwenForCausalLM) -> set:
    return {leaf.dtype for leaf in jax.tree.leaves(nnx.state(m, nnx.Param))}


def model(param_dtype, dtype, tie: bool = True) -> QwenForCausalLM:
    """The same weights (one float32 initialisation, rounded for bf16 parameters) in a model built
    with ``param_dtype`` and ``dtype``; its constructor alone must give every parameter
    ``param_dtype`` (checked on the abstract model, before the weights go in)."""
    m = nnx.eval_shape(
        lambda: QwenForCausalLM(tiny(tie), rngs=nnx.Rngs(0), dtype=dtype, param_dtype=param_dtype)
    )
    assert param_dtypes(m) == {jnp.dtype(param_dtype)}
    nnx.update(m, jax.tree.map(lambda x: x.astype(param_dtype), float32_weights(tie)))
    return m


@nnx.jit
def forward(m: QwenForCausalLM, ids, mask):
    """Hidden states, logits and token stats in one compiled program."""
    return m.hidden_states(ids, mask), m(ids, mask), token_log_probs(m, ids, mask, chunk_size=8)


@nnx.jit
def gradient(m: QwenForCausalLM, ids, mask) -> nnx.State:
    """d/dθ of a policy-gradient-like loss through token_log_probs (θ: the parameters)."""

    def loss(m):
        stats = token_log_probs(m, ids, mask, chunk_size=8)
        weight = mask.astype(F32)
        return -jnp.sum(stats.log_probs * weight) + 0.1 * jnp.sum(stats.entropy * weight)

    return nnx.grad(loss)(m)


def matmul_dtypes(fn, *args) -> set:
    """Operand and result dtypes of every ``dot_general`` in ``fn``'s program, nested ones too."""
    found = set()

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                found.update(str(v.aval.dtype) for v in (*eqn.invars, *eqn.outvars))
            for value in eqn.params.values():
                for sub in value if isinstance(value, tuple | list) else (value,):
                    if hasattr(sub, "eqns"):
                        walk(sub)
                    elif hasattr(getattr(sub, "jaxpr", None), "eqns"):
                        walk(sub.jaxpr)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("param_dtype", DTYPES)
def test_every_combination(param_dtype, dtype):
    m = model(param_dtype, dtype, tie=False)
    ids, mask = jnp.asarray(IDS), jnp.asarray(MASK)
    hidden, logits, stats = forward(m, ids, mask)
    assert param_dtypes(m) == {jnp.dtype(param_dtype)}
    assert hidden.dtype == dtype
    assert logits.dtype == F32
    assert np.isfinite(np.asarray(logits)).all()  # padding positions included
    assert stats.log_probs.dtype == F32 and stats.entropy.dtype == F32
    assert np.isfinite(np.asarray(stats.log_probs)).all()
    assert np.isfinite(np.asarray(stats.entropy)).all()
    assert (np.asarray(stats.log_probs) <= 0).all() and (np.asarray(stats.entropy) >= 0).all()
    # No dtype leaks: every matmul, the LM head's included, runs in the compute dtype.
    assert matmul_dtypes(lambda i, k: token_log_probs(m, i, k, chunk_size=8), ids, mask) == {
        jnp.dtype(dtype).name
    }


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("param_dtype", DTYPES)
def test_bf16_compute_close_to_f32_compute(param_dtype, tie):
    """Same weights (in the same parameter dtype); only the compute dtype differs."""
    ids, mask = jnp.asarray(IDS), jnp.asarray(MASK)
    _, z32, stats32 = forward(model(param_dtype, F32, tie), ids, mask)
    _, z16, stats16 = forward(model(param_dtype, BF16, tie), ids, mask)
    z32, z16 = np.asarray(z32)[REAL], np.asarray(z16)[REAL]
    tolerance = BF16_TOLERANCE_IN_UNITS * BF16_UNIT_ROUNDOFF * np.abs(z32).max()
    error = np.abs(jax.nn.log_softmax(z16) - jax.nn.log_softmax(z32)).max()
    assert 0 < error <= tolerance, (error, tolerance)  # > 0: bf16 compute really happened
    assert np.abs(np.asarray(stats16.log_probs - stats32.log_probs)).max() <= tolerance


def safetensors_dtypes(directory) -> set[str]:
    path = next(directory.glob("*.safetensors"))
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    return {v["dtype"] for k, v in header.items() if k != "__metadata__"}


def hf_logits(model_) -> np.ndarray:
    import torch

    positions = np.clip(MASK.cumsum(-1) - 1, 0, None)
    with torch.no_grad():
        out = model_(
            input_ids=torch.tensor(IDS),
            attention_mask=torch.tensor(MASK),
            position_ids=torch.tensor(positions),
        )
    return out.logits.float().numpy()


def test_checkpoint_dtype_conversion_on_load(tmp_path):
    """bf16 checkpoint → float32 parameters, float32 checkpoint → bf16 parameters."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        tie_word_embeddings=False,
    )
    hf32 = transformers.Qwen3ForCausalLM(config).eval()
    bf16_dir, f32_dir = tmp_path / "bf16", tmp_path / "f32"
    hf32.save_pretrained(f32_dir, safe_serialization=True)
    copy.deepcopy(hf32).to(torch.bfloat16).save_pretrained(bf16_dir, safe_serialization=True)
    assert safetensors_dtypes(bf16_dir) == {"BF16"}
    assert safetensors_dtypes(f32_dir) == {"F32"}
    # The bf16 weights, exactly, in float32 (what the bf16 checkpoint holds), and a float32 model
    # built on them (not the bf16 model cast back: its rotary frequencies, a transformers buffer,
    # would stay rounded to bf16).
    rounded = {k: v.to(torch.bfloat16).float() for k, v in hf32.state_dict().items()}
    hf_rounded = transformers.Qwen3ForCausalLM(config).eval()
    hf_rounded.load_state_dict(rounded)
    rounded = {k: v.numpy() for k, v in rounded.items()}

    for directory in (bf16_dir, f32_dir):
        for param_dtype in (F32, BF16):
            ours = load_pretrained(directory, param_dtype=param_dtype)
            assert param_dtypes(ours) == {jnp.dtype(param_dtype)}
            if directory == bf16_dir or param_dtype == BF16:
                # Rounding to bf16 (on save by torch, or on load by us) is round-to-nearest-even
                # on both sides: the parameters are bit for bit the bf16 weights.
                got = state_dict(ours)
                for name, value in rounded.items():
                    np.testing.assert_array_equal(got[name], value, err_msg=name)
                expected = hf_logits(hf_rounded)
            else:
                expected = hf_logits(hf32)
            logits = np.asarray(ours(jnp.asarray(IDS), jnp.asarray(MASK)))
            assert logits.dtype == np.float32
            np.testing.assert_allclose(logits[REAL], expected[REAL], atol=1e-4)


def test_bf16_parameters_survive_save_and_load(tmp_path):
    """save_pretrained writes float32, which holds bf16 values exactly (initialised in bf16)."""
    ours = QwenForCausalLM(tiny(False), rngs=nnx.Rngs(1), dtype=BF16, param_dtype=BF16)
    assert param_dtypes(ours) == {jnp.dtype(BF16)}
    save_pretrained(ours, tmp_path)
    again = load_pretrained(tmp_path, dtype=BF16, param_dtype=BF16)
    a = jax.tree.leaves(nnx.state(ours, nnx.Param))
    b = jax.tree.leaves(nnx.state(again, nnx.Param))
    for x, y in zip(a, b, strict=True):
        assert y.dtype == BF16
        np.testing.assert_array_equal(np.asarray(x, np.float32), np.asarray(y, np.float32))


@pytest.mark.parametrize("dtype", DTYPES)
def test_bf16_parameter_gradients(dtype):
    """Gradients through token_log_probs with bf16 parameters are bf16, finite, and point the way
    the float32 gradient (same weights in float32) does."""
    low = model(BF16, dtype, tie=False)
    reference = model(F32, F32, tie=False)
    rounded = jax.tree.map(lambda x: x.astype(F32), nnx.state(low, nnx.Param))
    nnx.update(reference, rounded)
    ids, mask = jnp.asarray(IDS), jnp.asarray(MASK)
    grads16 = jax.tree.leaves(gradient(low, ids, mask))
    grads32 = jax.tree.leaves(gradient(reference, ids, mask))
    assert {g.dtype for g in grads16} == {jnp.dtype(BF16)}
    flat16 = np.concatenate([np.asarray(g, np.float32).ravel() for g in grads16])
    flat32 = np.concatenate([np.asarray(g).ravel() for g in grads32])
    assert np.isfinite(flat16).all() and np.abs(flat16).max() > 0
    cosine = flat16 @ flat32 / (np.linalg.norm(flat16) * np.linalg.norm(flat32))
    assert cosine > 0.99, cosine
