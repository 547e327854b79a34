"""Benchmark: the jitted SAMPO micro-batch loss + gradient against NumPy on the same inputs.

SAMPO's per-micro-batch loss (docs/algorithms.md §8): GSPO turn-level ratio with ε = (3e-3, 4e-3),
seq-mean-token-mean, + 0.01·KL_k3 − 0.001·entropy. The baseline is a float32 NumPy
implementation of the same math with its analytic gradient with respect to the log-probs. Both
results are checked against each other before timing.

    python bench/objectives.py [--rows 8192] [--tokens 512] [--repeats 5]
"""

from __future__ import annotations

import argparse
import platform

import jax
import jax.numpy as jnp
import numpy as np
from timing import median_seconds

from arlarena_jax.objectives import aggregate, ratio, regularize
from arlarena_jax.objectives.batch import make_batch
from arlarena_jax.objectives.compose import AdvantageEstimator, chain

CLIP_LOW, CLIP_HIGH, KL_COEF, ENT_COEF = 3e-3, 4e-3, 0.01, 1e-3


def make_inputs(rows: int, tokens: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, tokens + 1, size=rows)
    mask = (np.arange(tokens)[None, :] < lengths[:, None]).astype(np.float32)
    old = -rng.gamma(1.0, 1.0, size=(rows, tokens)).astype(np.float32)
    return {
        "mask": mask,
        "old": old,
        "lp": (old + rng.normal(0, 0.003, size=(rows, tokens))).astype(np.float32),
        "ref": (old + rng.normal(0, 0.05, size=(rows, tokens))).astype(np.float32),
        "adv": (rng.normal(size=(rows, 1)) * mask).astype(np.float32),
        "entropy": rng.uniform(0, 3, size=(rows, tokens)).astype(np.float32),
    }


def numpy_sampo(x: dict[str, np.ndarray]) -> tuple[np.float32, np.ndarray]:
    """The same loss and d loss / d lp, written directly in NumPy (float32)."""
    m, lp = x["mask"], x["lp"]
    lengths = m.sum(-1)
    denom = np.maximum(lengths, 1.0)
    nonempty = (lengths > 0).astype(np.float32)
    n_valid = max(nonempty.sum(), 1.0)
    row_adv = (x["adv"] * m).sum(-1) / denom
    mean_delta = ((lp - x["old"]) * m).sum(-1) / denom
    s = np.exp(np.minimum(mean_delta, 10.0))
    l1, l2 = -row_adv * s, -row_adv * np.clip(s, 1 - CLIP_LOW, 1 + CLIP_HIGH)
    pg = (np.maximum(l1, l2) * nonempty).sum() / n_valid
    inside = (s >= 1 - CLIP_LOW) & (s <= 1 + CLIP_HIGH)
    active = (inside | (l1 > l2)) & (mean_delta < 10.0)
    row_weight = nonempty / denom / n_valid
    pg_grad = np.where(active, -row_adv * s, 0.0)[:, None] * row_weight[:, None] * m
    kappa = np.clip(x["ref"] - lp, -20.0, 20.0)
    k3 = np.clip(np.exp(kappa) - kappa - 1.0, -10.0, 10.0)
    kl = ((k3 * m).sum(-1) / denom * nonempty).sum() / n_valid
    kl_grad = (1.0 - np.exp(kappa)) * m * row_weight[:, None]
    ent = ((x["entropy"] * m).sum(-1) / denom * nonempty).sum() / n_valid
    loss = pg + KL_COEF * kl - ENT_COEF * ent
    return np.float32(loss), (pg_grad + KL_COEF * kl_grad).astype(np.float32)


def jax_sampo(x: dict[str, np.ndarray]):
    objective = chain(
        AdvantageEstimator("given", lambda b: (b.advantages, b.advantages)),
        ratio.gspo(CLIP_LOW, CLIP_HIGH),
        aggregate.seq_mean_token_mean(),
        regularize.kl("k3", KL_COEF),
        regularize.entropy(ENT_COEF),
    )
    batch = make_batch(
        x["mask"], x["old"], group_ids=np.zeros(len(x["mask"]), np.int32), ref_log_probs=x["ref"]
    )
    batch = batch._replace(advantages=jnp.asarray(x["adv"]))
    entropy = jnp.asarray(x["entropy"])

    @jax.jit
    def step(lp, batch, entropy):
        return jax.value_and_grad(lambda v: objective.loss(v, batch, entropy)[0])(lp)

    lp = jnp.asarray(x["lp"])
    return lambda: jax.block_until_ready(step(lp, batch, entropy))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    x = make_inputs(args.rows, args.tokens)
    run_jax = jax_sampo(x)
    jax_loss, jax_grad = run_jax()  # compiles
    np_loss, np_grad = numpy_sampo(x)
    np.testing.assert_allclose(float(jax_loss), float(np_loss), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.asarray(jax_grad), np_grad, rtol=1e-3, atol=1e-9)

    t_jax = median_seconds(run_jax, args.repeats)
    t_np = median_seconds(lambda: numpy_sampo(x), args.repeats)
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} "
        f"jax {jax.__version__} on {jax.devices()[0].platform}, numpy {np.__version__}"
    )
    print(f"SAMPO loss + grad, {args.rows} rows x {args.tokens} tokens (median of {args.repeats})")
    print(f"  numpy (baseline): {t_np * 1e3:9.1f} ms")
    print(f"  jax.jit         : {t_jax * 1e3:9.1f} ms")
    print(f"  speed-up jax/numpy: {t_np / t_jax:.2f}x")


if __name__ == "__main__":
    main()
