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


@pytest.mark.parametrize(
    ("env", "ids"),
    [
        # slurm_gpu.sbatch: one task per node, SLURM's gres hands it 8 GPUs: all 8, not JAX's
        # default [SLURM_LOCALID] = [0]
        (
            {"SLURM_TASKS_PER_NODE": "1(x4)", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"},
            list(range(8)),
        ),
        ({"SLURM_TASKS_PER_NODE": "1", "CUDA_VISIBLE_DEVICES": "4,5"}, [0, 1]),  # renumbered
        ({"SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_GPUS_ON_NODE": "4"}, [0, 1, 2, 3]),
        ({"SLURM_TASKS_PER_NODE": "2", "CUDA_VISIBLE_DEVICES": "0,1"}, None),  # a GPU per task
        ({"SLURM_TASKS_PER_NODE": "8(x2)", "SLURM_GPUS_ON_NODE": "8"}, None),
        ({"SLURM_TASKS_PER_NODE": "1(x2)"}, None),  # CPU nodes (the local test cluster)
        ({"SLURM_TASKS_PER_NODE": "1", "CUDA_VISIBLE_DEVICES": "0"}, None),  # one GPU: as JAX
    ],
)
def test_a_slurm_task_alone_on_its_node_gets_all_its_gpus(env, ids):
    settings = distributed_settings({"SLURM_NTASKS": "2", **env})
    assert settings == ({} if ids is None else {"local_device_ids": ids})


def test_one_declared_process_is_no_distributed_runtime():
    """One process has nothing to coordinate: the explicit variables declaring one process start
    no runtime (on CPU that keeps XLA's in-process collectives, not Gloo's)."""
    env = {
        "ARLARENA_COORDINATOR": "localhost:1234",
        "ARLARENA_NUM_PROCESSES": "1",
        "ARLARENA_PROCESS_ID": "0",
    }
    assert distributed_settings(env) is None
    assert initialize_if_distributed(env) is False
