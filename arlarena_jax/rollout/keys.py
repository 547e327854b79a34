"""Sampling seeds from the global episode identity (docs/environments.md §1.1).

A batch of episodes (one ``collect`` call: a dynamic-sampling try, or a whole evaluation) has one
*sample seed*, drawn once from the policy's seed stream (:func:`draw_sample_seed`). The sampler
request of episode ``trajectory`` (the global trajectory id, ``group_offset · group_size + i``) at
turn ``t`` gets the seed :func:`episode_turn_seed` ``(sample_seed, trajectory, t)``. Nothing
depends on where a request sits in a policy call, how many calls a batch made or which other
episodes shared them, so a batch played as one call per turn, split into sub-batches, or split
between processes draws the same samples (up to float rounding of differently shaped programs).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def episode_turn_seed(sample_seed: int, trajectory: int, turn: int) -> int:
    """The 31-bit sampler seed of episode ``trajectory``'s turn ``turn`` in the batch of
    ``sample_seed`` (all three non-negative): distinct per (batch, episode, turn) up to hash
    collisions, and an int32 as the driver's jitted key derivation takes it."""
    state = np.random.SeedSequence([sample_seed, trajectory, turn]).generate_state(1)
    return int(state[0] >> 1)


def episode_seed_table(sample_seed: int, trajectories: Sequence[int], turns: int) -> np.ndarray:
    """``[len(trajectories), turns]`` int32: row r, column t is :func:`episode_turn_seed`
    ``(sample_seed, trajectories[r], t)`` (the on-device rollout's seeds, computed on the host)."""
    table = [
        [episode_turn_seed(sample_seed, int(j), t) for t in range(turns)] for j in trajectories
    ]
    return np.asarray(table, np.int32).reshape(len(trajectories), turns)


def draw_sample_seed(policy: object) -> int:
    """The next sample seed of ``policy``'s seed stream (its ``next_sample_seed()``, which
    advances the stream by one); 0 for a policy without one (scripted policies ignore seeds)."""
    draw = getattr(policy, "next_sample_seed", None)
    return 0 if draw is None else int(draw())
