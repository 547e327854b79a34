"""``arlarena serve``: our environments served through OpenEnv and driven by OpenEnv's own client
(``openenv.core.generic_client.GenericEnvClient``), episode for episode, reward for reward,
against the same environment stepped in this process (docs/environments.md "OpenEnv").

Each server is the real command in a child process (``python -m arlarena_jax.cli serve``, port 0,
its port read off its start line). Needs the ``openenv`` extra; skips with the reason otherwise.
TextWorld also needs ``textworld`` (the alfworld extra): two test games are generated once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("openenv", reason="serving tests need openenv (the openenv extra)")

from openenv.core.generic_client import GenericEnvClient

from arlarena_jax import cli
from arlarena_jax.train.build import EVAL_SEED_BLOCKS
from arlarena_jax.train.config_io import apply_overrides, config_from_dict
from envs import registry
from envs.serving.models import MOVES

ROOT = Path(__file__).resolve().parents[2]
NAMES = {action: move for move, action in MOVES.items()}
START = re.compile(r"serving \w+ \(split \w+\) at http://([\d.]+):(\d+)")
IDLE_S = 2.0  # the Sokoban server's idle timeout (its reaper looks every 5 s)


@dataclasses.dataclass
class Server:
    process: subprocess.Popen
    url: str


def start_server(*args: str, wait_s: float = 120.0) -> Server:
    """``arlarena serve ARGS --port 0`` in a child process, once it listens."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "arlarena_jax.cli", "serve", *args, "--port", "0"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + wait_s
    lines = []
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line and process.poll() is not None:
            break
        lines.append(line)
        found = START.search(line)
        if found:
            return Server(process, f"http://{found.group(1)}:{found.group(2)}")
    process.kill()
    raise AssertionError(f"the server did not start: {''.join(lines)}")


def stop_server(server: Server, timeout: float = 20.0) -> tuple[int, str]:
    """SIGTERM, then its exit status and the rest of its stderr."""
    server.process.send_signal(signal.SIGTERM)
    try:
        _, rest = server.process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        server.process.kill()
        raise
    return server.process.returncode, rest


def env_section(name: str, *sets: str):
    """The trainer's env section the server builds for ``name`` with ``--set`` overrides."""
    config = apply_overrides(config_from_dict({"env": {"name": name}}), list(sets))
    return config.env


def local_batch(name: str, split: str, *sets: str):
    """The in-process reference: the registry's one-environment batch, no pool."""
    env = dataclasses.replace(env_section(name, *sets), num_workers=0)
    return registry.get(name).make_batch(env, 1, split)


def same_turn(served: dict, observation, reward, done, info) -> None:
    """One served step equals the in-process one: text, admissible, reward, done, info."""
    got = served.observation
    assert got["text"] == observation.text
    assert got["admissible"] == list(observation.admissible)
    assert got["task"] == observation.task
    assert served.reward == reward and served.done == done
    assert got["info"] == info and got["won"] == info["won"]


@pytest.fixture(scope="module")
def sokoban():
    server = start_server(
        "sokoban", "--split", "test", "--idle-timeout", str(IDLE_S), "--max-sessions", "40"
    )
    yield server
    with contextlib.suppress(Exception):
        stop_server(server)


def test_sokoban_episodes_equal_in_process_stepping(sokoban):
    """Three panel episodes of the test split: the expert's moves (a win) after a wall bump."""
    batch = local_batch("sokoban", "test")
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


def test_an_idle_session_is_reclaimed(sokoban):
    with GenericEnvClient(base_url=sokoban.url).sync() as client:
        client.reset(index=0)
        time.sleep(IDLE_S + 5.5)  # the timeout, then the reaper's next look (every 5 s)
        with pytest.raises(RuntimeError, match="reclaimed"):
            client.step({"move": "up"})


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


# --- TextWorld: a Python environment, one pool worker per session ---------------------------

TEXTWORLD_SETS = ("env.textworld.test_games=2", "env.textworld.validation_games=1")


@pytest.fixture(scope="module")
def textworld_root(tmp_path_factory):
    pytest.importorskip("textworld", reason="TextWorld needs textworld (the alfworld extra)")
    root = tmp_path_factory.mktemp("textworld")
    sets = (f"env.data_path={root}", *TEXTWORLD_SETS, "env.textworld.build_workers=0")
    registry.get("textworld").check_data(env_section("textworld", *sets), training=False)
    return sets


def textworld_server(sets) -> Server:
    return start_server("textworld", "--split", "test", *(f"--set={s}" for s in sets))


def test_textworld_episodes_equal_in_process_stepping_and_sigterm_stops_cleanly(
    textworld_root,
):
    """Both test games through the pool: a refused command, then the walkthrough (a win);
    then SIGTERM with a session open stops the server and its pool workers."""
    from envs.textworld.spec import split_games

    env = env_section("textworld", *textworld_root)
    _, walkthroughs = split_games(env, "test")
    batch = local_batch("textworld", "test", *textworld_root)
    server = textworld_server(textworld_root)
    try:
        client = GenericEnvClient(base_url=server.url).sync()
        client.connect()
        for index in range(2):
            seed = EVAL_SEED_BLOCKS["test"] + index
            first = client.reset(index=index)
            expected = batch.reset([seed])[0]
            assert first.observation["text"] == expected.text
            assert first.observation["admissible"] == list(expected.admissible)
            for command in ("dance wildly", *walkthroughs[seed % len(walkthroughs)]):
                step = batch.step([command])
                served = client.step({"command": command})
                reward, done = float(step.rewards[0]), bool(step.dones[0])
                same_turn(served, step.observations[0], reward, done, step.infos[0])
            assert served.observation["won"] and served.done
        workers = children(server.process.pid)
        assert workers, "each session's environment runs in a pool worker"
        status, err = stop_server(server)  # the session is still open
        assert status == 0 and "textworld server stopped (SIGTERM)" in err
        assert not outliving(workers, within_s=10.0)  # the pool worker, its resource tracker
    finally:
        batch.close()
        if server.process.poll() is None:
            server.process.kill()


def outliving(pids: list[int], within_s: float) -> list[int]:
    """Those of ``pids`` still running (not zombies) after up to ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while True:
        alive = []
        for pid in pids:
            with contextlib.suppress(OSError, IndexError):
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found
