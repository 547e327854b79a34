"""Every error a user can cause ends an ``arlarena`` command with one line on stderr and exit
status 2; an unexpected error with one line naming its type and the log holding the traceback,
exit status 1; ``arlarena --debug`` prints the traceback instead. Keys the environment ignores
get one warning line. Nothing here trains: checkpoints are faked as their step directories
beside the run's ``config.yaml``, and a model that fails to load fails before anything compiles.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from arlarena_jax import cli
from arlarena_jax.errors import ConfigError
from arlarena_jax.train import build, commands, preflight
from arlarena_jax.train.checkpoint import CheckpointError
from arlarena_jax.train.config import DEVICE_COUNT, EnvCommon, MeshConfig
from arlarena_jax.train.config_checks import validate
from arlarena_jax.train.config_io import dump_config, load_config
from arlarena_jax.train.resolution import resolve
from envs import registry

ROOT = Path(__file__).parents[2]
CONFIG = str(ROOT / "configs/sokoban/sampo_tiny.yaml")  # absolute: one test changes directory
ALFWORLD = str(ROOT / "configs/alfworld/sampo_tiny.yaml")


def fails(argv, capsys, status=2) -> str:
    """Run ``arlarena argv``; it must exit with ``status`` after one line on stderr."""
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == status
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("arlarena: "), err
    return err.strip()


def fake_run(run_dir: Path, *overrides: str) -> None:
    """A run directory as a run of CONFIG with ``overrides`` leaves it: config.yaml, a step."""
    config = resolve(load_config(CONFIG, [*overrides, f"trainer.run_dir={run_dir}"]))
    dump_config(config, run_dir / "config.yaml")
    (run_dir / "checkpoints" / "3").mkdir(parents=True)


# -- one line, exit status 2 ----------------------------------------------------------------------


def test_a_mesh_larger_than_the_devices_names_the_mesh_not_the_micro_batch(tmp_path, capsys):
    err = fails(["train", CONFIG, "mesh.data=3", f"trainer.run_dir={tmp_path}"], capsys)
    assert "'mesh'" in err and "mesh.data*mesh.fsdp*mesh.tensor = 3*1*1" in err
    assert "available" in err and "micro_batch" not in err


def test_the_mesh_check_needs_no_devices_and_comes_before_the_batch_split():
    config = load_config(CONFIG)
    assert config.trainer.micro_batch_size % 3  # the split would fail too
    meshed = dataclasses.replace(config, mesh=MeshConfig(data=3))
    token = DEVICE_COUNT.set(lambda: 1)
    try:
        with pytest.raises(ConfigError, match=r"'mesh'.* 3 devices, but 1 is available"):
            validate(meshed)
    finally:
        DEVICE_COUNT.reset(token)
    with pytest.raises(ConfigError, match="micro_batch_size"):  # unset: no device is asked
        validate(meshed)


def test_build_mesh_checks_the_device_count():
    config = dataclasses.replace(load_config(CONFIG), mesh=MeshConfig(data=2))  # of 8 devices
    with pytest.raises(ConfigError, match=r"= 2 devices, but 8 are available"):
        build.build_mesh(config)


def model_dir(tmp_path: Path, *files: str) -> Path:
    path = tmp_path / "model"
    path.mkdir()
    for name in files:
        (path / name).write_text("{}")
    return path


@pytest.mark.parametrize(
    "files, problem",
    [
        (None, "is missing"),
        ((), "no config.json in"),
        (("config.json",), "no model.safetensors or model.safetensors.index.json in"),
    ],
    ids=["no-directory", "no-config", "no-weights"],
)
def test_an_unusable_model_path_is_one_line_before_anything_is_built(
    files, problem, tmp_path, capsys
):
    path = model_dir(tmp_path, *files) if files is not None else tmp_path / "absent"
    run_dir = tmp_path / "run"
    err = fails(["train", CONFIG, f"model.path={path}", f"trainer.run_dir={run_dir}"], capsys)
    assert err.startswith("arlarena: config key 'model.path': ") and problem in err
    assert str(path) in err and not run_dir.exists()


def test_a_model_that_does_not_load_names_the_key_and_the_file(tmp_path, capsys):
    from arlarena_jax.tokenization import train_tiny

    path = model_dir(tmp_path, "config.json", "model.safetensors")  # neither is what it says
    tokenizer = tmp_path / "tokenizer"
    train_tiny(["<action>up</action>"] * 4, vocab_size=300).save_pretrained(tokenizer)
    run_dir = tmp_path / "run"
    argv = [
        "eval",
        "--allow-untrained",  # before the config: the overrides end the command line
        CONFIG,
        f"model.path={path}",
        f"model.tokenizer={tokenizer}",
    ]
    err = fails([*argv, f"trainer.run_dir={run_dir}"], capsys)
    assert err.startswith(f"arlarena: config key 'model.path': cannot load the model in {path}")
    assert "config.json" in err


def test_eval_of_a_run_directory_without_a_checkpoint_is_one_line(tmp_path, capsys):
    run_dir = tmp_path / "runs" / "sokoban" / "sampo_seed0_typo"
    err = fails(["eval", CONFIG, f"trainer.run_dir={run_dir}"], capsys)
    assert err == (
        f"arlarena: config key 'trainer.run_dir': {run_dir} has no checkpoint to evaluate; "
        "--allow-untrained evaluates the untrained model"
    )
    assert not run_dir.exists()  # nothing is created for a mistyped directory


def test_eval_of_a_step_the_run_does_not_keep_is_one_line(tmp_path, capsys):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "4").mkdir(parents=True)  # a folder without a finished save
    err = fails(["eval", CONFIG, f"trainer.run_dir={run_dir}", "--step", "4"], capsys)
    assert err == f"arlarena: --step 4: {run_dir / 'checkpoints'} has no valid step 4 (has [])"
    err = fails(
        ["eval", CONFIG, f"trainer.run_dir={run_dir}", "--step", "4", "--allow-untrained"], capsys
    )
    assert err == "arlarena: --step 4 and --allow-untrained: choose one"


def test_export_of_a_step_the_run_does_not_keep_is_one_line(tmp_path, capsys):
    err = fails(["export", str(tmp_path / "nothing")], capsys)
    assert err == f"arlarena: {tmp_path / 'nothing'} is not a run directory (no config.yaml)"
    run_dir = tmp_path / "run"
    fake_run(run_dir)  # config.yaml and a step folder without a finished save
    err = fails(["export", str(run_dir), "--step", "3"], capsys)
    assert err == f"arlarena: --step 3: {run_dir / 'checkpoints'} has no valid step 3 (has [])"


def test_build_model_turns_a_broken_file_into_a_config_error(tmp_path):
    path = model_dir(tmp_path)
    (path / "config.json").write_text("{not json")
    config = load_config(CONFIG, [f"model.path={path}"])
    with pytest.raises(ConfigError, match=r"'model.path'.*config.json: invalid JSON at line 1"):
        build.build_model(config, None, None, 0)


def test_an_unwritable_run_dir_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    run_dir = tmp_path / "file" / "run"
    err = fails(["train", CONFIG, f"trainer.run_dir={run_dir}"], capsys)
    assert err.startswith("arlarena: config key 'trainer.run_dir': cannot create ")
    assert f"{tmp_path / 'file'} is not a directory" in err


def test_checkpoints_of_another_model_name_the_model_key(tmp_path, capsys):
    fake_run(tmp_path, "model.name=tiny")
    err = fails(["train", CONFIG, "model.name=small", f"trainer.run_dir={tmp_path}"], capsys)
    assert err == (
        f"arlarena: config key 'model.name': the checkpoints in {tmp_path} were written by "
        "'tiny', this config says 'small' (use another trainer.run_dir or the same model)"
    )


def test_checkpoints_of_other_adapters_name_the_lora_key(tmp_path, capsys):
    """Only the adapters are checkpointed under model.lora: other adapters (or none) would fail
    in the restore; the start says which key differs."""
    fake_run(tmp_path, "model.lora={rank: 4, alpha: 8}")
    lora = ["model.lora={rank: 8, alpha: 8}", f"trainer.run_dir={tmp_path}"]
    err = fails(["train", CONFIG, *lora], capsys)
    assert err.startswith(
        f"arlarena: config key 'model.lora': the checkpoints in {tmp_path} were written by "
        "LoRAConfig(rank=4, alpha=8.0, "
    ) and err.endswith("(use another trainer.run_dir or the same model)")
    err = fails(["train", CONFIG, f"trainer.run_dir={tmp_path}"], capsys)
    assert "config key 'model.lora'" in err and "this config says None" in err


def test_checkpoints_of_another_objective_state_name_the_setting(tmp_path, capsys):
    fake_run(tmp_path)  # SAMPO keeps reference parameters for its KL loss
    err = fails(
        ["eval", CONFIG, "algorithm.use_kl_loss=false", f"trainer.run_dir={tmp_path}"], capsys
    )
    assert "config key 'algorithm.use_kl_loss'" in err and "objective state" in err


def test_checkpoints_of_the_same_model_and_state_pass(tmp_path):
    fake_run(tmp_path, "algorithm.clip_high=0.3", "model.remat=nothing_saveable")
    preflight.check_checkpoints(load_config(CONFIG, [f"trainer.run_dir={tmp_path}"]))


def test_a_derived_run_dir_is_checked_too(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_dir = Path(resolve(load_config(CONFIG)).trainer.run_dir)  # runs/sokoban/sampo_seed0
    fake_run(run_dir)
    err = fails(["train", CONFIG, "model.name=small"], capsys)
    assert f"'model.name': the checkpoints in {run_dir} " in err


# -- the error boundary ---------------------------------------------------------------------------


def failing_eval(error: Exception):
    """An eval handler that loads the config (so the run directory is known), then fails."""

    def handler(args):
        commands._config(args, training=False)
        raise error

    return handler


def test_a_checkpoint_error_is_one_line_and_its_traceback_goes_to_the_run_log(
    tmp_path, monkeypatch, capsys
):
    message = "checkpoint step 3: leaf 'opt_state.0.mu' has shape (8,) in the checkpoint"
    monkeypatch.setattr(commands, "eval_command", failing_eval(CheckpointError(message)))
    err = fails(["eval", CONFIG, f"trainer.run_dir={tmp_path}"], capsys)
    assert err == f"arlarena: {message}"
    log = (tmp_path / "error.log").read_text()
    assert "Traceback (most recent call last)" in log and "CheckpointError" in log
    assert f"arlarena eval {CONFIG} trainer.run_dir={tmp_path}" in log


def test_an_os_error_names_the_file(tmp_path, monkeypatch, capsys):
    error = PermissionError(13, "Permission denied", str(tmp_path / "metrics"))
    monkeypatch.setattr(commands, "eval_command", failing_eval(error))
    err = fails(["eval", CONFIG, f"trainer.run_dir={tmp_path}"], capsys)
    assert err == f"arlarena: Permission denied: {tmp_path / 'metrics'}"


def test_an_unexpected_error_names_its_type_and_the_log_in_the_run_dir(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(commands, "eval_command", failing_eval(KeyError("boom")))
    err = fails(["eval", CONFIG, f"trainer.run_dir={tmp_path}"], capsys, status=1)
    log = tmp_path / "error.log"
    assert err == f"arlarena: unexpected error KeyError: 'boom' (traceback in {log})"
    assert "Traceback (most recent call last)" in log.read_text()


def test_an_unexpected_error_without_a_run_dir_logs_to_a_temp_file(monkeypatch, capsys):
    def demo(args):
        raise RuntimeError("first line\nsecond line")

    monkeypatch.setattr(cli, "demo", demo)
    err = fails(["demo"], capsys, status=1)
    assert err.startswith("arlarena: unexpected error RuntimeError: first line ... (traceback in ")
    log = Path(err.rpartition("traceback in ")[2].rstrip(")"))
    try:
        text = log.read_text()
        assert "Traceback (most recent call last)" in text and "second line" in text
    finally:
        log.unlink()


def test_debug_prints_the_traceback_and_writes_no_log(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(commands, "eval_command", failing_eval(KeyError("boom")))
    with pytest.raises(SystemExit) as info:
        cli.main(["--debug", "eval", CONFIG, f"trainer.run_dir={tmp_path}"])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last)") and "KeyError: 'boom'" in err
    assert (
        err.strip().splitlines()[-1]
        == "arlarena: unexpected error KeyError: 'boom' (traceback above)"
    )
    assert not (tmp_path / "error.log").exists()


def test_debug_shows_a_config_errors_traceback_too(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--debug", "train", CONFIG, "trainer.totl_steps=3"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ConfigError" in err
    assert err.strip().splitlines()[-1].startswith("arlarena: unknown config key")


# -- warnings -------------------------------------------------------------------------------------


def test_a_key_sokoban_ignores_is_one_warning(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["train", CONFIG, "env.num_workers=2", "--print-config"])
    assert info.value.code == 0
    assert capsys.readouterr().err == (
        "arlarena: warning: config key 'env.num_workers' has no effect for env 'sokoban' "
        "(its batch runs in-process)\n"
    )


@pytest.mark.parametrize("config", [CONFIG, ALFWORLD])
def test_no_warning_where_the_key_is_read_or_left_at_its_default(config, capsys):
    extra = ["env.num_workers=2"] if config == ALFWORLD else []
    with pytest.raises(SystemExit) as info:
        cli.main(["train", config, *extra, "--print-config"])
    assert info.value.code == 0 and capsys.readouterr().err == ""


def test_every_ignored_key_is_a_common_env_key_with_a_reason():
    common = {f.name for f in dataclasses.fields(EnvCommon)}
    for name in registry.names():
        ignores = registry.get(name).ignores
        assert set(ignores) <= common - {"name"}, name
        assert all(reason for reason in ignores.values()), name
    assert set(registry.get("sokoban").ignores) == {"num_workers", "step_timeout_s", "data_path"}
    assert not registry.get("alfworld").ignores


def test_trajectory_caps_under_turn_rows_and_math_eval_episodes_warn(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["train", CONFIG, "env.max_right_tokens=100", "--print-config"])
    assert info.value.code == 0
    assert capsys.readouterr().err == (
        "arlarena: warning: config key 'env.max_right_tokens' has no effect with turn rows (it "
        "caps trajectory rows)\n"
    )
    with pytest.raises(SystemExit) as info:
        cli.main(
            ["train", "configs/math/base_tiny.yaml", "trainer.eval_episodes=7", "--print-config"]
        )
    assert info.value.code == 0
    assert "'trainer.eval_episodes' has no effect for env 'math'" in capsys.readouterr().err
