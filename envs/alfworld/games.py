"""Building ``game.tw-pddl`` files and keeping the solvable ones (docs/environments.md §4.2).

The ``alfworld-generate`` logic of alfworld 0.4.2, reimplemented (the script is not importable):
for a trial directory with ``traj_data.json`` and ``initial_state.pddl``,

1. the task sentence fills ``UNKNOWN GOAL`` in the grammar: one of the two templates of the task
   type (``goal_library``), chosen per trial by a generator seeded from ``(seed, task_id)``
   (alfworld draws it from the global ``random``, so its games are not reproducible), or the
   template ``phrasing`` when given;
2. ``game.tw-pddl`` = JSON ``{pddl_domain, grammar, pddl_problem, solvable, walkthrough}``;
3. the handcoded expert plays it (``AlfredExpert``, 200 steps at most, its random fallback seeded
   with ``seed``); any exception means unsolvable (e.g. Fast Downward finds the goal
   unreachable: ``KeyError('val1')``);
4. ``solvable`` and ``walkthrough`` are written back (atomically: a crash never leaves a
   half-written game file).

``move_fix=True`` mends a known bug of the 0.4.2 expert (docs/environments.md §4.2): its state
tracker recognises a placement only when the command says "put", but the 0.4 grammar says "move", so
after placing an object it believes it still holds it. pick_two then succeeds only by its random
fallback (3 of 10 generated pick_two games, in 66-125 steps; with the fix 10 of 10, 38 steps on
average; the other five task types give identical walkthroughs). The evaluation splits are built
with the stock expert (``alfworld-generate``'s behaviour); generated training games use the fix, so
that pick_two walkthroughs fit in the 50 turns and can be cloned.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import multiprocessing
import os
import random
import shutil
from collections.abc import Sequence
from pathlib import Path

from envs.alfworld.data import GAME_FILE, find_trials, task_type_of
from envs.alfworld.engine import alfworld, domain_and_grammar, play_env

_EXPERT_ENV = None  # one expert environment per process, built on first use


@dataclasses.dataclass(frozen=True)
class GameRecord:
    """The outcome of building one trial."""

    path: Path  # the game file
    task_type: str
    solvable: bool
    walkthrough: tuple[str, ...]
    error: str | None = None  # why the expert failed (one line), for unsolvable games


def phrasing_index(task_id: str, seed: int, num_templates: int) -> int:
    """A template index drawn by a generator seeded from ``(seed, task_id)`` (stable across
    runs and Python hash seeds)."""
    digest = hashlib.sha256(f"{seed}/{task_id}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little")).randrange(num_templates)


def task_description(traj_data: dict, *, seed: int = 0, phrasing: int | None = None) -> str:
    """The templated task sentence of a trial (alfworld's ``get_templated_task_desc``,
    docs/environments.md §4.6) with lower-cased class names and a reproducible template choice (see
    module doc)."""
    from alfworld.gen import goal_library

    params = traj_data["pddl_params"]
    goal = traj_data["task_type"] + ("_slice" if params.get("object_sliced") else "")
    if goal not in goal_library.gdict:
        raise ValueError(f"traj_data task_type {goal!r} is not an ALFRED goal")
    templates = goal_library.gdict[goal]["templates"]
    if phrasing is None:
        phrasing = phrasing_index(str(traj_data.get("task_id", "")), seed, len(templates))
    elif not 0 <= phrasing < len(templates):
        raise ValueError(f"phrasing {phrasing} out of range: {goal} has {len(templates)}")
    return templates[phrasing].format(
        obj=str(params.get("object_target", "")).lower(),
        recep=str(params.get("parent_target", "")).lower(),
        toggle=str(params.get("toggle_target", "")).lower(),
        mrecep=str(params.get("mrecep_target", "")).lower(),
    )


def _write_json(path: Path, payload: dict) -> None:
    """Write JSON through a temporary file and an atomic rename."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(payload, f)
    os.replace(tmp, path)


def write_game(
    src_trial: Path, dst_trial: Path, *, seed: int = 0, phrasing: int | None = None
) -> Path:
    """Write ``dst_trial/game.tw-pddl`` (not yet solved) and a copy of ``traj_data.json``, which
    the expert reads beside the game file. ``src_trial`` may be ``dst_trial``."""
    src_trial, dst_trial = Path(src_trial), Path(dst_trial)
    with open(src_trial / "traj_data.json") as f:
        traj_data = json.load(f)
    domain, grammar = domain_and_grammar()
    task = task_description(traj_data, seed=seed, phrasing=phrasing)
    dst_trial.mkdir(parents=True, exist_ok=True)
    if src_trial.resolve() != dst_trial.resolve():
        shutil.copyfile(src_trial / "traj_data.json", dst_trial / "traj_data.json")
    game = {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", task),
        "pddl_problem": (src_trial / "initial_state.pddl").read_text(),
        "solvable": None,
        "walkthrough": None,
    }
    _write_json(dst_trial / GAME_FILE, game)
    return dst_trial / GAME_FILE


@contextlib.contextmanager
def move_tracking_fix():
    """Within the context the expert's tracker reads "move X to Y" as "put X in Y" (module doc)."""
    from alfworld.agents.expert.handcoded_expert import BasePolicy

    original = BasePolicy.update_state_tracking

    def update_state_tracking(self, game_state, last_action):
        if last_action.startswith("move "):
            last_action = "put " + last_action[len("move ") :].replace(" to ", " in ", 1)
        return original(self, game_state, last_action)

    BasePolicy.update_state_tracking = update_state_tracking
    try:
        yield
    finally:
        BasePolicy.update_state_tracking = original


def solve_game(
    game_file: Path, *, seed: int = 0, move_fix: bool = False
) -> tuple[list[str] | None, str | None]:
    """The handcoded expert's walkthrough of a game, or ``(None, reason)`` if it fails.

    The global ``random`` (the expert's fallback) is seeded with ``seed`` and restored after.
    ``move_fix``: run the expert with :func:`move_tracking_fix` (module doc).
    """
    global _EXPERT_ENV
    if _EXPERT_ENV is None:
        _EXPERT_ENV = play_env(expert=True)
    saved = random.getstate()
    random.seed(seed)
    walkthrough: list[str] = []
    fix = move_tracking_fix() if move_fix else contextlib.nullcontext()
    try:
        with fix:
            _EXPERT_ENV.load(str(game_file))
            state, done = _EXPERT_ENV.reset(), False
            while not done:
                command = state["extra.expert_plan"][0]
                state, _, done = _EXPERT_ENV.step(command)
                walkthrough.append(command)
        if not state["won"]:
            return None, "the expert stopped without winning"
    except Exception as exc:  # any failure of planner or expert = unsolvable (alfworld-generate)
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    finally:
        random.setstate(saved)
    return walkthrough, None


def build_trial(
    src_trial: Path,
    dst_trial: Path,
    *,
    seed: int = 0,
    phrasing: int | None = None,
    move_fix: bool = False,
) -> GameRecord:
    """Write, solve and record one game (module doc, steps 1–4)."""
    path = write_game(src_trial, dst_trial, seed=seed, phrasing=phrasing)
    walkthrough, error = solve_game(path, seed=seed, move_fix=move_fix)
    with open(path) as f:
        game = json.load(f)
    game["solvable"] = walkthrough is not None
    game["walkthrough"] = walkthrough or []
    _write_json(path, game)
    return GameRecord(
        path, task_type_of(path), walkthrough is not None, tuple(walkthrough or ()), error
    )


def _build_one(args: tuple[Path, Path, int, bool]) -> GameRecord:
    src, dst, seed, move_fix = args
    return build_trial(src, dst, seed=seed, move_fix=move_fix)


def build_trials(
    pairs: Sequence[tuple[Path, Path]],
    *,
    seed: int = 0,
    workers: int = 1,
    move_fix: bool = False,
) -> list[GameRecord]:
    """:func:`build_trial` over ``(src, dst)`` pairs, in order, in ``workers`` processes
    (spawned: safe next to a running JAX; callers' scripts need the ``__main__`` guard)."""
    jobs = [(Path(s), Path(d), seed, move_fix) for s, d in pairs]
    if workers <= 1 or len(jobs) <= 1:
        return [_build_one(job) for job in jobs]
    alfworld()  # sets $ALFWORLD_DATA, which the spawned workers inherit
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        return list(pool.map(_build_one, jobs))


def build_split(
    src_split: Path, dst_split: Path, *, seed: int = 0, workers: int = 1, limit: int | None = None
) -> list[GameRecord]:
    """Build every candidate trial of a split (docs/environments.md §4.2 filters) into the same
    relative layout under ``dst_split``; ``limit`` keeps the first ``limit`` trials (sorted)."""
    src_split, dst_split = Path(src_split), Path(dst_split)
    trials = find_trials(src_split)[:limit]
    pairs = [(t, dst_split / t.relative_to(src_split)) for t in trials]
    return build_trials(pairs, seed=seed, workers=workers)
