"""The host environment pool (envs/pool.py) against the in-process batch (envs/local.py).

docs/environments.md §1.1 (grouped resets) and docs/environments.md §2.3 (pool: per-call timeouts,
restart of a crashed or hung worker). Fault injection uses tests/helpers/faulty_env.py,
importable by spawned workers.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import time

import numpy as np
import pytest

from envs.local import LocalEnvBatch, grouped_seeds
from envs.pool import EnvPool
from envs.sokoban.reference import SokobanTextEnv
from tests.helpers.faulty_env import (
    CRASH,
    HANG,
    RAISE,
    RAISE_SEED,
    SLOW,
    SLOW_S,
    BrokenFactory,
    FaultyEnv,
)


def assert_steps_equal(a, b, envs=None):
    """Equal observations, rewards, dones and infos (on the env indices ``envs``)."""
    envs = range(len(a.observations)) if envs is None else envs
    for i in envs:
        assert a.observations[i] == b.observations[i]
        assert a.rewards[i] == b.rewards[i] and a.dones[i] == b.dones[i]
        assert a.infos[i] == b.infos[i]


def gone(pid: int) -> bool:
    """True when the process ``pid`` has exited and been reaped (no zombie left)."""
    return not os.path.exists(f"/proc/{pid}")


@pytest.fixture(scope="module")
def sokoban_pool():
    with EnvPool(SokobanTextEnv, num_envs=6, num_workers=2) as pool:
        yield pool


@pytest.fixture(scope="module")
def faulty_pool():
    with EnvPool(FaultyEnv, num_envs=4, num_workers=2, step_timeout=1.0) as pool:
        yield pool


def test_pool_matches_local_batch(sokoban_pool):
    local = LocalEnvBatch(SokobanTextEnv, 6)
    seeds = grouped_seeds([0, 5, 17], 2)
    assert sokoban_pool.reset(seeds) == local.reset(seeds)
    rng = np.random.default_rng(0)
    for t in range(20):  # past max_steps=15: stepping finished episodes is allowed
        actions = rng.integers(0 if t < 3 else 1, 5, size=6).tolist()  # 0 is not counted
        got, want = sokoban_pool.step(actions), local.step(actions)
        assert got.rewards.dtype == np.float32 and got.dones.dtype == bool
        assert_steps_equal(got, want)
    assert got.dones.all()
    assert sokoban_pool.restarts == 0 and sokoban_pool.failures == 0


def test_grouped_resets_share_a_task(sokoban_pool):
    assert grouped_seeds([3, 11], 3) == [3, 3, 3, 11, 11, 11]
    obs = sokoban_pool.reset(grouped_seeds([3, 11], 3))
    assert obs[0] == obs[1] == obs[2] and obs[3] == obs[4] == obs[5] and obs[0] != obs[3]


def test_usage_errors(sokoban_pool):
    with pytest.raises(ValueError, match="expected 6 seeds"):
        sokoban_pool.reset([1, 2, 3])
    with pytest.raises(ValueError, match="expected 6 actions"):
        sokoban_pool.step([1] * 7)
    with pytest.raises(ValueError, match="num_workers"):
        EnvPool(SokobanTextEnv, num_envs=2, num_workers=0)
    with pytest.raises(ValueError, match="num_workers"):
        EnvPool(SokobanTextEnv, num_envs=2, num_workers=3)
    with pytest.raises(ValueError, match="num_envs"):
        EnvPool(SokobanTextEnv, num_envs=0, num_workers=1)
    with pytest.raises(ValueError, match="start_method"):
        EnvPool(SokobanTextEnv, num_envs=2, num_workers=1, start_method="fork")
    with pytest.raises(ValueError, match="expected 2 actions"):
        LocalEnvBatch(SokobanTextEnv, 2).step([1])


def test_crashed_and_hung_workers_fail_their_envs_only(faulty_pool):
    pool, local = faulty_pool, LocalEnvBatch(SokobanTextEnv, 4)
    seeds = [1, 1, 2, 2]  # worker 0 runs envs 0-1, worker 1 envs 2-3
    assert pool.reset(seeds) == local.reset(seeds)
    start = pool.reset(seeds)
    got, want = pool.step([CRASH, 1, 2, 3]), local.step([1, 1, 2, 3])
    assert_steps_equal(got, want, envs=[2, 3])
    for i in (0, 1):
        assert got.dones[i] and got.rewards[i] == 0.0 and got.observations[i] == start[i]
        assert got.infos[i]["won"] is False and "exit code 1" in got.infos[i]["failure"]
    assert (pool.restarts, pool.failures) == (1, 2)
    again = pool.step([1, 1, 1, 1])  # failed envs stay done until the next reset
    assert list(again.dones[:2]) == [True, True] and "failure" in again.infos[0]
    assert_steps_equal(again, local.step([1, 1, 1, 1]), envs=[2, 3])

    assert pool.reset(seeds) == local.reset(seeds)  # the fresh worker 0 works
    assert not pool.failed.any()
    got, want = pool.step([2, 4, 1, HANG]), local.step([2, 4, 1, 1])
    assert_steps_equal(got, want, envs=[0, 1])
    assert got.dones[2:].all() and "timed out" in got.infos[3]["failure"]
    assert (pool.restarts, pool.failures) == (2, 4)
    assert pool.reset(seeds) == local.reset(seeds)
    assert_steps_equal(pool.step([1, 2, 3, 4]), local.step([1, 2, 3, 4]))


def test_the_deadline_bounds_each_env_not_the_workers_whole_share():
    """One worker, 3 envs, step timeout 1 s. Three late replies of 0.6 s each (1.8 s for the
    share, each env under its 1 s) are all kept, as the in-process batch steps them; a hung env
    among them is still caught, one timeout after the env before it answered: the worker's
    episodes fail, it is replaced, and the step returns long before the hang would end (600 s;
    30 s allowed for a loaded machine)."""
    with EnvPool(FaultyEnv, num_envs=3, num_workers=1, step_timeout=1.0) as pool:
        local, seeds = LocalEnvBatch(SokobanTextEnv, 3), [3, 3, 5]
        assert pool.reset(seeds) == local.reset(seeds)
        began = time.monotonic()
        got = pool.step([SLOW, SLOW, SLOW])
        assert time.monotonic() - began >= 3 * SLOW_S > pool.step_timeout
        assert_steps_equal(got, local.step([1, 1, 1]))
        assert (pool.restarts, pool.failures) == (0, 0)

        began = time.monotonic()
        got = pool.step([SLOW, HANG, 1])
        assert time.monotonic() - began < 30
        assert got.dones.all() and "timed out" in got.infos[1]["failure"]
        assert (pool.restarts, pool.failures) == (1, 3)
        assert pool.reset(seeds) == local.reset(seeds)  # the fresh worker works
        assert_steps_equal(pool.step([SLOW, 2, SLOW]), local.step([1, 2, 1]))


def test_env_exceptions_fail_only_that_env(faulty_pool, caplog):
    pool, local = faulty_pool, LocalEnvBatch(SokobanTextEnv, 4)
    restarts, failures = pool.restarts, pool.failures
    seeds = [4, 4, 9, 9]
    pool.reset(seeds), local.reset(seeds)
    with caplog.at_level(logging.ERROR, logger="envs.pool"):
        got = pool.step([RAISE, 1, 1, 1])
    assert (
        got.infos[0]["failure"] == "ValueError: boom" and got.dones[0] and not got.infos[0]["won"]
    )
    assert "Traceback" in caplog.text and 'raise ValueError("boom")' in caplog.text
    assert_steps_equal(got, local.step([1, 1, 1, 1]), envs=[1, 2, 3])
    assert pool.restarts == restarts and pool.failures == failures + 1

    obs = pool.reset([4, 4, RAISE_SEED, 9])  # an exception in reset: failure at the next step
    assert list(pool.failed) == [False, False, True, False] and obs[2] == got.observations[2]
    step = pool.step([1, 1, 1, 1])
    assert step.dones[2] and step.infos[2]["failure"].startswith("RuntimeError: cannot reset")
    assert pool.reset(seeds) == local.reset(seeds)  # rebuilt envs work again
    assert_steps_equal(pool.step([3, 3, 3, 3]), local.step([3, 3, 3, 3]))


def test_startup_failure_raises_and_cleans_up():
    before = set(mp.active_children())
    with pytest.raises(RuntimeError, match="no such engine"):
        EnvPool(BrokenFactory(), num_envs=2, num_workers=1)
    assert set(mp.active_children()) == before


def test_close_leaves_no_child_processes():
    with EnvPool(SokobanTextEnv, num_envs=3, num_workers=2, start_method="forkserver") as pool:
        local = LocalEnvBatch(SokobanTextEnv, 3)
        assert pool.reset([0, 1, 2]) == local.reset([0, 1, 2])
        assert_steps_equal(pool.step([1, 2, 3]), local.step([1, 2, 3]))
        processes = [w.process for w in pool._workers]
        assert all(p.is_alive() for p in processes)
    assert all(not p.is_alive() and p.exitcode is not None for p in processes)
    assert all(gone(p.pid) for p in processes)
    assert not set(processes) & set(mp.active_children())
    pool.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        pool.reset([0, 1, 2])
