"""Each token id's bytes, as ``decode(ids, skip_special_tokens=True)`` writes them.

A byte-level BPE token's text is its bytes through GPT-2's byte ↔ unicode map; an added token
(``<think>``) is its content in UTF-8; a special token (``<|im_end|>``) writes nothing. Decoding
a sequence is then the concatenation of its tokens' bytes (before UTF-8 decoding), which lets
device code read replies without leaving the device (:mod:`envs.device`).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _byte_decoder() -> dict[str, int]:
    """GPT-2's unicode → byte map (the inverse of ``bytes_to_unicode``)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def token_bytes(tokenizer: Any) -> list[bytes]:
    """Every id's bytes (see module doc); ids past the tokenizer's vocabulary write nothing."""
    decoder = _byte_decoder()
    special = set(tokenizer.all_special_ids)
    added = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()}
    out = []
    for i, piece in enumerate(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))):
        if i in special or piece is None:
            out.append(b"")
        elif i in added:
            out.append(added[i].encode("utf-8"))
        else:
            out.append(bytes(decoder[c] for c in piece))
    return out


def token_byte_table(tokenizer: Any, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(bytes [vocab_size, widest] uint8, lengths [vocab_size] int32)`` for device lookup; the
    model's vocabulary may be padded past the tokenizer's (those rows are empty)."""
    pieces = token_bytes(tokenizer)
    if len(pieces) > vocab_size:
        raise ValueError(
            f"the tokenizer has {len(pieces)} ids, over the model's vocabulary of {vocab_size}"
        )
    width = max(1, *(len(p) for p in pieces))
    table = np.zeros((vocab_size, width), np.uint8)
    lengths = np.zeros(vocab_size, np.int32)
    for i, p in enumerate(pieces):
        table[i, : len(p)] = np.frombuffer(p, np.uint8)
        lengths[i] = len(p)
    return table, lengths
