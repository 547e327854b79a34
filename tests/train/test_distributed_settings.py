"""When the entry point starts JAX's multi-process runtime (arlarena_jax.train.distributed)."""

import pytest

from arlarena_jax.train.distributed import distributed_settings, initialize_if_distributed


def test_single_process_starts_nothing():
    assert distributed_settings({}) is None
    assert distributed_settings({"SLURM_NTASKS": "1", "TPU_WORKER_HOSTNAMES": "a"}) is None
    assert initialize_if_distributed({}) is False


def test_explicit_coordinator():
    env = {
        "ARLARENA_COORDINATOR": "localhost:1234",
        "ARLARENA_NUM_PROCESSES": "2",
        "ARLARENA_PROCESS_ID": "1",
    }
    assert distributed_settings(env) == {
        "coordinator_address": "localhost:1234",
        "num_processes": 2,
        "process_id": 1,
    }


def test_cluster_auto_detection():
    assert distributed_settings({"SLURM_NTASKS": "4"}) == {}
    assert distributed_settings({"TPU_WORKER_HOSTNAMES": "h0,h1,h2,h3"}) == {}


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"ARLARENA_COORDINATOR": "h:1", "ARLARENA_NUM_PROCESSES": "2"}, "ARLARENA_PROCESS_ID"),
        (
            {
                "ARLARENA_COORDINATOR": "h:1",
                "ARLARENA_NUM_PROCESSES": "two",
                "ARLARENA_PROCESS_ID": "0",
            },
            "must be integers",
        ),
    ],
)
def test_bad_settings_fail_in_one_line(env, match):
    with pytest.raises(ValueError, match=match):
        distributed_settings(env)
