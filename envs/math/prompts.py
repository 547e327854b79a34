"""The math environment's prompt format (docs/environments.md §8): the TIR prompt, responses cut
after their first code block, observations appended to the conversation as they are (trajectory
rows), and the per-episode code and accuracy metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envs.base import Observation
from envs.math import tir
from envs.projection import Projection
from envs.text import HistoryWindow, TaskFormat, text_memory_action


def math_task(obs: Observation) -> str:
    """The question."""
    return obs.task or obs.text


def math_prompt(obs: Observation, task: str, window: HistoryWindow | None) -> str:
    """The user message: the TIR instructions and the question (trajectory rows never rebuild
    it, so there is no history window)."""
    return tir.build_prompt(task)


def compact_prompt(obs: Observation, task: str, window: HistoryWindow | None) -> str:
    """The tiny CPU runs' user message: :data:`envs.math.tir.COMPACT_PREFIX` + the question."""
    return tir.build_prompt(task, tir.COMPACT_PREFIX)


def math_project(text: str, obs: Observation) -> Projection:
    """The response is the action; it is well formed unless it is a void turn (neither code nor
    ``\\boxed{``). Any text is a valid action: the environment reads it."""
    return Projection(text, True, tir.turn_kind(text) != "void")


def math_continuation(obs: Observation) -> str:
    """What a code run appends to the conversation: the observation text as it is."""
    return obs.text


def _accuracy_name(info: Mapping[str, Any]) -> str:
    k = info.get("avg_at")
    return "accuracy" if k is None else f"avg_at_{k}"


def math_episode_metrics(info: Mapping[str, Any], won: bool) -> dict[str, float]:
    """Of a finished episode: ``<dataset>/accuracy`` (training) or ``<dataset>/avg_at_<k>``
    (evaluation, where each problem is played k times: averaged over the dataset's episodes it
    is avg@k), ``use_code`` (ran code at least once),
    ``valid_code`` (share of its code turns that ran without error; only episodes that used
    code), ``void_turn``, ``turns``, ``boxed`` and ``score_timeout``."""
    if "turns" not in info:
        return {}
    metrics = {
        f"{info['dataset']}/{_accuracy_name(info)}": float(won),
        "use_code": float(info["code_turns"] > 0),
        "void_turn": float(info["void_turn"]),
        "turns": float(info["turns"]),
        "boxed": float(info["boxed"]),
        "score_timeout": float(info["score_timeout"]),
    }
    if info["code_turns"]:
        metrics["valid_code"] = info["valid_code_turns"] / info["code_turns"]
    return metrics


MATH_FORMAT = TaskFormat(
    "math",
    math_task,
    math_prompt,
    math_project,
    text_memory_action,
    data_source="text",  # val/text/test_score: the key every environment logs (arena report)
    episode_metrics=math_episode_metrics,
    cut_response=tir.cut_response,
    continuation=math_continuation,
)

# tiny CPU runs: the same format with a one-line instruction (shorter rows, faster cloning)
COMPACT_FORMAT = MATH_FORMAT._replace(name="math_compact", build_prompt=compact_prompt)
