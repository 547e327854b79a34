"""``arlarena serve`` for the text environments, driven by OpenEnv's own client and compared
with in-process stepping turn by turn (docs/environments.md §15.1): TextWorld through the pool
(one worker per session), then SIGTERM with a session open; WebShop (a small synthetic
catalogue) and ALFWorld (the shared evaluation tarball; the ``alfworld_data_root`` fixture skips
with the reason without it) in the server process (``--in-process``).

Needs the ``openenv`` extra; TextWorld and ALFWorld also ``textworld`` (the alfworld extra).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("openenv", reason="serving tests need openenv (the openenv extra)")

from openenv.core.generic_client import GenericEnvClient

from arlarena_jax.train.build import EVAL_SEED_BLOCKS
from envs import registry
from tests.helpers.openenv_servers import (
    children,
    env_section,
    launch,
    listening,
    local_batch,
    outliving,
    same_turn,
    stop_server,
)

TEXTWORLD_SETS = ("env.textworld.test_games=2", "env.textworld.validation_games=1")
WEBSHOP_SETS = (
    "env.webshop.num_products=200",
    "env.webshop.test_goals=10",
    "env.webshop.validation_goals=5",
    "env.webshop.nouns=lexicon",
)


def launch_text(name: str, sets, *args: str):
    """The server of ``name``'s test split with ``--set`` ``sets``, launched (it starts while
    the test prepares its in-process side)."""
    return launch(name, "--split", "test", *(f"--set={s}" for s in sets), *args)


def play_text_episodes(client, batch, plans: dict) -> None:
    """Per panel index of the test split: a refused command, then its plan (a win), served and
    in process side by side, turn by turn. ``{"command": null}`` (math's end without a turn)
    gets an error reply naming why, and the episode goes on untouched."""
    for index, plan in plans.items():
        seed = EVAL_SEED_BLOCKS["test"] + index
        first = client.reset(index=index)
        expected = batch.reset([seed])[0]
        assert first.observation["text"] == expected.text and first.observation["seed"] == seed
        assert first.observation["admissible"] == list(expected.admissible)
        assert first.observation["task"] == expected.task
        with pytest.raises(RuntimeError, match="null ends an episode only where"):
            client.step({"command": None})
        for command in ("dance wildly", *plan):
            step = batch.step([command])
            served = client.step({"command": command})
            reward, done = float(step.rewards[0]), bool(step.dones[0])
            same_turn(served, step.observations[0], reward, done, step.infos[0])
            if done:
                break
        assert served.observation["won"] and served.done


def serve_and_play(process, batch, plans: dict) -> None:
    """Once ``process``'s server listens: ``plans`` played through OpenEnv's client and on
    ``batch`` in-process (:func:`play_text_episodes`); then the batch closed, the server stopped."""
    server = None
    try:
        server = listening(process)
        with GenericEnvClient(base_url=server.url).sync() as client:
            play_text_episodes(client, batch, plans)
    finally:
        batch.close()
        if server is not None:
            stop_server(server)


@pytest.fixture(scope="module")
def textworld_sets(tmp_path_factory):
    pytest.importorskip("textworld", reason="TextWorld needs textworld (the alfworld extra)")
    root = tmp_path_factory.mktemp("textworld")
    sets = (f"env.data_path={root}", *TEXTWORLD_SETS, "env.textworld.build_workers=0")
    registry.get("textworld").check_data(env_section("textworld", *sets), training=False)
    return sets


def test_textworld_episodes_equal_in_process_stepping_and_sigterm_stops_cleanly(textworld_sets):
    """Both test games through the pool (the walkthroughs win), then three sessions at once
    (a pool worker each); then SIGTERM with a session open stops the server and its workers."""
    from envs.textworld.spec import split_games

    process = launch_text("textworld", textworld_sets)
    _, walkthroughs = split_games(env_section("textworld", *textworld_sets), "test")
    first = EVAL_SEED_BLOCKS["test"]
    plans = {i: walkthroughs[(first + i) % len(walkthroughs)] for i in range(2)}
    batch = local_batch("textworld", "test", *textworld_sets)
    server = listening(process)
    try:
        client = GenericEnvClient(base_url=server.url).sync()
        client.connect()
        play_text_episodes(client, batch, plans)
        walked = asyncio.run(concurrent_walks(server.url, plans[0], sessions=3))
        assert walked == [walked[0]] * 3 and walked[0][-1] == (True, True)  # all won
        workers = [pid for pid in children(server.process.pid) if is_pool_worker(pid)]
        assert len(workers) >= 3, "each open session's environment runs in a pool worker"
        children_before = children(server.process.pid)
        status, err = stop_server(server)  # a session is still open
        assert status == 0 and "textworld server stopped (SIGTERM)" in err
        assert not outliving(children_before, within_s=10.0)  # workers, resource tracker
    finally:
        batch.close()
        if server.process.poll() is None:
            server.process.kill()


async def concurrent_walks(url: str, plan, sessions: int) -> list[list[tuple[bool, bool]]]:
    """``sessions`` sessions at once, each walking ``plan`` in episode 0: (won, done) a turn."""

    async def walk() -> list[tuple[bool, bool]]:
        async with GenericEnvClient(base_url=url) as client:
            await client.reset(index=0)
            turns = []
            for command in plan:
                step = await client.step({"command": command})
                turns.append((step.observation["won"], step.done))
            return turns

    return list(await asyncio.gather(*(walk() for _ in range(sessions))))


def is_pool_worker(pid: int) -> bool:
    """Whether process ``pid`` is a multiprocessing worker (not its resource tracker)."""
    try:
        return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_webshop_episodes_equal_in_process_stepping():
    """Three test goals of a small synthetic catalogue in the server process: the scripted
    shopper's purchases (task_score 1 each)."""
    from envs.webshop.env import WebShopFactory
    from envs.webshop.expert import plan_purchase
    from envs.webshop.spec import source_of

    process = launch_text("webshop", WEBSHOP_SETS, "--in-process")
    env = env_section("webshop", *WEBSHOP_SETS)
    shopper = WebShopFactory(source_of(env), split="test", max_steps=env.max_turns)()
    first = EVAL_SEED_BLOCKS["test"]
    plans = {i: plan_purchase(shopper, first + i) for i in range(3)}
    assert all(plans.values())
    serve_and_play(process, local_batch("webshop", "test", *WEBSHOP_SETS), plans)


def test_alfworld_episodes_equal_in_process_stepping(alfworld_data_root):
    """A valid_seen game (the test split) in the server process: its walkthrough wins."""
    from envs.alfworld.env import AlfworldFactory
    from envs.alfworld.expert import walkthrough
    from envs.alfworld.spec import games

    sets = (f"env.data_path={alfworld_data_root}",)
    process = launch_text("alfworld", sets, "--in-process")
    player = AlfworldFactory(games(env_section("alfworld", *sets), "test"))()
    first = EVAL_SEED_BLOCKS["test"]  # the test panel's episode 0
    plans = {0: walkthrough(player.game_for(first))}
    serve_and_play(process, local_batch("alfworld", "test", *sets), plans)
