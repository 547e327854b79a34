"""A left-padded batch of unequal lengths and transformers' logits on it: the reference the
decoder families are compared with."""

from __future__ import annotations

import numpy as np
import torch

# The tiny decoder every model test compares against transformers (test_model, test_llama,
# test_rope_scaling): sizes only; each test adds its family's keys (head_dim, tie, rope).
TINY_HF = dict(
    vocab_size=97,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    rope_theta=10000.0,
)
IDS = np.array([[0, 0, 0, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7], [0, 9, 10, 11, 12, 13, 14]])
MASK = np.array([[0, 0, 0, 1, 1, 1, 1], [1] * 7, [0, 1, 1, 1, 1, 1, 1]])
REAL = MASK.astype(bool)


def hf_logits(model) -> np.ndarray:
    positions = np.clip(MASK.cumsum(-1) - 1, 0, None)  # what generate() uses for left padding
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(IDS),
            attention_mask=torch.tensor(MASK),
            position_ids=torch.tensor(positions),
        )
    return out.logits.numpy()
