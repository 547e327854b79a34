"""The typed trainer config: YAML files, dotted overrides, one-line errors, dump round trip."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arlarena_jax.errors import ConfigError
from arlarena_jax.objectives.presets import PRESETS
from arlarena_jax.train.config import Config
from arlarena_jax.train.config_checks import check_numbers, validate
from arlarena_jax.train.config_io import (
    apply_overrides,
    config_from_dict,
    config_keys,
    config_to_dict,
    dump_config,
    dumps_config,
    load_config,
)
from arlarena_jax.train.resolution import resolve

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
YAMLS = sorted(p for p in CONFIGS.rglob("*.yaml") if "sweeps" not in p.parts)  # sweeps: test_sweep
TINY = CONFIGS / "sokoban" / "base_tiny.yaml"


def _raises(fn, *args, match: str) -> str:
    with pytest.raises(ConfigError) as info:
        fn(*args)
    message = str(info.value)
    assert "\n" not in message
    assert match in message, message
    return message


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def tiny() -> Config:
    return load_config(TINY)


def test_defaults_validate():
    assert validate(Config()) == Config()
    assert "optim.lr" in config_keys() and "sampler.eval.top_k" in config_keys()


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_yaml_loads_and_round_trips(path, tmp_path):
    config = load_config(path)
    assert validate(config) is config
    assert load_config(dump_config(config, tmp_path / "out" / "config.yaml")) == config
    assert config_from_dict(config_to_dict(config)) == config


@pytest.mark.parametrize("method", sorted(PRESETS))
def test_every_method_preset_runs_from_the_tiny_base(tiny, method):
    """One base file plus ``algorithm.method``; the run directory follows env, method and seed."""
    config = apply_overrides(tiny, [f"algorithm.method={method}"])
    assert config.algorithm.method == method
    assert (config.env.name, config.env.prompt, config.model.name) == ("sokoban", "compact", "tiny")
    assert config.sft.enabled and config.model.path is None
    assert config.trainer.run_dir is None
    resolved = resolve(config)
    assert resolved.trainer.run_dir == f"runs/sokoban/{method}_seed0"
    assert resolved.algorithm.cold_start_steps == 3  # the base file's, read by every method
    assert resolve(apply_overrides(config, ["trainer.seed=2"])).trainer.run_dir.endswith("_seed2")


def test_the_main_job_file_is_the_base_plus_its_method_on_device(tiny):
    """The main job is the base, SAMPO, the on-device rollout and the RL curve's evaluations."""
    assert load_config(CONFIGS / "sokoban" / "sampo_tiny.yaml") == apply_overrides(
        tiny, ["algorithm.method=sampo", "env.device_rollout=true", "trainer.eval_every=7"]
    )


@pytest.mark.parametrize(
    ("env", "turns", "prompt", "mini", "micro", "steps"),
    [
        ("alfworld", 50, 2048, 256, 32, 200),
        ("sokoban", 15, 2048, 64, 8, 200),
    ],
)
def test_paper_scale_configs(env, turns, prompt, mini, micro, steps):
    c = load_config(CONFIGS / env / "sampo_qwen3_4b.yaml")
    assert (c.algorithm.method, c.env.name) == ("sampo", env)
    assert c.env.group_size == 8 and c.env.max_turns == turns
    assert (c.sampler.max_prefill_length, c.sampler.max_new_tokens) == (prompt, 512)
    assert (c.trainer.mini_batch_size, c.trainer.micro_batch_size) == (mini, micro)
    assert c.trainer.total_steps == steps and c.optim.lr == 1e-6 and c.model.tokenizer is None
    assert c.sampler.eval.temperature == 0.6


def test_overrides_nested_lists_bools_and_null(tiny):
    c = apply_overrides(
        tiny,
        [
            "trainer.total_steps=10",
            "optim.lr=1e-5",
            'sampler.stop_strings=["</action>", "\\n\\n"]',
            "sampler.eval.top_k=5",
            "trainer.export_hf=false",
            "optim.grad_clip=null",
            "sampler.enable_thinking=false",
            "algorithm.max_num_gen_batches=4",
            "model.tokenizer=None",
            "model.path=/models/qwen",
            "sft.optim.betas=[0.8, 0.9]",
        ],
    )
    assert c.trainer.total_steps == 10 and c.optim.lr == 1e-5
    assert c.sampler.stop_strings == ("</action>", "\n\n")
    assert c.sampler.eval.top_k == 5 and c.sampler.eval.temperature == 1.0  # kept
    assert c.trainer.export_hf is False and c.optim.grad_clip is None
    assert c.sampler.enable_thinking is False and c.algorithm.max_num_gen_batches == 4
    assert (c.model.tokenizer, c.model.path) == (None, "/models/qwen")
    assert c.sft.optim.betas == (0.8, 0.9) and isinstance(c.sft.optim.betas[0], float)
    assert apply_overrides(tiny, ["optim.lr=1"]).optim.lr == 1.0  # int taken for a float
    assert apply_overrides(tiny, ["trainer.run_dir=2024"]).trainer.run_dir == "2024"
    assert apply_overrides(tiny, ["env.data_path="]).env.data_path is None
    c = apply_overrides(tiny, ["sampler.train={temperature: 0.7}", "env.sokoban.dim_room=5"])
    assert c.sampler.train == dataclasses.replace(tiny.sampler.train, temperature=0.7)
    assert c.env.sokoban.dim_room == 5
    assert apply_overrides(tiny, []) == tiny


def test_load_config_applies_overrides_before_validation(tmp_path):
    path = _write(tmp_path / "c.yaml", "trainer: {mini_batch_size: 100, micro_batch_size: 30}\n")
    _raises(load_config, path, match="100 is not a multiple of trainer.micro_batch_size 30")
    c = load_config(path, ["trainer.micro_batch_size=20", "trainer.total_steps=3"])
    assert (c.trainer.micro_batch_size, c.trainer.total_steps) == (20, 3)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "trainer.totl_steps=3",
            "unknown config key 'trainer.totl_steps' (did you mean 'trainer.total_steps'?)",
        ),
        ("trainer.lr=1", "unknown config key 'trainer.lr' (did you mean 'optim.lr'?)"),
        ("optimm.lr=1", "unknown config key 'optimm' (did you mean 'optim'?)"),
        ("sampler.train={temperature: 1, xyz: 2}", "unknown config key 'sampler.train.xyz'"),
        ("optim.lr.x=1", "config key 'optim.lr.x': 'optim.lr' is not a section"),
        ("optim.lr", "config override 'optim.lr': expected key=value"),
        ("optim.lr=abc", "config key 'optim.lr': expected float, got 'abc' (str)"),
        ("optim.lr='1e-5'", "config key 'optim.lr': expected float, got '1e-5' (str)"),
        ("trainer.total_steps=true", "'trainer.total_steps': expected int, got True (bool)"),
        ("trainer.total_steps=1.5", "'trainer.total_steps': expected int, got 1.5 (float)"),
        ("trainer.export_hf=1", "'trainer.export_hf': expected bool, got 1 (int)"),
        (
            "env.name=chess",
            "'env.name': unknown environment 'chess' "
            "(registered: alfworld, math, openenv, sokoban, textworld, webshop)",
        ),
        ("optim.schedule=linear", "'optim.schedule': expected one of 'constant', 'cosine'"),
        ("sampler.stop_strings=[1]", "'sampler.stop_strings[0]': expected str, got 1 (int)"),
        ("sampler.stop_strings=x", "'sampler.stop_strings': expected a list of str"),
        ("optim.betas=[0.9]", "'optim.betas': expected a list of 2 (float, float)"),
        ("optim.grad_clip=abc", "'optim.grad_clip': expected float or null, got 'abc'"),
        ("trainer.total_steps=null", "'trainer.total_steps': expected int, got null"),
        ("optim=3", "config key 'optim': expected a mapping of OptimConfig keys, got 3 (int)"),
        ("optim.lr=[1", "config key 'optim.lr': cannot parse '[1' as YAML"),
    ],
)
def test_unknown_keys_and_wrong_types(tiny, override, message):
    _raises(apply_overrides, tiny, [override], match=message)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("trainer.mini_batch_size=100", "'trainer.mini_batch_size': 100 is not a multiple of"),
        ("algorithm.method=sampoo", "'algorithm.method': unknown method preset 'sampoo' (did you"),
        ("model.name=qwen4", "'model.name': unknown model preset 'qwen4'"),
        ("env.group_size=0", "'env.group_size': must be >= 1, got 0"),
        ("mesh.tensor=0", "'mesh.tensor': must be >= 1, got 0"),
        ("mesh.fsdp=3", "'trainer.micro_batch_size': 32 rows do not split over mesh"),
        ("optim.lr=0", "'optim.lr': must be > 0"),
        (
            "sampler.train.temperature=.nan",
            "'sampler.train.temperature': must be finite and >= 0, got nan",
        ),
        ("trainer.total_steps=-1", "'trainer.total_steps': must be >= 0, got -1"),
        ("trainer.eval_episodes=0", "'trainer.eval_episodes': must be >= 1, got 0"),
        ("sft.save_every_s=-1", "'sft.save_every_s': must be >= 0, got -1.0"),
        ("optim.betas=[0.9, 1.0]", "'optim.betas': each must lie in [0, 1)"),
        ("sft.optim.warmup_ratio=1", "'sft.optim.warmup_ratio': must lie in [0, 1)"),
        ("sampler.eval.top_p=0", "'sampler.eval.top_p': must lie in (0, 1]"),
        ("sampler.stop_strings=['']", "'sampler.stop_strings': stop strings must be non-empty"),
        ("model.tokenizer=null", "'model.tokenizer': null needs model.path"),
        ("model.remat=everything", "'model.remat': unknown jax.checkpoint_policies name"),
        ("algorithm.cold_start_steps=-1", "'algorithm.cold_start_steps': must be >= 0"),
        ("monitor.grad_norm_spike_factor=1", "'monitor.grad_norm_spike_factor': must be > 1"),
        ("monitor.entropy_collapse_fraction=1", "'monitor.entropy_collapse_fraction'"),
    ],
)
def test_cross_field_errors(tiny, override, message):
    _raises(apply_overrides, tiny, [override], match=message)


def test_compact_prompt_is_sokoban_only(tiny):
    _raises(apply_overrides, tiny, ["env.name=alfworld"], match="'env.prompt': 'compact'")
    assert apply_overrides(tiny, ["env.name=alfworld", "env.prompt=paper"]).env.name == "alfworld"


def test_yaml_files_are_checked_strictly(tmp_path):
    ok = _write(tmp_path / "ok.yaml", "optim:\n  lr: 1e-6\n  betas: [0.9, 0.95]\n")
    assert load_config(ok).optim.lr == 1e-6 and load_config(ok).optim.betas == (0.9, 0.95)
    _raises(load_config, _write(tmp_path / "empty.yaml", "# nothing\n"), match="empty (no sections")
    assert load_config(_write(tmp_path / "braces.yaml", "{}\n")) == Config()  # explicit defaults
    bad = _write(tmp_path / "typo.yaml", "trainer:\n  totl_steps: 3\n")
    _raises(load_config, bad, match="(did you mean 'trainer.total_steps'?)")
    quoted = _write(tmp_path / "quoted.yaml", "optim:\n  lr: '1e-6'\n")
    _raises(load_config, quoted, match="'optim.lr': expected float, got '1e-6' (str)")
    steps = _write(tmp_path / "steps.yaml", "trainer:\n  total_steps: '10'\n")
    _raises(load_config, steps, match="'trainer.total_steps': expected int, got '10' (str)")
    _raises(load_config, _write(tmp_path / "list.yaml", "- 1\n"), match="expected a mapping")
    broken = _write(tmp_path / "broken.yaml", "optim:\n  lr: [1\n")
    _raises(load_config, broken, match="invalid YAML at line")
    _raises(load_config, tmp_path / "missing.yaml", match="cannot read")


def test_base_includes(tmp_path):
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "a.yaml", "trainer: {total_steps: 7, seed: 3}\noptim: {lr: 2.0e-6}\n")
    _write(tmp_path / "b.yaml", "base: a.yaml\ntrainer: {seed: 4}\n")
    child = _write(tmp_path / "sub" / "c.yaml", "base: [../b.yaml]\noptim: {weight_decay: 0.0}\n")
    c = load_config(child)
    assert (c.trainer.total_steps, c.trainer.seed) == (7, 4)
    assert (c.optim.lr, c.optim.weight_decay) == (2e-6, 0.0)
    _write(tmp_path / "x.yaml", "base: y.yaml\n")
    _write(tmp_path / "y.yaml", "base: x.yaml\n")
    _raises(load_config, tmp_path / "x.yaml", match="include cycle")
    _raises(load_config, _write(tmp_path / "z.yaml", "base: 3\n"), match="config key 'base'")


def test_dump_is_plain_yaml(tiny, tmp_path):
    text = dumps_config(tiny)
    assert "stop_strings: [</action>]" in text and "betas: [0.9, 0.999]" in text
    assert load_config(_write(tmp_path / "c.yaml", text)) == tiny


# JSON-escaped (\uXXXX) text of the basic plane: the override syntax is YAML, and JSON is YAML
_CHARS = st.characters(
    max_codepoint=0xFFFF, blacklist_categories=("Cs",), blacklist_characters="\ufffe\uffff"
)
_TEXT = st.text(_CHARS, min_size=1, max_size=12)
_VALUES = {
    "trainer.total_steps": st.integers(1, 10**6),
    "trainer.seed": st.integers(0, 2**31),
    "optim.lr": st.floats(1e-12, 10.0),
    "optim.grad_clip": st.none() | st.floats(1e-3, 1e3),
    "optim.betas": st.lists(st.floats(0.0, 0.999), min_size=2, max_size=2),
    "sampler.stop_strings": st.lists(_TEXT, max_size=3),
    "sampler.enable_thinking": st.none() | st.booleans(),
    "sampler.train.top_k": st.integers(0, 100),
    "trainer.run_dir": _TEXT,
    "model.remat": st.none() | st.sampled_from(["nothing_saveable", "dots_saveable"]),
    "algorithm.method": st.sampled_from(sorted(PRESETS)),
    "algorithm.cold_start_steps": st.none() | st.integers(0, 1000),
    "algorithm.clip_high": st.none() | st.floats(0.0, 10.0),
    "algorithm.use_kl_loss": st.none() | st.booleans(),
    "env.sokoban.search_depth": st.integers(1, 100),
}


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from(sorted(_VALUES)), unique=True).flatmap(
        lambda keys: st.tuples(*[st.tuples(st.just(k), _VALUES[k]) for k in keys])
    )
)
def test_random_valid_overrides_round_trip(pairs):
    base = load_config(TINY)
    config = apply_overrides(base, [f"{key}={json.dumps(value)}" for key, value in pairs])
    for key, value in pairs:
        got = config
        for part in key.split("."):
            got = getattr(got, part)
        assert got == (tuple(value) if isinstance(value, list) else value)
    assert config_from_dict(config_to_dict(config)) == config
    assert apply_overrides(config, []) == config
    with tempfile.TemporaryDirectory() as tmp:
        assert load_config(dump_config(config, Path(tmp) / "config.yaml")) == config


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["algorithm.gamma=0.9"],
            "'algorithm.gamma': method 'grpo' does not read it (its settings:",
        ),
        (["algorithm.method=sampo", "algorithm.sapo_tau_pos=2"], "'algorithm.sapo_tau_pos'"),
        (["algorithm.clip_ratio_c=1"], "'algorithm.clip_ratio_c': must be > 1, got 1.0"),
        (["algorithm.method=gigpo", "algorithm.gamma=1.5"], "'algorithm.gamma': must be in [0, 1]"),
        (["algorithm.kl_type=k9"], "'algorithm.kl_type': expected one of 'k1', 'kl', 'abs'"),
        (["algorithm.method=gigpo", "algorithm.gigpo_mode=x"], "'algorithm.gigpo_mode': expected"),
        (["algorithm.max_num_gen_batches=0"], "'algorithm.max_num_gen_batches': must be >= 1"),
    ],
)
def test_method_settings_are_config_keys_checked_in_one_line(tiny, overrides, message):
    _raises(apply_overrides, tiny, overrides, match=message)


def test_method_settings_resolve_from_the_preset_and_overrides(tiny):
    """Unset keys take the method's values (SAMPO: GSPO's ε = 3e-3 / 4e-3, GiGPO γ = 0.95,
    dynamic sampling with 3 tries); a set key wins; keys the method does not read stay null."""
    sampo = resolve(apply_overrides(tiny, ["algorithm.method=sampo", "algorithm.clip_high=5e-3"]))
    a = sampo.algorithm
    assert (a.clip_low, a.clip_high, a.gamma, a.gigpo_mode) == (3e-3, 5e-3, 0.95, "mean_std_norm")
    assert (a.dynamic_sampling, a.max_num_gen_batches, a.cold_start_steps) == (True, 3, 3)
    assert a.sapo_tau_pos is None and a.clip_ratio_c is None and a.empg_zeta is None
    assert resolve(sampo) == sampo  # resolving pins values: a second pass changes nothing
    assert load_config(dump_config(sampo, Path(tempfile.mkdtemp()) / "c.yaml")) == sampo
    no_kl = resolve(apply_overrides(tiny, ["algorithm.method=dr_grpo"])).algorithm
    assert (no_kl.use_kl_loss, no_kl.loss_agg_mode) == (False, "seq-mean-token-sum")


def test_an_explicit_run_dir_is_kept(tiny):
    config = resolve(apply_overrides(tiny, ["trainer.run_dir=somewhere"]))
    assert config.trainer.run_dir == "somewhere"


def test_a_repeated_key_or_section_is_an_error_naming_both_lines(tmp_path):
    """A second ``trainer:`` block would otherwise replace the first (total_steps lost)."""
    text = "trainer:\n  total_steps: 3\noptim:\n  lr: 1.0e-5\ntrainer:\n  seed: 1\n"
    message = _raises(load_config, _write(tmp_path / "twice.yaml", text), match="invalid YAML")
    assert "at line 5: duplicate key 'trainer' (first at line 1)" in message
    nested = _write(tmp_path / "nested.yaml", "optim:\n  lr: 1.0\n  lr: 2.0\n")
    _raises(load_config, nested, match="at line 3: duplicate key 'lr' (first at line 2)")
    tiny = load_config(TINY)
    _raises(apply_overrides, tiny, ["sampler.train={top_k: 1, top_k: 2}"], match="duplicate key")


def test_a_config_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("trainer:\n  run_dir: caf\u00e9\n".encode("latin-1"))
    _raises(load_config, path, match="not UTF-8 text (byte 0xe9 at offset 23)")


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("optim.lr=1e999", "config key 'optim.lr': must be a finite number, got inf"),
        ("critic.optim.lr=1e999", "config key 'critic.optim.lr': must be a finite number"),
        ("optim.betas=[0.9,1e999]", "config key 'optim.betas': must be a finite number"),
        (
            "env.group_size=4000000000",
            "config key 'env.group_size': must lie within ±2,147,483,647",
        ),
        ("trainer.eval_episodes=2147483648", "config key 'trainer.eval_episodes': must lie within"),
        ("trainer.seed=9223372036854775808", "config key 'trainer.seed': must lie within ±9,223"),
    ],
)
def test_absurd_numbers_are_one_line_naming_the_key(override, words):
    """Issue 37 B1-B3: infinities and integers beyond int32 are refused before anything runs."""
    with pytest.raises(ConfigError) as error:
        load_config(CONFIGS / "sokoban" / "base_tiny.yaml", [override])
    assert str(error.value).startswith(words) and "\n" not in str(error.value)


def test_every_shipped_config_has_finite_int32_numbers():
    for path in sorted(CONFIGS.glob("*/*.yaml")):
        if path.parent.name != "sweeps":
            check_numbers(load_config(path))
