"""Each process's share of an RL step, side by side: the ``process/<i>/…`` scalars.

Process 0 alone writes the run's metrics, so its ``timing/…`` splits are its own. After every RL
step each process hands its numbers to one allgather and process 0 logs, for every process i:

- ``process/<i>/env_steps``: the environment steps its training environments took (episodes
  still running; ``TimedEnvBatch``); an on-device rollout takes none on the host;
- ``process/<i>/env_s``: its seconds inside those environments' reset and step (host time);
- ``process/<i>/rollout_s``, ``update_s``: its rollout (the gather of the parts included) and
  update;
- ``process/<i>/sync_s``: its weight refresh into its sampler (``replica_params``, a collective;
  asynchronous RL: the copy it publishes to its producer);
- ``process/<i>/exchange_s``, ``exchange_mib``: its time inside host exchanges over the step
  (``Exchange.traffic``: pickling, sending, waiting for the slowest process, reading) and what it
  sent. Under asynchronous RL the producer thread's exchanges during the step are counted too.

With N processes each plays a block of B / N groups (``process_shares``), so ``env_steps`` falls
as 1/N: summed over the processes it is the one-process count of the same episodes. A process
whose ``env_s`` or ``rollout_s`` stands out is the straggler the others wait for in
``exchange_s``. One process logs ``process/0/…`` (its exchange is empty).

Several processes also log the spread of each number over the processes, which is what a pod's
straggler shows in: ``process/max/<name>``, ``process/min/<name>``, ``process/mean/<name>`` and
``process/argmax/<name>`` (the index of the process with the largest, the lowest index on a tie).
Beyond :data:`PER_PROCESS_TAGS` processes only the spread is logged: 64 hosts would otherwise add
448 TensorBoard tags a step, while the spread stays at 28.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from arlarena_jax.train.processes import Exchange, Traffic

SPLITS = {"env_s": "rollout/env", "rollout_s": "rollout", "update_s": "update", "sync_s": "sync"}
NAMES = ("env_steps", *SPLITS, "exchange_s", "exchange_mib")  # process/<i>/<name>, in order
PER_PROCESS_TAGS = 8  # processes up to which each one's numbers are logged (module doc)


def own_numbers(seconds: Mapping[str, float], env_steps: int, traffic: Traffic) -> dict[str, float]:
    """This process's numbers of a step (:data:`NAMES`): ``seconds`` its timing splits
    (``Timer.seconds``: a split it did not time is 0), ``env_steps`` its environment steps,
    ``traffic`` what its exchanges took over the step."""
    out = {"env_steps": float(env_steps)}
    out |= {name: float(seconds.get(split, 0.0)) for name, split in SPLITS.items()}
    out |= {"exchange_s": traffic.seconds, "exchange_mib": traffic.sent_bytes / 2**20}
    return out


def process_metrics(exchange: Exchange, own: Mapping[str, float]) -> dict[str, float]:
    """Every process's ``own`` numbers, gathered (a collective: every process calls it once per
    step): ``process/<i>/<name>`` for each process i up to :data:`PER_PROCESS_TAGS` processes,
    and with several processes their spread (:func:`spread`)."""
    everyone = exchange.allgather("process numbers", dict(own))
    out = {}
    if len(everyone) <= PER_PROCESS_TAGS:
        out = {
            f"process/{i}/{name}": value
            for i, numbers in enumerate(everyone)
            for name, value in numbers.items()
        }
    return out | (spread(everyone) if len(everyone) > 1 else {})


def spread(everyone: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """``process/{max,min,mean,argmax}/<name>`` of each number over the processes ``everyone``
    (in process order): max_i x_i, min_i x_i, (1/N) Σ_i x_i and the lowest i with x_i = max."""
    out = {}
    for name in everyone[0]:
        values = [numbers[name] for numbers in everyone]
        largest = max(values)
        out |= {
            f"process/max/{name}": largest,
            f"process/min/{name}": min(values),
            f"process/mean/{name}": sum(values) / len(values),
            f"process/argmax/{name}": float(values.index(largest)),
        }
    return out
