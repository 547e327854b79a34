"""The math environment's registry entry: MATH problems for training, AIME 2024 and 2025 for
evaluation, model code in the sandbox, math-verify for the reward (docs/environments.md §8).

Three disjoint splits: ``test`` is ``env.math.test_files`` (the reported sets, AIME: never tuned
on), ``validation`` the dev set of ``env.math.validation_problems`` problems carved from
``env.math.train_files``, ``train`` the rest of those files (seed ``s`` plays problem ``s % P``).
An evaluation plays every problem of its split ``env.math.eval_samples`` (k) times, so
``val/<dataset>/accuracy`` is avg@k. The files are read
from ``env.data_path``, else ``$ARLARENA_MATH_DATA``, else ``../shared/data/math`` beside the
checkout. Rows are trajectory rows: one per episode, observation tokens masked.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Sequence
from typing import Any

from arlarena_base.errors import ConfigError, InvalidField
from envs.base import EnvBatch
from envs.math.prompts import COMPACT_FORMAT, MATH_FORMAT
from envs.registry import EnvSpec, check_split
from envs.spec_helpers import demo_batch_size, require_at_least, require_one_of
from envs.text import Expert, Generation


@dataclasses.dataclass(frozen=True)
class MathConfig:
    """The ``env.math`` config section."""

    train_files: tuple[str, ...] = ("math_l3to5_train",)  # <name>.jsonl.gz in the data folder
    test_files: tuple[str, ...] = ("aime2024", "aime2025")  # the reported sets
    # the dev set: this many training-file problems (lowest question hash) kept out of training
    validation_problems: int = 256
    eval_samples: int = 4  # k of avg@k: episodes per evaluation problem
    sandbox_timeout_s: float = 10.0  # wall clock per run (original: 3 s config, 10 s scripts)
    sandbox_cpu_s: int = 10
    sandbox_memory_mb: int = 2048
    sandbox_processes: int = 32
    isolation: str = "auto"  # auto | bwrap | unshare | userns | none
    allow_unsandboxed: bool = False  # isolation none (or auto with nothing available) runs bare
    executors: int = 0  # sandbox runs at once; 0: the usable cores, as many as fit half the memory
    score_timeout_s: float = 10.0  # math-verify's budget per answer (the original's 10 s)
    scorers: int = 0  # answers scored at once; 0: the usable cores
    remove_void_turns: bool = True  # mask trajectories holding a void turn out of the loss

    def __post_init__(self) -> None:
        from envs.math.sandbox import ISOLATIONS

        require_one_of("math", self, {"isolation": ISOLATIONS})
        at_least_one = (
            "eval_samples",
            "sandbox_cpu_s",
            "sandbox_memory_mb",
            "sandbox_processes",
            "validation_problems",
        )
        require_at_least("math", self, dict.fromkeys(at_least_one, 1))
        require_at_least("math", self, {"sandbox_timeout_s": 0, "score_timeout_s": 0}, strict=True)
        require_at_least("math", self, {"executors": 0, "scorers": 0})
        if not self.train_files or not self.test_files:
            raise InvalidField("math", "train_files", "train_files and test_files need a file each")


def sandbox_config(env: Any) -> Any:
    """The :class:`envs.math.sandbox.SandboxConfig` of ``env.math``."""
    from envs.math.sandbox import SandboxConfig

    m = env.math
    return SandboxConfig(
        timeout_s=m.sandbox_timeout_s,
        cpu_s=m.sandbox_cpu_s,
        memory_mb=m.sandbox_memory_mb,
        processes=m.sandbox_processes,
        isolation=m.isolation,
        allow_unsandboxed=m.allow_unsandboxed,
    )


def _load(env: Any, names: tuple[str, ...]) -> tuple:
    """The problems of the files ``names``; a missing or malformed file is a one-line
    ConfigError."""
    from envs.math.data import load_split

    try:
        return load_split(env.data_path, names)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"config key 'env.data_path': {exc}") from None


def question_key(problem: Any) -> str:
    """A problem's identity across files: its question, whitespace collapsed."""
    return " ".join(problem.question.split())


def carve_dev(problems: tuple, count: int) -> tuple[tuple, tuple]:
    """``(train, validation)``: the problems whose question hashes among the ``count`` lowest
    distinct ones are the dev set (a repeated question stays on one side), the rest training,
    each in file order. Too few problems is a one-line ConfigError."""
    keys = sorted({question_key(p) for p in problems}, key=_hash)
    if len(keys) <= count:
        raise ConfigError(
            f"config key 'env.math.validation_problems': {count} dev problems carved from "
            f"{len(keys)} distinct training problems leave none to train on"
        )
    dev = set(keys[:count])
    return (
        tuple(p for p in problems if question_key(p) not in dev),
        tuple(p for p in problems if question_key(p) in dev),
    )


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def all_problems(env: Any) -> dict[str, tuple]:
    """Every split's problems: ``test`` the reported files (``env.math.test_files``),
    ``validation`` the dev set carved from ``env.math.train_files``, ``train`` the rest."""
    m = env.math
    train, dev = carve_dev(_load(env, m.train_files), m.validation_problems)
    return {"train": train, "validation": dev, "test": _load(env, m.test_files)}


def problems(env: Any, split: str) -> tuple:
    """The problems of ``split`` (:func:`all_problems`; the test files alone for ``test``)."""
    if check_split(split) == "test":
        return _load(env, env.math.test_files)
    return all_problems(env)[split]


def split_members(env: Any) -> dict[str, frozenset[str]]:
    """Each split's problems by question (a test question also in the training files would
    overlap)."""
    return {
        split: frozenset(question_key(p) for p in found)
        for split, found in all_problems(env).items()
    }


def check_data(env: Any, training: bool) -> None:
    """The evaluation (and, when ``training``, the training) problems load, and the sandbox's
    isolation is available."""
    from envs.math.sandbox import SandboxUnavailable, resolve_isolation

    problems(env, "test")
    if training:
        problems(env, "train")
    try:
        resolve_isolation(sandbox_config(env))
    except SandboxUnavailable as exc:
        raise ConfigError(f"config key 'env.math.isolation': {exc}") from None
    executors(env)


def executors(env: Any) -> int:
    """Sandbox calls at once: ``env.math.executors``, or (0) the usable cores, as many as fit
    half the host's memory; a total over the host's memory is a one-line ConfigError."""
    from envs.math.memory_budget import default_executors, host_memory_mb, over_budget

    m, host = env.math, host_memory_mb()
    count = m.executors or default_executors(m.sandbox_memory_mb, usable_cores(), host)
    over = over_budget(m.sandbox_memory_mb, count, host)
    if over is not None:
        raise ConfigError(f"config key 'env.math.{over[0]}': {over[1]}")
    return count


def usable_cores() -> int:
    return len(os.sched_getaffinity(0))


def make_batch(env: Any, num_envs: int, split: str) -> EnvBatch:
    """``num_envs`` episodes in this process; code runs in up to ``env.math.executors`` sandboxes
    at once and answers are scored by ``env.math.scorers`` scoring workers."""
    from envs.math.env import MathBatch, ThreadScorers
    from envs.math.sandbox import run_many

    m, config = env.math, sandbox_config(env)
    workers = executors(env)
    scorers = m.scorers or usable_cores()
    return MathBatch(
        problems(env, split),
        num_envs,
        execute=lambda programs: run_many(programs, config, workers=workers),
        score=ThreadScorers(m.score_timeout_s),
        max_turns=env.max_turns,
        remove_void_turns=m.remove_void_turns,
        scorers=scorers,
        avg_at=m.eval_samples if split != "train" else None,
    )


def eval_episodes(env: Any, split: str) -> int:
    """Every problem of ``split`` ``env.math.eval_samples`` times (avg@k)."""
    return len(problems(env, split)) * env.math.eval_samples


def oracle_reply(answer: str) -> str:
    """The answer oracle's reply: one code block handing the ground truth to ``final_answer``."""
    return f"Let me give the answer.\n```python\nresult = {answer!r}\nfinal_answer(result)\n```"


def expert(env: Any) -> Expert:
    """The answer oracle over the training problems: it reads the ground truth and returns it
    through ``final_answer`` in one code turn. It exists for the tiny tokenizer's corpus and for
    pipeline tests; the paper trains from the base model (no cloning)."""
    train = problems(env, "train")

    def policy_for(task_seeds: list[int]):
        answers = [train[int(s) % len(train)].answer for s in task_seeds]

        def policy(
            prompts: list[str], *, training: bool, seeds: Sequence[int] | None = None
        ) -> list[Generation]:
            return [Generation(oracle_reply(a)) for a in answers[: len(prompts)]]

        return policy

    return Expert(policy_for, every_turn=True, batch_size=demo_batch_size(env))


MATH = EnvSpec(
    name="math",
    make_batch=make_batch,
    formats={"paper": MATH_FORMAT, "compact": COMPACT_FORMAT},
    expert=expert,
    check_data=check_data,
    split_members=split_members,
    settings=MathConfig,
    tokenizer_episodes=64,
    paper={"train_batch_size": 512, "group_size": 5, "max_turns": 5},
    rows=("trajectory",),
    eval_episodes=eval_episodes,
    ignores={
        "history_length": "trajectory rows continue one conversation",
        "num_workers": "code runs in sandbox subprocesses, episodes in this process",
        "step_timeout_s": "the sandbox has its own wall clock (env.math.sandbox_timeout_s)",
    },
)
