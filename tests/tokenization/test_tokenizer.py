"""Tokenizers: the Qwen chat format, a tiny trained tokenizer, loading a model directory.

Expected chat strings are written out by hand from the rules in ``tokenization/chat.py`` (Qwen3's
conventions), not produced by the code under test.
"""

from __future__ import annotations

import json
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arlarena_jax.tokenization import (
    QWEN_ADDED_TOKENS,
    encode_chat,
    load_tokenizer,
    render_chat,
    stop_token_ids,
    train_tiny,
)

CORPUS = [
    "You are an agent in a 6x6 Sokoban room. Push the box onto the target.",
    "<think>The box is left of the target, so I push right.</think><action>right</action>",
    "Admissible actions: go to cabinet 1, open drawer 2, take apple 1 from countertop 3.",
    "Reward: -0.1. Step 3 of 15. Thé café naïve 日本語 123456.",
] * 20


@pytest.fixture(scope="module")
def tiny():
    return train_tiny(CORPUS, vocab_size=512)


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def test_generation_prompt_with_and_without_thinking(tiny):
    msgs = [{"role": "system", "content": "S"}, user("Q")]
    base = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
    assert render_chat(tiny, msgs) == base
    assert render_chat(tiny, msgs, enable_thinking=False) == base + "<think>\n\n</think>\n\n"
    assert render_chat(tiny, msgs, add_generation_prompt=False) == base.removesuffix(
        "<|im_start|>assistant\n"
    )


def test_reasoning_dropped_from_history_kept_after_last_user(tiny):
    msgs = [
        user("Q1"),
        assistant("<think>\nr1\n</think>\n\nA1"),
        user("Q2"),
        assistant("<think>\nr2\n</think>\n\ncall"),
        {"role": "tool", "content": "out1"},
        {"role": "tool", "content": "out2"},
    ]
    expected = (
        "<|im_start|>user\nQ1<|im_end|>\n"
        "<|im_start|>assistant\nA1<|im_end|>\n"
        "<|im_start|>user\nQ2<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nr2\n</think>\n\ncall<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nout1\n</tool_response>"
        "\n<tool_response>\nout2\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert render_chat(tiny, msgs) == expected


def test_final_assistant_turn_is_written_with_its_think_block(tiny):
    """An SFT sample (no generation prompt) ends with the expert reply, think block included."""
    text = render_chat(
        tiny, [user("Q"), assistant("<action>up</action>")], add_generation_prompt=False
    )
    assert text == (
        "<|im_start|>user\nQ<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n<action>up</action><|im_end|>\n"
    )


def test_unknown_role_is_a_clear_error(tiny):
    with pytest.raises(Exception, match="unknown chat role critic"):
        render_chat(tiny, [{"role": "critic", "content": "x"}])


def test_tiny_vocabulary_layout(tiny):
    vocab = tiny.get_vocab()
    assert len(tiny) <= 512
    ids = [vocab[text] for text, _ in QWEN_ADDED_TOKENS]
    first = ids[0]
    assert ids == list(range(first, first + len(QWEN_ADDED_TOKENS)))  # Qwen's order, contiguous
    assert first == len(tiny) - len(QWEN_ADDED_TOKENS)  # after the learned vocabulary
    for text, _ in QWEN_ADDED_TOKENS:
        assert tiny(text, add_special_tokens=False)["input_ids"] == [vocab[text]]
    ids = tiny("<|im_end|><think>x</think>", add_special_tokens=False)["input_ids"]
    assert tiny.decode(ids, skip_special_tokens=True) == "<think>x</think>"  # think is not special
    assert tiny.eos_token == "<|im_end|>" and tiny.pad_token == "<|endoftext|>"
    assert tiny.bos_token is None


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=60))
def test_tiny_round_trips_any_text(tiny, text):
    """Byte-level BPE: every text encodes, and decodes to its NFC normal form."""
    ids = tiny(text, add_special_tokens=False)["input_ids"]
    assert tiny.decode(ids) == unicodedata.normalize("NFC", text)


def test_training_compresses_the_corpus(tiny):
    text = CORPUS[1]
    assert len(tiny(text, add_special_tokens=False)["input_ids"]) < len(text.encode()) / 2


def test_isolated_characters_are_never_merged_with_their_neighbours():
    """``isolate`` (EnvSpec.tokenizer_isolate): a grid that the plain tokenizer compresses is
    encoded one token per isolated character, and other text still merges."""
    grids = ["#####\n#_OX#\n#__P#\n#####"] * 200
    plain = train_tiny(grids, vocab_size=320)
    alone = train_tiny(grids, vocab_size=320, isolate="#_OXP")
    row = "#__OX_P#"
    assert len(plain(row, add_special_tokens=False)["input_ids"]) < len(row)
    ids = alone(row, add_special_tokens=False)["input_ids"]
    assert ids == [alone(c, add_special_tokens=False)["input_ids"][0] for c in row]
    assert alone.decode(ids) == row


def test_vocab_too_small_for_bytes_and_added_tokens():
    with pytest.raises(ValueError, match=r"vocab_size 200 .* at least 282"):
        train_tiny(CORPUS, vocab_size=200)


def test_save_and_load_directory(tiny, tmp_path):
    tiny.save_pretrained(tmp_path)
    loaded = load_tokenizer(tmp_path)
    msgs = [user("Push the box."), assistant("<think>x</think>ok"), user("again")]
    assert encode_chat(loaded, msgs) == encode_chat(tiny, msgs)
    assert loaded.chat_template == tiny.chat_template


def test_directory_without_chat_template_gets_qwens(tiny, tmp_path):
    tiny.save_pretrained(tmp_path)
    (tmp_path / "chat_template.jinja").unlink(missing_ok=True)
    config_path = tmp_path / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)
    config_path.write_text(json.dumps(config))
    loaded = load_tokenizer(tmp_path)
    assert render_chat(loaded, [user("Q")], enable_thinking=False).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_missing_tokenizer_files_name_the_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"no tokenizer files .* in {tmp_path}"):
        load_tokenizer(tmp_path)


def test_stop_ids_include_chat_end_and_generation_config(tiny, tmp_path):
    vocab = tiny.get_vocab()
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 8]}))
    ids = stop_token_ids(tiny, tmp_path)
    assert ids == (vocab["<|im_end|>"], vocab["<|endoftext|>"], 7, 8)
    assert stop_token_ids(tiny) == (vocab["<|im_end|>"], vocab["<|endoftext|>"])
