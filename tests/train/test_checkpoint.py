"""Orbax checkpoints of a realistic train state: exact round trip (typed PRNG keys and numpy
generator states included), shardings kept on the 8-device mesh, pruning, crashed saves ignored,
one-line errors; the pre-emption guard."""

from __future__ import annotations

import shutil
import signal
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from arlarena_jax.models import QwenForCausalLM, make_mesh, preset, shard_model
from arlarena_jax.train.checkpoint import Checkpointer, CheckpointError, abstract_like
from arlarena_jax.train.preemption import PreemptionGuard

CONFIG = preset("tiny", vocab_size=64, num_hidden_layers=1)
OPTIMIZER = optax.adamw(1e-3)


def train_state(mesh=None) -> dict:
    model = QwenForCausalLM(CONFIG, rngs=nnx.Rngs(0))
    if mesh is not None:
        shard_model(model, mesh)
    _, params = nnx.split(model, nnx.Param)
    opt_state = OPTIMIZER.init(params)  # moments placed like the parameters
    if mesh is not None:  # the step count replicated over the mesh
        replicated = NamedSharding(mesh, PartitionSpec())
        opt_state = jax.tree.map(
            lambda x: x if isinstance(x.sharding, NamedSharding) else jax.device_put(x, replicated),
            opt_state,
        )
    placement = jax.tree.map(lambda x: x.sharding, (params, opt_state))

    @partial(jax.jit, out_shardings=placement)
    def one_update(params, opt_state):  # so the moments and the count are not all zero
        grads = jax.tree.map(lambda p: jnp.full_like(p, 0.01), params)
        updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    params, opt_state = one_update(params, opt_state)
    return {
        "params": params,
        "opt_state": opt_state,
        "step": jnp.asarray(7, jnp.int32),
        "rng": jax.random.key(42),
        "env_keys": jax.random.split(jax.random.key(3, impl="rbg"), 4),
    }


def assert_same(a, b) -> None:
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            assert jax.random.key_impl(x) == jax.random.key_impl(y)
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture(scope="module")
def state() -> dict:
    return train_state()


def test_round_trip_continues_identically(tmp_path, state):
    gen = np.random.default_rng(123)
    gen.random(5)  # advance: the saved state is mid-stream
    host = {"env_seeds": [1, 2, 3], "episodes": np.int64(17), "data_pos": 5, "rng": {}}
    host["rng"] = gen.bit_generator.state
    with Checkpointer(tmp_path / "run", keep=2) as ckpt:
        assert ckpt.latest_step() is None
        assert ckpt.save(7, state, host)
        ckpt.wait()
        expected_draws = gen.random(4)
        expected_key = jax.random.normal(jax.random.fold_in(state["rng"], 1), (3,))

    with Checkpointer(tmp_path / "run", keep=2) as ckpt:  # a new process resuming
        assert ckpt.latest_step() == 7
        restored, host2 = ckpt.restore(abstract_like(state))
    assert_same(restored, state)
    assert isinstance(restored["params"], nnx.State)
    assert host2["env_seeds"] == [1, 2, 3] and host2["episodes"] == 17 and host2["data_pos"] == 5
    gen2 = np.random.default_rng()
    gen2.bit_generator.state = host2["rng"]
    np.testing.assert_array_equal(gen2.random(4), expected_draws)
    again = jax.random.normal(jax.random.fold_in(restored["rng"], 1), (3,))
    np.testing.assert_array_equal(np.asarray(again), np.asarray(expected_key))


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 simulated host devices")
def test_sharded_restore_keeps_the_placement(tmp_path):
    mesh = make_mesh(data=2, fsdp=2, tensor=2)
    state = train_state(mesh)
    state["env_keys"] = jax.device_put(
        jax.random.split(jax.random.key(5), 8),
        NamedSharding(mesh, PartitionSpec("data")),
    )
    with Checkpointer(tmp_path, keep=1) as ckpt:
        ckpt.save(3, state, {})
        restored, _ = ckpt.restore(abstract_like(state))
    assert_same(restored, state)
    for x, y in zip(jax.tree.leaves(restored), jax.tree.leaves(state), strict=True):
        assert x.sharding == y.sharding, (x.sharding, y.sharding)
    kernel = restored["params"]["model"]["layers"][0]["self_attn"]["q_proj"]["kernel"]
    assert kernel.get_value().sharding.spec == PartitionSpec("fsdp", "tensor")


def test_keep_newest_and_the_last_good_one(tmp_path):
    small = {"w": jnp.arange(4.0), "step": jnp.asarray(0)}
    with Checkpointer(tmp_path, keep=2, save_every=2) as ckpt:
        saved = [s for s in range(1, 11) if ckpt.save(s, small, {"s": s}, good=s <= 4)]
        ckpt.wait()
        assert saved == [2, 4, 6, 8, 10]
        assert ckpt.save(11, small, {}, force=True, good=False)
        ckpt.wait()
        assert ckpt.all_steps() == [4, 10, 11]  # the 2 newest and the newest good one
        assert ckpt.last_good_step() == 4
        _, host = ckpt.restore(small, step=4)
        assert host == {"s": 4}
        with pytest.raises(CheckpointError, match="already has a checkpoint"):
            ckpt.save(10, small, {}, force=True)
        assert ckpt.discard_after(4) == [10, 11]
        assert ckpt.save(6, small, {})
    assert sorted(int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()) == [4, 6]


def test_crashed_save_is_ignored(tmp_path):
    small = {"w": jnp.arange(4.0)}
    with Checkpointer(tmp_path, keep=3) as ckpt:
        ckpt.save(1, small, {"s": 1})
        ckpt.save(2, {"w": jnp.arange(4.0) + 1}, {"s": 2})
    # a save of step 3 killed half-way: orbax's temporary directory, truncated files
    partial = tmp_path / "3.orbax-checkpoint-tmp-1700000000"
    shutil.copytree(tmp_path / "2", partial)
    for f in partial.rglob("*"):
        if f.is_file():
            f.write_bytes(f.read_bytes()[:3])
    with Checkpointer(tmp_path, keep=3) as ckpt:
        assert ckpt.latest_step() == 2
        restored, host = ckpt.restore(small)
        np.testing.assert_array_equal(np.asarray(restored["w"]), np.arange(4.0) + 1)
        assert host == {"s": 2}
        assert ckpt.save(3, small, {"s": 3})  # the resumed run saves step 3 again
        ckpt.wait()
        assert ckpt.all_steps() == [1, 2, 3]
    assert not partial.exists()  # orbax removed the leftover (in the background, before saving)


def test_errors_are_one_line(tmp_path, state):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CheckpointError, match="is not writable") as err:
        Checkpointer(blocker / "ckpt")
    assert "\n" not in str(err.value)
    with Checkpointer(tmp_path / "run") as ckpt:
        with pytest.raises(CheckpointError, match="no checkpoint to restore"):
            ckpt.restore(state)
        ckpt.save(1, state, {})
        wrong = abstract_like(state)
        embed = wrong["params"]["model"]["embed_tokens"]["embedding"]
        embed.set_value(jax.ShapeDtypeStruct((65, 128), jnp.float32))
        with pytest.raises(CheckpointError) as err:
            ckpt.restore(wrong)
        msg = str(err.value)
        assert "\n" not in msg
        assert "'params.model.embed_tokens.embedding.value' has shape (64, 128)" in msg
        assert "(65, 128) in the target" in msg
        with pytest.raises(CheckpointError, match="'extra' is not in the checkpoint"):
            ckpt.restore({**state, "extra": jnp.zeros(2)})
        with pytest.raises(CheckpointError, match="not JSON-serialisable"):
            ckpt.save(2, state, {"gen": np.random.default_rng(0)})


def test_preemption_guard_sets_its_flag_and_restores_the_handler():
    def before(signum, frame):
        raise AssertionError("the guard should have intercepted SIGTERM")

    previous = signal.signal(signal.SIGTERM, before)
    # As in a terminal: a job started in the background (CI scripts) starts with SIGINT ignored.
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with PreemptionGuard(sigint=True) as guard:
            assert not guard.requested
            # raise_signal targets this (the main) thread, so the handler has run when it
            # returns; os.kill targets the process, and with XLA's threads alive the kernel may
            # deliver it to another thread after the call returns (a flaky assertion in CI).
            signal.raise_signal(signal.SIGTERM)
            assert guard.requested and guard.signal == signal.SIGTERM
            with pytest.raises(KeyboardInterrupt):  # second signal: SIGINT forces the exit
                signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGTERM) is before
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
