"""Expert demonstrations for behaviour cloning, one sample per agent turn
(docs/environments.md §5.2).

The offline substitute for ARLArena's teacher data: an expert plays the environment through the
same rollout as RL (:func:`arlarena_jax.rollout.collect`: the same task format, templates,
history window and projection, docs/environments.md §1.2, §1.4, §1.5), and every turn it took
becomes one sample

    Demonstration(prompt = the user-message content of that turn (template + last-k history),
                  reply  = the expert's text, ``<think>…</think><action>…</action>``).

The chat template is applied later, by :func:`arlarena_jax.train.sft.encode_example`, exactly as
the RL policy applies it. Kept turns (docs/environments.md §5.2: only successful episodes; the dev
commit "only save turns before finishing the goal" holds by construction, since a rollout has no
rows after an episode ends):

- only turns of episodes the expert won (``only_successful=True``, the default);
- only turns whose reply the projection accepted: ``action_valid`` and ``format_valid``
  (docs/environments.md §1.5), so an expert hiccup is never cloned.

Each environment plays its own task (``group_size = 1``). Seeds pick the tasks: the caller keeps
the training seeds disjoint from the evaluation seeds (this module cannot know the latter). The
expert and the environments come from the environment's registry entry
(:class:`envs.registry.EnvSpec`: ``expert``, ``make_batch``, ``formats``); this module only
replays it through the rollout.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from arlarena_jax.errors import ConfigError
from arlarena_jax.rollout import Policy, collect
from arlarena_jax.rollout.chunks import seed_chunks
from envs import registry
from envs.base import EnvBatch
from envs.registry import Expert
from envs.text import TaskFormat


class Demonstration(NamedTuple):
    """One per-turn SFT sample: the RL prompt (user content) and the expert's reply."""

    prompt: str
    reply: str


def collect_episodes(
    envs: EnvBatch,
    task_format: TaskFormat,
    expert_policy: Policy,
    *,
    group_seeds: Sequence[int],
    max_turns: int,
    history_length: int = 2,
    only_successful: bool = True,
    num_real: int | None = None,
    skip_done: bool = True,
) -> list[list[Demonstration]]:
    """Play ``len(group_seeds)`` episodes (one env each) with the expert; return each kept
    environment's kept turns, in turn order (an empty list for an episode the filter drops).

    ``len(group_seeds)`` must equal ``envs.num_envs``. ``num_real``: only the first ``num_real``
    environments are kept (the rest pad a fixed-size batch). ``skip_done=False`` asks the expert
    for every environment every turn (a per-environment replay needs it). See the module doc for
    the filter.
    """
    rollout = collect(
        envs,
        task_format,
        expert_policy,
        group_seeds=list(group_seeds),
        group_size=1,
        max_turns=max_turns,
        history_length=history_length,
        training=False,
        skip_done=skip_done,
    )
    n = len(group_seeds) if num_real is None else num_real
    won = {t.trajectory for t in rollout.trajectories if t.won}
    episodes: list[list[Demonstration]] = [[] for _ in range(n)]
    for row in rollout.rows:
        keep = (
            row.action_valid and row.format_valid and (row.trajectory in won or not only_successful)
        )
        if row.env_index < n and keep:
            episodes[row.env_index].append(Demonstration(row.prompt, row.response))
    return episodes


def chunked_episodes(
    envs: EnvBatch,
    seeds: Sequence[int],
    task_format: TaskFormat,
    expert_for: Callable[[list[int]], Policy],
    before_chunk: Callable[[], None] | None = None,
    **kw,
) -> list[list[Demonstration]]:
    """:func:`collect_episodes` over ``seeds`` in chunks of ``envs.num_envs`` (one episode per
    seed; the last chunk is padded with its first seed so one batch size serves every chunk, and
    the padding episodes are dropped). ``expert_for(chunk_seeds)`` gives each chunk's expert;
    ``before_chunk()`` runs before each chunk (the trainer's stop check, which may raise).
    One list of kept turns per seed, in seed order."""
    out: list[list[Demonstration]] = []
    for chunk in seed_chunks(seeds, envs.num_envs):
        if before_chunk is not None:
            before_chunk()
        expert = expert_for(chunk.seeds)
        out += collect_episodes(
            envs, task_format, expert, group_seeds=chunk.seeds, num_real=chunk.real, **kw
        )
    return out


def expert_demonstrations(
    envs: EnvBatch,
    expert: Expert,
    seeds: Sequence[int],
    *,
    task_format: TaskFormat,
    max_turns: int,
    history_length: int = 2,
    only_successful: bool = True,
    before_chunk: Callable[[], None] | None = None,
) -> list[Demonstration]:
    """The expert's kept turns, one episode per seed, in seed order (turns in order).

    Seeds of one task (``expert.task_of``) replay identically, so each task is played once, by
    an environment reset with ``task_of(seed)``, and its turns are repeated for every seed that
    maps to it. Tasks run in chunks of ``envs.num_envs`` (:func:`chunked_episodes`).
    """
    tasks = [expert.task_of(int(s)) for s in seeds]
    distinct = list(dict.fromkeys(tasks))
    episodes = chunked_episodes(
        envs,
        distinct,
        task_format,
        expert.policy_for,
        max_turns=max_turns,
        history_length=history_length,
        only_successful=only_successful,
        skip_done=not expert.every_turn,
        before_chunk=before_chunk,
    )
    by_task = dict(zip(distinct, episodes, strict=True))
    return [turn for task in tasks for turn in by_task[task]]


def demonstrations(
    env: Any, seeds: Sequence[int], *, before_chunk: Callable[[], None] | None = None
) -> list[Demonstration]:
    """Expert demonstrations of the environment ``env.name`` (the trainer's ``env`` config
    section) through its prompt format, on up to ``expert.batch_size`` training environments
    (``before_chunk``: see :func:`chunked_episodes`)."""
    spec = registry.get(env.name)
    if spec.expert is None:
        raise ConfigError(f"config key 'env.name': {env.name!r} has no expert to demonstrate")
    seeds = [int(s) for s in seeds]
    if not seeds:
        return []
    expert = spec.expert(env)
    num_tasks = len({expert.task_of(s) for s in seeds})
    envs = spec.make_batch(env, min(num_tasks, expert.batch_size), "train")
    try:
        return expert_demonstrations(
            envs,
            expert,
            seeds,
            task_format=spec.task_format(env),
            max_turns=env.max_turns,
            history_length=env.history_length,
            before_chunk=before_chunk,
        )
    finally:
        envs.close()


def write_demonstrations(path: Path, demos: Sequence[Demonstration], key: str) -> None:
    """Write ``demos`` as JSON lines after a first line ``{"key": key}`` (what made them),
    atomically: a temporary file renamed over ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with tmp.open("w") as f:
        f.write(json.dumps({"key": key}) + "\n")
        for d in demos:
            f.write(json.dumps({"prompt": d.prompt, "reply": d.reply}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_demonstrations(path: Path, key: str) -> list[Demonstration] | None:
    """The demonstrations :func:`write_demonstrations` wrote to ``path`` under ``key``; None
    when there is no such file, it is unreadable or another key made it."""
    try:
        with Path(path).open() as f:
            if json.loads(f.readline()).get("key") != key:
                return None
            return [Demonstration(r["prompt"], r["reply"]) for r in map(json.loads, f)]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
