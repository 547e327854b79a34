"""The multi-turn rollout: reset N envs in groups, prompt, generate, project, step
(docs/environments.md §1.1–§1.6).

One row per *active* turn (docs/environments.md §1.2: the turn on which ``done`` becomes true is
kept; later turns of a finished environment are not rows). Environment ``i`` belongs to group
``i // group_size`` and is reset with that group's seed, so a group plays one task.

An episode lost to an infrastructure failure (its last info has ``failure``: the host pool's
crashed or hung worker, an exception in environment code, an answer that could not be scored;
:func:`is_failure`) is marked ``failed`` on its rows and trajectory: the batch masks it out of
its group's statistics and the loss, and the metrics count it (docs/algorithms.md §3.0,
docs/environments.md §1.7).

Ids (the original draws fresh uuids per call): ints. Group ``g`` of this rollout has id
``group_offset + g`` and env ``i`` has trajectory id ``group_offset * group_size + i``; both are
unique within the rollout, and across rollouts when each passes the number of groups collected
before it as ``group_offset`` (dynamic sampling concatenates several rollouts).

Sampling seeds come from the global episode identity (:mod:`arlarena_jax.rollout.keys`): the
batch's ``sample_seed`` (drawn once per call from the policy's seed stream unless given), and for
environment ``i`` at turn ``t`` the request seed ``episode_turn_seed(sample_seed, trajectory id,
t)``. A batch split into sub-batches by ``group_offset`` (or between processes) therefore plays
the same episodes as the whole batch, up to float rounding of differently shaped programs.

``skip_done=True`` (the default) generates only for environments still running; the original
generates for all N every turn and drops the finished ones' rows (``skip_done=False``). Rows are
the same either way (a request's seed does not depend on who else is in the call), up to float
rounding. Finished environments are still stepped
(with the projection of an empty response when skipped) and still get a memory record, as in the
original; neither is read again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from arlarena_jax.objectives.host import HostTurn
from arlarena_jax.rollout.keys import draw_sample_seed, episode_turn_seed
from arlarena_jax.rollout.memory import SimpleMemory
from arlarena_jax.rollout.policy import Policy
from envs.base import EnvBatch, Observation, Step
from envs.projection import Projection
from envs.text import Generation, TaskFormat


@dataclasses.dataclass
class TurnRow:
    """One training sample = one active turn (docs/environments.md §1.3)."""

    prompt_ids: Sequence[int]  # chat-templated prompt tokens (empty for a scripted policy)
    response_ids: Sequence[int]
    log_probs: Sequence[float]  # behaviour log-probs, one per response token
    prompt: str  # the user-message content (template + history window)
    response: str  # the decoded response text
    group: int  # GRPO group id (uid)
    trajectory: int  # trajectory id (traj_uid)
    env_index: int  # index of the environment in the batch
    turn: int  # 0-based turn of the episode
    anchor: str  # the raw observation the prompt was built from (GiGPO anchor)
    action: Any  # the projected action sent to the env
    reward: float  # this turn's env reward
    action_valid: bool
    format_valid: bool
    data_source: str
    info: dict[str, Any]
    episode_return: float = 0.0  # filled at the end: sum of rewards over active turns
    episode_length: int = 0  # filled at the end: number of active turns
    # trajectory rows (rollout.trajectory): 1 on the model's tokens, 0 on observation tokens;
    # None: every response token counts
    loss_mask: Sequence[int] | None = None
    # the episode was lost to an infrastructure failure (is_failure): masked out of its group
    failed: bool = False
    # the policy version of each response token (asynchronous RL; -1 on observation tokens of
    # trajectory rows); None: not recorded (scripted policies, the on-device rollout)
    versions: Sequence[int] | None = None


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """Per-environment outcome; ``won`` and ``info`` are those of the last active turn."""

    group: int
    trajectory: int
    env_index: int
    episode_return: float
    length: int
    won: bool
    info: dict[str, Any]
    failed: bool = False  # lost to an infrastructure failure (is_failure of the last info)


def is_failure(info: Mapping[str, Any]) -> bool:
    """True when an environment reports that the episode was lost to an infrastructure failure
    (a non-empty ``failure`` reason in its info), not played to an outcome by the policy."""
    return bool(info.get("failure"))


@dataclasses.dataclass
class Rollout:
    """Rows of active turns (trajectory-major order: env 0's turns, then env 1's, …) and
    per-trajectory results."""

    rows: list[TurnRow]
    trajectories: list[Trajectory]
    group_size: int
    task_format: str
    data_source: str = "text"

    def to_host_turns(self) -> list[HostTurn]:
        """The rows as :class:`~arlarena_jax.objectives.host.HostTurn` for ``collate``.

        The sampler's behaviour log-probs fill both ``old_log_probs`` (until a trainer recomputes
        them) and ``rollout_log_probs`` (truncated importance sampling, docs/algorithms.md §4.9).
        """
        return [
            HostTurn(
                group=row.group,
                trajectory=row.trajectory,
                turn=row.turn,
                anchor=row.anchor,
                episode_return=row.episode_return,
                step_reward=row.reward,
                action_valid=row.action_valid,
                old_log_probs=list(row.log_probs),
                rollout_log_probs=list(row.log_probs),
                loss_mask=None if row.loss_mask is None else list(row.loss_mask),
                failed=row.failed,
            )
            for row in self.rows
        ]


def _generate(
    policy: Policy, prompts: list[str], todo: list[int], training: bool, seeds: list[int]
) -> dict[int, Generation]:
    """Generations for the envs in ``todo`` (``seeds``: one each), keyed by env index."""
    out = policy([prompts[i] for i in todo], training=training, seeds=seeds)
    if len(out) != len(todo):
        raise ValueError(f"policy returned {len(out)} generations for {len(todo)} prompts")
    return dict(zip(todo, out, strict=True))


def collect(
    envs: EnvBatch,
    task_format: TaskFormat,
    policy: Policy,
    *,
    group_seeds: Sequence[int],
    group_size: int,
    max_turns: int,
    history_length: int = 2,
    training: bool = True,
    skip_done: bool = True,
    group_offset: int = 0,
    rows: Any = None,
    sample_seed: int | None = None,
) -> Rollout:
    """Play one batch of episodes and return its turn rows
    (docs/environments.md §1.2, see module doc).

    ``len(group_seeds) * group_size`` must equal ``envs.num_envs``. Stops when every
    environment is done or after ``max_turns`` turns (ALFWorld 50, WebShop 15, Sokoban 15).
    ``rows``: a :class:`~arlarena_jax.rollout.trajectory.TrajectoryRows` makes one row per
    episode instead (docs/environments.md §1.8; ``history_length`` and ``skip_done`` do not
    apply); None: turn rows. ``sample_seed``: the batch's sample seed (module doc); None draws
    the policy's next one (:func:`~arlarena_jax.rollout.keys.draw_sample_seed`).
    """
    if sample_seed is None:
        sample_seed = draw_sample_seed(policy)
    if rows is not None:
        from arlarena_jax.rollout.trajectory import collect_trajectories

        return collect_trajectories(
            envs,
            task_format,
            policy,
            rows=rows,
            group_seeds=group_seeds,
            group_size=group_size,
            max_turns=max_turns,
            training=training,
            group_offset=group_offset,
            sample_seed=sample_seed,
        )
    return _collect_turn_rows(
        envs,
        task_format,
        policy,
        group_seeds=group_seeds,
        group_size=group_size,
        max_turns=max_turns,
        history_length=history_length,
        training=training,
        skip_done=skip_done,
        group_offset=group_offset,
        sample_seed=sample_seed,
    )


def _collect_turn_rows(
    envs: EnvBatch,
    task_format: TaskFormat,
    policy: Policy,
    *,
    group_seeds: Sequence[int],
    group_size: int,
    max_turns: int,
    history_length: int,
    training: bool,
    skip_done: bool,
    group_offset: int,
    sample_seed: int,
) -> Rollout:
    """:func:`collect` with one row per active turn: the turn loop."""
    n = check_batch_size(envs, group_seeds, group_size)
    first = group_offset * group_size  # environment i plays trajectory first + i
    observations: list[Observation] = list(
        envs.reset([group_seeds[i // group_size] for i in range(n)])
    )
    tasks = [task_format.extract_task(obs) for obs in observations]
    memory = SimpleMemory(n)
    done = np.zeros(n, bool)
    per_env: list[list[TurnRow]] = [[] for _ in range(n)]
    for turn in range(max_turns):
        with_history = turn > 0 and history_length > 0
        prompts = [
            task_format.build_prompt(
                obs, tasks[i], memory.window(i, history_length) if with_history else None
            )
            for i, obs in enumerate(observations)
        ]
        todo = [i for i in range(n) if not done[i]] if skip_done else list(range(n))
        seeds = [episode_turn_seed(sample_seed, first + i, turn) for i in todo]
        played, texts = _play_turn(
            envs, task_format, policy, _Asked(turn, prompts, observations, todo, seeds), training
        )
        memory.store(
            [obs.text for obs in observations],
            [
                task_format.memory_action(p, t)
                for p, t in zip(played.projections, texts, strict=True)
            ],
        )
        # Finished before this turn: no row (docs/environments.md §1.2).
        for i in np.flatnonzero(~done):
            row = _row(played, int(i), group_size, group_offset, task_format.data_source)
            per_env[i].append(row)
        done |= np.asarray(played.step.dones, bool)
        observations = list(played.step.observations)
        if done.all():
            break
    return _finish(per_env, group_size, group_offset, task_format)


def check_batch_size(envs: EnvBatch, group_seeds: Sequence[int], group_size: int) -> int:
    """``len(group_seeds) * group_size``, which must be the batch's environment count."""
    n = len(group_seeds) * group_size
    if group_size < 1 or n != envs.num_envs:
        raise ValueError(
            f"{len(group_seeds)} group seeds x group_size {group_size} = {n} envs, but the "
            f"batch has {envs.num_envs}"
        )
    return n


class _Turn(NamedTuple):
    """What one turn produced for every environment."""

    turn: int
    prompts: list[str]
    observations: list[Observation]
    generations: dict[int, Generation]
    projections: list[Projection]
    step: Step


class _Asked(NamedTuple):
    """What one turn asks of the policy: every environment's prompt and observation, the
    environments still playing (``todo``) and their sample seeds."""

    turn: int
    prompts: list[str]
    observations: list[Observation]
    todo: list[int]
    seeds: list[int]


def _play_turn(
    envs: EnvBatch, task_format: TaskFormat, policy: Policy, asked: _Asked, training: bool
) -> tuple[_Turn, list[str]]:
    """One turn: generations for ``asked.todo``, every environment's text projected (empty
    where it was not asked), the batch stepped; the turn and the texts."""
    generations = _generate(policy, asked.prompts, asked.todo, training, asked.seeds)
    texts = [generations[i].text if i in generations else "" for i in range(len(asked.prompts))]
    projections = [
        task_format.project(t, obs) for t, obs in zip(texts, asked.observations, strict=True)
    ]
    step = envs.step([p.action for p in projections])
    turn = _Turn(asked.turn, asked.prompts, asked.observations, generations, projections, step)
    return turn, texts


def row_place(i: int, group_size: int, group_offset: int) -> dict[str, int]:
    """Where environment ``i`` of a batch of whole groups sits in the step: its group
    (``group_offset + i // group_size``), its trajectory (``group_offset · group_size + i``) and
    its index in the batch."""
    return {
        "group": group_offset + i // group_size,
        "trajectory": group_offset * group_size + i,
        "env_index": i,
    }


def _row(t: _Turn, i: int, group_size: int, group_offset: int, data_source: str) -> TurnRow:
    """Environment ``i``'s row of turn ``t``."""
    gen, proj = t.generations[i], t.projections[i]
    return TurnRow(
        prompt_ids=list(gen.prompt_ids),
        response_ids=list(gen.response_ids),
        log_probs=list(gen.log_probs),
        versions=list(gen.versions) if len(gen.versions) else None,
        prompt=t.prompts[i],
        response=gen.text,
        **row_place(i, group_size, group_offset),
        turn=t.turn,
        anchor=t.observations[i].text,
        action=proj.action,
        reward=float(t.step.rewards[i]),
        action_valid=bool(proj.action_valid),
        format_valid=bool(proj.format_valid),
        data_source=data_source,
        info=dict(t.step.infos[i]),
    )


def _finish(
    per_env: list[list[TurnRow]], group_size: int, group_offset: int, task_format: TaskFormat
) -> Rollout:
    """Fill episode return/length (and ``failed``) on every row and build the per-trajectory
    results."""
    rows, trajectories = [], []
    for i, env_rows in enumerate(per_env):
        ret = float(sum(r.reward for r in env_rows))
        failed = any(is_failure(r.info) for r in env_rows)
        for row in env_rows:
            row.episode_return, row.episode_length = ret, len(env_rows)
            row.failed = failed
        last = env_rows[-1].info if env_rows else {}
        trajectories.append(
            Trajectory(
                group=group_offset + i // group_size,
                trajectory=group_offset * group_size + i,
                env_index=i,
                episode_return=ret,
                length=len(env_rows),
                won=bool(last.get("won", False)),
                info=last,
                failed=failed,
            )
        )
        rows.extend(env_rows)
    return Rollout(rows, trajectories, group_size, task_format.name, task_format.data_source)
