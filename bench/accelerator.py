"""Benchmark: the whole stack on one accelerator in one process, within 8 minutes (issue 41).

Parts, in this order, each guarded: an exception, a failed check or the part's time cap is
reported in that part's result and the next part still runs.

* ``versions``: the installed packages against ``pyproject.toml`` (and jaxlib / the CUDA plugin
  against jax); where one does not satisfy it, the wheel to carry (``launch/device_wheels.sh``).
* ``correctness``: our Qwen3 and Llama decoders against transformers on the same device and
  random weights: float32 (matmuls at "highest" on both sides) within a relative L2 error of
  :data:`F32_TOL` of transformers' logits; bfloat16 (our bfloat16 compute, transformers'
  bfloat16 weights) within :data:`BF16_TOL`, or twice transformers' own bfloat16 error where that
  is more, of transformers' float32 logits. The jitted SAMPO loss and gradient
  (``bench/objectives.py``) on the device against the same program on the CPU.
* ``sampler``: decode step time and tokens/s at the Qwen3-0.6B shape (bfloat16 weights and KV
  cache) against the step's HBM-bandwidth floor (weights + live KV cache over the chip's memory
  bandwidth) and compute floor (``bench/sampler.py``), and prefill tokens/s.
* ``training``: one behaviour-cloning step and one SAMPO RL step of
  ``configs/sokoban/sampo_qwen3_4b.yaml`` at the Qwen3-0.6B shape through the trainer
  (``bench/scale_smoke.py``): step times, compile seconds, peak device memory and a sharding
  audit (which parameters the rules split on this mesh, which stay replicated).
* ``model``: forward and forward+backward tokens/s of our decoder against transformers at the
  Qwen3-0.6B and Qwen3-1.7B shapes in bfloat16 on the same device (``bench/model.py``), with
  MFU against the chip's dense bfloat16 peak (:data:`PEAKS`, keyed by ``device_kind``).
* ``rollout``: the on-device Sokoban rollout against the host rollout at 128 and 1,024
  environments, Qwen3-0.6B shape, random weights (``bench/device_rollout.py``).

Results go to ``OUT/accelerator.json`` and ``OUT/accelerator.md`` (rewritten after every part, so
a killed run keeps what it finished). ``--cpu-dry-run`` runs every part at tiny shapes on the CPU
(transformers on PyTorch's CPU) in well under a minute: it keeps this script from rotting
(tests/project/test_bench_accelerator.py). The device call: launch/README.md, "The one-call GPU
check".

    python bench/accelerator.py OUT [--cpu-dry-run] [--parts NAME ...] [--budget SECONDS]
                                    [--cap NAME=SECONDS ...] [--inject-failure NAME]
"""

from __future__ import annotations

import os

# transformers' PyTorch shares the GPU with XLA: XLA takes memory as it needs it instead of 75 %
# of it up front (set before JAX starts its backend).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import argparse
import atexit
import contextlib
import dataclasses
import gc
import importlib.metadata as metadata
import json
import math
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import tomllib
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for _path in (str(BENCH), str(ROOT)):  # the bench modules import each other by name
    if _path not in sys.path:
        sys.path.insert(0, _path)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

F32_TOL = 1e-4  # relative L2 error of float32 logits (full float32 matmuls on both sides)
BF16_TOL = 2e-2  # ... of bfloat16 logits against float32 (8-bit mantissa, a few layers deep)
SAMPO_RTOL = 1e-4  # the SAMPO loss on the device against the CPU (float32 sums in another order)
SAMPO_GRAD_TOL = 1e-4  # its gradient: max |difference| over max |gradient|

# Dense bfloat16 peak FLOP/s (no sparsity) and HBM bandwidth (bytes/s), matched in this order
# against the lower-cased ``jax.devices()[0].device_kind``. Sources: NVIDIA's H100 datasheet
# (SXM 989 TFLOP/s, 3.35 TB/s; PCIe 756 TFLOP/s, 2.0 TB/s; NVL 835 TFLOP/s, 3.9 TB/s), H200
# datasheet (SXM 989 TFLOP/s, 4.8 TB/s), A100 datasheet (312 TFLOP/s; 80GB SXM 2.039 TB/s, 80GB
# PCIe 1.935 TB/s, 40GB 1.555 TB/s); Google Cloud's TPU system-architecture pages (v4 275 TFLOP/s,
# 1.2 TB/s; v5e, "TPU v5 lite", 197 TFLOP/s, 819 GB/s; v5p 459 TFLOP/s, 2.765 TB/s; v6e
# "Trillium", "TPU v6 lite", 918 TFLOP/s, 1.64 TB/s).
PEAKS: tuple[tuple[str, str, float, float], ...] = (
    ("h100 pcie", "H100 PCIe", 756e12, 2.0e12),
    ("h100 nvl", "H100 NVL", 835e12, 3.9e12),
    ("h100", "H100 SXM", 989e12, 3.35e12),
    ("h200", "H200 SXM", 989e12, 4.8e12),
    ("a100-sxm4-80gb", "A100 SXM 80GB", 312e12, 2.039e12),
    ("a100 80gb pcie", "A100 PCIe 80GB", 312e12, 1.935e12),
    ("a100", "A100 40GB", 312e12, 1.555e12),
    ("tpu v4", "TPU v4", 275e12, 1.2e12),
    ("tpu v5 lite", "TPU v5e", 197e12, 0.819e12),
    ("tpu v5e", "TPU v5e", 197e12, 0.819e12),
    ("tpu v5", "TPU v5p", 459e12, 2.765e12),
    ("tpu v6", "TPU v6e", 918e12, 1.64e12),
)
# What the bench imports, checked against pyproject.toml (torch: transformers' backend, any).
CHECKED = (
    "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy", "transformers", "tokenizers",
    "safetensors", "gymnax", "six", "tensorboardX", "etils", "tensorstore", "pyyaml", "protobuf",
    "jinja2",
)  # fmt: skip
TINY_TOKENIZER_EPISODES = 16
PARTS = ("versions", "correctness", "sampler", "training", "model", "rollout")


class PartTimeout(Exception):
    """A part ran past its time cap."""


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Every shape the parts run at (:data:`DEVICE` on the accelerator, :data:`DRY` on CPU)."""

    caps: dict[str, float]  # seconds per part
    budget: float  # seconds for the whole run, start-up included
    correct_qwen: dict[str, Any]  # QwenConfig fields of the Qwen3 and Llama checks
    correct_llama: dict[str, Any]
    correct_ids: tuple[int, int]  # batch, sequence
    sampo: tuple[int, int]  # rows, tokens
    model_presets: tuple[str, ...]
    model_ids: tuple[int, int]
    repeats: int
    sampler_preset: str
    sampler_batches: tuple[int, ...]
    prompt_len: int
    new_tokens: int
    steps_per_call: int
    prefill_batch: int
    rollout_preset: str
    rollout_batches: tuple[int, ...]
    rollout_turns: int
    train_args: tuple[str, ...]  # bench/scale_smoke.py's command line
    qwen_tokenizer: bool  # the real Qwen3 vocabulary for training (else tiny-sokoban)
    train_all_devices: bool  # training's mesh spans every device (else one: no mesh)


def _qwen3(**fields: Any) -> dict[str, Any]:
    return {"model_type": "qwen3", **fields}


DEVICE = Sizes(
    caps={
        "versions": 10,
        "correctness": 50,
        "sampler": 60,
        "training": 130,
        "model": 100,
        "rollout": 90,
    },
    budget=460,
    # preset "small" (10 layers, 512 wide) and SmolLM2's layout cut to 4 layers
    correct_qwen=_qwen3(vocab_size=2048, hidden_size=512, intermediate_size=1536,
                        num_hidden_layers=10, num_attention_heads=8, num_key_value_heads=2,
                        head_dim=64),
    correct_llama=dict(model_type="llama", vocab_size=49152, hidden_size=576,
                       intermediate_size=1536, num_hidden_layers=4, num_attention_heads=9,
                       num_key_value_heads=3, head_dim=64, rope_theta=100_000.0,
                       tie_word_embeddings=True),
    correct_ids=(4, 256),
    sampo=(1024, 512),
    model_presets=("qwen3-0.6b", "qwen3-1.7b"),
    model_ids=(4, 1024),
    repeats=5,
    sampler_preset="qwen3-0.6b",
    sampler_batches=(1, 64, 256),
    prompt_len=256,
    new_tokens=64,
    steps_per_call=8,
    prefill_batch=16,
    rollout_preset="qwen3-0.6b",
    rollout_batches=(128, 1024),
    rollout_turns=5,
    train_args=("--preset", "qwen3-0.6b", "--param-dtype", "float32", "--rows", "8",
                "--turns", "2", "--max-new-tokens", "32", "--max-prefill", "256"),
    qwen_tokenizer=True,
    train_all_devices=True,
)  # fmt: skip
DRY = Sizes(
    caps={name: 60 for name in PARTS},
    budget=240,
    correct_qwen=_qwen3(vocab_size=256, hidden_size=64, intermediate_size=128,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=16),
    correct_llama=dict(model_type="llama", vocab_size=256, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, tie_word_embeddings=False),
    correct_ids=(2, 16),
    sampo=(16, 32),
    model_presets=("tiny",),
    model_ids=(2, 16),
    repeats=1,
    sampler_preset="tiny",
    sampler_batches=(2,),
    prompt_len=8,
    new_tokens=4,
    steps_per_call=4,
    prefill_batch=2,
    rollout_preset="tiny",
    rollout_batches=(8,),
    rollout_turns=1,
    train_args=("--preset", "tiny", "--param-dtype", "float32", "--rows", "2", "--turns", "1",
                "--max-new-tokens", "4", "--max-prefill", "128", "--demo-episodes", "4"),
    qwen_tokenizer=False,
    train_all_devices=False,
)  # fmt: skip


# ---- helpers ------------------------------------------------------------------------------------


def device_peak() -> dict[str, Any]:
    """The device and its peaks from :data:`PEAKS` (None where the table has no entry)."""
    device = jax.devices()[0]
    kind = device.device_kind
    for key, name, flops, bandwidth in PEAKS:
        if key in kind.lower():
            return {"kind": kind, "chip": name, "bf16_flops": flops, "hbm_bytes_s": bandwidth}
    return {"kind": kind, "chip": None, "bf16_flops": None, "hbm_bytes_s": None}


def torch_device() -> str:
    """Where transformers runs: the GPU when JAX runs on one, else the CPU."""
    import torch

    return "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"


def torch_synced(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` followed by a CUDA synchronisation (PyTorch's GPU work is asynchronous)."""
    import torch

    def run():
        out = fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return out

    return run


def timed_first(fn: Callable[[], Any]) -> float:
    """Seconds of one call (the first: compilation included)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def relative_error(got: Any, want: Any) -> float:
    """‖got − want‖ / ‖want‖ in float64."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def device_memory() -> dict[str, float]:
    """Peak and current device memory (GiB), or the host's peak RSS where the device keeps no
    statistics (the CPU)."""
    stats = jax.devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" not in stats:
        import scale_smoke

        return {"peak_host_rss_gib": scale_smoke.peak_rss_gib()}
    return {
        "peak_device_gib": stats["peak_bytes_in_use"] / 2**30,
        "device_in_use_gib": stats.get("bytes_in_use", 0) / 2**30,
    }


_TOKENIZERS: dict[bool, str] = {}  # qwen_tokenizer -> the folder written for this process


def shared_tokenizer(sizes: Sizes) -> str:
    """A tokenizer folder for the rollout and training parts, written once per process: the real
    Qwen3 vocabulary (``bench/scale_smoke.py``) or, in the dry run, a ``tiny-sokoban``
    vocabulary built from :data:`TINY_TOKENIZER_EPISODES` expert episodes (the real one's 256
    take about 10 s on a CPU)."""
    if sizes.qwen_tokenizer not in _TOKENIZERS:
        import device_rollout
        import scale_smoke

        from arlarena_jax.train import build
        from arlarena_jax.train.config_io import load_config

        folder = Path(tempfile.mkdtemp(prefix="accelerator-tokenizer-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        if sizes.qwen_tokenizer:
            name = scale_smoke.qwen_tokenizer(folder / "qwen")
        else:
            config = load_config(device_rollout.CONFIG)
            build.build_tokenizer(config, TINY_TOKENIZER_EPISODES).save_pretrained(folder)
            name = str(folder)
        _TOKENIZERS[sizes.qwen_tokenizer] = name
    return _TOKENIZERS[sizes.qwen_tokenizer]


# ---- versions -----------------------------------------------------------------------------------


def carried_wheels() -> dict[str, str]:
    """The ``name==version`` pins ``launch/device_wheels.sh`` fetches (lower-cased names)."""
    text = (ROOT / "launch" / "device_wheels.sh").read_text()
    return {m[0].lower(): m[1] for m in re.findall(r"^\s+([A-Za-z0-9_.-]+)==(\S+)", text, re.M)}


def version_rows() -> list[dict[str, Any]]:
    """Each checked package: installed version, pyproject's requirement, whether it holds, and
    what to carry where it does not."""
    from packaging.requirements import Requirement

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = {(r := Requirement(d)).name.lower(): r.specifier for d in deps}
    carried, rows = carried_wheels(), []
    for name in CHECKED:
        spec = wanted.get(name.lower(), "")
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        ok = installed is not None and (not spec or spec.contains(installed, prereleases=True))
        row = {"package": name, "installed": installed or "-", "pyproject": str(spec), "ok": ok}
        if not ok:
            row["carry"] = (
                f"{name}=={carried[name.lower()]} (bash launch/device_wheels.sh; carry .whl)"
                if name.lower() in carried
                else f"a {name}{spec} wheel: add it to launch/device_wheels.sh, carry .whl"
            )
        rows.append(row)
    return rows


def part_versions(sizes: Sizes, result: dict[str, Any]) -> None:
    """Installed packages against pyproject.toml; jaxlib and the CUDA plugin against jax."""
    result["rows"] = rows = version_rows()
    result["device"] = device_peak() | {"platform": jax.default_backend()}
    result["devices"] = jax.device_count()
    problems = [f"{r['package']} {r['installed']}: carry {r['carry']}" for r in rows if not r["ok"]]
    for plugin in ("jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            if metadata.version(plugin) != jax.__version__:
                problems.append(f"{plugin} {metadata.version(plugin)} != jax {jax.__version__}")
    with contextlib.suppress(ImportError):
        import torch

        result["torch"] = torch.__version__
    result["problems"] = problems
    result["ok"] = not problems


# ---- correctness --------------------------------------------------------------------------------


def logits_errors(config, ids: np.ndarray) -> dict[str, float]:
    """Our decoder against transformers at the same random weights, on the same device:
    float32 errors (both sides at full float32 matmul precision) and bfloat16 errors (ours and
    transformers', each against transformers' float32 logits)."""
    import copy

    import model as model_bench
    import torch
    import weights

    from arlarena_jax.models import QwenForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False  # float32 is float32 (PyTorch's default)
    ours = QwenForCausalLM(config, rngs=nnx.Rngs(0))
    theirs = weights.pair_from(config.model_type, ours).theirs.to(torch_device())
    tids = torch.tensor(ids, device=torch_device())
    with torch.no_grad():
        want = theirs(input_ids=tids).logits.float().cpu().numpy()
        theirs_bf16 = copy.deepcopy(theirs).to(torch.bfloat16)
        theirs_low = theirs_bf16(input_ids=tids).logits.float().cpu().numpy()
    low = QwenForCausalLM(config, rngs=nnx.Rngs(0), dtype=jnp.bfloat16)
    nnx.update(low, nnx.state(ours, nnx.Param))
    seq = ids.shape[1]
    with jax.default_matmul_precision("highest"):
        params, forward, _, _ = model_bench.jax_programs(ours, seq)
        got = np.asarray(forward(params, jnp.asarray(ids)))
    params, forward, _, _ = model_bench.jax_programs(low, seq)
    got_low = np.asarray(forward(params, jnp.asarray(ids)))
    return {
        "float32": relative_error(got, want),
        "bfloat16": relative_error(got_low, want),
        "transformers_bfloat16": relative_error(theirs_low, want),
    }


def sampo_errors(rows: int, tokens: int) -> dict[str, float]:
    """The jitted SAMPO loss + gradient on the default device against the same program on the
    CPU, and the CPU's against the NumPy implementation (``bench/objectives.py``)."""
    import objectives

    x = objectives.make_inputs(rows, tokens)
    loss, grad = objectives.jax_sampo(x)()
    with jax.default_device(jax.devices("cpu")[0]):
        cpu_loss, cpu_grad = objectives.jax_sampo(x)()
    np_loss, _ = objectives.numpy_sampo(x)
    scale = float(np.abs(np.asarray(cpu_grad)).max())
    return {
        "loss": float(loss),
        "loss_rel_error": abs(float(loss) - float(cpu_loss)) / max(abs(float(cpu_loss)), 1e-6),
        "grad_error": float(np.abs(np.asarray(grad) - np.asarray(cpu_grad)).max()) / scale,
        "cpu_vs_numpy_rel_error": abs(float(cpu_loss) - float(np_loss)) / abs(float(np_loss)),
    }


def part_correctness(sizes: Sizes, result: dict[str, Any]) -> None:
    """Logits of both decoder families in float32 and bfloat16; the SAMPO loss (module doc)."""
    from arlarena_jax.models import QwenConfig

    result["tolerances"] = {
        "float32": F32_TOL,
        "bfloat16": f"max({BF16_TOL}, 2 x transformers' own bfloat16 error)",
        "sampo_loss_rel": SAMPO_RTOL,
        "sampo_grad": SAMPO_GRAD_TOL,
    }
    rows, ok = [], True
    rng = np.random.default_rng(0)
    for fields in (sizes.correct_qwen, sizes.correct_llama):
        config = QwenConfig(**fields)
        ids = rng.integers(0, config.vocab_size, size=sizes.correct_ids)
        e = logits_errors(config, ids)
        passed = e["float32"] <= F32_TOL and e["bfloat16"] <= max(
            BF16_TOL, 2 * e["transformers_bfloat16"]
        )
        rows.append({"model": config.model_type, **e, "ok": passed})
        ok &= passed
        result["rows"] = rows
    s = sampo_errors(*sizes.sampo)
    result["sampo"] = s
    s_ok = s["loss_rel_error"] <= SAMPO_RTOL and s["grad_error"] <= SAMPO_GRAD_TOL
    result["ok"] = ok and s_ok


# ---- model --------------------------------------------------------------------------------------


def forward_flops(config, batch: int, seq: int, params: int) -> float:
    """FLOPs of one forward pass: 2 per matmul weight per token (the LM head included, the
    embedding lookup not) plus attention's 4 · layers · heads · head_dim · seq² per sequence
    (PaLM's count: the full square, no causal halving). Forward+backward is three times this."""
    matmul = params - (0 if config.tie_word_embeddings else config.vocab_size * config.hidden_size)
    attention = 4 * config.num_hidden_layers * config.num_attention_heads * config.head_dim
    return batch * seq * 2 * matmul + batch * attention * seq**2


def transformers_model(config, dtype):
    """transformers' model of ``config`` with its own random initialisation, built on the torch
    device in ``dtype`` (the timings need no shared weights: ``correctness`` checks those)."""
    import torch
    import transformers

    hf = config.to_hf_dict()
    hf_config = transformers.AutoConfig.for_model(hf.pop("model_type"), **hf)
    with torch.device(torch_device()):
        return transformers.AutoModelForCausalLM.from_config(hf_config, dtype=dtype)


def ours_seconds(model, ids: np.ndarray, repeats: int) -> dict[str, float]:
    """Our jitted forward and forward+backward (``bench/model.py``): first call (compilation
    included) and median seconds."""
    import model as model_bench
    from timing import median_seconds

    params, forward, train, _ = model_bench.jax_programs(model, ids.shape[1])
    jids = jnp.asarray(ids)
    runs = {
        "fwd_ours": lambda: jax.block_until_ready(forward(params, jids)),
        "fwdbwd_ours": lambda: jax.block_until_ready(train(params, jids)),
    }
    times = {}
    for key, fn in runs.items():
        times[f"{key}_compile_s"] = timed_first(fn)
        times[f"{key}_s"] = median_seconds(fn, repeats, warmup=0)
    return times


def torch_seconds(config, ids: np.ndarray, repeats: int) -> dict[str, float]:
    """transformers' forward and forward+backward (``bench/model.py``) in bfloat16, median
    seconds after a warm-up."""
    import model as model_bench
    import torch
    from timing import median_seconds

    theirs = transformers_model(config, torch.bfloat16)
    tids = torch.tensor(ids, device=torch_device())
    forward, train = model_bench.torch_programs(theirs, tids)
    return {
        "fwd_torch_s": median_seconds(torch_synced(forward), repeats),
        "fwdbwd_torch_s": median_seconds(torch_synced(train), repeats),
    }


def model_row(name: str, sizes: Sizes, peak: float | None) -> dict[str, Any]:
    """Forward and forward+backward of one preset, ours and transformers', bfloat16 weights and
    compute on both sides; tokens/s and MFU (:func:`forward_flops`)."""
    from arlarena_jax.models import QwenForCausalLM, preset

    config = preset(name)
    batch, seq = sizes.model_ids
    ours = QwenForCausalLM(config, rngs=nnx.Rngs(0), dtype=jnp.bfloat16, param_dtype=jnp.bfloat16)
    count = sum(x.size for x in jax.tree.leaves(nnx.state(ours, nnx.Param)))
    ids = np.random.default_rng(0).integers(0, config.vocab_size, size=(batch, seq))
    row: dict[str, Any] = {"preset": name, "params_m": count / 1e6, "tokens": batch * seq}
    row |= ours_seconds(ours, ids, sizes.repeats)
    del ours
    free_memory()
    keys = ["fwd_ours", "fwdbwd_ours"]
    if torch_device() != "cpu" or jax.default_backend() == "cpu":  # not a TPU against a CPU
        row |= torch_seconds(config, ids, sizes.repeats)
        keys += ["fwd_torch", "fwdbwd_torch"]
    flops = forward_flops(config, batch, seq, count)
    for key in keys:
        work = flops * (3 if key.startswith("fwdbwd") else 1)
        row[f"{key}_tok_s"] = batch * seq / row[f"{key}_s"]
        row[f"{key}_mfu"] = None if peak is None else work / row[f"{key}_s"] / peak
    return row


def part_model(sizes: Sizes, result: dict[str, Any]) -> None:
    """:func:`model_row` per preset; rows kept as they finish."""
    peak = device_peak()["bf16_flops"]
    result["peak_bf16_flops"] = peak
    result["rows"] = rows = []
    for name in sizes.model_presets:
        rows.append(model_row(name, sizes, peak))
        free_memory()
    result["ok"] = True


# ---- sampler ------------------------------------------------------------------------------------


def floors_settings(sizes: Sizes):
    """``bench/sampler.py``'s settings with the chip's HBM bandwidth and bfloat16 peak (on a
    device without a :data:`PEAKS` entry, the CPU: a measured copy bandwidth and matmul rate)."""
    import sampler

    peak = device_peak()
    bandwidth, flops = peak["hbm_bytes_s"], peak["bf16_flops"]
    if bandwidth is None:
        bandwidth = max(sampler.copy_bandwidth(megabytes=16, repeats=2))
        flops = sampler.matmul_flops(n=256, repeats=2)
    return sampler.Settings(
        prompt_len=sizes.prompt_len,
        new_tokens=sizes.new_tokens,
        repeats=sizes.repeats,
        steps_per_call=sizes.steps_per_call,
        max_prefill_length=sizes.prompt_len,
        bandwidth=bandwidth,
        flops=flops,
        tie_tol=1e-3,
    )


def prefill_tokens_s(engine, sizes: Sizes, rng: np.random.Generator) -> float:
    """Prompt tokens/s of one ``prefill_batch`` of ``sizes.prefill_batch`` full-length prompts."""
    from timing import median_seconds

    b, p = sizes.prefill_batch, sizes.prompt_len
    tokens = rng.integers(0, engine.model_config.vocab_size, size=(b, p)).astype(np.int32)
    params = engine.load_params()
    lengths = np.full(b, p, np.int32)
    seconds = median_seconds(
        lambda: jax.block_until_ready(engine.prefill_batch(params, tokens, lengths)),
        sizes.repeats,
    )
    return b * p / seconds


def part_sampler(sizes: Sizes, result: dict[str, Any]) -> None:
    """Decode step against its floors per batch, and prefill tokens/s (module doc)."""
    import sampler

    from arlarena_jax.models import QwenForCausalLM, preset

    settings = floors_settings(sizes)
    result["bandwidth_bytes_s"], result["flops"] = settings.bandwidth, settings.flops
    chip = device_peak()["chip"]
    result["floors_from"] = f"{chip} datasheet" if chip else "measured on the host (no peak)"
    model = QwenForCausalLM(
        preset(sizes.sampler_preset),
        rngs=nnx.Rngs(0),
        dtype=jnp.bfloat16,
        param_dtype=jnp.bfloat16,
    )
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, model.config.vocab_size, size=sizes.prompt_len).astype(np.int32)
    result["rows"] = rows = []
    for batch in sizes.sampler_batches:
        engine = sampler.make_engine(model, batch, settings, cache_dtype="bfloat16")
        step = sampler.decode_step_seconds(engine, prompt, sizes.repeats)
        floors = sampler.step_floors(model, engine, settings)
        rows.append(
            {
                "batch": batch,
                "step_ms": step * 1e3,
                "tok_s": batch / step,
                "memory_floor_ms": floors.memory * 1e3,
                "compute_floor_ms": floors.compute * 1e3,
                "step_over_floor": step / max(floors.memory, floors.compute),
            }
        )
        if "prefill_tok_s" not in result:
            result["prefill_tok_s"] = prefill_tokens_s(engine, sizes, rng)
        del engine
        free_memory()
    result["ok"] = True


# ---- rollout ------------------------------------------------------------------------------------


def part_rollout(sizes: Sizes, result: dict[str, Any]) -> None:
    """``bench/device_rollout.py`` at each batch, random weights of the preset's shape."""
    import device_rollout

    overrides = (
        f"model.name={sizes.rollout_preset}",
        f"model.tokenizer={shared_tokenizer(sizes)}",
        f"env.max_turns={sizes.rollout_turns}",
    )
    if sizes.qwen_tokenizer:  # Qwen's ids for the compact prompts: up to ~64 + the chat turn
        overrides += ("sampler.max_prefill_length=128",)
    if sizes.rollout_preset != "tiny":
        overrides += ("model.dtype=bfloat16", "model.param_dtype=bfloat16")
        overrides += ("sampler.cache_dtype=bfloat16",)
    result["settings"] = list(overrides)
    result["rows"] = rows = []
    for batch in sizes.rollout_batches:
        start = time.perf_counter()
        r = device_rollout.measure(batch, 1, None, overrides)
        rows.append(
            {
                "envs": batch,
                "turn_rows": r["rows"],
                "same_rows": r["same_rows"],
                "host_turns_s": r["host"],
                "device_turns_s": r["device"],
                "ratio": r["device"] / r["host"],
                "seconds": time.perf_counter() - start,
            }
        )
        free_memory()
    result["ok"] = all(row["same_rows"] for row in rows)


# ---- training -----------------------------------------------------------------------------------


def sharding_groups(
    config, mesh_shape: dict[str, int], config_shape: dict[str, int]
) -> list[dict[str, Any]]:
    """Each parameter kind (layer numbers as ``*``): the partition rules' spec and into how many
    pieces it is split on this run's mesh and on the config file's (1: replicated on every
    device)."""
    import scale_smoke

    from arlarena_jax.models import QwenForCausalLM
    from arlarena_jax.models import sharding as rules

    abstract = nnx.eval_shape(lambda: QwenForCausalLM(config, rngs=nnx.Rngs(0)))
    groups: dict[str, dict[str, Any]] = {}
    for name, _ in scale_smoke.named_leaves(nnx.state(abstract, nnx.Param)):
        spec = rules.parameter_spec(name)
        axes = scale_smoke._axes(spec)
        key = re.sub(r"\.\d+\.", ".*.", name)
        groups.setdefault(
            key,
            {
                "parameter": key,
                "spec": str(spec),
                "split_ways": math.prod(mesh_shape[a] for a in axes),
                "split_ways_config_mesh": math.prod(config_shape[a] for a in axes),
            },
        )
    return list(groups.values())


def part_training(sizes: Sizes, result: dict[str, Any]) -> None:
    """One cloning step and one SAMPO RL step of the paper config (``bench/scale_smoke.py``)."""
    import scale_smoke

    from arlarena_jax.models import QwenConfig
    from arlarena_jax.train.config_io import load_config

    # Every device on the fsdp axis (the rows must split over it); the dry run keeps one (a
    # test process simulates 8 CPU devices, and sharded programs compile far slower there).
    devices = jax.device_count() if sizes.train_all_devices else 1
    args = scale_smoke.parse_args([*sizes.train_args, "--mesh", f"fsdp={devices}"])
    args.rows = math.lcm(args.rows, devices)
    tokenizer = shared_tokenizer(sizes)
    before = device_memory()  # the peak is the process's: did this part raise it?
    with tempfile.TemporaryDirectory() as scratch:
        overrides = scale_smoke.smoke_overrides(args, str(Path(scratch) / "run"), tokenizer)
        config = load_config(scale_smoke.CONFIG, overrides)
        report = scale_smoke.smoke(config, rl_steps=1)
    c, rl = report["cloning"], report["rl"][0]
    result["rows"] = [
        {"step": "cloning", "seconds": c["step_seconds"], "compile_s": c["step_compile_seconds"],
         "loss": c["loss"]},
        {"step": "SAMPO RL", "seconds": rl["seconds"], "compile_s": rl["compile_seconds"],
         "loss": rl["metrics"].get("actor/pg_loss", math.nan)},
    ]  # fmt: skip
    result["setup"] = {k: report["setup"][k] for k in ("mesh", "param_count", "dtype", "batch")}
    result["setup"]["param_dtype"] = report["setup"]["param_dtype"]
    result["memory"] = device_memory()
    if "peak_device_gib" in before:
        result["memory"]["peak_before_part_gib"] = before["peak_device_gib"]
    model_config = QwenConfig(**report["setup"]["model"])
    paper = dataclasses.asdict(load_config(scale_smoke.CONFIG).mesh)
    result["config_mesh"] = paper
    result["sharding"] = sharding_groups(model_config, report["setup"]["mesh"], paper)
    result["sharding_failures"] = report["sharding_failures"]
    result["ok"] = report["ok"]


# ---- the run ------------------------------------------------------------------------------------

PART_FUNCTIONS: dict[str, Callable[[Sizes, dict[str, Any]], None]] = {
    "versions": part_versions,
    "correctness": part_correctness,
    "sampler": part_sampler,
    "training": part_training,
    "model": part_model,
    "rollout": part_rollout,
}


def free_memory() -> None:
    """Drop what a finished part left: Python garbage, PyTorch's cached GPU memory (compiled
    programs stay: later parts reuse some, and they hold little device memory)."""
    gc.collect()
    with contextlib.suppress(ImportError):
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()


@contextlib.contextmanager
def time_cap(seconds: float) -> Iterator[None]:
    """Raise :class:`PartTimeout` in this (main) thread after ``seconds`` (SIGALRM: it lands when
    control returns to Python, so a long compilation overruns until it ends). No cap off the
    main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise PartTimeout(f"stopped by its {seconds:.0f} s cap")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_part(name: str, sizes: Sizes, cap: float, inject: str | None) -> dict[str, Any]:
    """One guarded part: its result, ``status`` ok / failed (a check) / error (an exception or
    the cap, with the message in ``error``), its seconds and the device memory after it."""
    result: dict[str, Any] = {"status": "running", "cap_s": round(cap, 1)}
    start = time.perf_counter()
    try:
        with time_cap(cap):
            if name == inject:
                raise RuntimeError("injected failure (--inject-failure)")
            PART_FUNCTIONS[name](sizes, result)
        result["status"] = "ok" if result.get("ok", True) else "failed"
    except Exception as error:  # a part's failure is its result; the next part runs
        result["status"] = "error"
        result["error"] = f"{type(error).__name__}: {error}"
        result["traceback"] = traceback.format_exc(limit=-6)
    result["seconds"] = time.perf_counter() - start
    with contextlib.suppress(Exception):
        result.setdefault("memory", device_memory())
        free_memory()
    return result


def clean(value: Any) -> Any:
    """JSON-ready: non-finite floats as strings, NumPy scalars as Python numbers."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def cell(value: Any) -> str:
    """A Markdown table cell."""
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value).replace("|", "/")


def markdown(report: dict[str, Any]) -> str:
    """The summary table (a row per part), then each part's rows as a table of their own."""
    head = report["header"]
    lines = [
        f"Device: {head['device']} ({head['platform']}, {head['chip'] or 'no peak in the table'})"
        f"; JAX {head['jax']}; {head['mode']}; {head['seconds']:.0f} s in all.",
        "",
        "| part | status | seconds | note |",
        "|---|---|---|---|",
    ]
    for name, r in report["parts"].items():
        note = r.get("error") or "; ".join(r.get("problems", [])) or ""
        lines.append(f"| {name} | {r['status']} | {r.get('seconds', 0):.1f} | {cell(note)} |")
    for name, r in report["parts"].items():
        for key, rows in r.items():  # rows, and training's sharding audit
            if not (isinstance(rows, list) and rows and all(isinstance(x, dict) for x in rows)):
                continue
            columns = list(dict.fromkeys(k for row in rows for k in row))
            title = name if key == "rows" else f"{name}: {key}"
            lines += ["", f"**{title}**", "", "| " + " | ".join(columns) + " |"]
            lines.append("|" + "---|" * len(columns))
            lines += [
                "| " + " | ".join(cell(row.get(k, "")) for k in columns) + " |" for row in rows
            ]
    return "\n".join(lines) + "\n"


def write(out: Path, report: dict[str, Any], start: float) -> None:
    """``accelerator.json`` and ``accelerator.md`` in ``out`` (``start``: the run's clock)."""
    report["header"]["seconds"] = time.perf_counter() - start
    (out / "accelerator.json").write_text(json.dumps(clean(report), indent=1))
    (out / "accelerator.md").write_text(markdown(report))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (module doc)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="folder for accelerator.json and accelerator.md")
    p.add_argument("--cpu-dry-run", action="store_true", help="tiny shapes on the CPU")
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    p.add_argument("--budget", type=float, default=None, help="seconds for the whole run")
    p.add_argument("--cap", action="append", default=[], help="NAME=SECONDS: a part's cap")
    p.add_argument("--inject-failure", choices=PARTS, default=None, help="this part raises")
    return p.parse_args(argv)


def part_caps(sizes: Sizes, overrides: list[str]) -> dict[str, float]:
    """Each part's cap: the sizes' own, changed by ``--cap NAME=SECONDS``."""
    caps = dict(sizes.caps)
    for item in overrides:
        name, _, seconds = item.partition("=")
        if name not in caps or not seconds.replace(".", "", 1).isdigit():
            raise SystemExit(f"--cap {item!r}: expected NAME=SECONDS with NAME in {PARTS}")
        caps[name] = float(seconds)
    return caps


def watchdog(seconds: float, out: Path, report: dict[str, Any], start: float) -> None:
    """After ``seconds``, write what is finished and end the process (exit 124): a part stuck
    in a long native call that its SIGALRM cap cannot interrupt must not outlast the lease."""

    def fire():
        running = [n for n, r in report["parts"].items() if r.get("status") == "running"]
        for name in running:
            report["parts"][name] |= {"status": "error", "error": "stopped by the run's budget"}
        with contextlib.suppress(Exception):
            write(out, report, start)
        print(f"accelerator: budget of {seconds:.0f} s spent, stopping", flush=True)
        os._exit(124)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


def header(args: argparse.Namespace) -> dict[str, Any]:
    """What ran where."""
    peak = device_peak()
    return {
        "device": peak["kind"],
        "chip": peak["chip"],
        "platform": jax.default_backend(),
        "jax": jax.__version__,
        "mode": "CPU dry run (tiny shapes)" if args.cpu_dry_run else "full sizes",
        "argv": sys.argv[1:],
    }


def main(argv: list[str] | None = None, hard_stop: bool = False) -> dict[str, Any]:
    """Run the parts (module doc); return the report also written to ``OUT``. ``hard_stop``
    (the command line's): end the process 15 s after the budget (:func:`watchdog`)."""
    start = time.perf_counter()
    args = parse_args(argv)
    sizes = DRY if args.cpu_dry_run else DEVICE
    budget = sizes.budget if args.budget is None else args.budget
    caps = part_caps(sizes, args.cap)
    args.out.mkdir(parents=True, exist_ok=True)
    from arlarena_jax.compile_cache import enable_compilation_cache

    enable_compilation_cache()
    report: dict[str, Any] = {"header": header(args), "parts": {}}
    if hard_stop:
        watchdog(budget + 15, args.out, report, start)
    for name in PARTS:
        if name not in args.parts:
            continue
        left = budget - (time.perf_counter() - start)
        report["parts"][name] = {"status": "running"}
        if left < 5:
            report["parts"][name] = {"status": "error", "error": "no budget left", "seconds": 0}
        else:
            report["parts"][name] = run_part(
                name, sizes, min(caps[name], left - 5), args.inject_failure
            )
        r = report["parts"][name]
        print(
            f"accelerator: {name} {r['status']} in {r['seconds']:.1f} s {r.get('error', '')}",
            flush=True,
        )
        write(args.out, report, start)
    print(markdown(report), flush=True)
    return report


if __name__ == "__main__":
    report = main(hard_stop=True)
    sys.exit(0 if all(r["status"] == "ok" for r in report["parts"].values()) else 1)
