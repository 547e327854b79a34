"""Training games generated offline over the real ALFRED scenes (docs/environments.md §4.2).

The official 3,553-game train split is not available offline, so new tasks are sampled over the
real problems of ``valid_train`` (200 problems, 82 train floor plans), following the rules of
ALFRED's own task sampler (``gen/scripts/generate_trajectories.py`` and
``gen/game_states/task_game_state.py``) with the tables of ``alfworld.gen.constants``:

1. **Scene skeleton** (:class:`Scene`): a real ``initial_state.pddl`` keeps its objects,
   receptacles, receptacle locations, agent start and every fact except object placements.
2. **Goal** (:func:`valid_goals`): the floor plan's scene type must be in ``GOALS_VALID[task]``
   (kitchens 1-30, living rooms 201-230, bedrooms 301-330, bathrooms 401-430); the object class
   is a non-sliced class that fits some receptacle (the union of ``VAL_RECEPTACLE_OBJECTS``),
   present with at least 1 (pick_two: 2) pickupable instances in a receptacle, carrying the
   task's ``heatable``/``coolable``/``cleanable`` fact (``VAL_ACTION_OBJECTS``); the receptacle
   class is a static receptacle of the scene (not a movable one, not Toaster) that can contain
   the object (canContain), minus ALFRED's invalid receptacles (heat: Microwave, cool: Fridge,
   clean: SinkBasin, pick_two: CoffeeMachine, ToiletPaperHanger, HandTowelHolder); look_at uses
   a toggleable lamp class (DeskLamp/FloorLamp) with an instance in a receptacle instead. Heat
   needs a Microwave, cool a Fridge, clean a SinkBasin (the domain cleans only in SinkBasinType).
   Object class, then receptacle class, are drawn uniformly.
3. **Placements** (:func:`sample_placements`): every pickupable object that the source problem
   has in a receptacle is moved to a receptacle that can contain its class, drawn with weight
   ``1 + (objects the source has there)`` (this keeps each scene's clutter profile: uniform
   weights would double the share of cabinets and drawers). Objects of the target class avoid
   the receptacles ALFRED keeps them out of: the task's appliance (Microwave/Fridge/SinkBasin)
   and, for pick_and_place/pick_two, the target receptacle class, so no goal holds at the start.
   ``inReceptacle``/``objectAtLocation`` follow the new receptacle; ``inReceptacleObject`` is
   dropped (no action reads it); ``isCool`` marks target-class objects in a Fridge, as ALFRED does.
4. **Files**: ``<out>/<task_type>-<Obj>-None-<Recep>-<scene>/trial_gen_<seed>_<k>/`` with
   ``initial_state.pddl`` (goal from ``goal_library.gdict``) and a minimal ``traj_data.json``, the
   official layout; :func:`envs.alfworld.games.build_trials` writes ``game.tw-pddl`` and runs the
   handcoded expert, and only solvable games stay on disk (docs/environments.md §4.2).

Everything is drawn from one ``random.Random(seed)``: the same seed gives the same problems.
"""

from __future__ import annotations

import functools
import json
import random
import re
import shutil
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from envs.alfworld.data import TASK_TYPES
from envs.alfworld.engine import alfworld
from envs.alfworld.games import GameRecord, build_trials
from envs.alfworld.pddl import Fact, Problem, goal_text, parse_problem, render_problem

APPLIANCE = {  # task → the receptacle class its action needs
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
    "pick_clean_then_place_in_recep": "SinkBasin",
}
ACTION = {  # task → VAL_ACTION_OBJECTS key; its lower case is the instance predicate
    "pick_heat_then_place_in_recep": "Heatable",
    "pick_cool_then_place_in_recep": "Coolable",
    "pick_clean_then_place_in_recep": "Cleanable",
}
INVALID_RECEPTACLES = {  # generate_trajectories.goal_to_invalid_receptacle
    **{task: frozenset({cls}) for task, cls in APPLIANCE.items()},
    "pick_two_obj_and_place": frozenset({"CoffeeMachine", "ToiletPaperHanger", "HandTowelHolder"}),
}
_FLAGS = ("pickupable", "toggleable", "heatable", "coolable", "cleanable")


@functools.cache
def _tables() -> tuple[ModuleType, ModuleType]:
    """``alfworld.gen.constants`` and ``goal_library`` (importing them creates $ALFWORLD_DATA)."""
    alfworld()
    from alfworld.gen import constants, goal_library

    return constants, goal_library


@dataclass(frozen=True)
class Scene:
    """A real problem used as a skeleton (step 1 of the module doc)."""

    trial: Path
    scene_num: int
    problem: Problem
    otype: dict[str, str]  # object id → class
    rtype: dict[str, str]  # receptacle id → class
    rloc: dict[str, str]  # receptacle id → location
    placed: dict[str, str]  # object id → its (first) receptacle in the source problem
    flags: dict[str, frozenset[str]]  # predicate in _FLAGS → object ids

    @property
    def kind(self) -> str:
        """Scene type from the floor plan number (``constants.SCENE_TYPE``)."""
        for kind, numbers in _tables()[0].SCENE_TYPE.items():
            if self.scene_num in numbers:
                return kind
        raise ValueError(f"floor plan {self.scene_num} has no ALFRED scene type")

    def movable(self) -> list[str]:
        """Pickupable objects that the source has in a receptacle (the ones re-placed)."""
        return sorted(o for o in self.placed if o in self.flags["pickupable"])


def load_scene(trial: Path) -> Scene:
    """Read ``trial/{initial_state.pddl, traj_data.json}`` into a :class:`Scene`."""
    trial = Path(trial)
    problem = parse_problem((trial / "initial_state.pddl").read_text())
    scene_num = int(json.loads((trial / "traj_data.json").read_text())["scene"]["scene_num"])
    placed: dict[str, str] = {}
    for o, r in problem.facts("inReceptacle"):
        placed.setdefault(o, r)
    return Scene(
        trial=trial,
        scene_num=scene_num,
        problem=problem,
        otype={o: t.removesuffix("Type") for o, t in problem.facts("objectType")},
        rtype={r: t.removesuffix("Type") for r, t in problem.facts("receptacleType")},
        rloc=dict(problem.facts("receptacleAtLocation")),
        placed=placed,
        flags={p: frozenset(f[0] for f in problem.facts(p)) for p in _FLAGS},
    )


def load_scenes(valid_train_dir: Path) -> list[Scene]:
    """All problems of a ``valid_train`` directory, in sorted path order."""
    valid_train_dir = Path(valid_train_dir)
    if not valid_train_dir.is_dir():
        raise ValueError(f"valid_train directory not found: {valid_train_dir}")
    trials = sorted(p.parent for p in valid_train_dir.glob("*/*/initial_state.pddl"))
    if not trials:
        raise ValueError(f"no */trial_*/initial_state.pddl under {valid_train_dir}")
    return [load_scene(t) for t in trials]


def valid_goals(scene: Scene, task_type: str) -> list[tuple[str, str]]:
    """The ``(object class, receptacle or lamp class)`` goals ALFRED's rules allow in the scene
    (module doc, step 2) and whose target objects can start outside the forbidden receptacles
    (step 3), sorted."""
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown task type {task_type!r}; expected one of {TASK_TYPES}")
    c = _tables()[0]
    classes = set(scene.rtype.values())
    if scene.kind not in c.GOALS_VALID[task_type]:
        return []
    if task_type in APPLIANCE and APPLIANCE[task_type] not in classes:
        return []
    placeable = set().union(*c.VAL_RECEPTACLE_OBJECTS.values())
    action = ACTION.get(task_type)
    flag = action.lower() if action else "pickupable"
    count = Counter(scene.otype[o] for o in scene.movable() if o in scene.flags[flag])
    need = 2 if task_type == "pick_two_obj_and_place" else 1
    objects = sorted(
        cls
        for cls, n in count.items()
        if n >= need
        and cls in placeable
        and c.OBJ_PARENTS.get(cls, cls) == cls  # no sliced classes
        and (action is None or cls in c.VAL_ACTION_OBJECTS[action])
    )
    if task_type == "look_at_obj_in_light":
        lamps = {
            scene.otype[o]
            for o in scene.flags["toggleable"]
            if o in scene.placed and scene.otype.get(o) in c.VAL_ACTION_OBJECTS["Toggleable"]
        }
        goals = [(obj, lamp) for obj in objects for lamp in sorted(lamps)]
    else:
        invalid = INVALID_RECEPTACLES.get(task_type, frozenset()) | {"Toaster"}
        receptacles = sorted(
            r
            for r in classes
            if r in c.VAL_RECEPTACLE_OBJECTS and r not in c.MOVABLE_RECEPTACLES and r not in invalid
        )
        goals = [(o, r) for o in objects for r in receptacles if o in c.VAL_RECEPTACLE_OBJECTS[r]]
    fits = c.VAL_RECEPTACLE_OBJECTS  # the target objects need somewhere to start (step 3)
    return [
        (o, r)
        for o, r in goals
        if any(o in fits.get(k, ()) for k in classes - forbidden_receptacles(task_type, r))
    ]


def forbidden_receptacles(task_type: str, receptacle: str) -> frozenset[str]:
    """Receptacle classes that objects of the target class may not start in (module doc, 3)."""
    forbidden = {APPLIANCE[task_type]} if task_type in APPLIANCE else set()
    if task_type in ("pick_and_place_simple", "pick_two_obj_and_place"):
        forbidden.add(receptacle)
    return frozenset(forbidden)


def sample_placements(
    scene: Scene, target: str, forbidden: frozenset[str], rng: random.Random
) -> dict[str, str] | None:
    """New receptacle of every movable object (module doc, step 3), or ``None`` if an object of
    the ``target`` class fits no allowed receptacle. Classes that fit no receptacle of the scene
    (e.g. HousePlant) keep their place."""
    fits = _tables()[0].VAL_RECEPTACLE_OBJECTS
    load = Counter(scene.placed.values())
    receptacles = sorted(r for r in scene.rtype if r in scene.rloc)
    placements = {}
    for o in scene.movable():
        cls = scene.otype[o]
        options = [
            r
            for r in receptacles
            if cls in fits.get(scene.rtype[r], ())
            and not (cls == target and scene.rtype[r] in forbidden)
        ]
        if not options and cls == target:
            return None
        placements[o] = (
            rng.choices(options, weights=[1 + load[r] for r in options])[0]
            if options
            else scene.placed[o]
        )
    return placements


def sample_task(
    scene: Scene, task_type: str, rng: random.Random, *, task_id: str = "trial_gen"
) -> tuple[str, dict] | None:
    """One new problem over ``scene``: ``(initial_state.pddl text, traj_data)``, or ``None`` if
    the scene admits no ``task_type`` goal. Pure: reads only ``scene`` and ``rng``."""
    goals = valid_goals(scene, task_type)
    if not goals:
        return None
    obj = rng.choice(sorted({o for o, _ in goals}))
    recep = rng.choice([r for o, r in goals if o == obj])
    placements = sample_placements(scene, obj, forbidden_receptacles(task_type, recep), rng)
    if placements is None:
        return None
    dropped = {"inReceptacleObject", "isCool"}
    init: list[Fact] = [
        f
        for f in scene.problem.init
        if f[0] not in dropped
        and not (f[0] in ("inReceptacle", "objectAtLocation") and f[1] in placements)
    ]
    init += [("inReceptacle", o, r) for o, r in placements.items()]
    init += [("objectAtLocation", o, scene.rloc[r]) for o, r in placements.items()]
    init += [
        ("isCool", o)
        for o, r in placements.items()
        if scene.otype[o] == obj and scene.rtype[r] == "Fridge"
    ]
    look = task_type == "look_at_obj_in_light"
    lib = _tables()[1].gdict[task_type]
    goal = goal_text(lib["pddl"], obj=obj, recep=recep, toggle=recep if look else "")
    head = re.sub(r"\(problem [^)\s]+\)", f"(problem plan_{task_id})", scene.problem.head, count=1)
    problem = Problem(head=head, init=tuple(init), goal=goal)
    params = {
        "object_target": obj,
        "parent_target": "" if look else recep,
        "toggle_target": recep if look else "",
        "mrecep_target": "",
        "object_sliced": False,
    }
    names = {"obj": obj.lower(), "recep": params["parent_target"].lower()}
    descs = [t.format(**names, toggle=params["toggle_target"].lower()) for t in lib["templates"]]
    traj_data = {
        "task_id": task_id,
        "task_type": task_type,
        "pddl_params": params,
        "scene": {"floor_plan": f"FloorPlan{scene.scene_num}", "scene_num": scene.scene_num},
        # No human annotations exist: the two templated sentences stand in for them.
        "turk_annotations": {"anns": [{"task_desc": d} for d in descs]},
        "generated_from": f"{scene.trial.parent.name}/{scene.trial.name}",
    }
    return render_problem(problem), traj_data


def task_dir_name(traj_data: dict) -> str:
    """``<task_type>-<Obj>-None-<Recep|Lamp>-<scene>``, as the official directories."""
    p, scene = traj_data["pddl_params"], traj_data["scene"]["scene_num"]
    recep = p["parent_target"] or p["toggle_target"]
    return f"{traj_data['task_type']}-{p['object_target']}-None-{recep}-{scene}"


def write_task(out_dir: Path, problem_text: str, traj_data: dict) -> Path:
    """Write ``initial_state.pddl`` and ``traj_data.json`` into the official layout; return the
    trial directory."""
    trial = Path(out_dir) / task_dir_name(traj_data) / traj_data["task_id"]
    trial.mkdir(parents=True, exist_ok=True)
    (trial / "initial_state.pddl").write_text(problem_text)
    (trial / "traj_data.json").write_text(json.dumps(traj_data, indent=2) + "\n")
    return trial


def _remove_trial(trial: Path) -> None:
    """Delete a generated trial directory, and its task directory once empty."""
    shutil.rmtree(trial)
    if not any(trial.parent.iterdir()):
        trial.parent.rmdir()


def _eligible_scenes(valid_train_dir: Path, quota: dict[str, int]) -> dict[str, list[Scene]]:
    """Per task type, the scenes that admit one of its goals (a type with a quota needs one)."""
    scenes = load_scenes(valid_train_dir)
    eligible = {t: [s for s in scenes if valid_goals(s, t)] for t in quota}
    for t, want in quota.items():
        if want and not eligible[t]:
            raise ValueError(f"no scene of {valid_train_dir} admits a {t} task")
    return eligible


def _round_sizes(
    quota: dict[str, int], kept: dict[str, list], tried: Counter, solved: Counter
) -> dict[str, int]:
    """Candidates to sample this round per task type short of its quota (see
    :func:`generate_training_games`)."""
    todo = {}
    for t, want in quota.items():
        if (deficit := want - len(kept[t])) > 0:
            todo[t] = min(4 * deficit, -(-deficit * (tried[t] + 1) // (solved[t] + 1)))
    return todo


def _write_candidates(
    todo: dict[str, int],
    eligible: dict[str, list[Scene]],
    rng: random.Random,
    out_dir: Path,
    *,
    seed: int,
    first: int,
) -> list[tuple[int, str, Path]]:
    """Sample and write this round's candidates, interleaving the task types; each is
    ``(index, task type, trial folder)`` with indices from ``first``."""
    order = [t for i in range(max(todo.values())) for t in eligible if i < todo.get(t, 0)]
    batch: list[tuple[int, str, Path]] = []
    for k, t in enumerate(order, start=first):
        task = sample_task(rng.choice(eligible[t]), t, rng, task_id=f"trial_gen_{seed}_{k}")
        if task is None:  # cannot happen: eligible scenes admit a goal that can be placed
            raise RuntimeError(f"scene sampling failed for a {t} task")
        batch.append((k, t, write_task(Path(out_dir), *task)))
    return batch


def generate_training_games(
    valid_train_dir: Path,
    out_dir: Path,
    *,
    num_games: int,
    seed: int = 0,
    workers: int = 1,
    task_types: Sequence[str] = TASK_TYPES,
    max_rounds: int = 8,
) -> list[GameRecord]:
    """Generate ``num_games`` expert-solvable games under ``out_dir`` (module doc), balanced
    round-robin over ``task_types``, and return their records in generation order.

    Candidates the expert cannot solve are deleted. Each round samples, for every task type
    short of its quota, ``deficit × (tried + 1) / (solved + 1)`` candidates (at most 4× the
    deficit), so a type with a low solve rate is over-sampled; solvable games past the quota are
    deleted too (the first ones in generation order stay). Everything is deterministic in
    ``seed``; after ``max_rounds`` a warning reports a shortfall."""
    task_types = tuple(task_types)
    if num_games < 1:
        raise ValueError(f"num_games must be >= 1, got {num_games}")
    if not task_types or any(t not in TASK_TYPES for t in task_types):
        raise ValueError(f"task_types must be a non-empty subset of {TASK_TYPES}: {task_types}")
    n, m = divmod(num_games, len(task_types))
    quota = {t: n + (i < m) for i, t in enumerate(task_types)}
    eligible = _eligible_scenes(valid_train_dir, quota)
    rng, k = random.Random(seed), 0
    kept: dict[str, list[tuple[int, GameRecord]]] = {t: [] for t in task_types}
    tried, solved = Counter(), Counter()
    for _ in range(max_rounds):
        todo = _round_sizes(quota, kept, tried, solved)
        if not todo:
            break
        batch = _write_candidates(todo, eligible, rng, out_dir, seed=seed, first=k)
        k += len(batch)
        records = build_trials(
            [(d, d) for _, _, d in batch], seed=seed, workers=workers, move_fix=True
        )
        for (i, t, trial), record in zip(batch, records, strict=True):
            tried[t] += 1
            solved[t] += record.solvable
            if record.solvable and len(kept[t]) < quota[t]:
                kept[t].append((i, record))
            else:
                _remove_trial(trial)
    if (got := sum(map(len, kept.values()))) < num_games:
        warnings.warn(
            f"{got} of {num_games} games solvable after {max_rounds} rounds", stacklevel=2
        )
    return [record for _, record in sorted(p for v in kept.values() for p in v)]
