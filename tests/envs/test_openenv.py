"""Any OpenEnv environment through env.name openenv, against a third party's code: the echo
environment openenv's ``openenv init`` writes, served by uvicorn on localhost
(tests/helpers/openenv_echo.py). Sessions, rewards, the faults (unreachable at start, dying
mid-episode, rejected and late replies), 32 concurrent sessions in the host pool, and
``arlarena train`` for 2 RL steps with the tiny model."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

pytest.importorskip(
    "openenv.core.generic_client", reason="needs openenv==0.10.0 (the openenv extra)"
)

from arlarena_base.errors import ConfigError
from arlarena_jax.rollout.loop import is_failure
from arlarena_jax.train.config_io import load_config
from envs.openenv import launch
from envs.openenv.env import OpenEnvTextEnv
from envs.openenv.spec import OPENENV, check_data
from tests.helpers.openenv_echo import APP, settings, write_echo_env

CONFIG = "configs/openenv/grpo_tiny.yaml"


@pytest.fixture(scope="module")
def echo_dir(tmp_path_factory):
    """The echo environment's folder (``openenv init``)."""
    return str(write_echo_env(tmp_path_factory.mktemp("openenv")))


@pytest.fixture(scope="module")
def echo_url(echo_dir):
    """One echo server for the module."""
    process, url = launch.start(APP, echo_dir, timeout=60)
    yield url
    launch.stop(process)


@pytest.fixture
def own_server(echo_dir):
    """A server of the test's own, to stop, pause or kill."""
    process, url = launch.start(APP, echo_dir, timeout=60)
    yield process, url
    if process.poll() is None:
        os.kill(process.pid, signal.SIGCONT)
    launch.stop(process)


def env_config(url: str, *overrides: str):
    """The example config's ``env`` section on the server at ``url``."""
    return load_config(CONFIG, ["env.openenv.app=''", f"env.openenv.url={url}", *overrides]).env


def test_an_unreachable_server_is_one_line_at_start_and_nothing_starts(tmp_path):
    url = f"http://127.0.0.1:{launch.free_port()}"
    with pytest.raises(ConfigError) as error:
        check_data(env_config(url), True)
    assert "\n" not in str(error.value) and url in str(error.value)
    with pytest.raises(ConfigError, match=r"needs env\.openenv\.url"):  # neither url nor app
        check_data(env_config("''"), True)
    missing = load_config(CONFIG, [f"env.openenv.app_dir={tmp_path / 'none'}"]).env
    with pytest.raises(ConfigError, match=r"'env\.openenv\.app_dir': no folder"):
        check_data(missing, True)


def test_each_episode_is_one_session_with_the_servers_rewards(echo_url):
    batch = OPENENV.make_batch(
        env_config(
            "env.openenv.app=",
            f"env.openenv.url={echo_url}",
            "env.num_workers=0",
            "env.max_turns=2",
        ),
        2,
        "train",
    )
    observations = batch.reset([5, 5])
    assert [o.text for o in observations] == ["Echo Game environment ready!"] * 2
    step = batch.step(["hi", "a longer message"])
    assert [o.text for o in step.observations] == ["hi", "a longer message"]
    assert step.rewards.tolist() == pytest.approx([0.2, 1.0])
    assert not step.dones.any() and all(i["action_is_effective"] for i in step.infos)
    step = batch.step(["x", "y"])
    assert step.dones.all()  # max_turns: the sessions are closed
    assert all(env._session is None for env in batch._envs)
    batch.close()


def test_a_rejected_or_malformed_reply_is_an_invalid_step(echo_url):
    wrong_field = OpenEnvTextEnv(settings(echo_url, action_field="text"), echo_url, 3)
    wrong_field.reset(0)
    _, reward, done, info = wrong_field.step("hello")  # the server's schema refuses it
    assert (reward, done, info["action_is_effective"]) == (0.0, False, False)
    assert "VALIDATION_ERROR" in info["openenv_error"]
    wrong_field.close()
    no_field = OpenEnvTextEnv(settings(echo_url, observation_field="nope"), echo_url, 3)
    with pytest.raises(RuntimeError, match="no field 'nope'"):  # the pool reports it
        no_field.reset(0)
    as_json = OpenEnvTextEnv(settings(echo_url, observation_field=""), echo_url, 3)
    assert json.loads(as_json.reset(0).text)["message_length"] == 0
    as_json.close()


def test_a_late_reply_is_invalid_and_a_dying_server_fails_only_its_episode(own_server, echo_url):
    """A paused server: the step waits message_timeout_s (1 s), then is an invalid step ending the
    episode. A killed server: that episode fails (masked as the pool's failures are), another
    episode on a live server goes on. One server of the test's own for both (one start, ~6 s)."""
    process, url = own_server
    env = OpenEnvTextEnv(settings(url, message_timeout_s=1.0), url, 5)
    env.reset(0)
    os.kill(process.pid, signal.SIGSTOP)
    start = time.monotonic()
    _, reward, done, info = env.step("hello")
    assert time.monotonic() - start < 4.0
    assert (reward, done, info["action_is_effective"]) == (0.0, True, False)
    assert "late reply" in info["openenv_error"] and not is_failure(info)
    os.kill(process.pid, signal.SIGCONT)
    assert env.reset(1).text == "Echo Game environment ready!"  # a new session
    living = OpenEnvTextEnv(settings(echo_url), echo_url, 5)
    living.reset(0)
    process.kill()
    process.wait()
    _, reward, done, info = env.step("hello")
    assert (reward, done) == (0.0, True) and is_failure(info)
    assert is_failure(env.step("again")[3])  # until the next reset
    assert living.step("hello")[1] == pytest.approx(0.5)
    with pytest.raises(RuntimeError, match="openenv reset"):  # the pool's reset failure
        env.reset(2)
    living.close()


def test_32_concurrent_sessions_in_the_pool_all_complete(echo_url):
    env = env_config(
        "env.openenv.app=", f"env.openenv.url={echo_url}", "env.num_workers=2", "env.max_turns=3"
    )
    batch = OPENENV.make_batch(env, 32, "train")
    try:
        batch.reset(list(range(32)))
        for _ in range(3):
            step = batch.step([f"m{i:02d}" for i in range(32)])
            assert not any(is_failure(i) for i in step.infos)
            assert step.rewards.tolist() == pytest.approx([0.3] * 32)
        assert step.dones.all() and batch.failures == 0
    finally:
        batch.close()


def echo_tokenizer(folder):
    """A 512-id byte-level BPE learned from the format's prompts and tag-formatted replies (no
    ``tiny-openenv``: an external environment has no expert), saved as a folder."""
    from arlarena_jax.tokenization.vocab import train_tiny
    from envs.base import Observation
    from envs.openenv.prompts import openenv_prompt

    words = ["hello", "echo", "a longer message", "ready!"]
    texts = [
        openenv_prompt(Observation(w, (), "echo a message"), "echo a message", None)
        + f"<think>say {w}</think><action>{w}</action>"
        for w in words
    ]
    train_tiny(texts * 8, vocab_size=512).save_pretrained(str(folder))
    return folder


def test_arlarena_train_runs_2_rl_steps_on_the_third_party_server(echo_dir, tmp_path):
    """The run starts the echo app itself (env.openenv.app), on localhost."""
    from arlarena_jax.cli import main

    tokenizer = echo_tokenizer(tmp_path / "tokenizer")
    status = main(
        [
            "train",
            CONFIG,
            f"env.openenv.app_dir={echo_dir}",
            f"model.tokenizer={tokenizer}",
            f"trainer.run_dir={tmp_path / 'run'}",
            "trainer.total_steps=2",
            "env.train_batch_size=2",
            "env.group_size=2",
            "env.max_turns=2",
            "env.num_workers=0",  # the pool: the 32-session test (its spawn costs ~6 s a batch)
            "trainer.eval_episodes=2",
            "env.eval_batch_size=2",
            "trainer.mini_batch_size=8",
            "trainer.micro_batch_size=4",
            "sampler.max_concurrent_decodes=4",
            "sampler.max_new_tokens=8",
            "sampler.max_prefill_length=512",
            "trainer.save_every=2",
        ]
    )
    assert status == 0
    assert (tmp_path / "run" / "checkpoints" / "2").exists()
