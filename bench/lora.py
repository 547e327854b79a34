"""Benchmark: the RL update step with LoRA against full fine-tuning, and the sampler's LoRA mode.

Update step: :func:`arlarena_jax.train.update.make_update_step` (GRPO's ratio and aggregation,
AdamW through :func:`~arlarena_jax.train.optim.make_optimizer`) on one mini-batch of ``--rows``
rows of ``--prompt-len`` + ``--response-len`` tokens (micro-batches of ``--micro``), random
weights of the ``--preset`` shape (default SmolLM2-135M), float32. Full fine-tuning (every
parameter trained, AdamW moments for all) against LoRA (``--rank``, alpha = 2 · rank, all seven
targets). Each mode runs in a fresh process, so its memory is its own: peak resident memory of
the process (``ru_maxrss``) and its rise over the process's memory once the model, optimizer
state and batch exist; on a GPU, JAX's ``peak_bytes_in_use``. Time: median over ``--repeats``
steps after one compiling step. Printed: both lines and LoRA / full ratios.

Sampler (``--sampler``): decode step time of the engine running merged weights (W + (alpha/r) A
B, what the trainer syncs) against the adapter-aware forward (x W + (alpha/r) x A B per linear),
on the ``--sampler-preset`` shape, and the time of one merge (per weight sync).

    python bench/lora.py [--preset smollm2-135m] [--rows 4] [--prompt-len 64]
                         [--response-len 64] [--micro 2] [--rank 16] [--repeats 3]
                         [--sampler] [--sampler-preset small]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.helpers.turn_rows, arlarena_jax from this checkout


def rss_mib() -> float:
    """The process's current resident memory (MiB, Linux)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one_mode(args: argparse.Namespace) -> dict:
    """Time the update step of one mode (``args.mode``: full or lora) in this process."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx
    from timing import median_seconds

    from arlarena_jax.models import QwenForCausalLM, preset
    from arlarena_jax.models.lora import LoRAConfig, add_lora, trainable_part
    from arlarena_jax.objectives import advantage, ratio
    from arlarena_jax.objectives import aggregate as agg
    from arlarena_jax.objectives.compose import chain
    from arlarena_jax.train.optim import OptimConfig, make_optimizer
    from arlarena_jax.train.update import make_prepare_fn, make_update_step
    from tests.helpers.turn_rows import random_turn_rows

    config = preset(args.preset)
    model = QwenForCausalLM(config, rngs=nnx.Rngs(0))
    if args.mode == "lora":
        add_lora(model, LoRAConfig(args.rank, 2.0 * args.rank), seed=1)
    graphdef, params = nnx.split(model)
    del model
    objective = chain(advantage.grpo(), ratio.vanilla(), agg.seq_mean_token_mean())
    optimizer = make_optimizer(OptimConfig(lr=1e-5), 1000)
    opt_state = optimizer.init(trainable_part(params))
    rng = np.random.default_rng(0)
    sequences, batch = random_turn_rows(
        rng,
        args.rows,
        vocab=config.vocab_size,
        group_size=2,
        prompt_length=args.prompt_len,
        response_length=args.response_len,
    )
    sequences = jax.tree.map(jnp.asarray, sequences)
    old = jnp.asarray(rng.normal(-2.0, 0.5, batch.response_mask.shape), jnp.float32)
    batch = batch._replace(old_log_probs=old * batch.response_mask)
    batch = make_prepare_fn(objective)(batch, None)[0]
    step = make_update_step(
        graphdef,
        objective,
        optimizer,
        prompt_length=args.prompt_len,
        mini_batch_size=args.rows,
        micro_batch_size=args.micro,
    ).step
    trained = sum(x.size for x in jax.tree.leaves(trainable_part(params)))
    jax.block_until_ready((params, opt_state))
    before = rss_mib()
    state = [params, opt_state]

    def run():
        state[0], state[1], metrics = step(state[0], state[1], sequences, batch)
        jax.block_until_ready(metrics)

    seconds = median_seconds(run, args.repeats)
    device = jax.devices()[0]
    stats = device.memory_stats() or {}
    return {
        "mode": args.mode,
        "seconds": seconds,
        "trained_parameters": int(trained),
        "parameters": int(sum(x.size for x in jax.tree.leaves(params))),
        "rss_before_mib": before,
        "peak_rss_mib": peak_rss_mib(),
        "device_peak_mib": stats.get("peak_bytes_in_use", 0) / 2**20,
        "device": f"{device.platform}: {device.device_kind}",
    }


def decode_step_seconds(engine, prompt, repeats: int) -> float:
    """Every slot filled with ``prompt`` (not timed), then the engine's decode calls for its
    ``max_new_tokens``; median over ``repeats`` fills, time per step (bench/sampler.py's
    decode-only step)."""
    import jax
    import numpy as np

    params = engine.load_params()
    slots, k = engine.max_concurrent_decodes, engine.config.steps_per_call
    padded = np.zeros(engine.bucket_for(len(prompt)), np.int32)
    padded[: len(prompt)] = prompt
    prefix = engine.prefill(params, padded, len(prompt))
    keys = jax.random.split(jax.random.key(0), slots)
    calls = max(1, engine.config.max_new_tokens // k)
    state, times = engine.init_decode_state(), []
    for _ in range(repeats + 1):  # the first one compiles
        state = engine.insert_group(prefix, state, list(range(slots)), keys)
        jax.block_until_ready(state)
        start = time.perf_counter()
        for call in range(calls):
            window = engine.decode_window(len(prompt) + call * k)
            state, result = engine.generate(params, state, window=window)
        jax.block_until_ready((state, result))
        times.append(time.perf_counter() - start)
    return float(np.median(times[1:])) / (calls * k)


def sampler_modes(args: argparse.Namespace) -> None:
    """Decode step: merged weights against the adapter-aware forward; one merge's time."""
    import jax
    import numpy as np
    from flax import nnx
    from timing import median_seconds

    from arlarena_jax.models import QwenForCausalLM, preset
    from arlarena_jax.models.lora import LoRAConfig, add_lora, merged_model, sampler_params
    from arlarena_jax.sampler import Engine, EngineConfig
    from arlarena_jax.sampler.sampling import SamplingParams

    lora = LoRAConfig(args.rank, 2.0 * args.rank)
    model = add_lora(QwenForCausalLM(preset(args.sampler_preset), rngs=nnx.Rngs(0)), lora)
    engine_config = EngineConfig(
        max_concurrent_decodes=args.slots,
        max_prefill_length=args.prompt_len,
        max_new_tokens=args.response_len,
        steps_per_call=8,
        stop_token_ids=(),
    )
    greedy = SamplingParams(temperature=0.0)
    prompt = np.random.default_rng(0).integers(1, 1000, args.prompt_len)
    for name, sampled in (("merged", merged_model(model)), ("adapter-aware", model)):
        engine = Engine(sampled, engine_config, sampling=greedy)
        step = decode_step_seconds(engine, prompt, args.repeats)
        print(f"sampler {name:<14} decode step {step * 1e3:7.2f} ms ({args.slots} slots)")
    _, params = nnx.split(model)
    merge = median_seconds(lambda: jax.block_until_ready(sampler_params(params, lora)), 3)
    print(f"one merge (per weight sync) {merge * 1e3:7.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="smollm2-135m")
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--response-len", type=int, default=64)
    parser.add_argument("--micro", type=int, default=2)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sampler", action="store_true")
    parser.add_argument("--sampler-preset", default="small")
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--mode", choices=("full", "lora"), default=None)  # internal: one mode
    args = parser.parse_args()
    if args.mode is not None:
        print(json.dumps(one_mode(args)))
        return
    if args.sampler:
        sampler_modes(args)
        return
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    results = {}
    for mode in ("full", "lora"):
        command = [sys.executable, __file__, *sys.argv[1:], "--mode", mode]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results[mode] = r = json.loads(out.strip().splitlines()[-1])
        rise = r["peak_rss_mib"] - r["rss_before_mib"]
        print(
            f"{mode:<5} {args.preset} {args.rows} x {args.prompt_len + args.response_len} tokens: "
            f"step {r['seconds']:.3f} s, trains {r['trained_parameters']:,} of "
            f"{r['parameters']:,} parameters, peak RSS {r['peak_rss_mib']:.0f} MiB "
            f"(+{rise:.0f} MiB over model + optimizer state), device peak "
            f"{r['device_peak_mib']:.0f} MiB [{r['device']}]"
        )
    full, lora = results["full"], results["lora"]
    print(
        f"LoRA / full: step time {lora['seconds'] / full['seconds']:.2f}, peak RSS "
        f"{lora['peak_rss_mib'] / full['peak_rss_mib']:.2f}"
    )


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"({time.perf_counter() - start:.0f} s)", file=sys.stderr)
