"""Host-side bridge from rollout turn rows to a padded :class:`TurnBatch`
(docs/algorithms.md §1.2, §3.9).

Everything here is plain numpy / Python and is never traced: strings, hashing and grouping by
observation text live on the host (docs/algorithms.md §1.2). The device sees only dense int32
segment ids in ``[0, N)`` and padded float32 arrays.

Padding rows are all zeros: ``row_mask`` 0, ids 0, returns, rewards, ``action_valid`` and every
token field 0. Padding tokens of real rows have ``response_mask`` 0 and value 0. A row's
``loss_mask`` (trajectory rows: 0 on observation tokens) multiplies its ``response_mask``, so the
objectives never see those tokens.

Failed episodes (docs/algorithms.md §3.0): the rows of a trajectory lost to an infrastructure
failure (``HostTurn.failed``) get ``row_mask`` 0, so every estimator leaves them out of its group
statistics and gives them advantage 0, and the loss skips them; a group that a failure leaves
with fewer than 2 valid trajectories is masked whole (no gradient). See :func:`kept_rows`.
"""

from __future__ import annotations

import difflib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from arlarena_jax.objectives.batch import TurnBatch, validate_batch

Anchor = str | bytes | np.ndarray
OPTIONAL_TOKEN_FIELDS = ("ref_log_probs", "rollout_log_probs", "old_entropy", "values")


def dense_ids(keys: Sequence[Hashable]) -> np.ndarray:
    """Map hashable keys to int32 ids ``0..G−1`` in first-appearance order
    (docs/algorithms.md §1.2).

    Keys that compare equal (Python ``==`` / ``hash``) share an id.
    """
    table: dict[Hashable, int] = {}
    out = np.empty(len(keys), dtype=np.int32)
    for i, key in enumerate(keys):
        out[i] = table.setdefault(key, len(table))
    return out


def anchor_key(obs: Anchor) -> Hashable:
    """Hashable key of an anchor observation for exact step grouping
    (docs/algorithms.md §3.9 step 3).

    ``str`` and ``bytes`` are their own keys. A numpy array becomes
    ``("ndarray", dtype, shape, bytes)``, so arrays match iff dtype, shape and every byte agree
    (bytewise: ``0.0`` and ``-0.0`` differ, equal NaN payloads match). Other array-likes with
    ``__array__`` (e.g. ``jax.Array``) are converted with ``np.asarray`` first; any other hashable
    value is its own key.
    """
    if isinstance(obs, str | bytes):
        return obs
    if not isinstance(obs, np.ndarray) and hasattr(obs, "__array__"):
        obs = np.asarray(obs)
    if isinstance(obs, np.ndarray):
        if obs.dtype.hasobject:
            raise TypeError("anchor_key() cannot key a numpy array of dtype object by its bytes")
        return ("ndarray", obs.dtype.str, obs.shape, obs.tobytes())
    if isinstance(obs, Hashable):
        return obs
    raise TypeError(f"anchor_key() got an unhashable anchor of type {type(obs).__name__}")


def similarity_ratio(a: str, b: str) -> float:
    """``difflib.SequenceMatcher(None, a, b).ratio()`` = 2·matches/(len a + len b)
    (docs/algorithms.md §3.9)."""
    return difflib.SequenceMatcher(None, a, b).ratio()


def _check_threshold(threshold: float) -> None:
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"similarity_threshold must lie in (0, 1], got {threshold}")


def _similarity_cluster_keys(
    group_keys: Sequence[Hashable], anchors: Sequence[Anchor], threshold: float
) -> list[tuple[Hashable, int]]:
    """Greedy clustering per group (docs/algorithms.md §3.9 step 3): the first cluster whose
    representative (first member) has ratio ≥ threshold, else a new cluster. Returns (group,
    cluster) pairs.

    The ratio is computed as ``ratio(row, representative)``, the argument order of the reference
    (difflib's ratio is not always symmetric). A text seen before in the same group reuses its
    cluster: clusters and representatives never change, so the greedy choice would be the same.
    """
    _check_threshold(threshold)
    representatives: dict[Hashable, list[str]] = {}
    seen: dict[tuple[Hashable, str], int] = {}
    out: list[tuple[Hashable, int]] = []
    for row, (group, text) in enumerate(zip(group_keys, anchors, strict=True)):
        if not isinstance(text, str):
            raise ValueError(
                f"similarity grouping needs text anchors, but row {row} has an anchor of type "
                f"{type(text).__name__}; use exact grouping (similarity_threshold=None)"
            )
        if (group, text) not in seen:
            reps = representatives.setdefault(group, [])
            seen[(group, text)] = next(
                (c for c, rep in enumerate(reps) if similarity_ratio(text, rep) >= threshold),
                len(reps),
            )
            if seen[(group, text)] == len(reps):
                reps.append(text)
        out.append((group, seen[(group, text)]))
    return out


def anchor_ids(
    group_keys: Sequence[Hashable],
    anchors: Sequence[Anchor],
    similarity_threshold: float | None = None,
) -> np.ndarray:
    """Dense step-group ids: rows of one group (uid) with the same anchor
    (docs/algorithms.md §3.9 step 3).

    Without a threshold, anchors match by exact equality of :func:`anchor_key`; with one, text
    anchors are clustered greedily by :func:`similarity_ratio`. Equal anchors in different groups
    always get different ids. Ids are dense over (group, cluster) pairs in first-appearance order.
    """
    if len(group_keys) != len(anchors):
        raise ValueError(
            f"anchor_ids() got {len(group_keys)} group keys but {len(anchors)} anchors"
        )
    if similarity_threshold is None:
        pairs = [(g, anchor_key(a)) for g, a in zip(group_keys, anchors, strict=True)]
    else:
        pairs = _similarity_cluster_keys(group_keys, anchors, similarity_threshold)
    return dense_ids(pairs)


@dataclass(frozen=True, eq=False)
class HostTurn:
    """One turn row as the rollout produces it (docs/algorithms.md §1.2 table).

    ``old_log_probs`` has one entry per response token; its length is the response length.
    Optional token fields, when given, have the same length. Equality is identity (anchors may be
    numpy arrays).
    """

    group: Hashable
    trajectory: Hashable
    turn: int
    anchor: Anchor
    episode_return: float
    step_reward: float
    action_valid: bool
    old_log_probs: Sequence[float]
    ref_log_probs: Sequence[float] | None = None
    rollout_log_probs: Sequence[float] | None = None
    old_entropy: Sequence[float] | None = None
    values: Sequence[float] | None = None
    # 1 on tokens the loss sees, 0 on tokens it skips (observation tokens of a trajectory row);
    # None: every response token. Same length as old_log_probs.
    loss_mask: Sequence[float] | None = None
    # the episode was lost to an infrastructure failure: the row leaves its group (kept_rows)
    failed: bool = False


def kept_rows(turns: Sequence[HostTurn]) -> np.ndarray:
    """[len(turns)] bool: the rows that enter group statistics and the loss
    (docs/algorithms.md §3.0).

    A failed row is dropped; so is every row of a group that holds a failed trajectory and
    fewer than 2 valid ones (one valid member has nothing to be compared with). Groups without a
    failure are kept whole, singletons included.
    """
    valid: dict[Hashable, set[Hashable]] = {}
    hit: set[Hashable] = set()
    for turn in turns:
        members = valid.setdefault(turn.group, set())
        if turn.failed:
            hit.add(turn.group)
        else:
            members.add(turn.trajectory)
    short = {g for g in hit if len(valid[g]) < 2}
    return np.asarray([not t.failed and t.group not in short for t in turns], bool)


def _resolve_shape(
    turns: Sequence[HostTurn], num_rows: int | None, num_tokens: int | None
) -> tuple[int, int]:
    """Static (N, T): defaults len(turns) and the longest response; errors name the numbers."""
    if not turns:
        raise ValueError("collate() got no turns; a batch needs at least one real row")
    lengths = [len(t.old_log_probs) for t in turns]
    n = len(turns) if num_rows is None else num_rows
    t = max(lengths) if num_tokens is None else num_tokens
    if len(turns) > n:
        raise ValueError(f"collate() got {len(turns)} turns but num_rows={n}")
    if t < 0:
        raise ValueError(f"collate() needs num_tokens >= 0, got {t}")
    for row, length in enumerate(lengths):
        if length > t:
            raise ValueError(f"turn row {row} has a {length}-token response but num_tokens={t}")
    return n, t


def _pad_tokens(rows: Sequence[Sequence[float]], n: int, t: int) -> np.ndarray:
    """Right-pad ragged per-row token values into an ``[n, t]`` float32 array of zeros."""
    out = np.zeros((n, t), dtype=np.float32)
    for i, values in enumerate(rows):
        out[i, : len(values)] = np.asarray(values, dtype=np.float32)
    return out


def _pad_rows(values: Sequence[float], n: int, dtype: type) -> np.ndarray:
    out = np.zeros(n, dtype=dtype)
    out[: len(values)] = values
    return out


def _optional_tokens(turns: Sequence[HostTurn], name: str, n: int, t: int) -> np.ndarray | None:
    """An optional token field: present iff given on every row, with old_log_probs' length."""
    given = [getattr(turn, name) is not None for turn in turns]
    if not any(given):
        return None
    if not all(given):
        missing = given.index(False)
        raise ValueError(
            f"{name} is given for some turn rows but missing on row {missing}; "
            "give it for every row or for none"
        )
    for row, turn in enumerate(turns):
        length, expected = len(getattr(turn, name)), len(turn.old_log_probs)
        if length != expected:
            raise ValueError(
                f"turn row {row}: {name} has {length} values but old_log_probs has {expected}"
            )
    return _pad_tokens([getattr(turn, name) for turn in turns], n, t)


def _check_episode_returns(turns: Sequence[HostTurn], traj: np.ndarray) -> None:
    """R is the same on every row of a trajectory (docs/algorithms.md §1.2)."""
    first: dict[int, int] = {}
    for row, turn in enumerate(turns):
        head = first.setdefault(int(traj[row]), row)
        if turn.episode_return != turns[head].episode_return:
            raise ValueError(
                f"turn row {row} has episode_return {turn.episode_return} but row {head} of the "
                f"same trajectory has {turns[head].episode_return}"
            )


def collate(
    turns: Sequence[HostTurn],
    num_rows: int | None = None,
    num_tokens: int | None = None,
    similarity_threshold: float | None = None,
) -> TurnBatch:
    """Pad turn rows to a static ``[num_rows, num_tokens]`` :class:`TurnBatch`
    (docs/algorithms.md §1.2).

    Rows keep their given order; padding rows follow them. Group ids are dense over ``group``,
    trajectory ids over ``(group, trajectory)`` pairs (so per-group trajectory labels such as
    0..n−1 stay distinct across groups), anchor ids as :func:`anchor_ids` with
    ``similarity_threshold`` (GiGPO, docs/algorithms.md §3.9). All ids of padding rows are 0.
    ``row_mask`` is 1 on the :func:`kept_rows` (0 on failed episodes), 0 on padding.
    """
    n, t = _resolve_shape(turns, num_rows, num_tokens)
    groups = [turn.group for turn in turns]
    traj = dense_ids([(turn.group, turn.trajectory) for turn in turns])
    _check_episode_returns(turns, traj)
    lengths = np.array([len(turn.old_log_probs) for turn in turns])
    mask = np.zeros((n, t), dtype=np.float32)
    mask[: len(turns)] = np.arange(t)[None, :] < lengths[:, None]
    loss_mask = _optional_tokens(turns, "loss_mask", n, t)
    if loss_mask is not None:
        mask *= loss_mask
    optional = {name: _optional_tokens(turns, name, n, t) for name in OPTIONAL_TOKEN_FIELDS}
    batch = TurnBatch(
        response_mask=jnp.asarray(mask),
        old_log_probs=jnp.asarray(_pad_tokens([turn.old_log_probs for turn in turns], n, t)),
        row_mask=jnp.asarray(_pad_rows(kept_rows(turns).astype(np.float32), n, np.float32)),
        group_ids=jnp.asarray(_pad_rows(dense_ids(groups), n, np.int32)),
        traj_ids=jnp.asarray(_pad_rows(traj, n, np.int32)),
        turn_ids=jnp.asarray(_pad_rows([turn.turn for turn in turns], n, np.int32)),
        anchor_ids=jnp.asarray(
            _pad_rows(
                anchor_ids(groups, [turn.anchor for turn in turns], similarity_threshold),
                n,
                np.int32,
            )
        ),
        episode_returns=jnp.asarray(
            _pad_rows([turn.episode_return for turn in turns], n, np.float32)
        ),
        step_rewards=jnp.asarray(_pad_rows([turn.step_reward for turn in turns], n, np.float32)),
        action_valid=jnp.asarray(
            _pad_rows([float(turn.action_valid) for turn in turns], n, np.float32)
        ),
        **{name: None if v is None else jnp.asarray(v) for name, v in optional.items()},
    )
    validate_batch(batch)
    return batch
