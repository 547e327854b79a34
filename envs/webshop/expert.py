"""The WebShop expert for behaviour cloning: a scripted shopper (docs/environments.md §6.9).

For a goal it plans the whole episode on a private copy of the environment (the environment is
deterministic, so the plan replays exactly in the real one): it searches, pages through the
results to the target product, opens it, clicks the goal's option values and buys. It tries the
queries of :func:`candidate_queries` in order and keeps the first plan whose purchase scores
1.0 within the turn limit. A goal no query reaches gets no plan (an empty one: the replay then
only sends the filler, and the demonstration filter drops the episode).

:func:`shopper_expert` wraps the plans as an :class:`envs.text.Expert` (a
:class:`envs.text.ReplayPolicy` per chunk of seeds), so demonstrations go through the same RL
prompts and projection as every other environment's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from envs.text import Expert, ReplayPolicy
from envs.webshop.env import WebShopEnv
from envs.webshop.goals import Goal
from envs.webshop.pages import PRODUCTS_PER_PAGE
from envs.webshop.shop import Shop

FILLER = "click[back to search]"  # past a plan's end (the episode is over by then)
PRICE_CLAUSE = re.compile(r", and price lower than [\d.]+ dollars$")


def candidate_queries(goal: Goal) -> list[str]:
    """What the shopper searches for, in order: the instruction without its price clause,
    the whole instruction, the product's query and its title (lower-cased, duplicates
    dropped)."""
    text = goal.instruction_text.lower()
    queries = [PRICE_CLAUSE.sub("", text), text, goal.query, goal.name.lower()]
    return list(dict.fromkeys(q.replace("[", " ").replace("]", " ").strip() for q in queries))


def plan_for_query(goal: Goal, query: str, results: Sequence[str]) -> list[str] | None:
    """Search, page to the target, open it, choose the goal's options and buy; None when the
    target is not among the results."""
    if goal.asin not in results:
        return None
    rank = list(results).index(goal.asin)
    plan = [f"search[{query}]"]
    plan += ["click[next >]"] * (rank // PRODUCTS_PER_PAGE)
    plan.append(f"click[{goal.asin.lower()}]")
    plan += [f"click[{value}]" for _, value in goal.goal_options]
    plan.append("click[buy now]")
    return plan


def replay(env: WebShopEnv, seed: int, plan: Sequence[str]) -> float:
    """The reward of playing ``plan`` from ``reset(seed)`` (0 when it does not buy)."""
    env.reset(seed)
    total = 0.0
    for action in plan:
        _, reward, done, _ = env.step(action)
        total += reward
        if done:
            break
    return total


def plan_purchase(env: WebShopEnv, seed: int) -> tuple[str, ...]:
    """The first plan that wins the goal of ``seed`` within ``env.max_steps`` turns, or ()."""
    goal = env.goal_of(seed)
    for query in candidate_queries(goal):
        plan = plan_for_query(goal, query, env.shop.search(query, 50))
        if plan and len(plan) <= env.max_steps and replay(env, seed, plan) > 0:
            return tuple(plan)
    return ()


def expert_success(shop: Shop, split: str, max_steps: int) -> tuple[int, int]:
    """``(goals the expert wins, goals)`` over a whole split."""
    env = WebShopEnv(shop, split=split, max_steps=max_steps)
    wins = sum(bool(plan_purchase(env, s)) for s in range(len(env.goals)))
    return wins, len(env.goals)


def shopper_expert(
    shop: Shop, *, max_steps: int, think: bool = True, batch_size: int = 64
) -> Expert:
    """Demonstrations on the training goals: seed ``s`` plays goal ``s % len(goals)``, whose
    plan does not depend on the seed, so each distinct goal is played once (``task_of``)."""
    env = WebShopEnv(shop, split="train", max_steps=max_steps)
    cache: dict[int, tuple[str, ...]] = {}

    def plans(seeds: list[int]) -> list[tuple[str, ...]]:
        for s in seeds:
            key = int(s) % len(env.goals)
            if key not in cache:
                cache[key] = plan_purchase(env, key)
        return [cache[int(s) % len(env.goals)] for s in seeds]

    return Expert(
        policy_for=lambda seeds: ReplayPolicy(plans(seeds), filler=FILLER, think=think),
        task_of=lambda seed: int(seed) % len(env.goals),
        every_turn=True,
        batch_size=batch_size,
    )
