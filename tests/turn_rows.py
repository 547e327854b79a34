"""Random one-turn rows for update-step tests: token ids packed as model inputs and their
:class:`~arlarena_jax.objectives.host.HostTurn` batch (host arrays)."""

from __future__ import annotations

import numpy as np

from arlarena_jax.objectives.host import HostTurn, collate
from arlarena_jax.train.sequences import Sequences, pack_rows


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
    [1, 48)), returns 1, 0, 1, 0, …; returns (Sequences, TurnBatch)."""
    rng = np.random.default_rng(7)
    prompts = [rng.integers(1, 48, n).tolist() for n in lengths]
    responses = [
        rng.integers(1, 48, rng.integers(1, response_length + 1)).tolist() for _ in lengths
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
