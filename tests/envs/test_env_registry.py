"""The environment registry: built-in entries, lookups and their one-line errors, a toy
environment registered from outside, and the layering rule that environments import nothing of
``arlarena_jax``.

The per-environment tests run over the registered environments (:func:`envs.registry.names`),
so adding an environment (one folder plus one line in ``envs/builtin.py``) adds their cases
without a line here."""

from __future__ import annotations

import ast
import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from arlarena_jax.errors import ConfigError
from arlarena_jax.rollout import collect
from arlarena_jax.train.config import Config, EnvConfig
from arlarena_jax.train.config_checks import validate
from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.demos import demonstrations
from arlarena_jax.train.loop import train
from envs import registry
from envs.base import Observation
from envs.text import ScriptedPolicy
from tests.helpers.toyenv.prompts import GUESS_FORMAT, guess_prompt
from tests.helpers.toyenv.spec import GUESS

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("arlarena_jax",)  # environments stand alone: shared pieces are in arlarena_base
BUILTIN = registry.names()  # the built-in environments, as registered (envs/builtin.py)


def _imported_modules(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def _forbidden_imports(files: list[Path]) -> list[str]:
    return [
        f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {name}"
        for path in files
        for name in _imported_modules(ast.parse(path.read_text(), str(path)))
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    ]


def test_environments_import_nothing_of_arlarena_jax():
    """Every import under ``envs/``, at module level or inside a function, of any name."""
    files = sorted((ROOT / "envs").rglob("*.py"))
    assert ROOT / "envs" / "alfworld" / "expert.py" in files
    assert _forbidden_imports(files) == []


def test_the_layering_check_sees_lazy_and_from_imports(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import arlarena_base.errors\n"
        "from arlarena_jax.errors import ConfigError\n\n"
        "def f():\n    import arlarena_jax\n    from arlarena_jax import train\n"
    )
    found = [line.split(": ", 1)[1] for line in _forbidden_imports([bad])]
    assert found == [
        "arlarena_jax.errors",
        "arlarena_jax.errors.ConfigError",
        "arlarena_jax",
        "arlarena_jax",
        "arlarena_jax.train",
    ]


def test_the_library_raises_the_shared_error_classes():
    """``arlarena_jax.errors`` re-exports ``arlarena_base.errors``: one class each, so the
    library's ``except ConfigError`` catches an environment's."""
    import arlarena_base.errors
    import arlarena_jax.errors

    assert arlarena_jax.errors.ConfigError is arlarena_base.errors.ConfigError
    assert arlarena_jax.errors.InvalidField is arlarena_base.errors.InvalidField
    with pytest.raises(ConfigError, match=r"'env\.prompt'"):
        registry.get("alfworld").task_format(SimpleNamespace(prompt="compact"))


def test_builtin_environments():
    """Every environment folder with a spec is registered, and nothing else; then what each of
    the built-in ones declares."""
    folders = sorted(p.parent.name for p in (ROOT / "envs").glob("*/spec.py"))
    assert tuple(folders) == BUILTIN
    assert {"alfworld", "math", "sokoban", "textworld", "webshop"} <= set(BUILTIN)
    for name in ("alfworld", "math", "sokoban", "textworld", "webshop"):
        assert registry.get(name).settings is not None and registry.get(name).paper, name
    sokoban, alfworld = registry.get("sokoban"), registry.get("alfworld")
    math_ = registry.get("math")
    assert math_.prompts == ("paper", "compact") and math_.rows == ("trajectory",)
    assert math_.eval_episodes is not None and math_.method_settings == {}
    assert all(registry.get(n).rows == ("turn",) for n in ("sokoban", "alfworld", "webshop"))
    webshop = registry.get("webshop")
    assert webshop.prompts == ("paper",) and webshop.commands is not None
    assert webshop.method_settings["sampo"] == {"gigpo_mode": "mean_norm", "cold_start_steps": 5}
    assert sokoban.prompts == ("paper", "compact") and alfworld.prompts == ("paper",)
    assert (sokoban.tokenizer_episodes, alfworld.tokenizer_episodes) == (256, 32)
    assert sokoban.method_settings == {} and alfworld.method_settings == {}
    assert alfworld.commands is not None and sokoban.commands is None
    textworld = registry.get("textworld")
    assert textworld.prompts == ("paper",) and textworld.rows == ("turn",)
    assert textworld.commands is not None and textworld.expert is not None
    # Sokoban's moves by action id (its batch: 0 still, 1 up, 2 down, 3 left, 4 right); the text
    # environments take commands
    assert sokoban.moves == ("still", "up", "down", "left", "right")
    assert all(registry.get(n).moves == () for n in ("alfworld", "math", "textworld", "webshop"))


def test_declared_moves_must_be_distinct_names():
    for moves in (("left", "left"), ("go north",)):
        with pytest.raises(ValueError, match="environment moves must be distinct names"):
            dataclasses.replace(GUESS, moves=moves)


@pytest.mark.parametrize("name", BUILTIN)
def test_env_config_has_each_settings_section(name):
    spec = registry.get(name)
    if spec.settings is None:
        assert not hasattr(EnvConfig(), name)
    else:
        assert isinstance(getattr(EnvConfig(), name), spec.settings)


@pytest.mark.parametrize("name", BUILTIN)
def test_paper_settings_are_the_paper_scale_config(name):
    spec = registry.get(name)
    if not spec.paper:
        pytest.skip(f"{name} declares no paper-scale settings")
    config = yaml.safe_load((ROOT / "configs" / name / "base_qwen3_4b.yaml").read_text())
    assert {k: config["env"][k] for k in spec.paper} == dict(spec.paper)


def _having_compact() -> str:
    having = [n for n in BUILTIN if "compact" in registry.get(n).prompts]
    assert {"math", "sokoban"} <= set(having) and "alfworld" not in having
    return ", ".join(having)


def test_unknown_names_and_prompts_are_one_line_errors():
    with pytest.raises(ValueError, match=r"unknown environment 'sokobn' \(did you mean 'sokoban'"):
        registry.get("sokobn")
    with pytest.raises(ValueError) as info:
        registry.get("webshp")
    assert str(info.value) == (
        f"unknown environment 'webshp' (did you mean 'webshop'? registered: {', '.join(BUILTIN)})"
    )
    env = SimpleNamespace(name="alfworld", prompt="compact")
    with pytest.raises(ConfigError) as info:
        registry.get("alfworld").task_format(env)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        f"config key 'env.prompt': 'compact' exists only for {_having_compact()}, not 'alfworld'"
    )
    with pytest.raises(
        ValueError, match="split must be one of train, validation, test, got 'eval'"
    ):
        registry.check_split("eval")


def test_config_validation_reads_the_registry():
    def env(**kw):
        return dataclasses.replace(Config(), env=dataclasses.replace(Config().env, **kw))

    with pytest.raises(ConfigError, match=r"'env\.name': unknown environment 'chess' \(regis"):
        validate(env(name="chess"))
    with pytest.raises(
        ConfigError, match=rf"'env\.prompt': 'compact' exists only for {_having_compact()}, not"
    ):
        validate(env(name="alfworld", prompt="compact"))
    with pytest.raises(ConfigError, match=r"'env\.prompt': 'tiny' exists for no environment"):
        validate(env(name="sokoban", prompt="tiny"))


# ---- a toy environment in one folder (tests/helpers/toyenv/), registered with one line -------


@pytest.fixture
def toy():
    assert "guess" not in registry.names()
    registry.register(GUESS)  # the one registration line
    yield GUESS
    registry.unregister("guess")
    assert "guess" not in registry.names()


def test_a_toy_environment_registers_and_plays(toy):
    assert "guess" in registry.names() and registry.get("guess") is toy
    with pytest.raises(ValueError, match="'guess' is already registered"):
        registry.register(dataclasses.replace(toy))
    env = SimpleNamespace(name="guess", prompt="paper", max_turns=2, history_length=2)
    fmt = toy.task_format(env)
    assert fmt is GUESS_FORMAT
    envs = toy.make_batch(env, 4, "train")
    wrong = ScriptedPolicy(lambda prompts: ["<think></think><action>x</action>"] * len(prompts))
    rollout = collect(envs, fmt, wrong, group_seeds=[3, 7], group_size=2, max_turns=env.max_turns)
    assert [t.won for t in rollout.trajectories] == [False] * 4
    assert len(rollout.rows) == 8  # two wrong tries each
    demos = demonstrations(env, [3, 13, 7])  # 3 and 13 show the same card: played once
    assert [d.reply for d in demos] == [f"<think></think><action>{n}</action>" for n in (3, 3, 7)]
    assert demos[0].prompt == guess_prompt(Observation("The card says 3."), "", None)


def test_a_toy_environment_trains_one_step(toy, tmp_path):
    """The whole trainer on the toy: its own tiny tokenizer from the expert's turns, cloning on
    its demonstrations, one SAMPO step, evaluation, a checkpoint. Nothing outside
    tests/helpers/toyenv/ names it, so this is what adding an environment costs."""
    config = load_config(
        ROOT / "configs" / "sokoban" / "sampo_tiny.yaml",
        [
            "env.name=guess",
            "env.device_rollout=false",  # the main job plays Sokoban on device
            "env.prompt=paper",
            "env.max_turns=2",
            "env.train_batch_size=2",
            "env.group_size=2",
            "env.eval_batch_size=4",
            "model.tokenizer=tiny-guess",
            "sft.num_episodes=8",
            "sft.steps=2",
            "sampler.max_concurrent_decodes=4",
            "trainer.total_steps=1",
            "trainer.eval_episodes=4",
            "trainer.mini_batch_size=8",
            "trainer.micro_batch_size=4",
            "trainer.export_hf=false",
            f"trainer.run_dir={tmp_path}",
        ],
    )
    summary = train(config, console=False)
    assert summary.steps == 1 and len(summary.history) == 1
    assert summary.success_after_cloning is not None and summary.success_after_rl is not None
    step = summary.history[0]
    for key in ("actor/pg_loss", "actor/grad_norm", "episode/success_rate", "batch/gen_tries"):
        assert math.isfinite(step[key]), key
    assert (tmp_path / "checkpoints" / "1").is_dir()
    assert load_config(tmp_path / "config.yaml").env.name == "guess"
