"""A run keeps the tokenizer its parameters were trained with.

A built ``tiny-<env>`` vocabulary (see :mod:`arlarena_jax.train.build`) is derived from expert
demonstrations rendered by the current code, so a later version of the renderer, or of the
tokenizer trainer, would build another one. The run therefore saves it once in
``run_dir/tokenizer`` and reads it from there whenever it starts again (resume, export,
evaluation). A run that takes its cloned policy from a shared start (``sft.init_from``) reads the
start's. Besides keeping old checkpoints readable, this skips the rebuild (~5 s of demonstrations
for Sokoban) in every run of a sweep but the start.

The folder records the :func:`~arlarena_jax.train.start.start_key` of the config that built it
(``KEY_FILE``); a kept tokenizer of other cloning settings (the run directory reused with another
environment, say) is not read but built again and replaced. Tokenizers loaded from a model or a
folder are read as before and not copied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arlarena_jax.errors import ConfigError
from arlarena_jax.tokenization import load_tokenizer
from arlarena_jax.train.build import build_tokenizer
from arlarena_jax.train.config import Config
from arlarena_jax.train.export import write_atomically
from arlarena_jax.train.resolution import Resolved, is_built_tokenizer, resolve, resolve_run
from arlarena_jax.train.start import start_key

TOKENIZER_DIR = "tokenizer"
KEY_FILE = "arlarena_start_key.txt"


def _kept_key(folder: Path) -> str | None:
    path = folder / KEY_FILE
    return path.read_text().strip() if path.is_file() else None


def kept_tokenizer(config: Config | Resolved) -> Any | None:
    """The built tokenizer kept by the run (``run_dir/tokenizer``), else by its shared start, of
    this config's cloning settings; None when there is none (or the tokenizer is not a built
    one). A kept folder that does not load is a one-line ConfigError naming it."""
    config = resolve(config)
    if not is_built_tokenizer(config.model.tokenizer):
        return None
    folders = [Path(config.trainer.run_dir) / TOKENIZER_DIR]
    if config.sft.init_from:
        folders.append(Path(config.sft.init_from) / TOKENIZER_DIR)
    key = start_key(config)
    for folder in folders:
        if _kept_key(folder) == key:
            try:
                return load_tokenizer(folder)
            except Exception as error:  # transformers raises many kinds on a damaged file
                raise ConfigError(
                    f"the kept tokenizer {folder} does not load ({type(error).__name__}: "
                    f"{error}); remove that folder to build the tokenizer again"
                ) from error
    return None


def run_tokenizer(config: Config | Resolved) -> Any:
    """The run's tokenizer: the kept one (:func:`kept_tokenizer`), else ``build_tokenizer``'s; a
    built vocabulary the run does not keep yet is saved in ``run_dir/tokenizer`` (atomically)."""
    run = resolve_run(config)
    config = run.config
    tokenizer = kept_tokenizer(run)
    if tokenizer is None:
        tokenizer = build_tokenizer(config)
    if not is_built_tokenizer(config.model.tokenizer):
        return tokenizer
    folder, key = Path(config.trainer.run_dir) / TOKENIZER_DIR, start_key(config)
    if _kept_key(folder) != key:

        def write(staging: Path) -> None:
            tokenizer.save_pretrained(str(staging))
            (staging / KEY_FILE).write_text(key + "\n")

        folder.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(folder, write)
    return tokenizer
