"""Tokenizers: a model directory's through ``transformers``, the Qwen chat format with its thinking
switch, the real Qwen vocabulary converted from its tiktoken file, and tiny trained ones.

Only the tokenizers of ``transformers`` are used, so its advice that PyTorch is missing (printed
on import in an environment without the ``dev`` extra) is turned off unless the user set
``TRANSFORMERS_NO_ADVISORY_WARNINGS`` themselves."""

import os

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

from arlarena_jax.tokenization.chat import QWEN_CHAT_TEMPLATE, encode_chat, render_chat
from arlarena_jax.tokenization.load import load_tokenizer, stop_token_ids
from arlarena_jax.tokenization.vocab import QWEN_ADDED_TOKENS, from_tiktoken, train_tiny

__all__ = [
    "QWEN_ADDED_TOKENS",
    "QWEN_CHAT_TEMPLATE",
    "encode_chat",
    "from_tiktoken",
    "load_tokenizer",
    "render_chat",
    "stop_token_ids",
    "train_tiny",
]
