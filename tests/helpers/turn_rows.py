"""Random one-turn rows for update-step tests: token ids packed as model inputs and their
:class:`~arlarena_jax.objectives.host.HostTurn` batch (host arrays), and the tiny Qwen they are
drawn for (:data:`TINY_CONFIG`, a vocabulary of :data:`VOCAB` ids)."""

from __future__ import annotations

import numpy as np

from arlarena_jax.models import QwenConfig
from arlarena_jax.objectives.host import HostTurn, collate
from arlarena_jax.train.sequences import Sequences, pack_rows

VOCAB = 48
TINY_CONFIG = QwenConfig(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=128,
)


def random_turn_rows(
    rng: np.random.Generator,
    n: int,
    *,
    vocab: int,
    group_size: int,
    prompt_length: int,
    response_length: int,
):
    """``n`` one-turn trajectories in groups of ``group_size``, returns 1, 0, 1, 0, …; prompts of
    2…P and responses of 1…T random ids in [1, vocab). Returns (Sequences, TurnBatch)."""
    p, t = prompt_length, response_length
    prompts = [rng.integers(1, vocab, rng.integers(2, p + 1)).tolist() for _ in range(n)]
    responses = [rng.integers(1, vocab, rng.integers(1, t + 1)).tolist() for _ in range(n)]
    turns = [
        HostTurn(
            group=i // group_size,
            trajectory=i,
            turn=0,
            anchor="state",
            episode_return=float(i % 2 == 0),
            step_reward=0.0,
            action_valid=True,
            old_log_probs=[-1.0] * len(responses[i]),
        )
        for i in range(n)
    ]
    ids, mask = pack_rows(prompts, responses, num_rows=n, prompt_length=p, response_length=t)
    return Sequences(ids, mask), collate(turns, n, t)


def rows_of_prompt_lengths(lengths: list[int], prompt_length: int, response_length: int):
    """One-turn rows in groups of two whose prompts have the given lengths (random ids in
    [1, VOCAB)), returns 1, 0, 1, 0, …; returns (Sequences, TurnBatch)."""
    rng = np.random.default_rng(7)
    prompts = [rng.integers(1, VOCAB, n).tolist() for n in lengths]
    responses = [
        rng.integers(1, VOCAB, rng.integers(1, response_length + 1)).tolist() for _ in lengths
    ]
    turns = [
        HostTurn(i // 2, i, 0, "state", float(i % 2 == 0), 0.0, True, [-1.0] * len(r))
        for i, r in enumerate(responses)
    ]
    n = len(lengths)
    ids, mask = pack_rows(
        prompts, responses, num_rows=n, prompt_length=prompt_length, response_length=response_length
    )
    return Sequences(ids, mask), collate(turns, n, response_length)
