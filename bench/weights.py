"""The two models a benchmark compares: ours and transformers', on the same weights.

A name is a preset (random weights: ours, exported with ``save_pretrained`` and read by
transformers), a fetched model's name (``smollm2-135m-instruct``: its directory in the model
cache, :func:`arlarena_jax.models.fetch.model_directory`) or a Hugging Face directory; the last
two are real weights, loaded by both sides from that directory.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from flax import nnx

from arlarena_jax.models import PRESETS, QwenForCausalLM, load_pretrained, preset, save_pretrained
from arlarena_jax.models.fetch import missing_hint, model_directory


@dataclasses.dataclass
class Pair:
    """Our model and transformers' (``eval()`` mode) on the same float32 weights."""

    name: str
    ours: QwenForCausalLM
    theirs: object  # transformers' PreTrainedModel
    directory: Path | None  # the real weights' directory; None for a preset's random weights


def pair_from(name: str, ours: QwenForCausalLM) -> Pair:
    """transformers' model on ``ours``' weights (exported with ``save_pretrained``, read back in
    float32): a pair with random weights, whatever the config."""
    import transformers

    with tempfile.TemporaryDirectory() as directory:
        save_pretrained(ours, directory)
        theirs = transformers.AutoModelForCausalLM.from_pretrained(directory)
    return Pair(name, ours, theirs.eval(), None)


def load_pair(name: str) -> Pair | None:
    """Both models for ``name``; None, after printing the fetch command, for a fetched model's
    name that was never fetched. Any other name that is neither a preset nor a directory with a
    ``config.json`` is a ``SystemExit`` with one line."""
    import torch
    import transformers

    if name in PRESETS:
        return pair_from(name, QwenForCausalLM(preset(name), rngs=nnx.Rngs(0)))
    hint = missing_hint(name)
    if hint is not None:
        print(f"{name}: skipped, {hint}")
        return None
    directory = Path(model_directory(name))
    if not (directory / "config.json").is_file():
        raise SystemExit(
            f"{name!r} is not a preset ({', '.join(PRESETS)}), a fetched model's name or a "
            f"directory with a config.json"
        )
    theirs = transformers.AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    return Pair(name, load_pretrained(directory), theirs.eval(), directory)
