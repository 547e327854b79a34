"""One resolution (issue 64): a config is resolved once into a frozen Resolved (the pinned config,
the environment's spec, the method's settings, the model's architecture), its cross-field rules
are a pure function of it, and the stages after loading read it without resolving again."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from arlarena_jax.errors import ConfigError
from arlarena_jax.models.config import PRESETS as MODEL_PRESETS
from arlarena_jax.objectives.presets import PRESETS
from arlarena_jax.train import build, config_checks, resolution
from arlarena_jax.train.config import Config
from arlarena_jax.train.config_io import apply_overrides, load_config, load_run
from arlarena_jax.train.resolution import Resolved, resolve_run
from envs import registry

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SOKOBAN = CONFIGS / "sokoban" / "sampo_tiny.yaml"
WEBSHOP = CONFIGS / "webshop" / "sampo_tiny.yaml"


@pytest.fixture
def counted(monkeypatch):
    """How often the method's settings are resolved (the resolution's real work)."""
    calls = []
    original = resolution._method_settings

    def counting(config, spec):
        calls.append(config.algorithm.method)
        return original(config, spec)

    monkeypatch.setattr(resolution, "_method_settings", counting)
    return calls


def test_a_resolution_is_returned_as_it_is():
    run = resolve_run(load_config(SOKOBAN))
    assert resolve_run(run) is run
    assert resolution.resolve(run) is run.config
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.config = Config()


def test_the_resolution_holds_the_spec_the_settings_and_the_pinned_config():
    config = load_config(SOKOBAN, ["trainer.run_dir=null", "trainer.rl_seed=0", "trainer.seed=0"])
    run = resolve_run(config)
    assert run.env is registry.get("sokoban")
    assert run.config.trainer.run_dir == "runs/sokoban/sampo_seed0"  # derived when null
    assert run.config.trainer.rl_seed is None  # equal to the seed: the same streams
    for knob in PRESETS["sampo"].knobs:  # every setting the method reads is pinned
        assert getattr(run.config.algorithm, knob) == getattr(run.method, knob)


def test_method_settings_are_preset_then_environment_recipe_then_config():
    """WebShop's release scripts run SAMPO with a cold start of 5 where the preset has 15
    (envs/webshop/spec.py); a key set in the config wins over both."""
    assert PRESETS["sampo"].defaults.get("cold_start_steps", 15) == 15
    unset = load_config(WEBSHOP, ["algorithm.cold_start_steps=null"])  # the tiny config sets 1
    assert resolve_run(unset).method.cold_start_steps == 5
    set_ = load_config(WEBSHOP, ["algorithm.cold_start_steps=7"])
    assert resolve_run(set_).method.cold_start_steps == 7


def test_asynchronous_runs_default_to_token_tis_in_the_resolution():
    sync = resolve_run(load_config(SOKOBAN))
    stale = resolve_run(apply_overrides(load_config(SOKOBAN), ["trainer.max_staleness=2"]))
    assert sync.method.rollout_is is None and stale.method.rollout_is == "token"


def test_the_architecture_is_the_preset_of_model_name():
    run = resolve_run(load_config(SOKOBAN))
    assert run.architecture == MODEL_PRESETS[run.config.model.name]


def test_the_checks_look_nothing_up(monkeypatch):
    """``check`` is a pure function of the resolution: with the registry made to fail, it
    still checks (and still refuses a bad key)."""
    run = resolve_run(load_config(SOKOBAN))

    def no_lookup(*_):
        raise AssertionError("the registry was consulted")

    monkeypatch.setattr(registry, "get", no_lookup)
    monkeypatch.setattr(resolution, "resolve_run", no_lookup)
    assert config_checks.check(run) is run
    bad = dataclasses.replace(
        run,
        config=dataclasses.replace(
            run.config,
            trainer=dataclasses.replace(
                run.config.trainer, mini_batch_size=100, micro_batch_size=32
            ),
        ),
    )
    with pytest.raises(ConfigError, match=r"trainer\.mini_batch_size"):
        config_checks.check(bad)


def test_loading_resolves_once_and_later_stages_resolve_nothing(counted):
    run = load_run(SOKOBAN)
    assert isinstance(run, Resolved) and counted == ["sampo"]
    build.build_objective(run)
    build.check_data(run, training=True)
    config_checks.ignored_env_keys(run)
    assert build.task_format(run) is not None and build.row_layout(run) is None
    assert counted == ["sampo"]


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["env.name=chess"], "env.name"),
        (["algorithm.method=nonesuch"], "algorithm.method"),
        (["algorithm.method=grpo", "algorithm.gamma=0.9"], "algorithm.gamma"),  # not read
        (["algorithm.clip_high=-1"], "algorithm.clip_high"),
    ],
)
def test_what_cannot_be_resolved_is_one_line_naming_the_key(overrides, key):
    with pytest.raises(ConfigError, match=re.escape(f"config key '{key}'")) as caught:
        load_run(SOKOBAN, overrides)
    assert "\n" not in str(caught.value)
