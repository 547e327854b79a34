"""The tool-integrated math environment: one problem per episode, at most ``max_turns`` turns of
model text, each code block run in the sandbox (docs/environments.md §8; spec environments §5).

An action is the model's response (already cut after its first code block by the task format) or
``None``, which ends the episode without a turn (the rollout's context budget ran out). A turn is

* ``answer`` (writes ``\\boxed{``): the episode ends;
* ``code``: the block runs in the sandbox and the observation is
  ``"\\nCode execution result: …\\n"`` (:func:`envs.math.tir.observation`); a printed
  ``\\boxed{`` (``final_answer``) ends the episode;
* ``void`` (neither): the episode ends and the trajectory holds a void turn.

The episode also ends at ``max_turns``. At the end the whole right side (responses and
observations, as text) is scored: ``extract_answer`` then math-verify against the ground truth;
the reward is 1.0 when correct, else 0.0, given on the last turn (no format reward).
``info["exclude_from_loss"]`` asks the rollout to mask the trajectory out of the loss when it
holds a void turn and ``remove_void_turns`` is on (SimpleTIR's filter). An episode whose answer
could not be scored (the scoring worker died twice: no verdict) reports ``info["failure"]``, an
infrastructure failure the rollout masks out of its group (docs/environments.md §9.3); a
scoring timeout is the answer's fault and scores 0, as in the original. An evaluation batch
adds ``avg_at`` (k: how many times each problem is played) to the last info.

:class:`MathBatch` runs N episodes in this process: one step's code blocks run concurrently in
sandbox subprocesses (``executors`` at a time) and finished episodes are scored concurrently, so
no Python worker pool is needed.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from envs.base import Observation, Step
from envs.local import check_length
from envs.math import tir
from envs.math.data import Problem
from envs.math.sandbox import ExecResult

SCORER_FAILURE = "the answer could not be scored: the scoring worker died twice"
Execute = Callable[[Sequence[str]], list[ExecResult]]  # programs -> results, in order
Score = Callable[[str, str], Any]  # (right-side text, ground truth) -> envs.math.verify.Score


@dataclasses.dataclass
class Episode:
    """One episode's state (see module doc)."""

    problem: Problem
    max_turns: int
    remove_void_turns: bool = True
    turns: int = 0
    code_turns: int = 0
    valid_code_turns: int = 0
    void_turn: bool = False
    done: bool = False
    right_side: list[str] = dataclasses.field(default_factory=list)

    def take(self, response: str | None) -> str | None:
        """Record one response; the program to run for a ``code`` turn, else None."""
        if self.done:
            return None
        if response is None:
            self.done = True
            return None
        self.turns += 1
        self.right_side.append(response)
        kind = tir.turn_kind(response)
        if kind == "code":
            self.code_turns += 1
            return tir.program(response)
        self.void_turn |= kind == "void"
        self.done = True
        return None

    def observe(self, result: ExecResult) -> str:
        """The observation of this turn's run; ends the episode on a printed ``\\boxed{`` or at
        ``max_turns``."""
        self.valid_code_turns += int(result.status == "ok")
        text = tir.observation(result.status, result.stdout, result.stderr)
        self.right_side.append(text)
        if tir.BOXED in result.stdout:
            self.done = True
        return text

    def close_turn(self) -> None:
        """End the episode when the turn cap is reached."""
        if self.turns >= self.max_turns:
            self.done = True

    def final_info(self, score: Any) -> dict[str, Any]:
        """The last turn's info: the score and the episode's code statistics (and ``failure``
        when the scorer gave no verdict)."""
        info = {
            "won": bool(score.correct),
            "correct": bool(score.correct),
            "boxed": bool(score.boxed),
            "answer": score.extracted,
            "score_timeout": bool(score.timed_out),
            "dataset": self.problem.dataset,
            "turns": self.turns,
            "code_turns": self.code_turns,
            "valid_code_turns": self.valid_code_turns,
            "void_turn": self.void_turn,
            "exclude_from_loss": self.void_turn and self.remove_void_turns,
        }
        if getattr(score, "failed", False):
            info["failure"] = SCORER_FAILURE
        return info


class ThreadScorers:
    """A :data:`Score` callable for threads: each thread scores with its own
    :class:`envs.math.verify.Scorer` (one scoring worker process each, ``timeout_s`` per answer);
    ``timeouts`` sums theirs; ``close()`` stops every worker."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, text: str, ground_truth: str) -> Any:
        scorer = getattr(self._local, "scorer", None)
        if scorer is None:
            from envs.math.verify import Scorer

            scorer = self._local.scorer = Scorer(timeout_s=self.timeout_s)
            with self._lock:
                self._all.append(scorer)
        return scorer.score(text, ground_truth)

    @property
    def timeouts(self) -> int:
        return sum(s.timeouts for s in self._all)

    def close(self) -> None:
        with self._lock:
            for scorer in self._all:
                scorer.close()
            self._all.clear()


class MathBatch:
    """N math episodes behind :class:`envs.base.EnvBatch` (see module doc)."""

    def __init__(
        self,
        problems: Sequence[Problem],
        num_envs: int,
        *,
        execute: Execute,
        score: Score,
        max_turns: int = 5,
        remove_void_turns: bool = True,
        scorers: int = 1,
        avg_at: int | None = None,
    ) -> None:
        if not problems:
            raise ValueError("MathBatch needs at least one problem")
        if num_envs < 1 or max_turns < 1:
            raise ValueError(f"num_envs and max_turns must be >= 1, got {num_envs}, {max_turns}")
        self.problems, self._n = tuple(problems), num_envs
        self._execute, self._score = execute, score
        self._max_turns, self._remove_void = max_turns, remove_void_turns
        self._scoring = ThreadPoolExecutor(max_workers=max(1, scorers))
        self._episodes: list[Episode] = []
        self._avg_at = avg_at  # evaluation: each problem is played this many times (avg@k)

    @property
    def num_envs(self) -> int:
        return self._n

    def problem_of(self, seed: int) -> Problem:
        """Seed ``s`` plays problem ``s % len(problems)``."""
        return self.problems[int(seed) % len(self.problems)]

    def reset(self, seeds: Sequence[int]) -> list[Observation]:
        """One episode per seed: the observation is the question (also the task)."""
        seeds = check_length("seeds", seeds, self._n)
        self._episodes = [
            Episode(self.problem_of(s), self._max_turns, self._remove_void) for s in seeds
        ]
        return [
            Observation(text=e.problem.question, task=e.problem.question) for e in self._episodes
        ]

    def step(self, actions: Sequence[str | None]) -> Step:
        """Take one response per episode, run the code blocks, score the episodes that end."""
        actions = check_length("actions", actions, self._n)
        if not self._episodes:
            raise RuntimeError("MathBatch.step() before reset()")
        running = [i for i, e in enumerate(self._episodes) if not e.done]
        infos = [{"won": False, "dataset": e.problem.dataset} for e in self._episodes]
        programs = {}
        for i in running:
            infos[i]["turn_kind"] = "none" if actions[i] is None else tir.turn_kind(actions[i])
            if (program := self._episodes[i].take(actions[i])) is not None:
                programs[i] = program
        texts = self._run(programs, infos)
        rewards = np.zeros(self._n, np.float32)
        for i in running:
            self._episodes[i].close_turn()
        ending = [i for i in running if self._episodes[i].done]
        for i, score in zip(ending, self._scoring.map(self._score_episode, ending), strict=True):
            infos[i] |= self._episodes[i].final_info(score)
            if self._avg_at is not None:
                infos[i]["avg_at"] = self._avg_at
            rewards[i] = float(score.correct)
        return Step(
            observations=[Observation(text=t) for t in texts],
            rewards=rewards,
            dones=np.asarray([e.done for e in self._episodes], bool),
            infos=infos,
        )

    def _run(self, programs: dict[int, str], infos: list[dict[str, Any]]) -> list[str]:
        """Run the programs concurrently; each episode's observation text ("" without code)."""
        texts = [""] * self._n
        results = self._execute(list(programs.values())) if programs else []
        for (i, _), result in zip(programs.items(), results, strict=True):
            texts[i] = self._episodes[i].observe(result)
            infos[i]["exec_status"] = result.status
        return texts

    def _score_episode(self, i: int) -> Any:
        episode = self._episodes[i]
        return self._score("".join(episode.right_side), episode.problem.answer)

    def close(self) -> None:
        self._scoring.shutdown(wait=True, cancel_futures=True)
        closer = getattr(self._score, "close", None)
        if closer is not None:
            closer()
