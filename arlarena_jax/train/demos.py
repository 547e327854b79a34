"""Expert demonstrations for behaviour cloning, one sample per agent turn (spec environments §6).

The offline substitute for ARLArena's teacher data: an expert plays the environment through the
same rollout as RL (:func:`arlarena_jax.rollout.collect`: the same task format, templates,
history window and projection, spec §1.2–§1.4), and every turn it took becomes one sample

    Demonstration(prompt = the user-message content of that turn (template + last-k history),
                  reply  = the expert's text, ``<think>…</think><action>…</action>``).

The chat template is applied later, by :func:`arlarena_jax.train.sft.encode_example`, exactly as
the RL policy applies it. Kept turns (spec §6: "keep only successful episodes"; the dev commit
"only save turns before finishing the goal" holds by construction, since a rollout has no rows
after an episode ends):

- only turns of episodes the expert won (``only_successful=True``, the default);
- only turns whose reply the projection accepted: ``action_valid`` and ``format_valid``
  (spec §1.4), so an expert hiccup is never cloned.

Each environment plays its own task (``group_size = 1``). Seeds pick the tasks: the caller keeps
the training seeds disjoint from the evaluation seeds (this module cannot know the latter).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from arlarena_jax.rollout import SOKOBAN_FORMAT, Policy, ScriptedPolicy, TaskFormat, collect
from envs.base import EnvBatch


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
    **kw,
) -> list[list[Demonstration]]:
    """:func:`collect_episodes` over ``seeds`` in chunks of ``envs.num_envs`` (one episode per
    seed; the last chunk is padded with its first seed so one batch size serves every chunk, and
    the padding episodes are dropped). ``expert_for(chunk_seeds)`` gives each chunk's expert.
    One list of kept turns per seed, in seed order."""
    size = envs.num_envs
    out: list[list[Demonstration]] = []
    for start in range(0, len(seeds), size):
        chunk = list(seeds[start : start + size])
        padded = chunk + [chunk[0]] * (size - len(chunk))
        out += collect_episodes(
            envs, task_format, expert_for(padded), group_seeds=padded, num_real=len(chunk), **kw
        )
    return out


def chunked_demonstrations(
    envs: EnvBatch,
    seeds: Sequence[int],
    task_format: TaskFormat,
    expert_for: Callable[[list[int]], Policy],
    **kw,
) -> list[Demonstration]:
    """:func:`chunked_episodes` flattened. Order: seed by seed, turns in order."""
    episodes = chunked_episodes(envs, seeds, task_format, expert_for, **kw)
    return [turn for episode in episodes for turn in episode]


def sokoban_demonstrations(
    seeds: Sequence[int],
    *,
    task_format: TaskFormat = SOKOBAN_FORMAT,
    max_turns: int = 15,
    history_length: int = 2,
    num_envs: int = 64,
    only_successful: bool = True,
    replies: Callable[[list[str]], Sequence[str]] | None = None,
) -> list[Demonstration]:
    """BFS-optimal Sokoban demonstrations from the rooms of ``seeds`` (one episode per seed).

    Runs :class:`envs.sokoban.batch.SokobanBatch` (default room settings, spec §2.1) with the
    prompt-reading expert as a scripted policy (``replies``, default
    :func:`envs.sokoban.expert.expert_replies`: the optimal plan as reasoning;
    ``short_expert_replies`` leaves it empty, for tiny CPU policies with
    ``SOKOBAN_COMPACT_FORMAT``), in
    chunks of ``num_envs`` rooms (the last chunk is padded by repeating its first seed, so one
    compiled batch size serves every chunk; padding episodes are dropped). ``seeds`` must be
    disjoint from the evaluation seeds; the caller owns both sets. Order: seed by seed, turns in
    order.
    """
    from envs.sokoban.batch import SokobanBatch
    from envs.sokoban.expert import expert_replies

    seeds = [int(s) for s in seeds]
    if not seeds:
        return []
    size = min(num_envs, len(seeds))
    envs = SokobanBatch(size)
    expert = ScriptedPolicy(expert_replies if replies is None else replies)
    try:
        return chunked_demonstrations(
            envs,
            seeds,
            task_format,
            lambda _: expert,
            max_turns=max_turns,
            history_length=history_length,
            only_successful=only_successful,
        )
    finally:
        envs.close()


def alfworld_demonstrations(
    envs: EnvBatch,
    games: Sequence[str],
    seeds: Sequence[int],
    *,
    task_format: TaskFormat,
    max_turns: int = 50,
    history_length: int = 2,
    think: bool = True,
    only_successful: bool = True,
) -> list[Demonstration]:
    """The handcoded expert's ALFWorld walkthroughs replayed through the RL prompts (spec §6).

    ``envs`` holds :class:`envs.alfworld.env.AlfworldEnv` environments (a pool or a local
    batch) over ``games`` (the factory's list); seed ``s`` plays
    ``play_order(games)[s % len(games)]``, replayed by
    :class:`envs.alfworld.expert.WalkthroughExpert`. A replay depends on the game only (the
    walkthrough and the engine's text are fixed), so each distinct game is played once, by the
    environment of game index ``g`` (which plays ``play_order(games)[g]``), and its turns are
    repeated for every seed that maps to it. Games run in chunks of ``envs.num_envs`` (the last
    one padded with its first game, padding dropped). Walkthroughs longer than
    ``max_turns`` do not finish, so ``only_successful`` drops them.
    """
    from envs.alfworld.env import play_order
    from envs.alfworld.expert import WalkthroughExpert, walkthrough

    games = play_order(games)
    played = [int(s) % len(games) for s in seeds]
    distinct = list(dict.fromkeys(played))  # a game's replay is the same for every seed
    episodes = chunked_episodes(
        envs,
        distinct,
        task_format,
        lambda padded: WalkthroughExpert([walkthrough(games[g]) for g in padded], think=think),
        max_turns=max_turns,
        history_length=history_length,
        only_successful=only_successful,
        skip_done=False,
    )
    by_game = dict(zip(distinct, episodes, strict=True))
    return [turn for game in played for turn in by_game[game]]
