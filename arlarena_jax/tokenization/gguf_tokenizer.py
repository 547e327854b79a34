"""A ``transformers`` tokenizer from a GGUF file's own vocabulary, merges and chat template.

Byte-level BPE only (``tokenizer.ggml.model == "gpt2"``: Llama 3, SmolLM, Qwen2/2.5/3); a
SentencePiece vocabulary (``"llama"``: Llama 2) or any other is refused in one line. Text is split
before the merges as llama.cpp splits it for the file's ``tokenizer.ggml.pre``:

* ``smollm`` (and the StarCoder family): every digit alone, then GPT-2's pattern — as SmolLM2's own
  ``tokenizer.json`` (``Digits(individual_digits)`` + ``ByteLevel``). ``transformers``' GGUF loader
  applies GPT-2's pattern alone here, so the two differ on a space run before a digit (``"a  1"``:
  ``a ĠĠ 1`` here, ``a Ġ Ġ 1`` there);
* ``qwen2``: Qwen's pattern (one digit per piece);
* ``llama-bpe`` (Llama 3): Llama 3's pattern (up to three digits a piece), and a piece that is a
  whole token is that token (``ignore_merges``);
* ``gpt2``/``default``: GPT-2's pattern.

Tokens the file marks control (``<|im_end|>``) become special tokens, user-defined ones
(``<think>``) plain added tokens, both matched whole in the text as llama.cpp does.
"""

from __future__ import annotations

from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import BPE

from arlarena_jax.tokenization.vocab import QWEN_SPLIT_PATTERN

LLAMA3_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# tokenizer.ggml.pre → (split pattern before the byte-level step or None for GPT-2's own,
# isolate each digit first, ignore_merges)
PRE_TOKENIZERS: dict[str, tuple[str | None, bool, bool]] = {
    "smollm": (None, True, False),
    "starcoder": (None, True, False),
    "gpt2": (None, False, False),
    "default": (None, False, False),
    "qwen2": (QWEN_SPLIT_PATTERN, False, False),
    "deepseek-r1-qwen": (QWEN_SPLIT_PATTERN, False, False),
    "llama-bpe": (LLAMA3_SPLIT_PATTERN, False, True),
    "llama3": (LLAMA3_SPLIT_PATTERN, False, True),
    "llama-v3": (LLAMA3_SPLIT_PATTERN, False, True),
}
CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types (1 is normal)


def _byte_spelling() -> dict[int, str]:
    """GPT-2's byte → unicode character map."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    spelling = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in spelling:
            spelling[b] = chr(256 + extra)
            extra += 1
    return spelling


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    if pre not in PRE_TOKENIZERS:
        raise ValueError(
            f"GGUF tokenizer.ggml.pre {pre!r} is not supported (supported: "
            f"{', '.join(sorted(PRE_TOKENIZERS))})"
        )
    pattern, digits, _ = PRE_TOKENIZERS[pre]
    steps = [pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated")] if digits else []
    if pattern is not None:
        steps.append(pre_tokenizers.Split(Regex(pattern), behavior="isolated"))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pattern is None))
    return pre_tokenizers.Sequence(steps)


def special_ids(meta: dict[str, Any]) -> dict[str, Any]:
    """The file's bos/eos/unk/pad ids, and the ids that end a reply (eos, eot, eom)."""
    ids = {
        name: meta.get(f"tokenizer.ggml.{key}")
        for name, key in (
            ("bos_token_id", "bos_token_id"),
            ("eos_token_id", "eos_token_id"),
            ("unk_token_id", "unknown_token_id"),
            ("pad_token_id", "padding_token_id"),
        )
    }
    stops = [
        meta.get(f"tokenizer.ggml.{k}") for k in ("eos_token_id", "eot_token_id", "eom_token_id")
    ]
    ids["stop_ids"] = tuple(dict.fromkeys(int(i) for i in stops if i is not None))
    return ids


def _backend(meta: dict[str, Any]) -> Tokenizer:
    """The ``tokenizers`` BPE of the file's tokens and merges, its added tokens and splitting."""
    tokens = list(meta["tokenizer.ggml.tokens"])
    types = list(meta.get("tokenizer.ggml.token_type") or [1] * len(tokens))
    spelling = _byte_spelling()
    alphabet = set(spelling.values())
    vocab = {}
    for index, (token, kind) in enumerate(zip(tokens, types, strict=True)):
        if kind not in (CONTROL, USER_DEFINED) and not set(token) <= alphabet:
            token = "".join(spelling[b] for b in token.encode("utf-8"))
        vocab.setdefault(token, index)
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or ()]
    pre = meta.get("tokenizer.ggml.pre", "default")
    splitting = _pre_tokenizer(pre)  # an unknown one fails before the BPE is built
    tokenizer = Tokenizer(BPE(vocab, merges, ignore_merges=PRE_TOKENIZERS[pre][2]))
    tokenizer.pre_tokenizer = splitting
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(
        [
            AddedToken(t, special=True, normalized=False)
            for t, k in zip(tokens, types, strict=True)
            if k == CONTROL
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(t, special=False, normalized=False)
            for t, k in zip(tokens, types, strict=True)
            if k == USER_DEFINED
        ]
    )
    return tokenizer


def _name(meta: dict[str, Any], token_id: int | None) -> str | None:
    return None if token_id is None else meta["tokenizer.ggml.tokens"][int(token_id)]


def gguf_tokenizer(meta: dict[str, Any]):
    """The ``transformers`` fast tokenizer a GGUF's metadata describes (see module doc)."""
    from transformers import PreTrainedTokenizerFast

    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(
            f"GGUF tokenizer.ggml.model {kind!r} is not supported (byte-level BPE 'gpt2' only)"
        )
    if not meta.get("tokenizer.ggml.tokens"):
        raise ValueError("GGUF metadata has no tokenizer.ggml.tokens")
    backend = _backend(meta)
    ids = special_ids(meta)
    bos = _name(meta, ids["bos_token_id"])
    if meta.get("tokenizer.ggml.add_bos_token") and bos is not None:
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A",
            pair=f"{bos} $A {bos} $B",
            special_tokens=[(bos, ids["bos_token_id"])],
        )
    arch = meta.get("general.architecture")
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=bos,
        eos_token=_name(meta, ids["eos_token_id"]),
        unk_token=_name(meta, ids["unk_token_id"]),
        pad_token=_name(meta, ids["pad_token_id"]),
        chat_template=meta.get("tokenizer.chat_template"),
        clean_up_tokenization_spaces=False,
        model_max_length=int(meta.get(f"{arch}.context_length") or 131_072),
    )
