"""The LLM policy over the sampling engine, alone and driving the rollout
(docs/environments.md §1.2).

A tiny random Qwen3 (width 32, 1 layer) over a tiny trained tokenizer; one engine shared by the
module, so each jitted function compiles once per sampling setting.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from arlarena_jax.models.config import QwenConfig
from arlarena_jax.models.qwen import QwenForCausalLM
from arlarena_jax.objectives.host import collate
from arlarena_jax.rollout import SamplerPolicy, collect
from arlarena_jax.rollout.trajectory import TrajectoryRows
from arlarena_jax.sampler import GREEDY, Engine, EngineConfig, Request, SamplingParams
from arlarena_jax.tokenization import encode_chat, stop_token_ids, train_tiny
from envs.alfworld.prompts import ALFWORLD_FORMAT
from envs.base import Observation, Step
from envs.text import Context


class Counter:
    """A text env that never ends: the observation counts the steps taken."""

    def __init__(self, num_envs: int):
        self.num_envs = num_envs

    def reset(self, seeds):
        self.t = 0
        return [Observation(f"Your task is to: count. Step {self.t}.", ("go",))] * self.num_envs

    def step(self, actions):
        self.t += 1
        obs = [Observation(f"Step {self.t}.", ("go",))] * self.num_envs
        n = self.num_envs
        return Step(obs, np.zeros(n, np.float32), np.zeros(n, bool), [{"won": False}] * n)

    def close(self):
        pass


# ---- the LLM policy on a tiny random model ---------------------------------------------------

CORPUS = ["user assistant go forward look room <think>x</think><action>look</action>"] * 20


@pytest.fixture(scope="module")
def llm():
    tokenizer = train_tiny(CORPUS, vocab_size=512)
    config = QwenConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=128,
    )
    engine_config = EngineConfig(
        max_concurrent_decodes=4,
        max_prefill_length=48,
        max_new_tokens=6,
        min_prefill_bucket=48,
        steps_per_call=6,
        stop_token_ids=stop_token_ids(tokenizer),
    )
    engine = Engine(QwenForCausalLM(config, rngs=nnx.Rngs(0)), engine_config)
    return engine, tokenizer


def make_policy(llm, **kw):
    engine, tokenizer = llm
    return SamplerPolicy(
        engine,
        tokenizer,
        SamplingParams(temperature=1.0),
        GREEDY,
        max_new_tokens=6,
        seed=kw.pop("seed", 0),
        **kw,
    )


def test_sampler_policy(llm):
    _, tokenizer = llm
    prompts = ["go forward", "look room", "look"]
    policy = make_policy(llm)
    first, second = policy(prompts, training=True), policy(prompts, training=True)
    assert make_policy(llm)(prompts, training=True) == first  # reproducible per seed
    assert [g.response_ids for g in first] != [g.response_ids for g in second]  # fresh per call
    for prompt, gen in zip(prompts, first, strict=True):
        user = [{"role": "user", "content": prompt}]
        assert list(gen.prompt_ids) == encode_chat(tokenizer, user)
        assert 1 <= len(gen.response_ids) == len(gen.log_probs) <= 6
        assert gen.text == tokenizer.decode(gen.response_ids, skip_special_tokens=True)
        assert all(lp <= 0 for lp in gen.log_probs)
    greedy = [policy(prompts, training=False) for _ in range(2)]
    assert greedy[0] == greedy[1]  # evaluation uses eval_sampling (greedy here)
    off = make_policy(llm, enable_thinking=False)(["look"], training=False)[0]
    assert tokenizer.decode(off.prompt_ids).endswith("<think>\n\n</think>\n\n")
    with pytest.raises(ValueError, match=r"prompt 1 has \d+ tokens, over .* max_prefill_length 48"):
        policy(["look", "look " * 60], training=True)


def test_rollout_with_sampler_policy_collates(llm):
    def short_prompt(obs, task, window):  # a task format is plain functions: swap one in
        return f"{obs.text[-16:]} {window.step_count if window else 0}"

    fmt = ALFWORLD_FORMAT._replace(build_prompt=short_prompt)
    rollout = collect(
        Counter(4), fmt, make_policy(llm), group_seeds=[0, 1], group_size=2, max_turns=2
    )
    assert len(rollout.rows) == 8  # the counter never ends: 2 turns × 4 envs
    assert [r.prompt for r in rollout.rows[:2]] == [": count. Step 0. 0", "Step 1. 1"]
    _, tokenizer = llm
    user = [{"role": "user", "content": rollout.rows[1].prompt}]
    assert list(rollout.rows[1].prompt_ids) == encode_chat(tokenizer, user)
    assert all(len(r.response_ids) == len(r.log_probs) >= 1 for r in rollout.rows)
    batch = collate(rollout.to_host_turns())
    assert float(np.asarray(batch.response_mask).sum()) == sum(
        len(r.log_probs) for r in rollout.rows
    )
    np.testing.assert_allclose(
        np.asarray(batch.old_log_probs)[0, : len(rollout.rows[0].log_probs)],
        rollout.rows[0].log_probs,
        rtol=1e-6,
    )
    assert jax.device_get(batch.traj_ids).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


def test_continue_from_generates_after_the_whole_context(llm):
    """Greedy: continuing an empty right side is the plain call; a context's new tokens are at most
    its budget; an over-long context keeps its last max_prefill_length tokens."""
    _, tokenizer = llm
    policy = make_policy(llm)
    (plain,) = policy(["look room"], training=False)
    context = Context("look room", plain.prompt_ids, "", (), 100)
    (same,) = policy.continue_from([context], training=False)
    assert same == plain
    ids = policy.encode_text(" look look")
    assert policy.decode(ids) == tokenizer.decode(ids, skip_special_tokens=True)
    grown = context._replace(text=" look look", ids=tuple(ids), budget=2)
    (short,) = policy.continue_from([grown], training=False)
    assert 1 <= len(short.response_ids) <= 2 and list(short.prompt_ids) == list(plain.prompt_ids)
    direct = policy._generate(
        [Request([*plain.prompt_ids, *ids], n=1, max_new_tokens=2)], training=False
    )[0]
    assert short.response_ids == direct.response_ids
    long = context._replace(ids=tuple(ids * 40))  # far over max_prefill_length 48
    (cut,) = policy.continue_from([long], training=False)
    assert len(cut.response_ids) >= 1


def test_trajectory_rollout_with_sampler_policy(llm):
    """Trajectory rows on the real policy: the row's ids are response + observation segments,
    the observation tokens masked and cut to max_observation_tokens."""

    def short_prompt(obs, task, window):
        return obs.text[-12:]

    fmt = ALFWORLD_FORMAT._replace(build_prompt=short_prompt, continuation=lambda o: o.text)
    rows = TrajectoryRows(max_observation_tokens=3, max_right_tokens=40)
    rollout = collect(
        Counter(2), fmt, make_policy(llm), group_seeds=[0], group_size=2, max_turns=3, rows=rows
    )
    assert len(rollout.rows) == 2
    for row in rollout.rows:
        assert len(row.response_ids) == len(row.log_probs) == len(row.loss_mask) <= 40
        masked = [lp for lp, m in zip(row.log_probs, row.loss_mask, strict=True) if not m]
        assert masked and all(lp == 0.0 for lp in masked)
        assert sum(1 - m for m in row.loss_mask) <= 3 * 3  # three observations of <= 3 tokens
    batch = collate(rollout.to_host_turns())
    mask = np.asarray(batch.response_mask)
    assert mask[0, : len(rollout.rows[0].loss_mask)].tolist() == rollout.rows[0].loss_mask
