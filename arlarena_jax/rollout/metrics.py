"""Success evaluation and environment metrics of a rollout (docs/environments.md §1.7).

Keys are ``episode/<name>`` for training rollouts and ``val/<name>`` for evaluation ones:

* ``success_rate``: mean over trajectories of ``won`` at the last active turn;
* the environment's own keys: its task format's ``episode_metrics(info, won)`` of each episode's
  last active turn, averaged over the episodes that report the key (ALFWorld:
  ``<task type>_success_rate``; WebShop: ``webshop_task_score (not success_rate)``);
* ``valid_action_ratio`` and ``valid_response_format_ratio``: means over rows (active turns);
* ``reward/{mean,max,min}`` and ``length/{mean,max,min}``: over trajectories;
* evaluation only: ``val/<data_source>/test_score`` = mean over rows of the episode return (long
  failed episodes weigh more, as the original's ``val/text/test_score``); ``val/episodes``, the
  number of held-out episodes n, and for ``success_rate`` and every environment key its standard
  error ``<key>_se`` = sqrt(Σ(x − x̄)² / n) / sqrt(n) over the episodes reporting it (for a 0/1
  success: sqrt(p(1 − p)/n)).
* ``rollout/failed_episodes`` (training) or ``val/failed_episodes`` (evaluation): the number of
  episodes lost to an infrastructure failure (``Trajectory.failed``), 0 when none. They still
  count in the other keys as the environment reported them (not won, their reward so far), so
  ``success_rate`` never rises because episodes failed; the count says how many there were.

``turns_to_success`` is not logged (as the original); WebShop's ``rollout/{title_score, …}``
attribute scores are not computed here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from arlarena_jax.rollout.loop import Rollout, Trajectory
from envs.text import no_episode_metrics

EpisodeMetrics = Callable[[Mapping[str, Any], bool], dict[str, float]]


def episode_values(
    trajectories: list[Trajectory], episode_metrics: EpisodeMetrics = no_episode_metrics
) -> dict[str, list[float]]:
    """Per key, the values of the episodes reporting it: ``success_rate`` (``won``) and the
    task format's ``episode_metrics`` of each last active turn's info."""
    values: dict[str, list[float]] = defaultdict(list)
    for traj in trajectories:
        values["success_rate"].append(float(traj.won))
        for key, value in episode_metrics(traj.info, traj.won).items():
            values[key].append(float(value))
    return values


def success_metrics(
    trajectories: list[Trajectory], episode_metrics: EpisodeMetrics = no_episode_metrics
) -> dict[str, float]:
    """``success_rate`` and the environment's own per-episode keys (its task format's
    ``episode_metrics`` of the last active turn's info), each averaged over the episodes that
    report it; unprefixed."""
    return _means(episode_values(trajectories, episode_metrics))


def standard_errors(
    trajectories: list[Trajectory], episode_metrics: EpisodeMetrics = no_episode_metrics
) -> dict[str, float]:
    """``<key>_se`` = std(x) / sqrt(n) (population std) of every :func:`success_metrics` key,
    over the episodes reporting it: sqrt(p(1 − p)/n) for a 0/1 success; unprefixed."""
    return _errors(episode_values(trajectories, episode_metrics))


def _means(values: Mapping[str, list[float]]) -> dict[str, float]:
    return {key: float(np.mean(v)) for key, v in values.items()}


def _errors(values: Mapping[str, list[float]]) -> dict[str, float]:
    return {f"{key}_se": float(np.std(v) / np.sqrt(len(v))) for key, v in values.items()}


def _stats(name: str, values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    arr = np.asarray(values, np.float64)
    return {f"{name}/mean": arr.mean(), f"{name}/max": arr.max(), f"{name}/min": arr.min()}


def rollout_metrics(
    rollout: Rollout,
    *,
    training: bool = True,
    episode_metrics: EpisodeMetrics = no_episode_metrics,
) -> dict[str, float]:
    """All environment metrics of a rollout, prefixed ``episode/`` or ``val/``
    (docs/environments.md §1.7); ``episode_metrics``: the task format's extra per-episode keys."""
    prefix = "episode" if training else "val"
    values = episode_values(rollout.trajectories, episode_metrics)  # once per episode
    out = _means(values)
    rows = rollout.rows
    if rows:
        out["valid_action_ratio"] = float(np.mean([r.action_valid for r in rows]))
        out["valid_response_format_ratio"] = float(np.mean([r.format_valid for r in rows]))
    out |= _stats("reward", [t.episode_return for t in rollout.trajectories])
    out |= _stats("length", [float(t.length) for t in rollout.trajectories])
    metrics = {f"{prefix}/{key}": float(value) for key, value in out.items()}
    if not training:
        metrics |= {f"val/{key}": value for key, value in _errors(values).items()}
        metrics["val/episodes"] = float(len(rollout.trajectories))
    failed = float(sum(t.failed for t in rollout.trajectories))
    metrics["rollout/failed_episodes" if training else "val/failed_episodes"] = failed
    if not training and rows:
        metrics[f"val/{rollout.data_source}/test_score"] = float(
            np.mean([r.episode_return for r in rows])
        )
    return metrics
