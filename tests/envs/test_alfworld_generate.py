"""The offline ALFWorld training-game generator (envs/alfworld/generate.py,
docs/environments.md §4.2).

Needs the real engine (alfworld 0.4.2, textworld[pddl] 1.7.0) and the evaluation tarball
(``$ARLARENA_ALFWORLD_TARBALL``, default ``../shared/data/alfworld/`` beside the checkout); the
module is skipped without them. Only the rule checks of the sampler run without the engine's
planner; one test builds and solves games (about a minute on 2 cores).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

os.environ.setdefault("ALFWORLD_DATA", str(Path(tempfile.gettempdir()) / "arlarena_alfworld_data"))
pytest.importorskip("alfworld", reason="needs alfworld==0.4.2 (the ALFWorld engine extra)")
pytest.importorskip("textworld", reason="needs textworld[pddl]==1.7.0 (the ALFWorld engine extra)")

from alfworld.gen import constants as C
from alfworld.gen import goal_library

from envs.alfworld import generate as G
from envs.alfworld.data import TASK_TYPES, default_tarball, find_games, task_type_of
from envs.alfworld.pddl import goal_text, parse_problem, render_problem

TARBALL = default_tarball()
if not TARBALL.is_file():
    pytest.skip(f"ALFWorld data tarball not found: {TARBALL}", allow_module_level=True)

APPLIANCE = {  # spelled out again here, from the domain's heat/cool/clean preconditions
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
    "pick_clean_then_place_in_recep": "SinkBasin",
}
ACTION = {
    "pick_heat_then_place_in_recep": "Heatable",
    "pick_cool_then_place_in_recep": "Coolable",
    "pick_clean_then_place_in_recep": "Cleanable",
}


@pytest.fixture(scope="session")
def valid_train(alfworld_problems: Path) -> Path:
    """valid_train of the shared evaluation tarball (unpacked once per session, conftest)."""
    return alfworld_problems / "valid_train"


@pytest.fixture(scope="session")
def scenes(valid_train: Path) -> list[G.Scene]:
    return G.load_scenes(valid_train)


def _state(problem_text: str) -> dict:
    """The facts of a problem that the rules talk about, by object id."""
    p = parse_problem(problem_text)
    inrec: dict[str, list[str]] = {}
    for o, r in p.facts("inReceptacle"):
        inrec.setdefault(o, []).append(r)
    return {
        "otype": {o: t.removesuffix("Type") for o, t in p.facts("objectType")},
        "rtype": {r: t.removesuffix("Type") for r, t in p.facts("receptacleType")},
        "rloc": dict(p.facts("receptacleAtLocation")),
        "oloc": dict(p.facts("objectAtLocation")),
        "inrec": inrec,
        **{k: {f[0] for f in p.facts(k)} for k in ("pickupable", "toggleable", "isCool")},
        **{k: {f[0] for f in p.facts(k)} for k in ("heatable", "coolable", "cleanable")},
        "preds": {f[0] for f in p.init},
        "goal": p.goal,
    }


def _check_rules(task_type: str, problem_text: str, traj: dict) -> None:
    """Assert ALFRED's task rules (docs/environments.md §4.2) on one generated problem, from its
    facts alone."""
    s = _state(problem_text)
    params, scene_num = traj["pddl_params"], traj["scene"]["scene_num"]
    obj = params["object_target"]
    look = task_type == "look_at_obj_in_light"
    recep = params["toggle_target"] if look else params["parent_target"]
    kind = next(k for k, nums in C.SCENE_TYPE.items() if scene_num in nums)
    assert kind in C.GOALS_VALID[task_type]
    assert params["mrecep_target"] == "" and params["object_sliced"] is False
    assert C.OBJ_PARENTS.get(obj, obj) == obj  # not a sliced class
    targets = [o for o, t in s["otype"].items() if t == obj and o in s["pickupable"]]
    reachable = [o for o in targets if o in s["inrec"]]
    assert len(reachable) >= (2 if task_type == "pick_two_obj_and_place" else 1)
    classes = set(s["rtype"].values())
    if task_type in ACTION:
        assert obj in C.VAL_ACTION_OBJECTS[ACTION[task_type]]
        assert APPLIANCE[task_type] in classes
        flag = ACTION[task_type].lower()
        assert all(o in s[flag] for o in targets)
    if look:
        assert recep in C.VAL_ACTION_OBJECTS["Toggleable"]
        lamps = [o for o, t in s["otype"].items() if t == recep]
        assert any(o in s["toggleable"] and o in s["inrec"] for o in lamps)
    else:
        assert recep in classes and recep not in C.MOVABLE_RECEPTACLES and recep != "Toaster"
        assert obj in C.VAL_RECEPTACLE_OBJECTS[recep]  # canContain
        assert recep != APPLIANCE.get(task_type)
        if task_type == "pick_two_obj_and_place":
            assert recep not in {"CoffeeMachine", "ToiletPaperHanger", "HandTowelHolder"}
    # placements: one receptacle per object, canContain, location of that receptacle
    fits_somewhere = {
        cls for r in classes for cls in C.VAL_RECEPTACLE_OBJECTS.get(r, ())
    }  # classes that fit no receptacle of the scene keep their original place
    for o in s["pickupable"] & set(s["inrec"]):
        (r,) = s["inrec"][o]
        cls = s["otype"][o]
        if cls in fits_somewhere:
            assert cls in C.VAL_RECEPTACLE_OBJECTS[s["rtype"][r]], (o, r)
            assert s["oloc"][o] == s["rloc"][r], o
    assert "inReceptacleObject" not in s["preds"]
    # the goal does not hold at the start, and state facts follow ALFRED
    target_recep_types = {s["rtype"][r] for o in targets for r in s["inrec"].get(o, [])}
    if task_type in ("pick_and_place_simple", "pick_two_obj_and_place"):
        assert recep not in target_recep_types, "goal already holds"
    if task_type in APPLIANCE:
        assert APPLIANCE[task_type] not in target_recep_types
    assert not {"isHot", "isClean", "holds", "isToggled", "isOn"} & s["preds"]
    for o in s["isCool"]:
        assert s["otype"][o] == obj and s["rtype"][s["inrec"][o][0]] == "Fridge"
    # the goal is goal_library's, filled as the real files are
    want = goal_text(goal_library.gdict[task_type]["pddl"], obj=obj, recep=recep, toggle=recep)
    assert s["goal"] == want


def test_goal_text_matches_real_files(valid_train: Path) -> None:
    """goal_library's template with '#'→'-' and the class names gives the real files' goals."""
    seen = set()
    for trial in sorted(valid_train.glob("*/*")):
        traj = json.loads((trial / "traj_data.json").read_text())
        if traj["task_type"] in seen:
            continue
        seen.add(traj["task_type"])
        p = traj["pddl_params"]
        real = parse_problem((trial / "initial_state.pddl").read_text()).goal
        mine = goal_text(
            goal_library.gdict[traj["task_type"]]["pddl"],
            obj=p["object_target"],
            recep=p["parent_target"],
            toggle=p["toggle_target"],
        )
        assert mine.split() == real.split()
    assert seen == set(TASK_TYPES)


def test_render_round_trip(valid_train: Path) -> None:
    for trial in sorted(valid_train.glob("*/*"))[:20]:
        problem = parse_problem((trial / "initial_state.pddl").read_text())
        assert parse_problem(render_problem(problem)) == problem


def test_real_goals_are_valid(scenes: list[G.Scene]) -> None:
    """Every official valid_train task (all expert-solvable) is allowed in its own scene."""
    for scene in scenes:
        traj = json.loads((scene.trial / "traj_data.json").read_text())
        p = traj["pddl_params"]
        recep = p["toggle_target"] or p["parent_target"]
        assert (p["object_target"], recep) in G.valid_goals(scene, traj["task_type"])


@pytest.mark.parametrize("task_type", TASK_TYPES)
def test_sampler_follows_alfred_rules(scenes: list[G.Scene], task_type: str) -> None:
    """Many seeds, each on every scene kind that admits the task: the rules hold."""
    eligible = [s for s in scenes if G.valid_goals(s, task_type)]
    assert eligible
    goals = Counter()
    for seed in range(40):
        rng = random.Random(seed)
        out = G.sample_task(rng.choice(eligible), task_type, rng, task_id=f"trial_gen_{seed}_0")
        assert out is not None
        text, traj = out
        assert traj["task_type"] == task_type and traj["task_id"] == f"trial_gen_{seed}_0"
        assert f"(problem plan_trial_gen_{seed}_0)" in text
        _check_rules(task_type, text, traj)
        goals[traj["pddl_params"]["object_target"]] += 1
    assert len(goals) > 1  # goals vary with the seed


def test_rule_check_catches_a_goal_that_already_holds(scenes: list[G.Scene]) -> None:
    """The checker above is not vacuous: moving a target object into a receptacle of the target
    class (the goal of pick_and_place then holds at the start) fails it."""
    rng = random.Random(0)
    text, traj = G.sample_task(scenes[0], "pick_and_place_simple", rng)
    _check_rules("pick_and_place_simple", text, traj)
    problem = parse_problem(text)
    s = _state(text)
    recep = next(r for r, t in s["rtype"].items() if t == traj["pddl_params"]["parent_target"])
    obj = next(o for o in s["inrec"] if s["otype"][o] == traj["pddl_params"]["object_target"])
    moved = {"inReceptacle": recep, "objectAtLocation": s["rloc"][recep]}
    init = tuple(
        (f[0], obj, moved[f[0]]) if f[0] in moved and f[1] == obj else f for f in problem.init
    )
    with pytest.raises(AssertionError, match="goal already holds"):
        _check_rules("pick_and_place_simple", render_problem(problem.with_init(init)), traj)


def test_sampler_refuses_scenes_of_the_wrong_kind(scenes: list[G.Scene]) -> None:
    for scene in scenes:
        for task_type in TASK_TYPES:
            if scene.kind not in C.GOALS_VALID[task_type]:
                assert G.sample_task(scene, task_type, random.Random(0)) is None


def test_sample_task_is_deterministic(scenes: list[G.Scene]) -> None:
    def draw(seed: int) -> list[str]:
        rng = random.Random(seed)
        return [G.sample_task(scenes[i], "pick_and_place_simple", rng)[0] for i in (0, 50, 100)]

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)


def test_problems_do_not_depend_on_the_hash_seed(valid_train: Path) -> None:
    """Two interpreters with different ``PYTHONHASHSEED`` sample identical problems."""
    code = (
        "import hashlib, random, sys; from envs.alfworld import generate as G; "
        "scenes = G.load_scenes(sys.argv[1]); rng = random.Random(3); h = hashlib.sha256(); "
        "[h.update(G.sample_task(s, t, rng)[0].encode()) for t in G.TASK_TYPES "
        "for s in [s for s in scenes if G.valid_goals(s, t)][:3]]; print(h.hexdigest())"
    )
    root = Path(__file__).resolve().parents[2]
    digests = {
        subprocess.run(
            [sys.executable, "-c", code, str(valid_train)],
            env={**os.environ, "PYTHONHASHSEED": str(hash_seed)},
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for hash_seed in (1, 2)
    }
    assert len(digests) == 1 and len(digests.pop().strip()) == 64


def test_bad_input_raises(tmp_path: Path, valid_train: Path, scenes: list[G.Scene]) -> None:
    with pytest.raises(ValueError, match="valid_train directory not found"):
        G.generate_training_games(tmp_path / "missing", tmp_path / "out", num_games=1)
    with pytest.raises(ValueError, match="num_games"):
        G.generate_training_games(valid_train, tmp_path / "out", num_games=0)
    with pytest.raises(ValueError, match="task_types"):
        G.generate_training_games(valid_train, tmp_path / "out", num_games=1, task_types=["x"])
    with pytest.raises(ValueError, match="unknown task type"):
        G.valid_goals(scenes[0], "pick_and_place_with_movable_recep")


def test_generator_yields_solvable_games_of_all_types(valid_train: Path, tmp_path: Path) -> None:
    """One game per task type, built and solved by the handcoded expert (the engine)."""
    out = tmp_path / "train"
    records = G.generate_training_games(valid_train, out, num_games=6, seed=0, workers=2)
    assert sorted(r.task_type for r in records) == sorted(TASK_TYPES)
    for r in records:
        assert r.solvable and r.walkthrough and r.error is None
        trial, task_dir = r.path.parent, r.path.parent.parent
        assert r.path.name == "game.tw-pddl" and trial.name.startswith("trial_gen_0_")
        assert task_dir.parent == out and (trial / "traj_data.json").is_file()
        traj = json.loads((trial / "traj_data.json").read_text())
        task_type, obj, mrecep, recep, scene = task_dir.name.split("-")
        assert task_type == task_type_of(r.path) == r.task_type == traj["task_type"]
        params = traj["pddl_params"]
        assert (obj, mrecep, recep, int(scene)) == (
            params["object_target"],
            "None",
            params["parent_target"] or params["toggle_target"],
            traj["scene"]["scene_num"],
        )
        game = json.loads(r.path.read_text())
        assert game["solvable"] is True and tuple(game["walkthrough"]) == r.walkthrough
    # unsolvable candidates are gone: the official loader finds exactly the kept games
    assert find_games(out) == sorted(r.path for r in records)
    assert sorted(out.glob("*/*")) == sorted(r.path.parent for r in records)
