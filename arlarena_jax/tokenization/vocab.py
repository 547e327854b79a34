"""Byte-level BPE tokenizers in Qwen's layout: the real vocabulary converted offline, or a tiny one.

Qwen2/2.5/3 share one byte-level BPE of 151,643 tokens (distributed, among other places, as the
tiktoken rank file ``qwen.tiktoken``), followed by added tokens at fixed ids: ``<|endoftext|>``
151643, ``<|im_start|>`` 151644, ``<|im_end|>`` 151645, …, ``<think>`` 151667, ``</think>``
151668. Text is NFC-normalised, split by Qwen's regex (one digit per piece), then byte-level
encoded.

- :func:`from_tiktoken` converts a rank file into a ``transformers`` fast tokenizer (vocabulary
  and merges recovered by ``transformers``' ``TikTokenConverter``), with the added tokens and the
  chat template.
- :func:`train_tiny` trains the same kind of tokenizer on a small corpus with ``tokenizers`` (for
  tests and the CPU configurations whose models have a vocabulary of a few hundred tokens); the
  added tokens follow the learned vocabulary in the same order.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer
from transformers import PreTrainedTokenizerFast

from arlarena_jax.tokenization.chat import QWEN_CHAT_TEMPLATE

QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN_BASE_VOCAB = 151_643

# (text, special): special tokens are dropped by decode(skip_special_tokens=True); the others
# (tool-call, fill-in-the-middle and think markers) are kept, as in Qwen3's tokenizer.
QWEN_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)


def _qwen_pipeline(tokenizer: Tokenizer, isolate: str = "") -> Tokenizer:
    """Qwen's normaliser, split and byte-level steps; each character of ``isolate`` is first
    split off as a piece of its own (so no merge ever joins it to a neighbour)."""
    tokenizer.normalizer = normalizers.NFC()
    split = [pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated", invert=False)]
    if isolate:
        chars = "".join(f"\\x{{{ord(c):x}}}" for c in dict.fromkeys(isolate))
        split.insert(0, pre_tokenizers.Split(Regex(f"[{chars}]"), behavior="isolated"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [*split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _add_qwen_tokens(tokenizer: Tokenizer) -> None:
    tokenizer.add_tokens(
        [
            AddedToken(text, special=special, normalized=False, single_word=False)
            for text, special in QWEN_ADDED_TOKENS
        ]
    )


def wrap(tokenizer: Tokenizer, *, eos_token: str = "<|im_end|>") -> PreTrainedTokenizerFast:
    """A ``transformers`` tokenizer around a Qwen-layout ``tokenizers.Tokenizer``.

    End of sequence ``<|im_end|>`` (chat models) and padding ``<|endoftext|>``, no BOS, as Qwen3.
    """
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=eos_token,
        pad_token="<|endoftext|>",
        chat_template=QWEN_CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
        model_max_length=131_072,
    )


def from_tiktoken(path: str | Path) -> PreTrainedTokenizerFast:
    """Convert Qwen's tiktoken rank file (``qwen.tiktoken``) into the Qwen fast tokenizer."""
    from transformers.convert_slow_tokenizer import TikTokenConverter

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no tiktoken rank file at {path}")
    converter = TikTokenConverter(vocab_file=str(path), pattern=QWEN_SPLIT_PATTERN)
    tokenizer = _qwen_pipeline(converter.tokenizer())
    size = tokenizer.get_vocab_size()
    if size != QWEN_BASE_VOCAB:
        raise ValueError(
            f"{path} has {size} ranks; the Qwen2/2.5/3 vocabulary has {QWEN_BASE_VOCAB}"
        )
    _add_qwen_tokens(tokenizer)
    return wrap(tokenizer)


def train_tiny(
    texts: Iterable[str], vocab_size: int = 512, isolate: str = ""
) -> PreTrainedTokenizerFast:
    """Train a Qwen-layout byte-level BPE of ``vocab_size`` tokens in total (added ones included).

    The 256 byte symbols are always in the vocabulary, so any text (any language, any byte) stays
    encodable; merges are learned from ``texts``. Every character of ``isolate`` is always encoded
    on its own, whatever surrounds it (Sokoban's grid symbols: a cell is then one fixed token
    sequence, which the on-device prompt renderer relies on).
    """
    n_added = len(QWEN_ADDED_TOKENS)
    learned = vocab_size - n_added
    if learned < 256:
        raise ValueError(
            f"vocab_size {vocab_size} leaves {learned} ids for the byte-level base; "
            f"it must be at least {256 + n_added}"
        )
    tokenizer = _qwen_pipeline(Tokenizer(BPE()), isolate)
    trainer = BpeTrainer(
        vocab_size=learned,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    _add_qwen_tokens(tokenizer)
    return wrap(tokenizer)
