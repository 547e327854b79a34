"""``arlarena serve``: our environments served through OpenEnv and driven by OpenEnv's own client
(``openenv.core.generic_client.GenericEnvClient``), episode for episode, reward for reward,
against the same environment stepped in this process (docs/environments.md §15.1). This file:
Sokoban and the command's errors, concurrency, idle reclaim; the text environments (and
SIGTERM) are in ``test_openenv_serving_text.py``.

Needs the ``openenv`` extra; skips with the reason otherwise.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("openenv", reason="serving tests need openenv (the openenv extra)")

from openenv.core.generic_client import GenericEnvClient

from arlarena_jax import cli
from arlarena_jax.train.build import EVAL_SEED_BLOCKS
from envs.sokoban.prompts import SOKOBAN_KEYWORDS
from tests.helpers.openenv_servers import (
    ROOT,
    launch,
    listening,
    local_batch,
    same_turn,
    stop_server,
)

# the move names by action id, from the prompt's keywords (independent of the spec's ``moves``)
NAMES = {action: move for move, action in SOKOBAN_KEYWORDS}
IDLE_S = 2.0  # the Sokoban server's idle timeout (its reaper looks every 5 s)
RECLAIMED_S = IDLE_S + 5.5  # idle long enough for the reaper to have looked after the timeout


@pytest.fixture(scope="module")
def sokoban():
    """The server of the test split, its in-process reference (compiled while the server
    starts) and a session left idle."""
    process = launch(
        "sokoban", "--split", "test", "--idle-timeout", str(IDLE_S), "--max-sessions", "40"
    )
    reference = local_batch("sokoban", "test")
    reference.reset([EVAL_SEED_BLOCKS["test"]])
    reference.step([0])
    server = listening(process)
    server.reference = reference
    server.idle = GenericEnvClient(base_url=server.url).sync()
    server.idle.connect()
    server.idle.reset(index=0)  # then idle until test_an_idle_session_is_reclaimed
    server.idle_since = time.monotonic()
    yield server
    server.idle.close()
    stop_server(server)


def test_sokoban_episodes_equal_in_process_stepping(sokoban):
    """Three panel episodes of the test split: the expert's moves (a win) after a wall bump."""
    batch = sokoban.reference
    with GenericEnvClient(base_url=sokoban.url).sync() as client:
        for index in range(3):
            seed = EVAL_SEED_BLOCKS["test"] + index
            first = client.reset(index=index)
            assert first.observation["seed"] == seed and first.observation["index"] == index
            assert first.observation["text"] == batch.reset([seed])[0].text
            won = False
            for turn in range(12):
                action = 0 if turn == 0 else batch.expert_actions()[0]
                step = batch.step([action])
                served = client.step({"move": NAMES[action]})
                reward, done = float(step.rewards[0]), bool(step.dones[0])
                same_turn(served, step.observations[0], reward, done, step.infos[0])
                won = won or step.infos[0]["won"]
                if done:
                    break
            assert won, "the expert wins these rooms"
        state = client.state()
        assert state["split"] == "test" and state["index"] == 2 and state["done"]


def test_a_reset_by_seed_or_none_plays_the_panel(sokoban):
    with GenericEnvClient(base_url=sokoban.url).sync() as client:
        by_index = client.reset(index=5).observation
        assert client.reset().observation["index"] == 6  # the next one
        assert client.reset(seed=5).observation == by_index
        with pytest.raises(RuntimeError, match="split must be one of"):
            client.reset(split="dev")


def test_32_concurrent_clients_all_complete(sokoban):
    async def play(index: int) -> list[float]:
        async with GenericEnvClient(base_url=sokoban.url) as client:
            first = await client.reset(index=index)
            assert first.observation["index"] == index
            rewards = []
            for move in ("up", "left", "down", "right"):
                rewards.append((await client.step({"move": move})).reward)
            return rewards

    async def everyone() -> list[list[float]]:
        return await asyncio.gather(*(play(i % 8) for i in range(32)))

    results = asyncio.run(everyone())
    assert len(results) == 32 and all(len(r) == 4 for r in results)
    for i, rewards in enumerate(results):  # equal episodes, equal rewards
        assert rewards == results[i % 8]


def test_a_wrong_action_type_gets_an_error_reply_and_the_server_goes_on(sokoban):
    with GenericEnvClient(base_url=sokoban.url).sync() as client:
        client.reset(index=0)
        for wrong in ({"command": "go north"}, {"move": "jump"}, {}):
            with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
                client.step(wrong)
        assert client.step({"move": "up"}).observation["turn"] == 1  # the same session
    with GenericEnvClient(base_url=sokoban.url).sync() as client:  # and a new one
        assert client.reset(index=0).observation["turn"] == 0


def test_a_port_in_use_is_one_line(sokoban, capsys):
    port = sokoban.url.rsplit(":", 1)[1]
    with pytest.raises(SystemExit) as stop:
        cli.main(["serve", "sokoban", "--port", port])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"arlarena: port {port} on 127.0.0.1 is in use (another server?); "
        "choose another with --port"
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["sokobn"], "unknown environment 'sokobn' (did you mean 'sokoban'?"),
        (["sokoban", "--split", "dev"], "--split 'dev': sokoban declares train, validation"),
    ],
)
def test_an_unknown_environment_or_split_is_one_line(args, message, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["serve", *args])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_the_library_imports_without_openenv():
    """``arlarena``'s CLI and the environments load without touching openenv (the extra)."""
    code = "import sys, arlarena_jax.cli, envs.serving; print('openenv' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_an_idle_session_is_reclaimed(sokoban):
    """The session the fixture opened and left idle (last in this file: the wait overlaps
    the tests above)."""
    time.sleep(max(0.0, sokoban.idle_since + RECLAIMED_S - time.monotonic()))
    with pytest.raises(RuntimeError, match="reclaimed"):
        sokoban.idle.step({"move": "up"})
    with GenericEnvClient(base_url=sokoban.url).sync() as client:  # new sessions still open
        assert client.reset(index=0).observation["index"] == 0
