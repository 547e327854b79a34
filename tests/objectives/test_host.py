"""Host bridge: dense ids, anchor grouping (docs/algorithms.md §3.9, TV-4 similarity check) and
collation (§1.2).

Ratios use a 1e-6 tolerance (the spec prints 6 decimals); advantages through the full pipeline use
1e-5 like tests/objectives/test_advantage.py (float32 arithmetic on values up to ~10).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arlarena_jax.objectives import advantage as adv
from arlarena_jax.objectives.compose import Objective, PolicyLoss
from arlarena_jax.objectives.host import (
    HostTurn,
    anchor_ids,
    anchor_key,
    collate,
    dense_ids,
    similarity_ratio,
)
from arlarena_jax.objectives.rewards import invalid_action_penalty

KITCHEN = "you are in the kitchen"
KITCHEN_DOT = "you are in the kitchen."
HALLWAY = "you are in the hallway"


# ---------------------------------------------------------------------------------------------
# dense_ids
# ---------------------------------------------------------------------------------------------


def test_dense_ids_first_appearance_order():
    ids = dense_ids(["b", "a", "b", "c", "a", ("t", 1), ("t", 1)])
    assert ids.dtype == np.int32
    np.testing.assert_array_equal(ids, [0, 1, 0, 2, 1, 3, 3])
    assert dense_ids([]).shape == (0,)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.integers(-5, 5), st.sampled_from("abcdef")), max_size=40))
def test_dense_ids_is_first_appearance_bijection(keys):
    ids = dense_ids(keys)
    distinct = list(dict.fromkeys(keys))  # distinct keys in first-appearance order
    assert ids.dtype == np.int32 and ids.shape == (len(keys),)
    assert sorted(set(ids.tolist())) == list(range(len(distinct)))
    # key -> id is a function and injective, and id g is the g-th distinct key to appear.
    for key, i in zip(keys, ids.tolist(), strict=True):
        assert distinct[i] == key
    first_ids = [int(ids[keys.index(key)]) for key in distinct]
    assert first_ids == list(range(len(distinct)))


# ---------------------------------------------------------------------------------------------
# anchor_key / similarity_ratio / anchor_ids
# ---------------------------------------------------------------------------------------------


def test_anchor_key_text_and_bytes_are_themselves():
    assert anchor_key("room") == "room"
    assert anchor_key(b"room") == b"room"
    assert anchor_key("room") != anchor_key(b"room")


def test_anchor_key_numpy_arrays_match_by_dtype_shape_and_bytes():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert anchor_key(a) == anchor_key(a.copy())
    assert hash(anchor_key(a)) == hash(anchor_key(np.array([[0, 1, 2], [3, 4, 5]], np.int32)))
    assert anchor_key(a) != anchor_key(a.reshape(3, 2))  # same bytes, other shape
    assert anchor_key(a) != anchor_key(a.astype(np.int64))  # same values, other dtype
    assert anchor_key(a) != anchor_key(a + 1)
    strided = np.arange(12, dtype=np.int32).reshape(2, 6)[:, ::2]  # non-contiguous view
    assert anchor_key(strided) == anchor_key(np.array([[0, 2, 4], [6, 8, 10]], np.int32))


def test_anchor_key_rejects_unkeyable_anchors():
    with pytest.raises(TypeError, match="dtype object"):
        anchor_key(np.array(["a", None], dtype=object))
    with pytest.raises(TypeError, match="unhashable anchor of type list"):
        anchor_key([1, 2])


def test_similarity_ratio_tv4_check():
    assert similarity_ratio(KITCHEN, KITCHEN_DOT) == pytest.approx(0.977778, abs=1e-6)
    assert similarity_ratio(KITCHEN, HALLWAY) == pytest.approx(0.727273, abs=1e-6)
    assert similarity_ratio("", "") == 1.0
    assert similarity_ratio("abcd", "abcd") == 1.0


def test_similarity_grouping_tv4_check():
    ids = anchor_ids(["g"] * 3, [KITCHEN, KITCHEN_DOT, HALLWAY], similarity_threshold=0.95)
    np.testing.assert_array_equal(ids, [0, 0, 1])
    # The same rows grouped exactly: three distinct anchors.
    np.testing.assert_array_equal(anchor_ids(["g"] * 3, [KITCHEN, KITCHEN_DOT, HALLWAY]), [0, 1, 2])


def test_exact_anchor_grouping_is_within_groups_only():
    groups = ["a", "a", "b", "b", "a", "b"]
    anchors = ["x", "y", "x", "x", "x", "y"]
    ids = anchor_ids(groups, anchors)
    assert ids.dtype == np.int32
    # a|x = {0, 4}, a|y = {1}, b|x = {2, 3}, b|y = {5}: equal anchors across groups differ.
    np.testing.assert_array_equal(ids, [0, 1, 2, 2, 0, 3])
    sim = anchor_ids(groups, anchors, similarity_threshold=0.95)
    np.testing.assert_array_equal(sim, [0, 1, 2, 2, 0, 3])


def test_similar_anchors_in_different_groups_get_different_ids():
    ids = anchor_ids(
        ["a", "b", "a"], [KITCHEN, KITCHEN_DOT, KITCHEN_DOT], similarity_threshold=0.95
    )
    np.testing.assert_array_equal(ids, [0, 1, 0])


def test_exact_grouping_of_numpy_array_anchors():
    grid = np.array([[1, 0], [3, 2]], np.uint8)
    anchors = [grid, grid.copy(), grid.T.copy(), grid.astype(np.int32), grid.copy()]
    ids = anchor_ids(["g", "g", "g", "g", "h"], anchors)
    # rows 0, 1 equal; row 2 other values; row 3 other dtype; row 4 other group.
    np.testing.assert_array_equal(ids, [0, 0, 1, 2, 3])


def test_similarity_representative_is_the_first_member():
    a, b, c = "a" * 10, "a" * 10 + "b", "a" * 10 + "bb"
    assert similarity_ratio(b, a) == pytest.approx(20 / 21)  # 0.952 -> joins a's cluster
    assert similarity_ratio(c, a) == pytest.approx(20 / 22)  # 0.909 vs the representative a
    assert similarity_ratio(c, b) == pytest.approx(22 / 23)  # 0.957, but b is not representative
    np.testing.assert_array_equal(anchor_ids(["g"] * 3, [a, b, c], 0.95), [0, 0, 1])


def test_similarity_joins_the_first_matching_cluster():
    x, y, z = "a" * 10, "a" * 10 + "b" * 6, "a" * 10 + "bbb"
    assert similarity_ratio(y, x) == pytest.approx(20 / 26)  # 0.769 < 0.8: y starts cluster 1
    assert similarity_ratio(z, x) == pytest.approx(20 / 23)  # 0.870 >= 0.8
    assert similarity_ratio(z, y) == pytest.approx(26 / 29)  # 0.897, higher, but cluster 1
    np.testing.assert_array_equal(anchor_ids(["g"] * 3, [x, y, z], 0.8), [0, 1, 0])


def test_similarity_repeated_text_reuses_its_cluster():
    texts = [KITCHEN, HALLWAY, KITCHEN_DOT, HALLWAY, KITCHEN, "zzz"]
    np.testing.assert_array_equal(anchor_ids(["g"] * 6, texts, 0.95), [0, 1, 0, 1, 0, 2])


def test_anchor_ids_errors():
    with pytest.raises(ValueError, match="row 1 has an anchor of type bytes"):
        anchor_ids(["g", "g"], ["text", b"bytes"], similarity_threshold=0.9)
    with pytest.raises(ValueError, match="row 0 has an anchor of type ndarray"):
        anchor_ids(["g"], [np.zeros(2)], similarity_threshold=0.9)
    with pytest.raises(ValueError, match=r"similarity_threshold must lie in \(0, 1\], got 1.5"):
        anchor_ids(["g"], ["t"], similarity_threshold=1.5)
    with pytest.raises(ValueError, match=r"similarity_threshold must lie in \(0, 1\], got 0.0"):
        anchor_ids(["g"], ["t"], similarity_threshold=0.0)
    with pytest.raises(ValueError, match="2 group keys but 1 anchors"):
        anchor_ids(["g", "g"], ["t"])


# ---------------------------------------------------------------------------------------------
# collate
# ---------------------------------------------------------------------------------------------


def turn(group="g", traj="t0", k=0, anchor="s", ret=1.0, length=2, **kw) -> HostTurn:
    """A turn row whose old log-probs are -1, -2, ... (one per token)."""
    defaults = dict(step_reward=0.5, action_valid=True)
    defaults.update(kw)
    old = [-(j + 1.0) for j in range(length)]
    return HostTurn(group, traj, k, anchor, ret, old_log_probs=old, **defaults)


def test_collate_pads_rows_and_tokens():
    turns = [
        turn("a", "a1", 0, "s0", 1.0, 3, step_reward=0.0, action_valid=True),
        turn("a", "a1", 1, "s1", 1.0, 1, step_reward=1.0, action_valid=False),
        turn("b", "b1", 0, "s0", 0.0, 2, step_reward=0.0, action_valid=True),
    ]
    batch = collate(turns, num_rows=5, num_tokens=4)
    assert batch.response_mask.shape == (5, 4) and batch.num_rows == 5 and batch.num_tokens == 4
    np.testing.assert_array_equal(
        batch.response_mask,
        [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]],
    )
    np.testing.assert_array_equal(
        batch.old_log_probs,
        [[-1, -2, -3, 0], [-1, 0, 0, 0], [-1, -2, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]],
    )
    np.testing.assert_array_equal(batch.row_mask, [1, 1, 1, 0, 0])
    np.testing.assert_array_equal(batch.group_ids, [0, 0, 1, 0, 0])
    np.testing.assert_array_equal(batch.traj_ids, [0, 0, 1, 0, 0])
    np.testing.assert_array_equal(batch.turn_ids, [0, 1, 0, 0, 0])
    np.testing.assert_array_equal(batch.anchor_ids, [0, 1, 2, 0, 0])  # a|s0, a|s1, b|s0
    np.testing.assert_array_equal(batch.episode_returns, [1, 1, 0, 0, 0])
    np.testing.assert_array_equal(batch.step_rewards, [0, 1, 0, 0, 0])
    np.testing.assert_array_equal(batch.action_valid, [1, 0, 1, 0, 0])
    for name in ("response_mask", "old_log_probs", "row_mask", "episode_returns", "step_rewards"):
        assert getattr(batch, name).dtype == jnp.float32, name
    for name in ("group_ids", "traj_ids", "turn_ids", "anchor_ids"):
        assert getattr(batch, name).dtype == jnp.int32, name
    for name in ("ref_log_probs", "rollout_log_probs", "old_entropy", "values", "advantages"):
        assert getattr(batch, name) is None, name
    assert isinstance(batch.row_mask, jnp.ndarray)


def test_collate_default_shape_is_rows_by_longest_response():
    batch = collate([turn(length=2), turn(traj="t1", length=5), turn(traj="t2", length=0)])
    assert batch.response_mask.shape == (3, 5)
    np.testing.assert_array_equal(batch.response_mask.sum(axis=1), [2, 5, 0])
    np.testing.assert_array_equal(batch.row_mask, [1, 1, 1])


def test_collate_optional_token_fields():
    turns = [
        turn(traj="t0", length=2, ref_log_probs=[-0.5, -0.25], values=[1.0, 2.0]),
        turn(traj="t1", length=1, ref_log_probs=np.array([-0.125]), values=[3.0]),
    ]
    batch = collate(turns, num_rows=3, num_tokens=3)
    np.testing.assert_array_equal(batch.ref_log_probs, [[-0.5, -0.25, 0], [-0.125, 0, 0], [0] * 3])
    np.testing.assert_array_equal(batch.values, [[1, 2, 0], [3, 0, 0], [0, 0, 0]])
    assert batch.ref_log_probs.dtype == jnp.float32 and batch.values.shape == (3, 3)
    assert batch.rollout_log_probs is None and batch.old_entropy is None


def test_collate_keeps_row_order_and_splits_per_group_trajectory_labels():
    turns = [
        turn("b", 0, 1, "x"),
        turn("a", 0, 0, "x", ret=2.0),
        turn("b", 0, 0, "y"),
        turn("a", 1, 0, "x", ret=3.0),
    ]
    batch = collate(turns)
    np.testing.assert_array_equal(batch.group_ids, [0, 1, 0, 1])
    np.testing.assert_array_equal(batch.traj_ids, [0, 1, 0, 2])  # b/0, a/0, b/0, a/1
    np.testing.assert_array_equal(batch.turn_ids, [1, 0, 0, 0])
    np.testing.assert_array_equal(batch.anchor_ids, [0, 1, 2, 1])
    np.testing.assert_array_equal(batch.episode_returns, [1, 2, 1, 3])


def test_collate_numpy_anchors_and_similarity_threshold():
    grid = np.eye(3, dtype=np.uint8)
    turns = [
        turn(anchor=grid),
        turn(traj="t1", anchor=grid.copy()),
        turn(traj="t2", anchor=grid * 2),
    ]
    np.testing.assert_array_equal(collate(turns).anchor_ids, [0, 0, 1])
    text = [
        turn(anchor=KITCHEN),
        turn(traj="t1", anchor=KITCHEN_DOT),
        turn(traj="t2", anchor=HALLWAY),
    ]
    np.testing.assert_array_equal(collate(text).anchor_ids, [0, 1, 2])
    np.testing.assert_array_equal(collate(text, similarity_threshold=0.95).anchor_ids, [0, 0, 1])
    with pytest.raises(ValueError, match="row 0 has an anchor of type ndarray"):
        collate(turns, similarity_threshold=0.95)


def test_collate_error_too_many_turns():
    with pytest.raises(ValueError, match=r"^collate\(\) got 3 turns but num_rows=2$"):
        collate([turn(traj=f"t{i}") for i in range(3)], num_rows=2)


def test_collate_error_response_too_long():
    turns = [turn(length=2), turn(traj="t1", length=5)]
    with pytest.raises(ValueError, match=r"^turn row 1 has a 5-token response but num_tokens=4$"):
        collate(turns, num_tokens=4)


def test_collate_error_optional_field_on_some_rows_only():
    turns = [turn(old_entropy=[0.1, 0.2]), turn(traj="t1"), turn(traj="t2", old_entropy=[1, 2])]
    with pytest.raises(
        ValueError, match=r"^old_entropy is given for some turn rows but missing on row 1;"
    ):
        collate(turns)
    turns = [turn(), turn(traj="t1", rollout_log_probs=[-1.0, -1.0])]
    with pytest.raises(ValueError, match=r"rollout_log_probs .* missing on row 0"):
        collate(turns)


def test_collate_error_optional_field_length():
    turns = [turn(values=[1.0, 2.0]), turn(traj="t1", length=3, values=[1.0, 2.0])]
    with pytest.raises(
        ValueError, match=r"^turn row 1: values has 2 values but old_log_probs has 3$"
    ):
        collate(turns)


def test_collate_error_empty_and_inconsistent_returns():
    with pytest.raises(ValueError, match="no turns"):
        collate([])
    turns = [turn(k=0, ret=1.0), turn(k=1, ret=2.0)]
    with pytest.raises(ValueError, match=r"row 1 has episode_return 2\.0 but row 0 .* has 1\.0"):
        collate(turns)


# ---------------------------------------------------------------------------------------------
# Round trip: TV-4's 11 rows -> ids -> GiGPO advantages of the spec
# ---------------------------------------------------------------------------------------------

# row: uid, traj, turn, R, invalid, r_env, anchor, #tok (spec §12 TV-4)
TV4_ROWS = [
    ("a", "a1", 0, 10, 0, 0, "s0", 3),
    ("a", "a1", 1, 10, 0, 10, "s1", 2),
    ("a", "a2", 0, 0, 0, 0, "s0", 3),
    ("a", "a2", 1, 0, 1, 0, "s2", 3),
    ("a", "a2", 2, 0, 0, 0, "s1", 2),
    ("a", "a3", 0, 10, 0, 10, "s0", 3),
    ("b", "b1", 0, 0, 1, 0, "t0", 3),
    ("b", "b1", 1, 0, 0, 0, "t1", 2),
    ("b", "b2", 0, 0, 0, 0, "t0", 3),
    ("b", "b2", 1, 0, 0, 0, "t1", 3),
    ("b", "b3", 0, 0, 0, 0, "t0", 2),
]
TV4_GIGPO_STD = [1.445264, 1.619957, -2.060348, -0.924982, -1.613892, 1.534, -2.943495]
TV4_GIGPO_STD += [0.447204, 1.024544, 0.447204, 1.024544]


def tv4_turns() -> list[HostTurn]:
    return [
        HostTurn(
            group=uid,
            trajectory=traj,
            turn=k,
            anchor=anchor,
            episode_return=float(ret),
            step_reward=float(r_env),
            action_valid=not invalid,
            old_log_probs=[-1.0] * n_tok,
        )
        for uid, traj, k, ret, invalid, r_env, anchor, n_tok in TV4_ROWS
    ]


def members(ids: np.ndarray) -> list[set[int]]:
    """The partition of row indices that segment ids induce, in first-appearance order."""
    out: dict[int, set[int]] = {}
    for row, i in enumerate(np.asarray(ids).tolist()):
        out.setdefault(i, set()).add(row)
    return list(out.values())


@pytest.mark.parametrize("threshold", [None, 0.95])
def test_tv4_round_trip_ids(threshold):
    batch = collate(tv4_turns(), num_rows=16, num_tokens=4, similarity_threshold=threshold)
    real = slice(0, 11)
    np.testing.assert_array_equal(batch.group_ids[real], [0] * 6 + [1] * 5)
    np.testing.assert_array_equal(batch.traj_ids[real], [0, 0, 1, 1, 1, 2, 3, 3, 4, 4, 5])
    np.testing.assert_array_equal(batch.turn_ids[real], [0, 1, 0, 1, 2, 0, 0, 1, 0, 1, 0])
    np.testing.assert_array_equal(batch.anchor_ids[real], [0, 1, 0, 2, 1, 0, 3, 4, 3, 4, 3])
    assert members(batch.anchor_ids[real]) == [{0, 2, 5}, {1, 4}, {3}, {6, 8, 10}, {7, 9}]
    np.testing.assert_array_equal(
        batch.response_mask.sum(axis=1)[real], [3, 2, 3, 3, 2, 3, 3, 2, 3, 3, 2]
    )
    np.testing.assert_array_equal(batch.row_mask, [1] * 11 + [0] * 5)
    np.testing.assert_array_equal(batch.action_valid[real], [1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1])


def test_tv4_round_trip_gigpo_advantages():
    """Collated (and padded) TV-4 rows reproduce the spec's GiGPO mean_std_norm row values."""
    batch = collate(tv4_turns(), num_rows=16, num_tokens=4)
    objective = Objective(
        advantage=adv.gigpo(0.95, 1.0, "mean_std_norm"),
        policy_loss=PolicyLoss("unused", lambda lp, b, m: (jnp.zeros_like(lp), {})),
        shapers=(invalid_action_penalty(0.1),),
    )
    out, _, _ = objective.prepare(batch)
    expected = np.zeros((16, 4))
    expected[:11] = np.asarray(TV4_GIGPO_STD)[:, None]
    expected *= np.asarray(batch.response_mask)
    np.testing.assert_allclose(np.asarray(out.advantages), expected, atol=1e-5)
