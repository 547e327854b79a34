"""``bench/weights.py`` (the model pair a benchmark compares) and the sampler bench's chat prompts:
a preset gives random weights that transformers reads back, a directory or a fetched model's name
gives that directory's weights on both sides, an unfetched name is skipped with the fetch command.
Logits agree within 1e-4 (float32, two tiny layers: the bar of tests/models/test_model.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import sampler  # noqa: E402
import weights  # noqa: E402

NAME = "smollm2-135m-instruct"


def logits_agree(pair: weights.Pair) -> None:
    ids = np.random.default_rng(0).integers(0, pair.ours.config.vocab_size, size=(2, 12))
    with torch.no_grad():
        expected = pair.theirs(input_ids=torch.tensor(ids)).logits.numpy()
    np.testing.assert_allclose(np.asarray(pair.ours(ids)), expected, atol=1e-4)


def test_a_preset_gives_random_weights_read_back_by_transformers():
    pair = weights.load_pair("tiny")
    assert pair.name == "tiny" and pair.directory is None
    assert not pair.theirs.training
    logits_agree(pair)


def test_a_directory_and_a_fetched_name_give_the_directory_weights(tmp_path, monkeypatch):
    from arlarena_jax.models import save_pretrained, state_dict

    source = weights.load_pair("tiny").ours
    monkeypatch.setenv("ARLARENA_MODELS", str(tmp_path / "models"))
    monkeypatch.chdir(tmp_path)
    fetched = tmp_path / "models" / NAME
    save_pretrained(source, fetched)
    for name in (str(fetched), NAME):
        pair = weights.load_pair(name)
        assert pair.directory == fetched
        for key, value in state_dict(source).items():
            np.testing.assert_array_equal(state_dict(pair.ours)[key], value, err_msg=key)
        logits_agree(pair)


def test_an_unfetched_name_is_skipped_with_the_fetch_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ARLARENA_MODELS", str(tmp_path / "models"))
    monkeypatch.chdir(tmp_path)
    assert weights.load_pair(NAME) is None
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.rstrip().endswith(f"run `arlarena model fetch {NAME}`")


def test_an_unknown_name_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        weights.load_pair("no-such-model")
    assert "'no-such-model' is not a preset" in str(info.value) and "\n" not in str(info.value)


def test_chat_prompts_have_the_length_asked_and_keep_both_ends():
    from arlarena_jax.tokenization import QWEN_CHAT_TEMPLATE, render_chat
    from arlarena_jax.tokenization.vocab import train_tiny

    tokenizer = train_tiny(sampler.QUESTIONS * 4, vocab_size=400)
    tokenizer.chat_template = QWEN_CHAT_TEMPLATE
    prompts = sampler.chat_prompts(tokenizer, 10, 40)
    assert prompts.shape == (10, 40) and prompts.dtype == np.int32
    assert (prompts[0] == prompts[8]).all() and not (prompts[0] == prompts[1]).all()
    text = tokenizer.decode(prompts[1])
    full = render_chat(tokenizer, [{"role": "user", "content": " ".join(sampler.QUESTIONS)}])
    assert text.startswith(full[: full.index("user\n") + 5] + sampler.QUESTIONS[1][:4])
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    with pytest.raises(SystemExit, match="--prompt-len 4000 is longer than the chat prompts"):
        sampler.chat_prompts(tokenizer, 1, 4000)
