"""The scripted shopper (docs/environments.md §6.9): its plans win (score exactly 1.0) on the
synthetic catalogue's goals, its demonstrations go through the RL prompts and projection, and a
goal it cannot find gets no plan. Plus grouped resets through the host pool."""

from __future__ import annotations

import pytest

from arlarena_jax.train import demos
from arlarena_jax.train.config_io import load_config
from envs.pool import text_env_batch
from envs.webshop.env import WebShopEnv, WebShopFactory
from envs.webshop.expert import candidate_queries, expert_success, plan_purchase, replay
from envs.webshop.shop import ShopSource, load_shop
from tests.helpers.webshop_fixture import tiny_shop

SMALL = ShopSource(num_products=60, test_size=30, nouns="lexicon")


@pytest.fixture(scope="module")
def shop():
    return load_shop(SMALL)


def test_plans_win_every_goal(shop):
    """Each plan is search, next pages, the product, the options, buy now; all score 1.0."""
    wins, total = expert_success(shop, "test", 15)
    assert (wins, total) == (30, 30)
    env = WebShopEnv(shop, split="train")
    for seed in range(0, len(env.goals), 7):
        goal, plan = env.goal_of(seed), plan_purchase(env, seed)
        assert plan[0].startswith("search[") and plan[-1] == "click[buy now]"
        assert plan[-2 - len(goal.goal_options)] == f"click[{goal.asin.lower()}]"
        assert replay(env, seed, plan) == 10.0
        assert env.info["task_score"] == 1.0  # the purchase the plan ends with


def test_candidate_queries_drop_the_price_clause(shop):
    goal = next(g for g in shop.goals.goals if "price lower than" in g.instruction_text)
    first, second = candidate_queries(goal)[:2]
    assert "price lower than" not in first and second == goal.instruction_text.lower()


def test_a_goal_out_of_reach_gets_no_plan():
    """The fixture's keyword search cannot find a product no title word of the query names."""
    shop = tiny_shop()
    env = WebShopEnv(shop, split="train", max_steps=15)

    class Nothing:
        def search(self, keywords, k=50):
            return []

    blind = type(shop)(shop.catalogue, shop.goals, Nothing(), shop.nouns)
    assert plan_purchase(WebShopEnv(blind), 0) == ()
    assert plan_purchase(env, 0) != ()


def test_demonstrations_go_through_the_rl_prompts(tmp_path):
    config = load_config(
        "configs/webshop/base_tiny.yaml",
        ["env.webshop.num_products=60", "env.webshop.test_goals=30", "env.webshop.nouns=lexicon"],
    )
    seeds = list(range(2**30, 2**30 + 6))
    turns = demos.demonstrations(config.env, seeds)
    assert turns and all(t.reply.startswith("<think></think><action>") for t in turns)
    assert sum(t.reply.endswith("<action>click[buy now]</action>") for t in turns) == 6
    assert "Your task is to:" in turns[0].prompt and "'search[<your query>]'," in turns[0].prompt


def test_grouped_resets_in_the_pool_share_a_goal():
    batch = text_env_batch(WebShopFactory(SMALL, split="train"), 4, 2, 30.0)
    try:
        obs = batch.reset([5, 5, 9, 9])
        assert obs[0] == obs[1] and obs[2] == obs[3] and obs[0].task != obs[2].task
        step = batch.step(["search[" + obs[0].task + "]", "click[search]", "x", "x"])
        assert step.observations[0] != step.observations[1]  # only a valid action moves
        assert step.observations[1] == obs[1]
    finally:
        batch.close()
