"""Rows for the RL update's tests: random one-turn groups, their prepared batch, and three GRPO
epochs on them (the check every decoder family repeats)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from arlarena_jax.objectives import advantage, ratio
from arlarena_jax.objectives.compose import chain
from arlarena_jax.objectives.declare import Input
from arlarena_jax.train.update import (
    make_log_prob_fn,
    make_prepare_fn,
    make_update_step,
    run_update,
)
from tests.helpers.turn_rows import VOCAB, random_turn_rows

P, T = 6, 5


def make_rows(rng: np.random.Generator, n: int):
    """n rows in groups of two trajectories, one turn each; returns 1 / 0 within each group."""
    sequences, batch = random_turn_rows(
        rng, n, vocab=VOCAB, group_size=2, prompt_length=P, response_length=T
    )
    return jax.tree.map(jnp.asarray, sequences), batch


def prepared(graphdef, params, sequences, batch, objective, micro=2):
    lp, ent = make_log_prob_fn(graphdef, prompt_length=P, micro_batch_size=micro)(params, sequences)
    batch = batch._replace(old_log_probs=lp * batch.response_mask, old_entropy=ent)
    batch, _, _ = make_prepare_fn(objective)(batch, None)
    return batch


def grpo_steps(graphdef, params, ppo_epochs: int = 3):
    """Three GRPO epochs on :func:`make_rows`' batch (winners at even rows): the rows, the
    summed response log-probs before and after, and the update's metric history."""
    objective = chain(advantage.grpo(), ratio.vanilla())
    assert Input.REF_LOG_PROBS not in objective.requirements  # no reference pass needed
    sequences, batch = make_rows(np.random.default_rng(3), 8)
    batch = prepared(graphdef, params, sequences, batch, objective)
    optimizer = optax.adam(3e-3)
    update = make_update_step(
        graphdef, objective, optimizer, prompt_length=P, mini_batch_size=4, micro_batch_size=2
    )
    log_probs = make_log_prob_fn(graphdef, prompt_length=P, micro_batch_size=4)
    before = np.asarray((log_probs(params, sequences)[0] * batch.response_mask).sum(1))
    params, _, history = run_update(
        update, params, optimizer.init(params), sequences, batch, ppo_epochs=ppo_epochs
    )
    after = np.asarray((log_probs(params, sequences)[0] * batch.response_mask).sum(1))
    return batch, before, after, history
