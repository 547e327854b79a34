"""Multi-process start-up: ``jax.distributed.initialize`` when the job runs as several processes.

One process per host (TPU pod worker, GPU node) runs the same command. The entry point calls
:func:`initialize_if_distributed` before anything touches a device:

* ``ARLARENA_COORDINATOR`` (``host:port``), ``ARLARENA_NUM_PROCESSES`` and ``ARLARENA_PROCESS_ID``
  set explicitly (any launcher, e.g. the localhost two-process CPU test);
* SLURM (``SLURM_NTASKS`` > 1): JAX reads the SLURM variables itself, except that a task alone
  on its node is given all of its GPUs (:func:`slurm_local_devices`);
* Cloud TPU pods (``TPU_WORKER_HOSTNAMES`` with more than one host, or ``MEGASCALE_*``): JAX
  discovers the coordinator itself.

Otherwise nothing happens, and so it does when the explicit variables declare one process
(``ARLARENA_NUM_PROCESSES=1``): one process has nothing to coordinate, and on CPU joining the
runtime would also swap XLA's in-process collectives for Gloo's TCP ones, whose blocking calls
were seen to deadlock XLA's CPU runtime under load (docs/training.md, "Several processes").

Bounded waits (seconds, from the environment so that every launcher sets them alike):
``ARLARENA_INIT_TIMEOUT_S`` (default 120) for reaching the coordinator, after which the start is
one line naming it; ``ARLARENA_HEARTBEAT_TIMEOUT_S`` (default 60) after which a process whose
pulse stopped is lost and the others end in one line, exit 75 (:mod:`arlarena_jax.train.liveness`;
JAX's own heartbeat, a C++ abort, is set to twice that plus 30 s as a backstop);
``ARLARENA_PROCESS_TIMEOUT_S`` (default 600) for any host-side exchange between processes
(:mod:`arlarena_jax.train.processes`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import jax

from arlarena_jax.errors import ConfigError
from arlarena_jax.train import liveness


def distributed_settings(env: Mapping[str, str]) -> dict | None:
    """The ``jax.distributed.initialize`` keyword arguments for this environment, or None (one
    process)."""
    if "ARLARENA_COORDINATOR" in env:
        try:
            settings = {
                "coordinator_address": env["ARLARENA_COORDINATOR"],
                "num_processes": int(env["ARLARENA_NUM_PROCESSES"]),
                "process_id": int(env["ARLARENA_PROCESS_ID"]),
            }
        except KeyError as missing:
            raise ValueError(f"ARLARENA_COORDINATOR is set but {missing.args[0]} is not") from None
        except ValueError:
            raise ValueError(
                "ARLARENA_NUM_PROCESSES and ARLARENA_PROCESS_ID must be integers"
            ) from None
        return settings if settings["num_processes"] > 1 else None
    if int(env.get("SLURM_NTASKS", "1")) > 1:
        return slurm_local_devices(env)
    hosts = env.get("TPU_WORKER_HOSTNAMES", "")
    if len([h for h in hosts.split(",") if h]) > 1 or "MEGASCALE_COORDINATOR_ADDRESS" in env:
        return {}
    return None


def slurm_local_devices(env: Mapping[str, str]) -> dict:
    """Under SLURM, JAX gives each task the one GPU numbered by its ``SLURM_LOCALID`` (one task
    per GPU). A task alone on its node (``launch/slurm_gpu.sbatch``: one task per node, all its
    GPUs) gets every GPU SLURM gave it instead: ``local_device_ids`` 0..n-1 over
    ``CUDA_VISIBLE_DEVICES`` (else ``SLURM_GPUS_ON_NODE``). Several tasks per node, or no GPU:
    JAX's default (``{}``)."""
    if not re.fullmatch(r"1(\(x\d+\))?", env.get("SLURM_TASKS_PER_NODE", "")):
        return {}
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    count = len(visible) if visible else int(env.get("SLURM_GPUS_ON_NODE", "0") or 0)
    return {"local_device_ids": list(range(count))} if count > 1 else {}


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        value = float(env.get(name, default))
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, got {env[name]!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {env[name]!r}")
    return value


def process_timeout_s(env: Mapping[str, str] | None = None) -> float:
    """How long a host-side exchange waits for another process (``ARLARENA_PROCESS_TIMEOUT_S``)."""
    return _seconds(os.environ if env is None else env, "ARLARENA_PROCESS_TIMEOUT_S", 600.0)


def initialize_if_distributed(env: Mapping[str, str] | None = None) -> bool:
    """Start JAX's multi-controller runtime when launched as several processes; True if it did.
    A coordinator that does not answer within ``ARLARENA_INIT_TIMEOUT_S`` is one ConfigError."""
    env = os.environ if env is None else env
    settings = distributed_settings(env)
    if settings is None:
        return False
    if jax.distributed.is_initialized():  # started already (the data check starts it early)
        return True
    init_s = int(_seconds(env, "ARLARENA_INIT_TIMEOUT_S", 120.0))
    heartbeat_s = _seconds(env, "ARLARENA_HEARTBEAT_TIMEOUT_S", 60.0)
    try:
        jax.distributed.initialize(
            **settings,
            initialization_timeout=init_s,
            heartbeat_timeout_seconds=int(2 * heartbeat_s)
            + 30,  # a backstop: liveness speaks first
        )
    except Exception as error:  # XlaRuntimeError / RuntimeError from the coordination client
        where = settings.get("coordinator_address", "the coordinator")
        first = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
        raise ConfigError(
            f"could not join the other processes through {where} within {init_s} s "
            f"(ARLARENA_INIT_TIMEOUT_S): {type(error).__name__}: {first}"
        ) from None
    from jax._src import distributed  # the coordination service's client

    liveness.watch(
        distributed.global_state.client, jax.process_index(), jax.process_count(), heartbeat_s
    )
    return True
