"""ALFWorld's progress signal: the goal's state conditions the PDDL state satisfies
(envs/alfworld/progress.py, docs/environments.md §1.9).

The counting is checked on hand-built states of two real goal shapes (no engine needed); the
predicate split against alfworld's own domain and the dense rewards on the stored walkthroughs of
built games need the ``alfworld`` extra and the shared evaluation tarball (tests/conftest.py), and
skip with the reason otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest

from envs.alfworld import progress
from envs.alfworld.progress import World, conditions, goal_of, satisfied

PICK_TWO = """(define (problem plan_trial)
(:domain alfred)
(:objects ...)
(:init (atLocation agent1 loc_1))
(:goal
    (and
        (exists (?r - receptacle)
            (exists (?o1 - object)
                (and
                    (objectType ?o1 AlarmClockType)  ; a comment the parser drops
                    (receptacleType ?r DresserType)
                    (inReceptacle ?o1 ?r)
                    (exists (?o2 - object)
                        (and
                            (not (= ?o1 ?o2))
                            (objectType ?o2 AlarmClockType)
                            (receptacleType ?r DresserType)
                            (inReceptacle ?o2 ?r)
                        )
                    )
                )
            )
        )
    )
)
)"""

HEAT = """(:goal (and (exists (?r - receptacle) (exists (?o - object) (and (heatable ?o)
    (objectType ?o AppleType) (receptacleType ?r DiningTableType) (isHot ?o)
    (inReceptacle ?o ?r))))))"""

TYPES = [
    ("objecttype", "clock_1", "alarmclocktype"),
    ("objecttype", "clock_2", "alarmclocktype"),
    ("objecttype", "apple_1", "appletype"),
    ("heatable", "apple_1"),
    ("receptacletype", "dresser_1", "dressertype"),
    ("receptacletype", "table_1", "diningtabletype"),
]
ENTITIES = {"object": ("apple_1", "clock_1", "clock_2"), "receptacle": ("dresser_1", "table_1")}


def state(*facts: tuple[str, ...]) -> World:
    return World(frozenset(TYPES + list(facts)), ENTITIES)


def test_pick_two_counts_distinct_objects_of_the_type_in_one_receptacle():
    goal = goal_of(PICK_TWO)
    assert conditions(goal) == 2
    assert satisfied(goal, state()) == 0
    assert satisfied(goal, state(("inreceptacle", "apple_1", "dresser_1"))) == 0  # not the type
    assert satisfied(goal, state(("inreceptacle", "clock_1", "dresser_1"))) == 1  # ?o2 ≠ ?o1
    split = state(("inreceptacle", "clock_1", "dresser_1"), ("inreceptacle", "clock_2", "table_1"))
    assert satisfied(goal, split) == 1  # both must be in the same dresser
    both = state(("inreceptacle", "clock_1", "dresser_1"), ("inreceptacle", "clock_2", "dresser_1"))
    assert satisfied(goal, both) == 2


def test_heat_then_place_counts_heat_and_place_on_the_same_apple():
    goal = goal_of(HEAT)
    assert conditions(goal) == 2
    placed = ("inreceptacle", "apple_1", "table_1")
    assert satisfied(goal, state(placed)) == 1  # the game may put it there at the start
    assert satisfied(goal, state(("ishot", "apple_1"))) == 1
    assert satisfied(goal, state(("ishot", "apple_1"), placed)) == 2
    hot_clock = World(frozenset([("ishot", "clock_1")]), ENTITIES)  # no heatable apple at all
    assert satisfied(goal, hot_clock) == 0


def test_malformed_goals_are_refused():
    with pytest.raises(ValueError, match="no \\(:goal"):
        goal_of("(define (problem p))")
    with pytest.raises(ValueError, match="no complete PDDL expression"):
        goal_of("(:goal (and (isHot ?o)")
    with pytest.raises(ValueError, match="unsupported PDDL goal expression 'or'"):
        satisfied(goal_of("(:goal (or (isHot a) (isCool a)))"), state())


@pytest.fixture(scope="module")
def engine():
    pytest.importorskip("alfworld", reason="needs alfworld==0.4.2 (the ALFWorld engine extra)")
    from envs.alfworld import engine

    return engine


def effect_predicates(node) -> set[str]:
    """The predicates an action effect adds or deletes (``when``: its effect part)."""
    if isinstance(node, str) or node[0] == "increase":
        return set()
    if node[0] in ("and", "not"):
        return set().union(*(effect_predicates(child) for child in node[1:]))
    if node[0] in ("forall", "when"):
        return effect_predicates(node[2])
    return {node[0]}


def test_state_predicates_are_those_the_domains_actions_change(engine):
    domain_text, _ = engine.domain_and_grammar()
    domain = progress.parse(domain_text[domain_text.index("(define") :])
    changed = set()
    for item in domain:
        if isinstance(item, list) and item[0] == ":action":
            changed |= effect_predicates(item[item.index(":effect") + 1])
    assert changed == progress.STATE_PREDICATES


def test_walkthroughs_telescope_to_the_maximum_on_every_task_type(alfworld_data_root):
    """Each built game's stored walkthrough wins; its increments sum to ``progress_max`` (the
    conditions unmet at the reset), so the normalised dense rewards sum to 1, and at the win
    every condition holds."""
    from envs.alfworld.data import find_games
    from envs.alfworld.env import AlfworldFactory
    from envs.alfworld.expert import walkthrough
    from envs.local import LocalEnvBatch
    from envs.rewards import INFO_PROGRESS, ShapedRewards

    games = tuple(str(g) for g in find_games(alfworld_data_root / "json_2.1.1" / "valid_seen"))
    factory = AlfworldFactory(games)
    plans = [walkthrough(factory().game_for(seed)) for seed in range(len(games))]
    shaped = ShapedRewards(
        LocalEnvBatch(factory, len(games)),
        "dense",
        win_reward=10.0,
        progress=INFO_PROGRESS,
        normalise=True,
    )
    shaped.reset(list(range(len(games))))
    rewards, last = [], [None] * len(games)
    for turn in range(max(len(p) for p in plans)):
        step = shaped.step([p[turn] if turn < len(p) else "look" for p in plans])
        rewards.append(step.rewards)
        for i, plan in enumerate(plans):
            last[i] = step.infos[i] if turn == len(plan) - 1 else last[i]
    shaped.close()
    sums = np.stack(rewards).sum(axis=0)
    for i, info in enumerate(last):
        assert info["won"] and info["goal_satisfied"] == info["goal_conditions"], info
        assert info["progress_max"] >= 1 and sums[i] == pytest.approx(1.0, abs=1e-6), info
    task_types = {info["task_type"]: info["goal_conditions"] for info in last}
    assert task_types["pick_and_place_simple"] == 1 and task_types["look_at_obj_in_light"] == 4
