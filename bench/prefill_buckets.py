"""Benchmark: the sampler's turn with prompts padded to powers of two (one prefill bucket per
octave, the default) against k buckets per octave (``sampler.prefill_buckets_per_octave: k``),
each with the waiting prompts taken in arrival order (the default) and shortest first
(``sampler.prefill_shortest_first: true``).

One turn of a text environment's rollout: ``--requests`` prompts, their lengths drawn uniformly
from ``--prompt-min``…``--prompt-max`` (default 250…576: the SmolLM2 prompts of TextWorld's expert
turns on 24 training games, history 1, spanned 250-576 tokens, mean 390; bench/prompt_widths.py
measured them), one sample each, greedy, ``--new-tokens`` tokens each (no stop token, so every
setting decodes the same tokens). The engine is the SmolLM2 TextWorld config's
(configs/textworld/smollm2_base.yaml: 16 slots, prompts up to 1,024 tokens, 8 decode steps a
call, prefill batches of at most 4,096 padded tokens), over random weights of the ``--preset``
shape with ``--layers`` layers (default SmolLM2-135M's, 4 of its 30 layers, to keep the bench
short). Each setting runs the turn once to compile (its time, compiling included, is printed as
"first turn", with the count of prefill programs it compiled); then the settings alternate
``--repeats`` times (so a change of the machine's load hits all of them) and the medians are
printed with the ratio against the first setting (one bucket per octave, arrival order), and
the prompt tokens each pads them to.

    python bench/prefill_buckets.py [--preset smollm2-135m] [--layers 4] [--requests 64]
                                    [--prompt-min 250] [--prompt-max 576] [--new-tokens 16]
                                    [--per-octave 1 4] [--orders arrival shortest] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # arlarena_jax from this checkout

from timing import machine  # noqa: E402 (this folder's helpers)

ORDERS = {"arrival": False, "shortest": True}  # the waiting prompts' order: prefill_shortest_first
TEXTWORLD_ENGINE = dict(  # configs/textworld/smollm2_base.yaml's sampler section
    max_concurrent_decodes=16, max_prefill_length=1024, max_new_tokens=32, steps_per_call=8
)


def padded_tokens(engine, lengths) -> int:
    """The prompt tokens the driver's prefill batches hold: each batch's rows at its bucket,
    batches formed as the driver forms them when every slot is free (an upper bound: later
    batches form as slots free up, a few rows at a time)."""
    from arlarena_jax.sampler.driver import pow2

    if engine.config.prefill_shortest_first:
        lengths = sorted(lengths)
    total, batch = 0, []
    for length in [*lengths, None]:
        grown = batch if length is None else [*batch, length]
        too_wide = pow2(len(grown)) * engine.bucket_for(max(grown)) > (
            engine.config.prefill_batch_tokens
        )
        full = len(grown) > engine.max_concurrent_decodes
        if batch and (length is None or too_wide or full):
            total += pow2(len(batch)) * engine.bucket_for(max(batch))
            batch = []
        if length is not None:
            batch.append(length)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--prompt-min", type=int, default=250)
    parser.add_argument("--prompt-max", type=int, default=576)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--per-octave", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--orders", nargs="+", choices=ORDERS, default=list(ORDERS))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import jax
    import numpy as np
    from flax import nnx

    from arlarena_jax.models import QwenForCausalLM, preset
    from arlarena_jax.sampler import GREEDY, Engine, EngineConfig, Request, generate

    print(f"{machine()}; jax {jax.__version__}")
    config = preset(args.preset, num_hidden_layers=args.layers)
    model = QwenForCausalLM(config, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    lengths = rng.integers(args.prompt_min, args.prompt_max + 1, args.requests)
    requests = [
        Request(rng.integers(1, config.vocab_size, n).tolist(), max_new_tokens=args.new_tokens)
        for n in lengths
    ]
    engines = {
        (k, order): Engine(
            model,
            EngineConfig(
                **TEXTWORLD_ENGINE,
                prefill_buckets_per_octave=k,
                prefill_shortest_first=ORDERS[order],
            ),
            sampling=GREEDY,
        )
        for order in args.orders
        for k in args.per_octave
    }
    times: dict[tuple[tuple[int, str], bool], list[float]] = {}
    outputs = {}
    for repeat in range(args.repeats + 1):  # the first round compiles
        for k, engine in engines.items():
            start = time.perf_counter()
            outputs[k] = generate(engine, requests, sampling=GREEDY)
            times.setdefault((k, repeat == 0), []).append(time.perf_counter() - start)
    report(args, engines, lengths, times, outputs)


def report(args, engines, lengths, times, outputs) -> None:
    base = next(iter(engines))
    print(
        f"{args.preset} with {args.layers} layers; {args.requests} prompts of "
        f"{args.prompt_min}-{args.prompt_max} tokens (mean {lengths.mean():.0f}, "
        f"{int(lengths.sum())} in all), {args.new_tokens} new tokens each, greedy"
    )
    same = all(
        [c.token_ids for c in outputs[k][i]] == [c.token_ids for c in outputs[base][i]]
        for k in outputs
        for i in range(len(outputs[k]))
    )
    print(f"the same tokens under every setting: {same}")
    base_turn = statistics.median(times[(base, False)])
    for (k, order), engine in engines.items():
        turn = statistics.median(times[((k, order), False)])
        first, programs = times[((k, order), True)][0], engine.traces["prefill_batch"]
        print(
            f"{k} per octave {engine.config.prefill_buckets}, {order} first: first turn "
            f"{first:6.1f} s ({programs} prefill programs), turn {turn:6.2f} s (ratio "
            f"{turn / base_turn:.2f}), padded prompt tokens {padded_tokens(engine, lengths)}"
        )


if __name__ == "__main__":
    main()
