"""map_row_chunks: a row-independent function over chunks of rows equals it over all rows."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arlarena_jax.row_chunks import largest_divisor_at_most, map_row_chunks


def _rowwise(x, y):
    """Row-independent, two outputs of different ranks (a pytree)."""
    return {"sum": x.sum(axis=1) * y, "scaled": x * y[:, None]}


def test_largest_divisor_at_most():
    assert [largest_divisor_at_most(n, 4) for n in (8, 6, 7, 3, 1)] == [4, 3, 1, 3, 1]
    assert largest_divisor_at_most(12, 0) == 1


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_chunks_equal_the_whole(chunks, chunk, seed):
    rng = np.random.default_rng(seed)
    n = chunks * chunk
    x = jnp.asarray(rng.normal(size=(n, 3)), jnp.float32)
    y = jnp.asarray(rng.normal(size=n), jnp.float32)
    # Exact: each row's arithmetic is the same whichever chunk it lands in (tolerance 0 up to
    # float32 summation of 3 terms, stated as 1e-6).
    chex.assert_trees_all_close(map_row_chunks(_rowwise, (x, y), chunk), _rowwise(x, y), atol=1e-6)


def test_chunks_see_consecutive_rows():
    ids = jnp.arange(6)
    out = map_row_chunks(lambda r: jnp.broadcast_to(r[0], r.shape), (ids,), 2)
    np.testing.assert_array_equal(out, [0, 0, 2, 2, 4, 4])


@pytest.mark.parametrize("chunk", [4, 0])
def test_a_chunk_that_does_not_divide_the_rows_is_refused(chunk):
    with pytest.raises(ValueError, match=f"6 rows are not a multiple of the chunk size {chunk}"):
        map_row_chunks(_rowwise, (jnp.zeros((6, 3)), jnp.zeros(6)), chunk)


@pytest.mark.parametrize(("chunk", "loops"), [(6, 0), (3, 1)])
def test_a_single_chunk_runs_without_a_loop(chunk, loops):
    """One chunk holding every row is ``fn`` itself (no ``lax.map`` loop in the program)."""
    x, y = jnp.ones((6, 3)), jnp.ones(6)
    jaxpr = jax.make_jaxpr(lambda x, y: map_row_chunks(_rowwise, (x, y), chunk))(x, y)
    assert [e.primitive.name for e in jaxpr.eqns].count("scan") == loops
