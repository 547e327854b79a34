"""Benchmark: forward and forward+backward tokens/s of our decoder against HF transformers.

The same weights, the same random token batch, float32 on this machine's CPU (or GPU for JAX if
present). The training step is the mean token log-likelihood and its gradient for all parameters
(transformers: the LM loss with ``labels`` and ``backward()``). Outputs are checked against each
other before timing.

Two more lines per preset:
* the log-prob pass (``token_log_probs`` at the trainer's default chunk of 128 positions, no
  gradient: the RL update's old/reference pass) against our own forward pass;
* the GEMM ceiling: one bare ``[tokens, hidden] x [hidden, intermediate]`` float32 matmul, XLA
  against PyTorch. It bounds what the whole step can reach, since both spend most of their
  time in such matmuls.

``--presets`` names presets (random weights: ours, exported with ``save_pretrained`` and read by
transformers), fetched models (``smollm2-135m-instruct``, real weights from the model cache; one
never fetched is skipped with the command that fetches it) or Hugging Face directories (real
weights, read by both sides from the directory): ``bench/weights.py``.

    python bench/model.py [--presets tiny small smollm2-135m-instruct DIR] [--batch 8] [--seq 256]
                          [--repeats 3]
"""

from __future__ import annotations

import argparse
import platform

import jax
import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx
from timing import median_seconds
from weights import load_pair

from arlarena_jax.models import token_log_probs


def jax_programs(model, seq: int):
    """``(params, forward, train, log_prob_pass)``: the model's parameters and its jitted forward
    (logits), training step (mean token NLL and its gradient, log-probs in one chunk of ``seq``)
    and log-prob pass (the trainer's default chunks, no gradient), each called as ``f(params,
    ids)``."""
    graphdef, params = nnx.split(model, nnx.Param)
    forward = jax.jit(lambda p, x: nnx.merge(graphdef, p)(x))

    def nll(p, x):
        stats = token_log_probs(nnx.merge(graphdef, p), x, chunk_size=seq)
        return -jnp.mean(stats.log_probs[:, 1:])

    train = jax.jit(jax.value_and_grad(nll))
    log_prob_pass = jax.jit(lambda p, x: token_log_probs(nnx.merge(graphdef, p), x).log_probs)
    return params, forward, train, log_prob_pass


def torch_programs(theirs, tids):
    """transformers' forward (logits, no gradient) and training step (the LM loss with
    ``labels`` and ``backward()``) on the token batch ``tids``, as argument-free callables."""

    def forward():
        with torch.no_grad():
            return theirs(input_ids=tids).logits

    def train():
        theirs.zero_grad(set_to_none=True)
        loss = theirs(input_ids=tids, labels=tids).loss
        loss.backward()
        return loss

    return forward, train


def bench(name: str, batch: int, seq: int, repeats: int) -> None:
    pair = load_pair(name)
    if pair is None:
        return
    ours, theirs, config = pair.ours, pair.theirs, pair.ours.config
    ids = np.random.default_rng(0).integers(0, config.vocab_size, size=(batch, seq))
    jids, tids = jnp.asarray(ids), torch.tensor(ids)
    params, forward, train, log_prob_pass = jax_programs(ours, seq)
    torch_forward, torch_train = torch_programs(theirs, tids)

    got, expected = np.asarray(forward(params, jids)), torch_forward().numpy()
    # 1e-3, or 1e-4 of the largest logit where that is more (real weights: logits reach ~40, and
    # 30 layers of float32 sums in another order differ by ~1e-3 there).
    atol = max(1e-3, 1e-4 * float(np.abs(expected).max()))
    np.testing.assert_allclose(got, expected, atol=atol)
    gap = float(np.abs(got - expected).max())
    del got, expected
    np.testing.assert_allclose(
        float(train(params, jids)[0]), float(torch_train().detach()), rtol=1e-4
    )

    tokens = batch * seq
    rows = [
        (
            "forward",
            median_seconds(lambda: jax.block_until_ready(forward(params, jids)), repeats),
            median_seconds(torch_forward, repeats),
        ),
        (
            "forward+backward",
            median_seconds(lambda: jax.block_until_ready(train(params, jids)), repeats),
            median_seconds(torch_train, repeats),
        ),
    ]
    t_log_probs = median_seconds(
        lambda: jax.block_until_ready(log_prob_pass(params, jids)), repeats
    )
    count = sum(x.size for x in jax.tree.leaves(params))
    weights = "random weights" if pair.directory is None else f"real weights from {pair.directory}"
    print(
        f"{name} ({count / 1e6:.1f} M parameters, {weights}), batch {batch} x {seq} tokens; "
        f"logits within {gap:.1e} of transformers' (tolerance {atol:.1e})"
    )
    for label, t_jax, t_torch in rows:
        print(
            f"  {label:<17} transformers {tokens / t_torch:9.0f} tok/s | ours (jax.jit) "
            f"{tokens / t_jax:9.0f} tok/s | ratio {t_torch / t_jax:.2f}x"
        )
    print(
        f"  log-prob pass     {tokens / t_log_probs:9.0f} tok/s | "
        f"{rows[0][1] / t_log_probs:.2f}x our forward"
    )
    gemm_ceiling(tokens, config.hidden_size, config.intermediate_size, repeats)


def gemm_ceiling(m: int, k: int, n: int, repeats: int) -> None:
    """Print one bare float32 ``[m, k] x [k, n]`` matmul's GFLOP/s, XLA against PyTorch."""
    a, b = jnp.ones((m, k)), jnp.ones((k, n))
    ta, tb = torch.ones(m, k), torch.ones(k, n)
    matmul = jax.jit(jnp.dot)
    t_jax = median_seconds(lambda: matmul(a, b).block_until_ready(), 3 * repeats)
    t_torch = median_seconds(lambda: ta @ tb, 3 * repeats)
    flops = 2 * m * k * n
    print(
        f"  GEMM {m}x{k}x{n}  torch {flops / t_torch / 1e9:6.1f} GFLOP/s | XLA "
        f"{flops / t_jax / 1e9:6.1f} GFLOP/s | ratio {t_torch / t_jax:.2f}x (ceiling)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--presets",
        nargs="+",
        default=["tiny", "small"],
        help="presets (random weights), fetched models' names or Hugging Face directories",
    )
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()}, jax {jax.__version__} on {jax.devices()[0].platform}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads), float32"
    )
    for name in args.presets:
        bench(name, args.batch, args.seq, args.repeats)


if __name__ == "__main__":
    main()
