"""Benchmark: the RL update and the log-prob pass with every micro-batch at its batch's prompt
width (``trainer.prompt_widths: 1``) against each at the narrowest of k widths that holds its
prompts (``trainer.prompt_widths: k``, :func:`arlarena_jax.train.update.at_narrowest_width`).

One mini-batch of ``--rows`` one-turn rows, micro-batches of ``--micro`` rows, in the RL
update's layout: prompts left-padded to the bucket of the longest
(:func:`~arlarena_jax.train.sequences.bucket_length`), responses of ``--response-len`` tokens.
Prompt lengths are drawn uniformly from ``--prompt-min``…``--prompt-max`` (default 250…576: the
SmolLM2 prompts of TextWorld's expert turns on 24 training games, history 1, spanned 250-576
tokens, mean 390; in a real step a micro-batch holds consecutive turns of one episode). Random
weights of the ``--preset`` shape with ``--layers`` layers (default SmolLM2-135M's shape, 4 of
its 30 layers, to keep the bench short), float32, GRPO's ratio and aggregation, AdamW. Both
modes compile first (the first call's time, compiling included, is printed as "compile": k
widths compile k programs); then their steps alternate ``--repeats`` times (so a change of the
machine's load hits both), and the medians are printed with the ratio, and the share of the
prompt columns that k widths compute. Run without the persistent compilation cache (JAX's
default), so "compile" is a compile.

    python bench/prompt_widths.py [--preset smollm2-135m] [--layers 4] [--rows 16] [--micro 2]
                                  [--widths 3] [--prompt-min 250] [--prompt-max 576]
                                  [--response-len 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # arlarena_jax from this checkout


def make_batch(args: argparse.Namespace, vocab: int):
    """(sequences, host batch, prompt width) of ``args.rows`` rows in groups of two."""
    import numpy as np

    from arlarena_jax.objectives.host import HostTurn, collate
    from arlarena_jax.train.sequences import Sequences, bucket_length, pack_rows

    rng = np.random.default_rng(0)
    lengths = rng.integers(args.prompt_min, args.prompt_max + 1, args.rows)
    prompts = [rng.integers(1, vocab, n).tolist() for n in lengths]
    responses = [rng.integers(1, vocab, args.response_len).tolist() for _ in lengths]
    turns = [
        HostTurn(i // 2, i, 0, "state", float(i % 2), 0.0, True, [-2.0] * args.response_len)
        for i in range(args.rows)
    ]
    width = bucket_length(int(lengths.max()))
    ids, mask = pack_rows(
        prompts, responses, num_rows=args.rows, prompt_length=width,
        response_length=args.response_len,
    )  # fmt: skip
    return Sequences(ids, mask), collate(turns, args.rows, args.response_len), width, lengths


def columns_share(lengths, width: int, widths: tuple[int, ...], micro: int) -> float:
    """Prompt columns computed with ``widths`` over those at ``width`` for every micro-batch."""
    chosen = []
    for start in range(0, len(lengths), micro):
        need = max(lengths[start : start + micro])
        chosen.append(min(w for w in widths if w >= need))
    return sum(chosen) / (width * len(chosen))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--micro", type=int, default=2)
    parser.add_argument("--widths", type=int, default=3)
    parser.add_argument("--prompt-min", type=int, default=250)
    parser.add_argument("--prompt-max", type=int, default=576)
    parser.add_argument("--response-len", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    from flax import nnx

    from arlarena_jax.models import QwenForCausalLM, preset
    from arlarena_jax.objectives import advantage, ratio
    from arlarena_jax.objectives import aggregate as agg
    from arlarena_jax.objectives.compose import chain
    from arlarena_jax.train.optim import OptimConfig, make_optimizer
    from arlarena_jax.train.sequences import narrower_widths
    from arlarena_jax.train.update import make_log_prob_fn, make_prepare_fn, make_update_step

    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"jax {jax.__version__}"
    )
    config = preset(args.preset, num_hidden_layers=args.layers)
    graphdef, params = nnx.split(QwenForCausalLM(config, rngs=nnx.Rngs(0)))
    objective = chain(advantage.grpo(), ratio.vanilla(), agg.seq_mean_token_mean())
    optimizer = make_optimizer(OptimConfig(lr=1e-5), 1000)
    sequences, batch, width, lengths = make_batch(args, config.vocab_size)
    sequences = jax.tree.map(jnp.asarray, sequences)
    batch = batch._replace(old_log_probs=jnp.asarray(batch.old_log_probs) * batch.response_mask)
    batch = make_prepare_fn(objective)(batch, None)[0]
    modes = {}
    for count in (1, args.widths):
        common = dict(prompt_length=width, micro_batch_size=args.micro, prompt_widths=count)
        update = make_update_step(
            graphdef, objective, optimizer, mini_batch_size=args.rows, donate=False, **common
        )
        log_probs = make_log_prob_fn(graphdef, **common)
        modes[count] = (update.step, log_probs)
    opt_state = optimizer.init(params)
    times: dict[tuple[int, str], list[float]] = {}
    for repeat in range(args.repeats + 1):  # the first round compiles
        for count, (step, log_probs) in modes.items():
            for part, call, call_args in (
                ("update", step, (params, opt_state, sequences, batch)),
                ("log-prob pass", log_probs, (params, sequences)),
            ):
                start = time.perf_counter()
                jax.block_until_ready(call(*call_args))
                key = (count, part if repeat else f"{part} compile")
                times.setdefault(key, []).append(time.perf_counter() - start)
    widths = narrower_widths(width, args.widths)
    share = columns_share(lengths, width, widths, args.micro)
    print(
        f"{args.preset} with {args.layers} layers, {args.rows} rows in micro-batches of "
        f"{args.micro}, prompts {args.prompt_min}-{args.prompt_max} (mean {lengths.mean():.0f}) "
        f"at width {width}, responses {args.response_len}; widths {widths}: "
        f"{share:.0%} of the prompt columns"
    )
    for part in ("update compile", "update", "log-prob pass compile", "log-prob pass"):
        one = statistics.median(times[(1, part)])
        many = statistics.median(times[(args.widths, part)])
        print(
            f"{part:<22} 1 width {one:7.2f} s   {args.widths} widths {many:7.2f} s   "
            f"ratio {many / one:.2f}"
        )


if __name__ == "__main__":
    main()
