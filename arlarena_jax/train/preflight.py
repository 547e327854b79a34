"""Checks a command makes after loading its config and before building anything, each failing with
one :class:`ConfigError` line that names the key and the path:

- :func:`check_paths`: ``model.path`` is a Hugging Face directory (``config.json`` and
  safetensors; an embedded model's name resolves to its fetched directory, or fails with the
  ``arlarena model fetch`` hint), a tokenizer directory holds tokenizer files,
  ``trainer.run_dir`` can be created or written;
- :func:`check_checkpoints`: the checkpoints already in the run directory were written by the same
  model and the same objective state as this config's (compared with the run's ``config.yaml``),
  so a mismatch names the config key rather than a leaf of the optimizer state.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from arlarena_jax.errors import ConfigError
from arlarena_jax.models.fetch import missing_hint, model_directory
from arlarena_jax.models.hf_io import SAFETENSORS_INDEX, SAFETENSORS_SINGLE
from arlarena_jax.tokenization.load import TOKENIZER_FILES
from arlarena_jax.train.config import Config, ModelConfig
from arlarena_jax.train.layout import checkpoints_dir
from arlarena_jax.train.resolution import (
    Resolved,
    is_built_tokenizer,
    model_dir,
    resolve,
    resolve_run,
    tokenizer_dir,
)

ADVICE = "use another trainer.run_dir or the same"


def _fail(key: str, message: str) -> None:
    raise ConfigError(f"config key {key!r}: {message}")


def check_model_path(model: ModelConfig) -> None:
    """``model.path`` (when set) is a directory with ``config.json`` and safetensors weights; an
    embedded model's name not fetched yet says how to fetch it."""
    if model.path is None:
        return
    hint = missing_hint(model.path)
    if hint is not None:
        _fail("model.path", hint)
    path = Path(model_dir(model))
    if not path.is_dir():
        _fail("model.path", f"{path} is {'not a directory' if path.exists() else 'missing'}")
    if not (path / "config.json").is_file():
        _fail("model.path", f"no config.json in {path} (not a Hugging Face model directory)")
    if not any((path / name).is_file() for name in (SAFETENSORS_SINGLE, SAFETENSORS_INDEX)):
        _fail("model.path", f"no {SAFETENSORS_SINGLE} or {SAFETENSORS_INDEX} in {path}")


def check_tokenizer_path(model: ModelConfig) -> None:
    """A tokenizer read from a directory (``model.tokenizer``, or ``model.path`` when it is null)
    finds its files there; the built ``tiny-<env>`` names are checked when built."""
    name = model.tokenizer
    if is_built_tokenizer(name):
        return
    key = "model.tokenizer" if name is not None else "model.path"
    hint = missing_hint(name if name is not None else model.path or "")
    if hint is not None:
        _fail(key, hint)
    path = Path(tokenizer_dir(model) or "")
    if not path.is_dir() or not any((path / f).is_file() for f in TOKENIZER_FILES):
        _fail(key, f"no tokenizer files ({', '.join(TOKENIZER_FILES)}) in {path}")


def check_run_dir(run_dir: str) -> None:
    """``trainer.run_dir`` exists as a writable directory, or its nearest existing ancestor is
    one (nothing is created here)."""
    path = Path(run_dir).absolute()
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        _fail("trainer.run_dir", f"cannot create {run_dir}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        _fail("trainer.run_dir", f"cannot write to {run_dir}: {existing} is not writable")


def check_paths(run: Config | Resolved) -> None:
    """The model, tokenizer and run directory paths of ``run``'s config."""
    config = resolve(run)
    check_model_path(config.model)
    check_tokenizer_path(config.model)
    check_run_dir(config.trainer.run_dir)


def _same_model_directory(a: str, b: str) -> bool:
    """Two ``model.path`` values name the same model: the same directory, or equal configs."""
    a, b = model_directory(a), model_directory(b)
    if os.path.abspath(a) == os.path.abspath(b):
        return True
    from arlarena_jax.models.config import QwenConfig

    try:
        return QwenConfig.from_json(a) == QwenConfig.from_json(b)
    except (OSError, ValueError):
        return False


def _model_difference(stored: ModelConfig, current: ModelConfig) -> str | None:
    """The first ``model`` field whose change changes the parameters' shapes (or, for
    ``lora``, what the checkpointed adapters mean), or None."""
    if (stored.path is None) != (current.path is None):
        return "path"
    if stored.path is not None and current.path is not None:
        if not _same_model_directory(stored.path, current.path):
            return "path"
    elif stored.name != current.name:
        return "name"
    if stored.tokenizer != current.tokenizer:
        return "tokenizer"
    return "lora" if stored.lora != current.lora else None  # adapters only are checkpointed


def _state_signature(config: Config | Resolved) -> Any:
    """What the objective adds to the checkpointed state: its state's structure, shapes and
    dtypes, and whether reference parameters are kept."""
    import jax

    from arlarena_jax.objectives.compose import Input
    from arlarena_jax.train.build import build_objective

    objective = build_objective(config)
    state = jax.eval_shape(objective.init_state)
    leaves = [(leaf.shape, str(leaf.dtype)) for leaf in jax.tree.leaves(state)]
    return jax.tree.structure(state), leaves, Input.REF_LOG_PROBS in objective.requirements


def _objective_difference(stored: Config, current: Resolved) -> str | None:
    """The first ``algorithm`` field (the method first) behind a different objective state."""
    if _state_signature(stored) == _state_signature(current):
        return None
    old, new = stored.algorithm, current.config.algorithm
    changed = [
        f.name for f in dataclasses.fields(old) if getattr(old, f.name) != getattr(new, f.name)
    ]
    return changed[0] if changed else "method"


def _has_steps(directory: Path) -> bool:
    return directory.is_dir() and any(p.name.isdigit() for p in directory.iterdir())


def check_checkpoints(run: Config | Resolved) -> None:
    """The run directory's checkpoints (if any) fit ``run``'s config: the same model and the
    same objective state as the ``config.yaml`` of the run that wrote them."""
    from arlarena_jax.train.config_io import load_config

    run = resolve_run(run)
    config = run.config
    run_dir = Path(config.trainer.run_dir)
    stored_file = run_dir / "config.yaml"
    if not (_has_steps(checkpoints_dir(run_dir)) and stored_file.is_file()):
        return
    try:
        stored = load_config(stored_file)
    except ConfigError:
        return  # written by another version of the schema: the restore itself checks the shapes
    written = f"the checkpoints in {run_dir} were written"
    field = _model_difference(stored.model, config.model)
    if field is not None:
        old, new = getattr(stored.model, field), getattr(config.model, field)
        _fail(f"model.{field}", f"{written} by {old!r}, this config says {new!r} ({ADVICE} model)")
    field = _objective_difference(stored, run)
    if field is not None:
        old, new = getattr(stored.algorithm, field), getattr(config.algorithm, field)
        _fail(
            f"algorithm.{field}",
            f"{written} with {old!r}, this config says {new!r}, which changes the checkpointed "
            f"objective state ({ADVICE} setting)",
        )
