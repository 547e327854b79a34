"""Seed chunks: fixed-size batches whose real parts are the seeds, in order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arlarena_jax.rollout.chunks import seed_chunks


@given(st.lists(st.integers(0, 2**31), max_size=40), st.integers(1, 9))
def test_chunks_cover_the_seeds_in_order_with_first_seed_padding(seeds, size):
    chunks = list(seed_chunks(seeds, size))
    assert [s for c in chunks for s in c.seeds[: c.real]] == seeds
    assert all(len(c.seeds) == size and 1 <= c.real <= size for c in chunks)
    assert all(c.seeds[c.real :] == [c.seeds[0]] * (size - c.real) for c in chunks)
    assert [c.start for c in chunks] == list(range(0, len(seeds), size))


def test_a_chunk_size_below_one_is_refused():
    with pytest.raises(ValueError, match="chunk size must be >= 1, got 0"):
        list(seed_chunks([1, 2], 0))
