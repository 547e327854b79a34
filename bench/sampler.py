"""Benchmark: output tokens/s of our sampler against Hugging Face ``transformers`` ``generate``.

The same random weights (ours, exported with ``save_pretrained`` and read by transformers), the
same prompts (random ids, all of ``--prompt-len`` tokens, no padding) and the same number of new
tokens (``--new-tokens``, no stop tokens), greedy, float32 on this machine's CPU (or GPU for JAX
if present). Ours is the whole driver (:func:`arlarena_jax.sampler.driver.generate`: prefills,
inserts and decode steps, results on the host; it prefills the waiting requests together, as
transformers does the whole batch); transformers' ``generate`` likewise includes its prefill.
Compilation is excluded: every function is warmed up once before timing (the warm-up run is also
the one whose token ids are checked against transformers).

Also reported: our decode-only step time (every slot filled with one prompt, then the
``new_tokens / steps_per_call`` ``engine.generate`` calls that decode its new tokens, each with
the driver's decode window, divided by the steps) against its floors. Memory floor: the bytes a
step must read (every parameter once, plus the KV cache of the live tokens: prompt +
new_tokens / 2 on average over the timed steps) over this machine's copy bandwidth (measured
here: a 256 MiB array copied by NumPy, one thread, and by PyTorch, all threads; bytes read +
written over the fastest time, the better of the two). Compute floor: the step's FLOPs (2 ·
parameters · batch for the matmuls, 4 · layers · heads · head_dim · live tokens · batch for
attention) over the measured float32 matmul rate (a 2048² ``jnp.dot``). A step can beat neither,
so its floor is the larger of the two (the roofline), and ``step / floor`` is against that; at
batch 1 the memory floor binds, at large batches on CPU the compute floor. Where the model and
cache fit in the last-level cache (``tiny``) a step can beat the memory floor.

Also per batch: one bare float32 matmul of the decode step's MLP shape, ``[batch, hidden] ×
[hidden, intermediate]``, in XLA and in PyTorch (GFLOP/s): the rate the step's matmuls can
reach at that batch. At small batches it is far below the 2048² rate the compute floor assumes,
and XLA's is below PyTorch's.

``--presets`` names presets (random weights, random prompts), fetched models
(``smollm2-135m-instruct``, from the model cache; one never fetched is skipped with the command
that fetches it) or Hugging Face directories: ``bench/weights.py``. Real weights get real prompts:
the directory's chat template over a user message of a few questions, the message cut so that
every prompt has exactly ``--prompt-len`` tokens (:func:`chat_prompts`), and no stop tokens on
either side (transformers' eos is switched off, as the engine has none).

``--max-prefill-length`` (default: the prompt length) gives the engine a longer preallocated
cache than the run needs, as a trainer's config does (its longest prompt); the decode window
then keeps each step's attention to the live part of it.

    python bench/sampler.py [--presets tiny small smollm2-135m-instruct DIR]
                            [--batches 1 32 64 128] [--prompt-len 64] [--new-tokens 64]
                            [--max-prefill-length P] [--repeats 3]
                            [--steps-per-call 8]

The defaults took 7 minutes on a loaded 2-core machine (less when it is idle; PyTorch's two
threads slow down sharply under contention, so compare numbers from quiet runs only).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers
from flax import nnx
from timing import best_seconds, median_seconds
from weights import Pair, load_pair

from arlarena_jax.models import QwenForCausalLM
from arlarena_jax.sampler.driver import Request, generate
from arlarena_jax.sampler.engine import Engine, EngineConfig
from arlarena_jax.sampler.sampling import GREEDY
from arlarena_jax.tokenization import load_tokenizer, render_chat


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
    cache_length: int  # the engine's preallocated cache per slot
    gemm_xla: float  # GFLOP/s of a bare [batch, hidden] x [hidden, intermediate] matmul, XLA
    gemm_torch: float  # the same in PyTorch

    @property
    def roofline_ms(self) -> float:
        """The step's floor: the larger of the memory and compute floors."""
        return max(self.floor_ms, self.compute_ms)


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


def gemm_rates(m: int, k: int, n: int, repeats: int = 30) -> tuple[float, float]:
    """GFLOP/s of one float32 ``[m, k] × [k, n]`` matmul: XLA (``jax.jit``) and PyTorch, each the
    fastest of ``repeats``."""
    a, b = jnp.ones((m, k), jnp.float32), jnp.ones((k, n), jnp.float32)
    dot = jax.jit(jnp.dot)
    ta, tb = torch.ones(m, k), torch.ones(k, n)
    t_xla = best_seconds(lambda: dot(a, b).block_until_ready(), repeats)
    t_torch = best_seconds(lambda: ta @ tb, repeats)
    return 2 * m * k * n / t_xla / 1e9, 2 * m * k * n / t_torch / 1e9


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
    """Our decode-only step: every slot filled with ``prompt`` (not timed), then the
    ``max_new_tokens / steps_per_call`` ``engine.generate`` calls that decode its new tokens, each
    with the decode window the driver would use; median over ``repeats`` fills, time per step."""
    params = engine.load_params()
    slots, k = engine.max_concurrent_decodes, engine.config.steps_per_call
    padded = np.zeros(engine.bucket_for(len(prompt)), np.int32)
    padded[: len(prompt)] = prompt
    prefix = engine.prefill(params, padded, len(prompt))
    keys = jax.random.split(jax.random.key(0), slots)
    calls = max(1, engine.config.max_new_tokens // k)
    state = engine.init_decode_state()
    times = []
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


@dataclasses.dataclass(frozen=True)
class Settings:
    """The command line's run settings and the machine's measured floors."""

    prompt_len: int
    new_tokens: int
    repeats: int
    steps_per_call: int
    max_prefill_length: int
    bandwidth: float  # bytes/s
    flops: float  # FLOP/s
    tie_tol: float


@dataclasses.dataclass(frozen=True)
class Floors:
    """One decode step's bytes to read and its memory-bandwidth and compute floors (seconds)."""

    param_bytes: int
    kv_bytes: int  # KV cache bytes of the live tokens
    live_tokens: float  # mean cache length per slot over the timed steps
    memory: float
    compute: float


QUESTIONS = [
    "What is the capital of France?",
    "How do plants turn sunlight into food?",
    "Write a haiku about the sea.",
    "Why is the sky blue?",
    "Give me three tips for learning to cook.",
    "What does a compiler do?",
    "Explain gravity to a child.",
    "Name a famous painting and its painter.",
]


def chat_prompts(tokenizer, batch: int, prompt_len: int) -> np.ndarray:
    """``batch`` chat prompts of exactly ``prompt_len`` tokens: row ``r`` is the chat template's
    rendering of one user message (the questions, from the ``r % 8``-th on), with that message
    cut so that the start (system prompt, user turn) and the end (the message's end, the
    assistant's turn opened) fit; no padding needed."""
    rows = []
    for r in range(batch):
        k = r % len(QUESTIONS)
        content = " ".join(QUESTIONS[k:] + QUESTIONS[:k])
        text = render_chat(tokenizer, [{"role": "user", "content": content}])
        end = text.rindex(content) + len(content)
        head, tail = (
            tokenizer(t, add_special_tokens=False)["input_ids"] for t in (text[:end], text[end:])
        )
        if len(head) + len(tail) < prompt_len:
            raise SystemExit(
                f"--prompt-len {prompt_len} is longer than the chat prompts "
                f"({len(head) + len(tail)} tokens)"
            )
        rows.append(head[: prompt_len - len(tail)] + tail)
    return np.array(rows, np.int32)


def bench(name: str, batches: list[int], settings: Settings) -> list[Row]:
    """Every batch size of one model, ours against transformers: random prompts for a preset's
    random weights, chat prompts for real weights (:func:`chat_prompts`)."""
    pair = load_pair(name)
    if pair is None:
        return []
    tokenizer = None if pair.directory is None else load_tokenizer(pair.directory)
    # No stop tokens on either side: the engine has none, and transformers' min_new_tokens would
    # otherwise mask the directory's eos token instead of letting greedy pick it.
    pair.theirs.generation_config.eos_token_id = None
    param_bytes, params = param_stats(pair.ours)
    weights = "random weights" if pair.directory is None else f"real weights from {pair.directory}"
    print(f"{name} ({params / 1e6:.1f} M parameters, {param_bytes / 2**20:.1f} MiB, {weights})")
    if tokenizer is not None:
        sample = tokenizer.decode(chat_prompts(tokenizer, 1, settings.prompt_len)[0])
        print(f"  chat prompts, e.g. {sample!r}")
    return [bench_batch(name, pair, tokenizer, batch, settings) for batch in batches]


def param_stats(model: QwenForCausalLM) -> tuple[int, int]:
    """The model's parameter bytes and parameter count."""
    leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    return sum(x.nbytes for x in leaves), sum(x.size for x in leaves)


def make_engine(
    model: QwenForCausalLM, batch: int, settings: Settings, cache_dtype: str = "float32"
) -> Engine:
    """A greedy engine with ``batch`` slots, no stop tokens."""
    config = EngineConfig(
        max_concurrent_decodes=batch,
        max_prefill_length=settings.max_prefill_length,
        max_new_tokens=settings.new_tokens,
        steps_per_call=settings.steps_per_call,
        stop_token_ids=(),
        cache_dtype=cache_dtype,
    )
    return Engine(model, config, sampling=GREEDY)


def step_floors(model: QwenForCausalLM, engine: Engine, settings: Settings) -> Floors:
    """Memory floor = (weights + live KV cache bytes) / bandwidth; compute floor = slots · (2 ·
    parameters + 4 · layers · heads · head_dim · live tokens) / FLOP/s, with live tokens = prompt
    + new_tokens / 2 (the mean cache length per slot over the timed steps)."""
    config = model.config
    param_bytes, params = param_stats(model)
    batch = engine.max_concurrent_decodes
    live = settings.prompt_len + settings.new_tokens / 2
    kv_bytes = int(
        2
        * config.num_hidden_layers
        * batch
        * live
        * config.num_key_value_heads
        * config.head_dim
        * jnp.dtype(engine.config.cache_dtype).itemsize
    )
    attention_flops = (
        4 * config.num_hidden_layers * config.num_attention_heads * config.head_dim
    ) * live
    compute = batch * (2 * params + attention_flops) / settings.flops
    memory = (param_bytes + kv_bytes) / settings.bandwidth
    return Floors(param_bytes, kv_bytes, live, memory, compute)


def bench_batch(name: str, pair: Pair, tokenizer, batch: int, settings: Settings) -> Row:
    """One batch size: greedy check against transformers, then driver end to end, transformers
    ``generate`` and our decode-only step, timed. Random prompts without a tokenizer, else chat
    prompts."""
    model, theirs = pair.ours, pair.theirs
    prompt_len, new_tokens = settings.prompt_len, settings.new_tokens
    if tokenizer is None:
        rng = np.random.default_rng(batch)
        prompts = rng.integers(0, model.config.vocab_size, size=(batch, prompt_len))
        prompts = prompts.astype(np.int32)
    else:
        prompts = chat_prompts(tokenizer, batch, prompt_len)
    engine = make_engine(model, batch, settings)
    requests = [Request(row.tolist(), max_new_tokens=new_tokens) for row in prompts]
    tids = torch.tensor(prompts, dtype=torch.long)

    def ours():
        return generate(engine, requests, sampling=GREEDY)

    def transformers_generate():
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
    agree = check_greedy(theirs, prompts, got, ref, settings.tie_tol)
    if tokenizer is not None:
        print(f"  batch {batch:>3}: row 0 replies {tokenizer.decode(got[0])!r}")

    t_ours = median_seconds(ours, settings.repeats, warmup=0)
    t_theirs = median_seconds(transformers_generate, settings.repeats, warmup=0)
    compiled = engine.traces["generate"]
    step = decode_step_seconds(engine, prompts[0], settings.repeats)
    floors = step_floors(model, engine, settings)
    assert engine.traces["generate"] == compiled, engine.traces  # no recompilation while timing

    tokens = batch * new_tokens
    config = model.config
    gemm = gemm_rates(batch, config.hidden_size, config.intermediate_size)
    row = Row(
        name,
        param_stats(model)[1] / 1e6,
        batch,
        tokens / t_ours,
        tokens / t_theirs,
        agree,
        step * 1e3,
        floors.memory * 1e3,
        floors.compute * 1e3,
        engine.config.cache_length,
        *gemm,
    )
    print_row(row, step, floors)
    return row


def print_row(row: Row, step: float, floors: Floors) -> None:
    batch = row.batch
    print(
        f"  batch {batch:>3}: transformers {row.theirs_tps:8.0f} tok/s | ours (driver) "
        f"{row.ours_tps:8.0f} tok/s | ratio {row.ours_tps / row.theirs_tps:.2f}x | greedy "
        f"agree {row.agree}\n"
        f"             decode step {step * 1e3:7.2f} ms ({batch / step:8.0f} tok/s, cache "
        f"{row.cache_length} tokens/slot) | memory floor {floors.memory * 1e3:6.2f} ms (weights "
        f"{floors.param_bytes / 2**20:.1f} MiB + KV cache {floors.kv_bytes / 2**20:.1f} MiB of "
        f"{floors.live_tokens:.0f} live tokens) | compute floor {floors.compute * 1e3:.2f} ms | "
        f"step/floor {row.step_ms / row.roofline_ms:.1f}x (step/memory floor "
        f"{row.step_ms / row.floor_ms:.1f}x)\n"
        f"             GEMM at this batch (MLP shape): XLA {row.gemm_xla:.0f} GFLOP/s, PyTorch "
        f"{row.gemm_torch:.0f} GFLOP/s",
        flush=True,
    )


def markdown(rows: list[Row]) -> str:
    lines = [
        "| preset | batch | cache | greedy ids = HF | transformers | ours (driver) | ratio | "
        "decode step | memory floor | compute floor | step / floor | GEMM XLA / PyTorch |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.preset} ({r.params_m:.1f} M) | {r.batch} | {r.cache_length} | "
            f"{r.agree.split()[0]} rows | {r.theirs_tps:,.0f} tok/s | "
            f"{r.ours_tps:,.0f} tok/s | {r.ours_tps / r.theirs_tps:.2f}× | {r.step_ms:.2f} ms | "
            f"{r.floor_ms:.2f} ms | {r.compute_ms:.2f} ms | {r.step_ms / r.roofline_ms:.1f}× | "
            f"{r.gemm_xla:.0f} / {r.gemm_torch:.0f} GFLOP/s |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--presets",
        nargs="+",
        default=["tiny", "small"],
        help="presets (random weights), fetched models' names or Hugging Face directories",
    )
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32, 64, 128])
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument(
        "--max-prefill-length",
        type=int,
        default=None,
        help="the engine's longest prompt (default: --prompt-len); more gives a longer cache",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps-per-call", type=int, default=8)
    parser.add_argument(
        "--tie-tol",
        type=float,
        default=1e-3,
        help="largest top-2 logit gap at which a greedy mismatch counts as a near-tie",
    )
    args = parser.parse_args()
    max_prefill = args.prompt_len if args.max_prefill_length is None else args.max_prefill_length
    if max_prefill < args.prompt_len:
        parser.error(f"--max-prefill-length {max_prefill} is below --prompt-len {args.prompt_len}")
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
        f"prompts {args.prompt_len} tokens, {args.new_tokens} new tokens, cache "
        f"{max_prefill + args.new_tokens} tokens per slot, greedy, steps_per_call "
        f"{args.steps_per_call}, median of {args.repeats} after a warm-up (compilation excluded)"
    )
    settings = Settings(
        args.prompt_len,
        args.new_tokens,
        args.repeats,
        args.steps_per_call,
        max_prefill,
        bandwidth,
        flops,
        args.tie_tol,
    )
    rows = []
    for name in args.presets:
        rows += bench(name, args.batches, settings)
    print()
    print(markdown(rows))
    print(f"\n({time.perf_counter() - start:.0f} s in all)")


if __name__ == "__main__":
    main()
