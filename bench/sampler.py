"""Benchmark: output tokens/s of our sampler against Hugging Face ``transformers`` ``generate``.

The same random weights (ours, exported with ``save_pretrained`` and read by transformers), the
same prompts (random ids, all of ``--prompt-len`` tokens, no padding) and the same number of new
tokens (``--new-tokens``, no stop tokens), greedy, float32 on this machine's CPU (or GPU for JAX
if present). Ours is the whole driver (:func:`arlarena_jax.sampler.driver.generate`: prefills,
inserts and decode steps, results on the host; it prefills the waiting requests together, as
transformers does the whole batch); transformers' ``generate`` likewise includes its prefill.
Compilation is excluded: every function is warmed up once before timing (the warm-up run is also
the one whose token ids are checked against transformers).

Also reported: our decode-only step time (``engine.generate`` on a filled decode state, divided by
``steps_per_call``) and its memory-bandwidth floor: the bytes one decode step must read (every
parameter once, plus the whole preallocated KV cache, which our attention reads at every step)
divided by this machine's copy bandwidth (measured here: a 256 MiB array copied by NumPy, one
thread, and by PyTorch, all threads; bytes read + written over the fastest time, the better of
the two). Where the model fits in the last-level cache (``tiny``) a step can beat this floor. At
large batches a CPU decode step is compute-bound instead, so the compute floor is printed too:
the step's FLOPs (2 · parameters · batch for the matmuls, 4 · layers · heads · head_dim ·
cache_length · batch for attention over the whole cache) over the measured float32 matmul rate
(a 2048² ``jnp.dot``).

    python bench/sampler.py [--presets tiny small] [--batches 1 8 32 64] [--prompt-len 64]
                            [--new-tokens 64] [--repeats 3] [--steps-per-call 8]

The defaults take about 2 minutes on an idle 2-core machine (longer when it is shared: PyTorch's
two threads slow down sharply under contention, so compare numbers from quiet runs only).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers
from flax import nnx
from timing import best_seconds, median_seconds

from arlarena_jax.models import QwenForCausalLM, preset, save_pretrained
from arlarena_jax.sampler.driver import Request, generate
from arlarena_jax.sampler.engine import Engine, EngineConfig
from arlarena_jax.sampler.sampling import GREEDY


@dataclasses.dataclass
class Row:
    preset: str
    params_m: float
    batch: int
    ours_tps: float  # output tokens/s, driver end to end
    theirs_tps: float
    agree: str  # greedy agreement summary
    step_ms: float  # our decode-only step
    floor_ms: float  # memory-bandwidth floor of one decode step
    compute_ms: float  # compute floor of one decode step


def copy_bandwidth(megabytes: int = 256, repeats: int = 7) -> tuple[float, float]:
    """Bytes/s (read + written) of a large array copy: NumPy (one thread), PyTorch (all)."""
    src = np.ones(megabytes * 2**20 // 8, np.float64)
    dst = np.empty_like(src)
    t_numpy = best_seconds(lambda: np.copyto(dst, src), repeats)
    tsrc, tdst = torch.from_numpy(src), torch.from_numpy(dst)
    t_torch = best_seconds(lambda: tdst.copy_(tsrc), repeats)
    return 2 * src.nbytes / t_numpy, 2 * src.nbytes / t_torch


def matmul_flops(n: int = 2048, repeats: int = 5) -> float:
    """FLOP/s of a float32 ``n × n`` matmul under ``jax.jit`` (fastest of ``repeats``)."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    dot = jax.jit(jnp.dot)
    return 2 * n**3 / best_seconds(lambda: jax.block_until_ready(dot(a, a)), repeats)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def first_mismatch(a: np.ndarray, b: np.ndarray) -> int:
    """Index of the first differing token of two equal-length rows, or their length."""
    diff = np.nonzero(a != b)[0]
    return int(diff[0]) if diff.size else len(a)


def logit_gap(theirs, ids: np.ndarray, best: int, other: int) -> float:
    """transformers' logit of token ``best`` minus that of ``other`` after ``ids``."""
    with torch.no_grad():
        logits = theirs(input_ids=torch.tensor(ids[None])).logits[0, -1].double()
    return float(logits[best] - logits[other])


def check_greedy(theirs, prompts, ours, ref, tie_tol: float) -> str:
    """Compare greedy continuations row by row. A row may diverge only at a near-tie: where
    transformers' logit of its own token exceeds its logit of our token by at most ``tie_tol``
    (float32 rounding can flip such a choice; after it the rows continue from different prefixes
    and are no longer comparable). Returns a summary."""
    n = ref.shape[1]
    agreed, gaps = [], []
    for row, (mine, theirs_row) in enumerate(zip(ours, ref, strict=True)):
        j = first_mismatch(mine, theirs_row)
        if j == n:
            continue
        gap = logit_gap(
            theirs, np.concatenate([prompts[row], theirs_row[:j]]), theirs_row[j], mine[j]
        )
        if gap > tie_tol:
            raise AssertionError(
                f"row {row}: greedy token {j} differs (ours {mine[j]}, transformers "
                f"{theirs_row[j]}) where transformers' logits differ by {gap:.2e} > "
                f"{tie_tol:.0e}: not a near-tie"
            )
        agreed.append(j)
        gaps.append(gap)
    summary = f"{len(ours) - len(agreed)}/{len(ours)} rows"
    if agreed:
        summary += (
            f" (the others agree on {min(agreed)}+ tokens, then part at a near-tie, logit gap "
            f"<= {max(gaps):.0e})"
        )
    return summary


def decode_step_seconds(engine: Engine, prompt: np.ndarray, repeats: int) -> float:
    """Our decode-only step: every slot filled with ``prompt``, ``engine.generate`` called back to
    back for ``max_decode_length`` steps, time per step. A step's cost does not depend on the
    data (dense attention over the whole cache, masked), so slots that reach their budget during
    the repeats cost the same as active ones."""
    params = engine.load_params()
    slots, k = engine.max_concurrent_decodes, engine.config.steps_per_call
    state = engine.init_decode_state()
    prefix = engine.prefill(params, prompt, len(prompt))
    keys = jax.random.split(jax.random.key(0), slots)
    state = engine.insert_group(prefix, state, list(range(slots)), keys)
    calls = max(1, engine.config.max_decode_length // k)

    def decode():
        nonlocal state
        for _ in range(calls):
            state, result = engine.generate(params, state)
        jax.block_until_ready((state, result))

    return median_seconds(decode, repeats) / (calls * k)


def bench(
    name: str,
    batches: list[int],
    prompt_len: int,
    new_tokens: int,
    repeats: int,
    steps_per_call: int,
    bandwidth: float,
    flops: float,
    tie_tol: float,
) -> list[Row]:
    config = preset(name)
    model = QwenForCausalLM(config, rngs=nnx.Rngs(0))
    with tempfile.TemporaryDirectory() as directory:
        save_pretrained(model, directory)
        theirs = transformers.AutoModelForCausalLM.from_pretrained(directory).eval()
    param_leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    param_bytes = sum(x.nbytes for x in param_leaves)
    params_m = sum(x.size for x in param_leaves) / 1e6
    print(f"{name} ({params_m:.1f} M parameters, {param_bytes / 2**20:.1f} MiB)")
    rows = []
    for batch in batches:
        rng = np.random.default_rng(batch)
        prompts = rng.integers(0, config.vocab_size, size=(batch, prompt_len)).astype(np.int32)
        engine = Engine(
            model,
            EngineConfig(
                max_concurrent_decodes=batch,
                max_prefill_length=prompt_len,
                max_decode_length=new_tokens,
                steps_per_call=steps_per_call,
                stop_token_ids=(),
            ),
            sampling=GREEDY,
        )
        requests = [Request(row.tolist(), max_new_tokens=new_tokens) for row in prompts]
        tids = torch.tensor(prompts, dtype=torch.long)

        def ours(engine=engine, requests=requests):
            return generate(engine, requests, sampling=GREEDY)

        def transformers_generate(tids=tids):
            with torch.no_grad():
                return theirs.generate(
                    input_ids=tids,
                    attention_mask=torch.ones_like(tids),
                    do_sample=False,
                    max_new_tokens=new_tokens,
                    min_new_tokens=new_tokens,
                    pad_token_id=0,
                )

        # Warm-up (compiles ours) and the greedy check, before any timing.
        got = np.array([c[0].token_ids for c in ours()])
        ref = transformers_generate()[:, prompt_len:].numpy()
        assert got.shape == ref.shape == (batch, new_tokens), (got.shape, ref.shape)
        agree = check_greedy(theirs, prompts, got, ref, tie_tol)

        t_ours = median_seconds(ours, repeats, warmup=0)
        t_theirs = median_seconds(transformers_generate, repeats, warmup=0)

        step = decode_step_seconds(engine, prompts[0], repeats)
        cache_length = engine.config.cache_length
        kv_bytes = (
            2
            * config.num_hidden_layers
            * batch
            * cache_length
            * config.num_key_value_heads
            * config.head_dim
            * jnp.dtype(engine.config.cache_dtype).itemsize
        )
        floor = (param_bytes + kv_bytes) / bandwidth
        attention_flops = (
            4 * config.num_hidden_layers * config.num_attention_heads * config.head_dim
        ) * cache_length
        compute = batch * (2 * params_m * 1e6 + attention_flops) / flops
        assert engine.traces["generate"] == 1, engine.traces  # no recompilation while timing

        tokens = batch * new_tokens
        row = Row(
            name,
            params_m,
            batch,
            tokens / t_ours,
            tokens / t_theirs,
            agree,
            step * 1e3,
            floor * 1e3,
            compute * 1e3,
        )
        rows.append(row)
        print(
            f"  batch {batch:>3}: transformers {row.theirs_tps:8.0f} tok/s | ours (driver) "
            f"{row.ours_tps:8.0f} tok/s | ratio {row.ours_tps / row.theirs_tps:.2f}x | greedy "
            f"agree {agree}\n"
            f"             decode step {step * 1e3:7.2f} ms ({batch / step:8.0f} tok/s) | floor "
            f"{floor * 1e3:6.2f} ms (weights {param_bytes / 2**20:.1f} MiB + KV cache "
            f"{kv_bytes / 2**20:.1f} MiB of {cache_length} tokens) | step/floor "
            f"{step / floor:.1f}x | compute floor {compute * 1e3:.2f} ms",
            flush=True,
        )
    return rows


def markdown(rows: list[Row]) -> str:
    lines = [
        "| preset | batch | greedy ids = HF | transformers | ours (driver) | ratio | decode step | "
        "memory floor | step / floor | compute floor |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.preset} ({r.params_m:.1f} M) | {r.batch} | {r.agree.split()[0]} rows | "
            f"{r.theirs_tps:,.0f} tok/s | "
            f"{r.ours_tps:,.0f} tok/s | {r.ours_tps / r.theirs_tps:.2f}× | {r.step_ms:.2f} ms | "
            f"{r.floor_ms:.2f} ms | {r.step_ms / r.floor_ms:.1f}× | {r.compute_ms:.2f} ms |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "small"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32, 64])
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps-per-call", type=int, default=8)
    parser.add_argument(
        "--tie-tol",
        type=float,
        default=1e-3,
        help="largest top-2 logit gap at which a greedy mismatch counts as a near-tie",
    )
    args = parser.parse_args()
    transformers.utils.logging.disable_progress_bar()
    start = time.perf_counter()
    bw_numpy, bw_torch = copy_bandwidth()
    bandwidth = max(bw_numpy, bw_torch)
    flops = matmul_flops()
    print(
        f"machine: {cpu_name()} ({platform.machine()}, {os.cpu_count()} cores), jax "
        f"{jax.__version__} on {jax.devices()[0].platform}, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), transformers {transformers.__version__}, float32"
    )
    print(
        f"copy bandwidth (256 MiB, read + write, fastest of 7): NumPy {bw_numpy / 1e9:.1f} GB/s, "
        f"PyTorch {bw_torch / 1e9:.1f} GB/s; float32 matmul (2048², jax.jit) "
        f"{flops / 1e9:.0f} GFLOP/s"
    )
    print(
        f"prompts {args.prompt_len} tokens, {args.new_tokens} new tokens, greedy, steps_per_call "
        f"{args.steps_per_call}, median of {args.repeats} after a warm-up (compilation excluded)"
    )
    rows = []
    for name in args.presets:
        rows += bench(
            name,
            args.batches,
            args.prompt_len,
            args.new_tokens,
            args.repeats,
            args.steps_per_call,
            bandwidth,
            flops,
            args.tie_tol,
        )
    print()
    print(markdown(rows))
    print(f"\n({time.perf_counter() - start:.0f} s in all)")


if __name__ == "__main__":
    main()
