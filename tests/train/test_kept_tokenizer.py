"""A run keeps its built tokenizer in run_dir/tokenizer (arlarena_jax/train/kept_tokenizer.py):
built once, read back on the next start, read from the shared start, rebuilt when the cloning
settings changed, and a damaged kept folder is one ConfigError line naming it. The builder is
replaced by a counting one on a small corpus (the real one renders ~1,000 demonstrations); the
end-to-end runs of test_trainer.py and test_sweep_run.py use the real builder."""

from __future__ import annotations

from pathlib import Path

import pytest

from arlarena_jax.errors import ConfigError
from arlarena_jax.tokenization import train_tiny
from arlarena_jax.train import kept_tokenizer as kept
from arlarena_jax.train.config_io import load_config

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "configs" / "sokoban" / "base_tiny.yaml"
TEXT = "<think>push the box</think><action>up</action> #####\n#_O@#\n#####"


@pytest.fixture
def builds(monkeypatch) -> list[str]:
    """Each call of the builder appends the env's room size; it returns a small BPE."""
    made: list[str] = []

    def build(config):
        made.append(str(config.env.sokoban.dim_room))
        return train_tiny([TEXT, f"room {config.env.sokoban.dim_room}"] * 4, vocab_size=300)

    monkeypatch.setattr(kept, "build_tokenizer", build)
    return made


def config(run_dir: Path, *extra: str):
    return load_config(BASE, [f"trainer.run_dir={run_dir}", *extra])


def test_built_once_then_read_back_unchanged(tmp_path, builds):
    first = kept.run_tokenizer(config(tmp_path / "run"))
    assert (tmp_path / "run" / "tokenizer" / kept.KEY_FILE).is_file()
    again = kept.run_tokenizer(config(tmp_path / "run"))
    assert len(builds) == 1
    assert again.get_vocab() == first.get_vocab()
    assert again(TEXT)["input_ids"] == first(TEXT)["input_ids"]
    assert again.pad_token_id == first.pad_token_id and again.chat_template == first.chat_template


def test_a_run_from_a_start_reads_the_starts_and_keeps_a_copy(tmp_path, builds):
    start = kept.run_tokenizer(config(tmp_path / "start"))
    run = config(tmp_path / "run", f"sft.init_from={tmp_path / 'start'}", "algorithm.method=gspo")
    tokenizer = kept.run_tokenizer(run)
    assert len(builds) == 1 and tokenizer.get_vocab() == start.get_vocab()
    assert (tmp_path / "run" / "tokenizer" / "tokenizer.json").is_file()


def test_other_cloning_settings_build_again_and_replace_it(tmp_path, builds):
    kept.run_tokenizer(config(tmp_path / "run"))
    kept.run_tokenizer(config(tmp_path / "run", "env.sokoban.dim_room=7"))
    assert builds == ["6", "7"]
    assert kept.kept_tokenizer(config(tmp_path / "run")) is None  # the 6x6 one was replaced
    assert kept.kept_tokenizer(config(tmp_path / "run", "env.sokoban.dim_room=7")) is not None


def test_a_damaged_kept_tokenizer_is_one_line_naming_it(tmp_path, builds):
    kept.run_tokenizer(config(tmp_path / "run"))
    (tmp_path / "run" / "tokenizer" / "tokenizer.json").write_text("{not json")
    with pytest.raises(ConfigError) as error:
        kept.run_tokenizer(config(tmp_path / "run"))
    message = str(error.value)
    assert "\n" not in message and str(tmp_path / "run" / "tokenizer") in message
    assert "remove that folder" in message


def test_a_tokenizer_read_from_a_folder_is_not_copied(tmp_path, builds):
    folder = tmp_path / "vocab"
    train_tiny([TEXT] * 4, vocab_size=300).save_pretrained(str(folder))
    kept.run_tokenizer(config(tmp_path / "run", f"model.tokenizer={folder}"))
    assert not (tmp_path / "run" / "tokenizer").exists()
