"""The trainer's Hugging Face export behaves like a Qwen release in ``transformers``.

A Qwen release ships ``generation_config.json``, so ``model.generate(ids)`` stops at
``<|im_end|>``. The export must do the same, at exactly the token where our sampler stops.

The stop has to be reached on purpose by a random model. Let ``g`` be the random model's greedy
continuation of a chat prompt, run with no stop ids, and ``t = g[p]`` its first token at a
position ``p`` where neither ``t`` nor ``<|im_end|>`` occurs in ``g[:p]``. Swapping the output rows
(``lm_head``, untied from the input embeddings) of ``t`` and ``<|im_end|>`` permutes the logits
only. So the swapped model's greedy tokens are ``g[:p]`` (neither token is the argmax before
``p``, and the inputs are unchanged), followed by ``<|im_end|>`` at ``p``. Both decoders must
return exactly ``g[:p] + [<|im_end|>]``: equality of token ids, no tolerance. Weights are drawn
with ``initializer_range`` 0.1, as in ``test_sampler_engine``, so that greedy top-2 logit gaps are
far above float32 rounding and the two implementations agree on every argmax.
"""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

from arlarena_jax.models.hf_io import load_pretrained, save_generation_config
from arlarena_jax.rollout.policy import chat_prompt_ids
from arlarena_jax.sampler import GREEDY, Engine, EngineConfig, Request, generate
from arlarena_jax.tokenization import stop_token_ids, train_tiny
from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.export import export_hf
from tests.helpers.hf_reference import TINY_HF

CORPUS = [
    "You are an agent in a 6x6 Sokoban room. Push the box onto the target.",
    "<think>The box is left of the target, so I push right.</think><action>right</action>",
    "Reward: -0.1. Step 3 of 15. Walls #, boxes $, targets ., the player @.",
] * 20
PROMPT = "Room:\n#####\n#@$.#\n#####\nPush the box onto the target."
BUDGET = 24  # sampler.max_new_tokens of the tiny Sokoban config


@pytest.fixture(scope="module")
def tokenizer():
    return train_tiny(CORPUS, vocab_size=512)


@pytest.fixture(scope="module")
def random_model(tokenizer, tmp_path_factory):
    """Our model, loaded from a random ``transformers`` Qwen3 with an untied ``lm_head``."""
    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        **TINY_HF | dict(vocab_size=512, max_position_embeddings=256),
        head_dim=16,
        initializer_range=0.1,
        tie_word_embeddings=False,
    )
    assert len(tokenizer) <= config.vocab_size
    directory = tmp_path_factory.mktemp("random")
    transformers.Qwen3ForCausalLM(config).save_pretrained(directory, safe_serialization=True)
    return load_pretrained(directory)


def our_greedy(model, prompt: list[int], stop_ids: tuple[int, ...]) -> list[int]:
    config = EngineConfig(
        max_concurrent_decodes=1,
        max_prefill_length=64,
        max_new_tokens=BUDGET,
        stop_token_ids=stop_ids,
        min_prefill_bucket=64,
    )
    engine = Engine(model, config, sampling=GREEDY)
    ((completion,),) = generate(engine, [Request(prompt, max_new_tokens=BUDGET)])
    return completion.token_ids


def swap_output_rows(model, a: int, b: int) -> None:
    kernel = np.array(model.lm_head.kernel.get_value())  # [hidden, vocab]
    kernel[:, [a, b]] = kernel[:, [b, a]]
    model.lm_head.kernel.set_value(jnp.asarray(kernel))


@pytest.fixture(scope="module")
def export(tokenizer, random_model, tmp_path_factory):
    """(directory, prompt ids, the expected reply) of a model that ends its greedy reply with
    ``<|im_end|>`` at a position chosen from its own greedy continuation."""
    stops = stop_token_ids(tokenizer)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompt = chat_prompt_ids(tokenizer, PROMPT)
    assert len(prompt) <= 64
    free = our_greedy(random_model, prompt, ())
    p = next(
        i
        for i in range(2, BUDGET - 1)
        if free[i] not in free[:i] and not set(free[: i + 1]) & {*stops, im_end}
    )
    model = nnx.clone(random_model)
    swap_output_rows(model, free[p], im_end)
    config = load_config("configs/sokoban/sampo_tiny.yaml")
    assert config.sampler.max_new_tokens == BUDGET
    directory = export_hf(tmp_path_factory.mktemp("export") / "hf", model, tokenizer, config)
    return directory, model, prompt, [*free[:p], im_end]


def test_generation_config_lists_the_stop_ids_and_the_runs_sampling(export, tokenizer):
    directory, _, _, _ = export
    written = json.loads((directory / "generation_config.json").read_text())
    im_end, end_of_text = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert written["eos_token_id"] == [im_end, end_of_text]
    assert written["pad_token_id"] == end_of_text
    # sampler.eval of the tiny Sokoban config: T = 1, no top-p / top-k; replies of 24 tokens.
    assert written["do_sample"] is True
    assert (written["temperature"], written["top_p"], written["top_k"]) == (1.0, 1.0, 0)
    assert written["max_new_tokens"] == BUDGET
    loaded = transformers.GenerationConfig.from_pretrained(directory)
    assert loaded.eos_token_id == [im_end, end_of_text]


def test_transformers_greedy_generate_stops_where_our_sampler_stops(export, tokenizer):
    directory, model, prompt, expected = export
    ours = our_greedy(model, prompt, stop_token_ids(tokenizer, directory))
    assert ours == expected
    hf = transformers.AutoModelForCausalLM.from_pretrained(directory).eval()
    assert type(hf).__name__ == "Qwen3ForCausalLM"
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    ids = hf_tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=True
    )
    ids = ids["input_ids"] if isinstance(ids, dict | transformers.BatchEncoding) else ids
    assert list(ids) == prompt
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), do_sample=False)  # the export's own config
    assert out[0, len(prompt) :].tolist() == expected  # stopped at <|im_end|>, not at 24 tokens
    assert len(expected) < BUDGET


def test_greedy_generation_config_has_no_sampling_keys(tmp_path):
    save_generation_config(tmp_path, eos_token_ids=(7, 8), pad_token_id=8, temperature=0.0)
    written = json.loads((tmp_path / "generation_config.json").read_text())
    assert written == {"eos_token_id": [7, 8], "pad_token_id": 8, "do_sample": False}
    assert transformers.GenerationConfig.from_pretrained(tmp_path).do_sample is False


def test_generation_config_needs_an_eos_id(tmp_path):
    with pytest.raises(ValueError, match="at least one eos token id"):
        save_generation_config(tmp_path, eos_token_ids=(), pad_token_id=None)


def test_export_is_atomic(export, tokenizer, tmp_path, monkeypatch):
    """A second export replaces the first as a whole; one that fails midway leaves the complete
    previous export in place and its partial folder aside (never a half-written ``hf``)."""
    from arlarena_jax.train import export as export_module

    _, model, _, _ = export
    config = load_config("configs/sokoban/sampo_tiny.yaml")
    target = tmp_path / "hf"
    export_hf(target, model, tokenizer, config)
    first = {p.name: p.stat().st_size for p in target.iterdir()}
    assert "model.safetensors" in first and "generation_config.json" in first

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(export_module, "save_generation_config", broken)
    with pytest.raises(OSError, match="disk full"):
        export_hf(target, model, tokenizer, config)
    assert {p.name: p.stat().st_size for p in target.iterdir()} == first
    assert (tmp_path / ".hf.partial" / "model.safetensors").exists()
    monkeypatch.undo()
    export_hf(target, model, tokenizer, config)  # the leftover partial folder is replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]
    assert {p.name: p.stat().st_size for p in target.iterdir()} == first
