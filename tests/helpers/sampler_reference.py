"""The sampling engine's references: tiny model settings and prompts, a naive full-forward greedy
loop, teacher-forced log-probs, transformers' generate, and a driver that fills the engine's
slots and decodes them to the end."""

from __future__ import annotations

import functools

import jax
import numpy as np
import torch
from flax import nnx

from arlarena_jax.models.logprobs import token_log_probs
from arlarena_jax.models.qwen import QwenForCausalLM
from arlarena_jax.sampler import Engine, SamplingParams
from tests.helpers.hf_reference import TINY_HF

VOCAB = 256
COMMON = TINY_HF | dict(vocab_size=VOCAB, max_position_embeddings=256, initializer_range=0.1)
# Two prefill buckets (8, 16); a cache of 32 tokens per slot.
BASE = dict(
    max_concurrent_decodes=4, max_prefill_length=16, max_new_tokens=16, min_prefill_bucket=8
)
WIDTH = 32  # the naive loop's padded sequence length (= the engine's cache length)
PROMPTS = [[5, 17, 3], [9, 8, 7, 6, 5, 4, 3, 2, 1, 10, 11, 12, 13], [200, 1, 77, 31, 4, 4, 90], []]
PROMPTS[3] = list(range(100, 116))  # 16 tokens: the largest bucket, full
BUDGETS = [12, 9, 16, 5]  # unequal, so slots finish at different steps
SAMPLED = SamplingParams(temperature=0.7, top_k=20, top_p=0.9)


# ---- reference computations ----------------------------------------------------------------


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, np.float64)
    shifted = z - z.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


@functools.partial(jax.jit, static_argnums=0)
def _full_logits(graphdef, state, ids, mask):
    return nnx.merge(graphdef, state)(ids, mask)


def naive_greedy(model: QwenForCausalLM, prompts, n_new: int, width: int = WIDTH):
    """Greedy continuations: at every step, the full forward pass over prompt + generated so far.

    Rows are right-padded to ``width`` (causal attention: padding after a token never changes its
    logits) and the batch to 8 rows, so the forward compiles once per model structure.
    """
    graphdef, state = nnx.split(model)
    seqs = [list(p) for p in prompts]
    log_probs: list[list[float]] = [[] for _ in prompts]
    for _ in range(n_new):
        ids = np.zeros((max(8, len(seqs)), width), np.int32)
        mask = np.zeros_like(ids)
        for b, s in enumerate(seqs):
            ids[b, : len(s)], mask[b, : len(s)] = s, 1
        logits = np.asarray(_full_logits(graphdef, state, ids, mask))
        for b, s in enumerate(seqs):
            row = logits[b, len(s) - 1]
            token = int(row.argmax())
            log_probs[b].append(float(log_softmax(row)[token]))
            s.append(token)
    return [s[len(p) :] for s, p in zip(seqs, prompts, strict=True)], log_probs


@functools.partial(jax.jit, static_argnums=(0, 4))
def _token_log_probs(graphdef, state, ids, mask, temperature):
    return token_log_probs(nnx.merge(graphdef, state), ids, mask, temperature=temperature)[0]


def teacher_forced(model, prompts, outputs, temperature: float) -> list[np.ndarray]:
    """log softmax(z/τ)[token] of each generated token, from one pass over prompt + output."""
    pairs = list(zip(prompts, outputs, strict=True))
    ids = np.zeros((len(pairs), WIDTH), np.int32)
    mask = np.zeros_like(ids)
    for b, (p, o) in enumerate(pairs):
        ids[b, : len(p) + len(o)], mask[b, : len(p) + len(o)] = list(p) + list(o), 1
    lp = np.asarray(_token_log_probs(*nnx.split(model), ids, mask, temperature))
    return [lp[b, len(p) : len(p) + len(o)] for b, (p, o) in enumerate(pairs)]


# ---- driving the engine through its JetStream-style API --------------------------------------


def padded(prompt, engine: Engine) -> np.ndarray:
    out = np.zeros(engine.bucket_for(len(prompt)), np.int32)
    out[: len(prompt)] = prompt
    return out


def collect(engine: Engine, params, state, n_slots: int, sampling=None):
    """Call ``generate`` until the first ``n_slots`` slots are done; their tokens and log-probs."""
    tokens: list[list[int]] = [[] for _ in range(n_slots)]
    log_probs: list[list[float]] = [[] for _ in range(n_slots)]
    for _ in range(64):
        state, result = engine.generate(params, state, sampling=sampling)
        t, valid, lp, done = jax.device_get(
            (result.tokens, result.valid, result.log_probs, result.done)
        )
        for slot in range(n_slots):
            tokens[slot] += t[slot][valid[slot]].tolist()
            log_probs[slot] += lp[slot][valid[slot]].tolist()
        if done[:n_slots].all():
            return tokens, log_probs, state
    raise AssertionError("slots never finished")


def run_slots(engine, prompts, budgets, *, params=None, sampling=None, seed=0, use_insert=False):
    """Prompt i prefilled and inserted into slot i (slot 0 through ``insert`` if asked, the others
    through ``insert_group`` with one key), then decoded together until all are done.

    The prefill runs with the engine's default (greedy) setting: ``insert_group`` draws each
    slot's first token itself, with ``sampling``, from the prefix logits."""
    params = engine.load_params() if params is None else params
    state = engine.init_decode_state()
    keys = jax.random.split(jax.random.key(seed), len(prompts))
    for slot, (prompt, budget) in enumerate(zip(prompts, budgets, strict=True)):
        prefix = engine.prefill(params, padded(prompt, engine), len(prompt))
        if use_insert and slot == 0:
            state = engine.insert(prefix, state, slot, max_new_tokens=budget)
        else:
            state = engine.insert_group(
                prefix,
                state,
                [slot],
                keys[slot : slot + 1],
                max_new_tokens=budget,
                sampling=sampling,
            )
    return collect(engine, params, state, len(prompts), sampling)


def hf_generate(hf, prompts, n_new: int, *, batched: bool) -> list[list[int]]:
    with torch.no_grad():
        if not batched:
            return [
                hf.generate(torch.tensor([p]), do_sample=False, max_new_tokens=n_new)[
                    0, len(p) :
                ].tolist()
                for p in prompts
            ]
        width = max(len(p) for p in prompts)  # left-padded batch, as transformers expects
        ids = torch.zeros((len(prompts), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for b, p in enumerate(prompts):
            ids[b, width - len(p) :], mask[b, width - len(p) :] = torch.tensor(p), 1
        out = hf.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=n_new)
        return out[:, width:].tolist()


SHORT = [PROMPTS[0], PROMPTS[2], [1, 2], [250, 251, 252, 253, 254]]  # all in the 8-token bucket
