"""PPO's critic passes (arlarena_jax/train/critic.py) at narrower prompt widths.

``trainer.prompt_widths: k`` runs each micro-batch of the value pass and of the critic's
mini-batch step on the narrowest of k prompt widths that holds its prompts. Only left padding is
cut (positions come from the mask, padded keys are masked out), so by construction the values, the
value-loss metrics and an SGD step equal the full-width ones; the tolerance, 1e-5, is float32
rounding of differently sized reductions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from arlarena_jax.models import QwenForCausalLM
from arlarena_jax.models.value import ValueHead, value_model_from_policy
from arlarena_jax.train.critic import (
    head_forward,
    make_critic_step,
    make_values_fn,
    separate_forward,
)
from tests.helpers.turn_rows import TINY_CONFIG, rows_of_prompt_lengths

WIDE, T = 64, 5


def critic(model: str):
    """``(forward, critic_params, policy_params)`` of a ``separate`` or ``head`` critic."""
    policy = QwenForCausalLM(TINY_CONFIG, rngs=nnx.Rngs(0))
    policy_graphdef, policy_params = nnx.split(policy)
    if model == "separate":
        graphdef, params = nnx.split(value_model_from_policy(policy, seed=1))
        return separate_forward(graphdef), params, policy_params
    graphdef, params = nnx.split(ValueHead(TINY_CONFIG.hidden_size, rngs=nnx.Rngs(1)))
    return head_forward(graphdef, policy_graphdef), params, policy_params


@pytest.mark.parametrize("model", ["separate", "head"])
def test_the_critic_at_its_narrowest_prompt_widths_computes_the_same(model: str):
    """Micro-batches of 2 rows whose prompts are at most 14, 30 and 60 tokens of 64 columns run
    at 16, 32 and 64 with 4 widths (test_rl_update checks that choice for the policy)."""
    forward, params, policy_params = critic(model)
    sequences, batch = rows_of_prompt_lengths([10, 14, 25, 30, 50, 60], WIDE, T)
    sequences = jax.tree.map(jnp.asarray, sequences)
    mask = jnp.asarray(batch.response_mask)
    results = []
    for count in (1, 4):
        values_fn = make_values_fn(
            forward, prompt_length=WIDE, micro_batch_size=2, prompt_widths=count
        )
        values = values_fn(params, policy_params, sequences) * mask
        # returns 1 for the winners' tokens, 0 for the losers': a value loss with a gradient
        returns = jnp.asarray(batch.episode_returns)[:, None] * mask
        ready = jax.tree.map(jnp.asarray, batch)._replace(values=values, returns=returns)
        step = make_critic_step(
            forward,
            optax.sgd(1.0),
            prompt_length=WIDE,
            mini_batch_size=6,
            micro_batch_size=2,
            clip=0.2,
            prompt_widths=count,
        )
        own = jax.tree.map(jnp.copy, params)  # the step donates its parameters
        new, _, metrics = step(own, optax.sgd(1.0).init(own), policy_params, sequences, ready)
        narrow = f"i32[2,{16 + T}]" in str(
            jax.make_jaxpr(values_fn)(params, policy_params, sequences)
        )
        results.append((values, new, metrics, narrow))
    (values1, new1, metrics1, narrow1), (values4, new4, metrics4, narrow4) = results
    assert (narrow1, narrow4) == (False, True)  # the 16-column program exists only with 4
    assert float(jnp.abs(values1).sum()) > 0
    np.testing.assert_allclose(values4, values1, atol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), new4, new1)
    for key in metrics1:
        assert float(metrics4[key]) == pytest.approx(float(metrics1[key]), rel=1e-4, abs=1e-6)
    assert float(metrics1["grad_norm"]) > 0
