"""The trained policy as a Hugging Face directory that ``transformers`` uses like a Qwen release.

``run_dir/hf`` holds ``config.json`` + ``model.safetensors``, the tokenizer with its chat template,
and ``generation_config.json``: ``eos_token_id`` lists the ids the sampler stops at
(``<|im_end|>``, ``<|endoftext|>``, the base model's own), and the sampling defaults are the
run's evaluation sampling and reply budget (``sampler.eval``, ``sampler.max_new_tokens``). So
``model.generate(ids)`` ends a reply at ``<|im_end|>`` exactly where the sampler does.

Stop strings (``sampler.stop_strings``, e.g. ``</action>``) are not written: ``transformers``
refuses a generation config with stop strings unless every ``generate`` call passes the
tokenizer. Pass them per call for the sampler's cut, ``model.generate(ids,
stop_strings=["</action>"], tokenizer=tokenizer)``.

The export is written beside the target and renamed into place, so a reader never sees half of
one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
from flax import nnx

from arlarena_jax.models import QwenForCausalLM, save_generation_config, save_pretrained
from arlarena_jax.models.lora import merged_model
from arlarena_jax.models.value import QwenValueModel, save_value_pretrained
from arlarena_jax.tokenization import stop_token_ids
from arlarena_jax.train.config import Config
from arlarena_jax.train.processes import Exchange
from arlarena_jax.train.resolution import model_dir


def whole_params(params: Any) -> Any:
    """The parameters as one process can write them: themselves with one process; with several,
    whole NumPy copies gathered from every process (a collective: every process calls it)."""
    if jax.process_count() == 1:
        return params
    from arlarena_jax.models.sharding import to_host

    return to_host(params)


def export_policy(
    directory: str | Path,
    model: QwenForCausalLM,
    params: Any,
    tokenizer: Any,
    config: Config,
    exchange: Exchange,
) -> Path:
    """:func:`export_hf` of ``params`` (put into ``model``; LoRA adapters merged) from one
    process or several: every process gathers the whole parameters, process 0 writes, the others
    wait for it (one writer of the shared run directory)."""
    nnx.update(model, whole_params(params))
    exchange.first_then_all(
        "exported", lambda: export_hf(directory, merged_model(model), tokenizer, config)
    )
    return Path(directory)


def export_hf(
    directory: str | Path, model: QwenForCausalLM, tokenizer: Any, config: Config
) -> Path:
    """Write the model, the tokenizer and the generation config of ``config``'s run.

    Atomic: everything is written to ``.<name>.partial`` beside ``directory``, which then takes
    its place by renames, so ``directory`` always holds a complete export (the previous one until
    the new one is in place) and an interrupted export leaves only the partial folder."""
    return write_atomically(
        Path(directory), lambda staging: _write_export(staging, model, tokenizer, config)
    )


def export_critic(directory: str | Path, critic: QwenValueModel, tokenizer: Any) -> Path:
    """The critic as a ``transformers`` token-classification directory (one label: the value)
    with the tokenizer, put in place atomically as :func:`export_hf` does."""

    def write(staging: Path) -> None:
        save_value_pretrained(critic, staging)
        tokenizer.save_pretrained(staging)

    return write_atomically(Path(directory), write)


def write_atomically(directory: Path, write: Callable[[Path], None]) -> Path:
    """``write`` into ``.<name>.partial`` beside ``directory``, then rename it into place."""
    staging = directory.with_name(f".{directory.name}.partial")
    if staging.exists():
        shutil.rmtree(staging)
    write(staging)
    replace_directory(staging, directory)
    return directory


def _write_export(directory: Path, model: QwenForCausalLM, tokenizer: Any, config: Config) -> None:
    save_pretrained(model, directory)
    tokenizer.save_pretrained(directory)
    sampling = config.sampler.eval
    save_generation_config(
        directory,
        eos_token_ids=stop_token_ids(tokenizer, model_dir(config.model)),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        max_new_tokens=config.sampler.max_new_tokens,
    )


def replace_directory(new: Path, target: Path) -> None:
    """Put the complete folder ``new`` at ``target``: the old ``target`` is renamed aside first
    (``.<name>.old``) and removed only once ``new`` is in place."""
    old = target.with_name(f".{target.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        os.replace(target, old)
    os.replace(new, target)
    shutil.rmtree(old, ignore_errors=True)
