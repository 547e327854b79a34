"""A model directory's tokenizer through ``transformers``, with the ids generation stops on."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from arlarena_jax.tokenization.chat import QWEN_CHAT_TEMPLATE

log = logging.getLogger(__name__)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json")
CHAT_END_TOKENS = ("<|im_end|>", "<|endoftext|>")


def load_tokenizer(path: str | Path):
    """``AutoTokenizer.from_pretrained(path)``, offline, with the Qwen chat template if it has none.

    The directory's own chat template (Qwen3's, with the ``enable_thinking`` switch) is kept.
    """
    from transformers import AutoTokenizer

    path = Path(path)
    if not path.is_dir() or not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise FileNotFoundError(f"no tokenizer files ({', '.join(TOKENIZER_FILES)}) in {path}")
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if not getattr(tokenizer, "chat_template", None):
        log.warning("%s has no chat template; using the Qwen chat template", path)
        tokenizer.chat_template = QWEN_CHAT_TEMPLATE
    return tokenizer


def stop_token_ids(tokenizer, model_dir: str | Path | None = None) -> tuple[int, ...]:
    """Ids that end a reply: the tokenizer's EOS, ``<|im_end|>`` and ``<|endoftext|>`` when in the
    vocabulary, and ``eos_token_id`` of the model directory's ``generation_config.json``."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    vocab = tokenizer.get_vocab()
    ids += [vocab[t] for t in CHAT_END_TOKENS if t in vocab]
    if model_dir is not None:
        gen_config = Path(model_dir) / "generation_config.json"
        if gen_config.is_file():
            eos = json.loads(gen_config.read_text()).get("eos_token_id")
            ids += [eos] if isinstance(eos, int) else list(eos or [])
    return tuple(dict.fromkeys(ids))
