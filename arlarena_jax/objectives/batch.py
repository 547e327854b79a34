"""The batch of turn rows every objective component reads (docs/algorithms.md §1.2).

One row is one agent turn. Arrays are padded to a static row count ``N`` and response width ``T``;
``row_mask`` marks real rows and ``response_mask`` real response tokens, so padding rows and padding
tokens never change a result. Group, trajectory and anchor ids are dense int32 segment ids built on
the host (see :mod:`arlarena_jax.objectives.host`); each lies in ``[0, N)`` so that segment
reductions can use ``num_segments=N`` as a static size.

Fields filled by :meth:`Objective.prepare` (``token_rewards``, ``step_reward_adjust``,
``advantages``, ``returns``) are ``None`` in a freshly collected batch.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array


class TurnBatch(NamedTuple):
    """Turn rows with the fields of docs/algorithms.md §1.2 (shapes: N rows, T response tokens).

    Attributes:
      response_mask: ``[N, T]`` 1 on response tokens (``m``), 0 on padding.
      old_log_probs: ``[N, T]`` log-prob of each sampled token under the policy before the update
        (``lp_old``).
      row_mask: ``[N]`` 1 for real rows, 0 for padding rows.
      group_ids: ``[N]`` int32 group (uid) segment id: the n envs launched on one task.
      traj_ids: ``[N]`` int32 trajectory segment id.
      turn_ids: ``[N]`` int32 turn index ``k`` of the row within its trajectory (0, 1, ...).
      anchor_ids: ``[N]`` int32 step-group id: rows of one group whose raw current observation
        (anchor) is the same (GiGPO, docs/algorithms.md §3.9). Built on the host.
      episode_returns: ``[N]`` episode return ``R`` of the row's trajectory.
      step_rewards: ``[N]`` environment reward received at this turn (``r_env``).
      action_valid: ``[N]`` 1 if the turn's action was valid (format and admissibility).
      ref_log_probs: ``[N, T]`` log-probs under the frozen reference policy (KL terms).
      rollout_log_probs: ``[N, T]`` log-probs reported by the sampler (truncated IS,
        docs/algorithms.md §4.9).
      old_entropy: ``[N, T]`` token entropy of the old policy (EMPG, docs/algorithms.md §3.10).
      values: ``[N, T]`` critic values (GAE, docs/algorithms.md §3.7).
      token_rewards: ``[N, T]`` token-level rewards; set by ``Objective.prepare``.
      step_reward_adjust: ``[N]`` non-discounted additions to GiGPO step returns (the invalid
        penalty); set by ``Objective.prepare``.
      advantages: ``[N, T]`` advantages; set by ``Objective.prepare``.
      returns: ``[N, T]`` returns; set by ``Objective.prepare``.
    """

    response_mask: Array
    old_log_probs: Array
    row_mask: Array
    group_ids: Array
    traj_ids: Array
    turn_ids: Array
    anchor_ids: Array
    episode_returns: Array
    step_rewards: Array
    action_valid: Array
    ref_log_probs: Array | None = None
    rollout_log_probs: Array | None = None
    old_entropy: Array | None = None
    values: Array | None = None
    token_rewards: Array | None = None
    step_reward_adjust: Array | None = None
    advantages: Array | None = None
    returns: Array | None = None

    @property
    def num_rows(self) -> int:
        return self.response_mask.shape[0]

    @property
    def num_tokens(self) -> int:
        return self.response_mask.shape[1]


_VALUE_ROW_FIELDS = ("episode_returns", "step_rewards", "action_valid", "step_reward_adjust")
_ROW_FIELDS = (
    "row_mask",
    "group_ids",
    "traj_ids",
    "turn_ids",
    "anchor_ids",
    "episode_returns",
    "step_rewards",
    "action_valid",
    "step_reward_adjust",
)
_TOKEN_FIELDS = (
    "old_log_probs",
    "ref_log_probs",
    "rollout_log_probs",
    "old_entropy",
    "values",
    "token_rewards",
    "advantages",
    "returns",
)


def without_padding(batch: TurnBatch) -> TurnBatch:
    """Zero every value on padding rows and padding tokens (``jnp.where``, not a product).

    Padding may hold anything, NaN and -inf included (a model's log-prob of a pad token); a
    product with a 0 mask would turn those into NaN, ``where`` cannot. The response mask is
    restricted to real rows. Ids are left as they are.
    """
    row = batch.row_mask > 0
    mask = jnp.where(row[:, None], batch.response_mask, 0.0)
    token = mask > 0
    updates: dict[str, Array] = {"response_mask": mask}
    for names, keep in ((_TOKEN_FIELDS, token), (_VALUE_ROW_FIELDS, row)):
        for name in names:
            value = getattr(batch, name)
            if value is not None:
                updates[name] = jnp.where(keep, value, jnp.zeros((), value.dtype))
    return batch._replace(**updates)


def validate_batch(batch: TurnBatch) -> None:
    """Check shapes on the host; raise ``ValueError`` with one line naming the bad field."""
    mask = batch.response_mask
    if mask.ndim != 2:
        raise ValueError(f"TurnBatch.response_mask must be [rows, tokens], got shape {mask.shape}")
    n, t = mask.shape
    for name in _ROW_FIELDS:
        value = getattr(batch, name)
        if value is not None and tuple(value.shape) != (n,):
            raise ValueError(f"TurnBatch.{name} must have shape ({n},), got {tuple(value.shape)}")
    for name in _TOKEN_FIELDS:
        value = getattr(batch, name)
        if value is not None and tuple(value.shape) != (n, t):
            raise ValueError(
                f"TurnBatch.{name} must have shape ({n}, {t}), got {tuple(value.shape)}"
            )
    for name in ("group_ids", "traj_ids", "turn_ids", "anchor_ids"):
        value = getattr(batch, name)
        if not jnp.issubdtype(value.dtype, jnp.integer):
            raise ValueError(f"TurnBatch.{name} must be an integer array, got dtype {value.dtype}")


def make_batch(
    response_mask,
    old_log_probs,
    *,
    group_ids,
    traj_ids=None,
    turn_ids=None,
    anchor_ids=None,
    episode_returns=None,
    step_rewards=None,
    action_valid=None,
    row_mask=None,
    **optional,
) -> TurnBatch:
    """Build a :class:`TurnBatch` from array-likes, filling defaults, and validate it.

    Defaults: every row real, each row its own trajectory at turn 0, anchors = trajectories,
    zero rewards, every action valid. Float fields become float32 and ids int32.
    """
    mask = jnp.asarray(response_mask, jnp.float32)
    n = mask.shape[0] if mask.ndim == 2 else -1
    rows = jnp.arange(max(n, 0), dtype=jnp.int32)

    def ids(value, default):
        return jnp.asarray(default if value is None else value, jnp.int32)

    def floats(value, default):
        return jnp.asarray(default if value is None else value, jnp.float32)

    batch = TurnBatch(
        response_mask=mask,
        old_log_probs=floats(old_log_probs, None),
        row_mask=floats(row_mask, jnp.ones(max(n, 0))),
        group_ids=ids(group_ids, None),
        traj_ids=ids(traj_ids, rows),
        turn_ids=ids(turn_ids, jnp.zeros_like(rows)),
        anchor_ids=ids(anchor_ids, rows if traj_ids is None else traj_ids),
        episode_returns=floats(episode_returns, jnp.zeros(max(n, 0))),
        step_rewards=floats(step_rewards, jnp.zeros(max(n, 0))),
        action_valid=floats(action_valid, jnp.ones(max(n, 0))),
        **{k: (None if v is None else jnp.asarray(v, jnp.float32)) for k, v in optional.items()},
    )
    validate_batch(batch)
    return batch
