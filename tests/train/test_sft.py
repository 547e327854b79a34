"""Behaviour cloning (docs/environments.md §5.2): per-turn expert demonstrations, token layout and
loss mask, fixed-shape batches, the optimizer schedule, the jitted step (non-finite skip, sharded =
unsharded on 8 simulated devices) and cloning a tiny Qwen3 on Sokoban expert turns."""

from __future__ import annotations

import dataclasses
import functools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from arlarena_jax.errors import ConfigError
from arlarena_jax.models import QwenForCausalLM, make_mesh, preset, shard_model
from arlarena_jax.rollout.policy import chat_prompt_ids
from arlarena_jax.tokenization import render_chat, train_tiny
from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.demos import expert_demonstrations
from arlarena_jax.train.optim import (
    SFT_OPTIM,
    OptimConfig,
    current_learning_rate,
    make_optimizer,
    make_schedule,
)
from arlarena_jax.train.sft import (
    Example,
    SFTBatch,
    SFTBatcher,
    buckets_for,
    encode_example,
    make_sft_step,
    nll_sums,
    run_sft,
)
from envs.base import Observation
from envs.sokoban.batch import SokobanBatch
from envs.sokoban.expert import bfs_expert
from envs.sokoban.prompts import SOKOBAN_COMPACT_FORMAT, SOKOBAN_FORMAT, project_sokoban

VOCAB = 512  # the compact demonstrations saturate BPE at ~450 tokens
TRAIN_SEEDS = list(range(10_000, 10_012))
HELD_OUT_SEEDS = list(range(20_000, 20_004))  # disjoint from the training rooms
CONFIG = preset(
    "tiny",
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)


def make_batches(
    examples, batch_size: int, buckets, seed: int = 0, *, epoch: int = 0
) -> list[SFTBatch]:
    """One epoch of :class:`SFTBatcher` batches."""
    return SFTBatcher(examples, batch_size, buckets, seed).epoch(epoch)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _eval_sums(graphdef, params, batch, chunk_size):
    return nll_sums(graphdef, params, batch, chunk_size)


def evaluate_loss(graphdef, params, examples, *, batch_size=8, buckets=None, chunk_size=128):
    """Token-mean NLL over all loss tokens of ``examples`` (Σ over batches, then one division)."""
    buckets = buckets or buckets_for([len(e.ids) for e in examples])
    nll, tokens = 0.0, 0.0
    for batch in make_batches(examples, batch_size, buckets):
        a, b = _eval_sums(graphdef, params, batch, chunk_size)
        nll, tokens = nll + float(a), tokens + float(b)
    return nll / max(tokens, 1.0)


def plan_length(reply: str) -> int:
    """Number of moves in the expert's stated optimal plan."""
    return len(re.search(r"is: (.*)\.</think>", reply).group(1).split(", "))


def episodes(demos):
    """Split trajectory-major demonstrations into episodes: an optimal plan shrinks by one move
    per turn and the winning turn has a one-move plan."""
    out, current = [], []
    for d in demos:
        current.append(d)
        if plan_length(d.reply) == 1:
            out.append(current)
            current = []
    assert not current
    return out


@pytest.fixture(scope="module")
def data():
    """Compact prompts (~95 tokens, the CPU job's; the paper template is ~600 with this vocabulary)
    with the plan-stating expert; one rollout batch size for training and held-out rooms."""
    demos = expert_demonstrations(
        SokobanBatch(8),
        bfs_expert(),
        TRAIN_SEEDS + HELD_OUT_SEEDS,
        task_format=SOKOBAN_COMPACT_FORMAT,
        max_turns=15,
    )
    eps = episodes(demos)
    train = [d for ep in eps[: len(TRAIN_SEEDS)] for d in ep]
    held = [d for ep in eps[len(TRAIN_SEEDS) :] for d in ep]
    tokenizer = train_tiny([d.prompt + d.reply for d in train], VOCAB)
    return eps, train, held, tokenizer


def test_demonstrations_are_optimal_valid_expert_turns(data):
    eps, train, _, _ = data
    assert len(eps) == len(TRAIN_SEEDS) + len(HELD_OUT_SEEDS)  # padding episodes dropped
    for ep in eps:
        assert [plan_length(d.reply) for d in ep] == list(range(len(ep), 0, -1))
        previous = "none"
        for turn, d in enumerate(ep):  # the RL prompt of that turn, history window included
            assert d.prompt.startswith(f"Sokoban step {turn + 1}. Push the box")
            assert f"Last action: {previous}." in d.prompt
            proj = project_sokoban(d.reply)
            assert proj.action_valid and proj.action in (1, 2, 3, 4)
            previous = re.search("<action>(.*)</action>", d.reply).group(1).capitalize()
    assert len(train) == sum(len(ep) for ep in eps[: len(TRAIN_SEEDS)])


@pytest.mark.parametrize("paper", [False, True])
@pytest.mark.parametrize("thinking", [None, False])
def test_loss_mask_covers_exactly_the_reply_and_im_end(data, thinking, paper):
    _, train, _, tok = data
    demo = train[3]
    if paper:  # the paper template around the same grid (docs/environments.md §1.4), NO_HIS variant
        rows = demo.prompt.split("\n")[2:8]
        obs = Observation("\n".join("".join(f" {c} \t" for c in row) for row in rows))
        demo = demo._replace(prompt=SOKOBAN_FORMAT.build_prompt(obs, "", None))
        assert "# Symbols and Their Meaning" in demo.prompt and " X \t" in demo.prompt
    ex = encode_example(tok, demo.prompt, demo.reply, enable_thinking=thinking)
    prompt_ids = chat_prompt_ids(tok, demo.prompt, thinking)
    n = len(prompt_ids)
    assert list(ex.ids[:n]) == prompt_ids  # BC and RL see identical prompts
    assert ex.loss_mask.tolist() == [0] * n + [1] * (len(ex.ids) - n)
    assert ex.ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")
    assert tok.decode(ex.ids[n:].tolist()) == demo.reply + "<|im_end|>"
    # Same ids as tokenizing the whole text at once (no merge across the prompt/reply boundary).
    text = render_chat(tok, [{"role": "user", "content": demo.prompt}], enable_thinking=True)
    if thinking is None:
        whole = tok(text + demo.reply + "<|im_end|>", add_special_tokens=False)["input_ids"]
        assert list(ex.ids) == list(whole)
    # The template's assistant rendering reformats the reasoning, hence the concatenation.
    chat = [{"role": "user", "content": demo.prompt}, {"role": "assistant", "content": demo.reply}]
    rendered = render_chat(tok, chat, add_generation_prompt=False)
    assert demo.reply not in rendered and "<think>\nThe shortest plan" in rendered


def fake_examples(lengths):
    return [
        Example(np.arange(1, n + 1, dtype=np.int32), (np.arange(n) >= n // 2).astype(np.int32))
        for n in lengths
    ]


def test_batches_fixed_shapes_and_deterministic_shuffle():
    lengths = [5, 9, 16, 3, 12, 7, 16, 2, 10, 4, 8]
    examples = fake_examples(lengths)
    batcher = SFTBatcher(examples, batch_size=3, buckets=(8, 16), seed=7)
    epoch0 = batcher.epoch(0)
    assert len(epoch0) == batcher.num_batches() == 2 + 2  # 6 short → 2 batches, 5 long → 2
    seen = []
    for b in epoch0:
        assert b.input_ids.shape in ((3, 8), (3, 16)) and b.input_ids.dtype == np.int32
        assert b.attention_mask.shape == b.loss_mask.shape == b.input_ids.shape
        for row in range(3):
            n = int(b.attention_mask[row].sum())
            assert b.attention_mask[row, :n].all() and not b.attention_mask[row, n:].any()
            assert not b.input_ids[row, n:].any() and not b.loss_mask[row, n:].any()
            if n:
                seen.append(n)
    assert sorted(seen) == sorted(lengths)  # every example once; empty rows fill short batches
    same = make_batches(examples, 3, (8, 16), seed=7)
    assert all((a.input_ids == b.input_ids).all() for a, b in zip(epoch0, same, strict=True))
    other = batcher.epoch(1)
    assert any(
        a.input_ids.shape != b.input_ids.shape or (a.input_ids != b.input_ids).any()
        for a, b in zip(epoch0, other, strict=True)
    )
    with pytest.raises(ValueError, match="example 2 has 16 tokens, over the longest bucket 12"):
        SFTBatcher(examples, 3, (12,))
    assert SFTBatcher(examples, 3, (12,), on_overflow="drop").dropped == [2, 6]


def test_schedule_warmup_then_cosine_and_lr_in_state():
    sched = make_schedule(learning_rate=2.0, total_steps=100, warmup_ratio=0.1)
    for k, want in [(0, 0.0), (5, 1.0), (10, 2.0), (40, 2.0 * 0.75), (55, 1.0), (100, 0.0)]:
        assert float(sched(k)) == pytest.approx(want, abs=1e-6)
    k = 73  # cosine: 2 · ½ (1 + cos(π (73 − 10) / 90))
    assert float(sched(k)) == pytest.approx(1.0 + math.cos(math.pi * 63 / 90), abs=1e-6)
    const = make_schedule(learning_rate=2.0, total_steps=100, warmup_ratio=0.1, schedule="constant")
    assert [float(const(k)) for k in (0, 3, 10, 99)] == pytest.approx([0.0, 0.6, 2.0, 2.0])
    opt = make_optimizer(OptimConfig(lr=2.0, warmup_ratio=0.1, schedule="cosine"), 100)
    params = {"w": jnp.ones(3)}
    state = opt.init(params)
    for step in range(12):
        _, state = opt.update({"w": jnp.full(3, 5.0)}, state, params)
        assert float(current_learning_rate(state)) == pytest.approx(float(sched(step)), abs=1e-6)
    with pytest.raises(ValueError, match="unknown schedule"):
        make_schedule(learning_rate=1.0, total_steps=10, schedule="linear")


def random_batch(seed: int = 0, b: int = 8, s: int = 32) -> SFTBatch:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, (b, s)).astype(np.int32)
    attn = (np.arange(s)[None] < rng.integers(s // 2, s + 1, (b, 1))).astype(np.int32)
    return SFTBatch(ids, attn, attn * (np.arange(s)[None] >= 8).astype(np.int32))


def one_step(mesh, batch, micro_batch_size=None):
    """One step from the same initial one-layer model (compiles faster); eps 1e-6 keeps Adam's
    g/(|g|+ε) well conditioned for near-zero gradients, whose float noise differs by layout."""
    opt = make_optimizer(OptimConfig(lr=1e-3, eps=1e-6), 10)
    model = QwenForCausalLM(dataclasses.replace(CONFIG, num_hidden_layers=1), rngs=nnx.Rngs(0))
    if mesh is not None:
        shard_model(model, mesh)
    graphdef, params = nnx.split(model)
    step = make_sft_step(graphdef, opt, mesh=mesh, chunk_size=16, micro_batch_size=micro_batch_size)
    params, opt_state, metrics = step(params, opt.init(params), batch)
    return step, params, opt_state, metrics


@pytest.fixture(scope="module")
def unsharded():
    """The step function, its device outputs (donated by later use) and host copies of them."""
    step, params, opt_state, metrics = one_step(None, random_batch())
    host = jax.tree.map(np.asarray, (params, opt_state, metrics))
    return step, (params, opt_state, metrics), host


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 simulated host devices")
def test_sharded_step_equals_unsharded(unsharded):
    p1, o1, m1 = unsharded[2]
    _, p2, o2, m2 = one_step(make_mesh(2, 2, 2), random_batch())
    q = p2["model"]["layers"][0]["mlp"]["gate_proj"]["kernel"].get_value()
    assert q.sharding.spec == jax.sharding.PartitionSpec("fsdp", "tensor")
    for key in ("loss", "grad_norm", "lr", "tokens", "skipped"):
        np.testing.assert_allclose(float(m1[key]), float(m2[key]), rtol=1e-5, atol=1e-5)
    for a, b in zip(jax.tree.leaves((p1, o1)), jax.tree.leaves((p2, o2)), strict=True):
        np.testing.assert_allclose(a, np.asarray(b), atol=1e-5)


@pytest.mark.parametrize("micro", [2, 4])
def test_micro_batches_give_the_whole_batch_s_step(unsharded, micro):
    """Σ nll and Σ m are linear in the rows, so summing micro-batch gradients and dividing by
    the batch's token count is the whole batch's step, up to float32 summation order (1e-5);
    the micro-batches hold different token counts (random lengths), so a per-micro-batch mean
    would not agree."""
    p1, o1, m1 = unsharded[2]
    _, p2, o2, m2 = one_step(None, random_batch(), micro_batch_size=micro)
    for key in ("loss", "grad_norm", "lr", "tokens", "skipped"):
        np.testing.assert_allclose(float(m1[key]), float(m2[key]), rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree.leaves((p1, o1)), jax.tree.leaves((p2, o2)), strict=True):
        np.testing.assert_allclose(a, np.asarray(b), atol=1e-5)


def test_sft_micro_batch_size_must_divide_the_batch():
    with pytest.raises(ConfigError, match=r"sft\.micro_batch_size.*must divide sft\.batch_size 8"):
        load_config(
            "configs/sokoban/base_tiny.yaml", ["sft.batch_size=8", "sft.micro_batch_size=3"]
        )


def test_non_finite_gradient_skips_the_update(unsharded):
    step, (params, opt_state, metrics), _ = unsharded
    assert int(metrics["skipped"]) == 0
    embed = params["model"]["embed_tokens"]["embedding"]
    embed.set_value(embed.get_value().at[0, 0].set(jnp.nan))  # poisons every forward pass
    before = jax.tree.map(np.asarray, (params, opt_state))
    params, opt_state, metrics = step(params, opt_state, random_batch(1))  # same shapes
    assert int(metrics["skipped"]) == 1 and not np.isfinite(float(metrics["grad_norm"]))
    after = jax.tree.map(np.asarray, (params, opt_state))
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True):
        np.testing.assert_array_equal(a, b)  # NaN == NaN here; the Adam count did not advance


def test_cloning_sokoban_expert_lowers_the_loss(data):
    """A random model starts at ≈ ln V = 6.24 nats per reply token. A reply is ~28 tokens of
    which all but the moves are fixed template text, and the moves are a few bits each, so a
    model that learned the format sits below 1 nat/token (measured: ~0.4 on train and held-out
    after 30 steps at peak lr 1e-2). Threshold 2.0 (< 1/3 of the start) leaves a wide margin
    for noise, while a model that learned nothing stays near 6.2."""
    _, train, held, tok = data
    held_ex = [encode_example(tok, d.prompt, d.reply) for d in held]
    model = QwenForCausalLM(CONFIG, rngs=nnx.Rngs(0))
    buckets = (128,)
    graphdef, params = nnx.split(model)
    start = evaluate_loss(graphdef, params, held_ex, batch_size=8, buckets=buckets)
    assert start == pytest.approx(math.log(VOCAB), abs=0.3)
    logged = []
    model, history = run_sft(
        model,
        tok,
        train,
        steps=30,
        batch_size=8,
        buckets=buckets,
        optim=dataclasses.replace(SFT_OPTIM, lr=1e-2, betas=(0.9, 0.999)),
        seed=0,
        log_fn=lambda step, m: logged.append(step),
    )
    assert logged == list(range(30)) and len(history) == 30
    assert all(h["skipped"] == 0 and h["tokens"] > 0 for h in history)
    assert history[0]["lr"] == 0.0 and max(h["lr"] for h in history) == pytest.approx(1e-2)
    assert history[0]["loss"] == pytest.approx(math.log(VOCAB), abs=0.3)
    assert np.mean([h["loss"] for h in history[-5:]]) < 2.0
    graphdef, params = nnx.split(model)
    assert evaluate_loss(graphdef, params, held_ex, batch_size=8, buckets=buckets) < 2.0


def test_optimizer_clips_before_adamw():
    opt = make_optimizer(OptimConfig(lr=1.0, grad_clip=1.0), 4)
    state = opt.init({"w": jnp.zeros(2)})
    _, state = opt.update({"w": jnp.array([30.0, 40.0])}, state, {"w": jnp.zeros(2)})
    mu = state[1].inner_state[0].mu["w"]  # first moment = (1 − β₁) · clipped gradient
    np.testing.assert_allclose(np.asarray(mu), 0.1 * np.array([0.6, 0.8]), rtol=1e-6)
    assert float(optax.tree.norm({"w": jnp.array([30.0, 40.0])})) == pytest.approx(50.0)


def test_bfloat16_parameters_keep_float32_moments():
    """bfloat16 weights, the RL β₂ = 0.999 (1.0 in bfloat16): the moments stay float32, so the
    first update is AdamW's ±lr·(1 + wd·w)-sized step computed in float32, not 0/0."""
    opt = make_optimizer(OptimConfig(lr=1e-2, betas=(0.9, 0.999), weight_decay=0.0), 4)
    params = {"w": jnp.ones(3, jnp.bfloat16)}
    grads = {"w": jnp.array([0.5, -0.25, 0.0], jnp.bfloat16)}
    state = opt.init(params)
    assert state[1].inner_state[0].nu["w"].dtype == jnp.float32
    updates, _ = opt.update(grads, state, params)
    assert updates["w"].dtype == jnp.bfloat16
    # first Adam step: m̂/(√v̂ + ε) = sign(g) (0 where g = 0), times −lr
    expected = -1e-2 * np.sign([0.5, -0.25, 0.0])
    np.testing.assert_allclose(np.asarray(updates["w"], np.float32), expected, rtol=1e-2)
