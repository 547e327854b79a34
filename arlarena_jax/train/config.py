"""The trainer's typed configuration: nested frozen dataclasses and their cross-field rules.

A :class:`Config` has one section per concern (``model``, ``env``, ``sampler``, ``algorithm``,
``optim``, ``sft``, ``trainer``, ``mesh``, ``monitor``). Defaults are the paper's ALFWorld
settings (spec algorithms §9.1) where the spec gives a value, otherwise small safe values.
YAML loading, dotted overrides and dumping live in :mod:`arlarena_jax.train.config_io`;
:func:`validate` checks the rules that span fields. Every failure is a :class:`ConfigError`
whose message is one line naming the key path, e.g.
``config key 'trainer.mini_batch_size': 100 is not a multiple of trainer.micro_batch_size 32``.

Batch semantics follow verl (spec §9): ``env.train_batch_size`` task groups of
``env.group_size`` trajectories per step; the turn rows are split into mini-batches of
``trainer.mini_batch_size`` rows (one optimizer step each) and micro-batches of
``trainer.micro_batch_size`` rows, each aggregated on its own as verl's per-GPU micro-batch is
(so the paper's per-GPU value reproduces its loss normalisation).
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Literal

DTypeName = Literal["float32", "bfloat16"]
Schedule = Literal["constant", "cosine"]


class ConfigError(ValueError):
    """An invalid configuration; the message is one line naming the offending key."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    name: str = "tiny"  # a preset of arlarena_jax.models.PRESETS, used when path is null
    path: str | None = None  # a local Hugging Face directory (config.json + safetensors)
    tokenizer: str | None = "tiny-sokoban"  # "tiny-<env.name>" (built), a directory, null = path
    dtype: DTypeName = "float32"  # compute dtype
    param_dtype: DTypeName = "float32"
    remat: str | None = None  # a jax.checkpoint_policies name, e.g. "nothing_saveable"


@dataclasses.dataclass(frozen=True)
class SokobanConfig:
    dim_room: int = 6
    num_boxes: int = 1
    search_depth: int = 30


@dataclasses.dataclass(frozen=True)
class AlfworldConfig:
    eval_split: Literal["valid_seen", "valid_unseen"] = "valid_seen"  # in / out of distribution
    expert_think: bool = True  # demonstrations carry a short rationale (false: empty <think>)


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    name: Literal["sokoban", "alfworld", "webshop"] = "alfworld"
    train_batch_size: int = 16  # task groups per step (data.train_batch_size)
    group_size: int = 8  # trajectories per group (env.rollout.n)
    max_turns: int = 50  # env.max_steps
    history_length: int = 2
    prompt: Literal["paper", "compact"] = "paper"  # "compact": one character per cell (Sokoban)
    eval_batch_size: int = 128  # validation environments run at once (group size 1)
    seed: int = 0
    eval_seed: int = 0  # offset of the held-out seeds (the trainer keeps them apart from training)
    num_workers: int = 0  # host environment pool processes (0: in-process / JAX-native)
    step_timeout_s: float = 60.0  # per step call to a pool worker
    data_path: str | None = None  # ALFWorld: the root holding json_2.1.1/<split>/ games
    sokoban: SokobanConfig = dataclasses.field(default_factory=SokobanConfig)
    alfworld: AlfworldConfig = dataclasses.field(default_factory=AlfworldConfig)


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off (verl's -1)


@dataclasses.dataclass(frozen=True)
class SamplerConfig:
    max_concurrent_decodes: int = 128  # decode slots
    max_prefill_length: int = 2048  # data.max_prompt_length
    max_new_tokens: int = 512  # data.max_response_length
    steps_per_call: int = 8
    cache_dtype: DTypeName = "float32"
    train: SamplingConfig = dataclasses.field(default_factory=SamplingConfig)
    eval: SamplingConfig = dataclasses.field(
        default_factory=lambda: SamplingConfig(temperature=0.6, top_p=0.95, top_k=20)
    )
    stop_strings: tuple[str, ...] = ()
    enable_thinking: bool | None = None  # null: the chat template's default


@dataclasses.dataclass(frozen=True)
class AlgorithmConfig:
    method: str = "sampo"  # a key of arlarena_jax.objectives.presets.PRESETS
    env: Literal["alfworld", "webshop", "sokoban"] | None = None  # preset recipe; null = env.name
    max_num_gen_batches: int | None = None  # dynamic-sampling tries; null = the preset's
    cold_start_steps: int | None = None  # null = the preset's


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-6
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    warmup_ratio: float = 0.0
    schedule: Schedule = "constant"
    grad_clip: float | None = 1.0  # null: no clipping


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    enabled: bool = False
    num_episodes: int = 512  # expert episodes (Sokoban: demo rooms); successful ones are kept
    epochs: int = 1
    steps: int | None = None  # optimizer steps; overrides epochs when set
    batch_size: int = 16
    lr: float = 1e-5
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.95)
    warmup_ratio: float = 0.1
    schedule: Schedule = "cosine"
    grad_clip: float | None = 1.0
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    total_steps: int = 200  # RL iterations (1 epoch = 1 step in the scripts); 0: no RL
    ppo_epochs: int = 1
    mini_batch_size: int = 256  # turn rows per optimizer step (ppo_mini_batch_size)
    micro_batch_size: int = 32  # rows per aggregated micro-batch (ppo_micro_batch_size_per_gpu)
    seed: int = 0
    eval_every: int = 5  # test_freq; 0 = never
    eval_at_start: bool = True
    eval_episodes: int = 128  # held-out seeds per evaluation
    run_dir: str = "runs/default"  # metrics, checkpoints and exports go under it
    save_every: int = 10  # 0 = only at the end
    keep_checkpoints: int = 3
    export_hf: bool = False  # write a Hugging Face directory at the end


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    data: int = 1
    fsdp: int = 1
    tensor: int = 1


@dataclasses.dataclass(frozen=True)
class MonitorConfig:
    enabled: bool = True
    window: int = 20
    min_history: int = 5
    grad_norm_spike_factor: float | None = 5.0
    format_drop: float | None = 0.15
    kl_bound: float | None = 0.05
    log_ratio_bound: float | None = 0.2
    entropy_collapse_fraction: float | None = 0.2
    entropy_blowup_factor: float | None = 3.0
    clipfrac_bound: float | None = None
    rollback: bool = False
    rollback_after: int = 3


@dataclasses.dataclass(frozen=True)
class Config:
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    sampler: SamplerConfig = dataclasses.field(default_factory=SamplerConfig)
    algorithm: AlgorithmConfig = dataclasses.field(default_factory=AlgorithmConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    sft: SFTConfig = dataclasses.field(default_factory=SFTConfig)
    trainer: TrainerConfig = dataclasses.field(default_factory=TrainerConfig)
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)
    monitor: MonitorConfig = dataclasses.field(default_factory=MonitorConfig)

    @property
    def preset_env(self) -> str:
        """The environment whose script settings the method preset follows."""
        return self.algorithm.env or self.env.name


def _fail(key: str, message: str) -> None:
    raise ConfigError(f"config key {key!r}: {message}")


def _at_least(section: object, prefix: str, minimum: float, *names: str) -> None:
    for name in names:
        value = getattr(section, name)
        if value is not None and not value >= minimum:  # NaN fails too
            _fail(f"{prefix}.{name}", f"must be >= {minimum:g}, got {value!r}")


def _check_optimizer(section: OptimConfig | SFTConfig, prefix: str) -> None:
    if not section.lr > 0:
        _fail(f"{prefix}.lr", f"must be > 0, got {section.lr!r}")
    _at_least(section, prefix, 0, "weight_decay")
    if not all(0 <= b < 1 for b in section.betas):
        _fail(f"{prefix}.betas", f"each must lie in [0, 1), got {list(section.betas)}")
    if not 0 <= section.warmup_ratio < 1:
        _fail(f"{prefix}.warmup_ratio", f"must lie in [0, 1), got {section.warmup_ratio!r}")
    if section.grad_clip is not None and not section.grad_clip > 0:
        _fail(f"{prefix}.grad_clip", f"must be > 0 or null, got {section.grad_clip!r}")
    if isinstance(section, OptimConfig) and not section.eps > 0:
        _fail(f"{prefix}.eps", f"must be > 0, got {section.eps!r}")


def _check_sampling(section: SamplingConfig, prefix: str) -> None:
    _at_least(section, prefix, 0, "temperature", "top_k")
    if not 0 < section.top_p <= 1:
        _fail(f"{prefix}.top_p", f"must lie in (0, 1], got {section.top_p!r}")


def _check_model(model: ModelConfig) -> None:
    import jax  # deferred: only for the remat policy names

    from arlarena_jax.models.config import PRESETS as MODEL_PRESETS

    if model.path is None:
        if model.name not in MODEL_PRESETS:
            close = difflib.get_close_matches(model.name, list(MODEL_PRESETS), n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(MODEL_PRESETS)}"
            _fail("model.name", f"unknown model preset {model.name!r} ({hint})")
    elif not model.path:
        _fail("model.path", "must be a directory or null, got ''")
    if model.path is None and model.tokenizer is None:
        _fail("model.tokenizer", "null needs model.path (the tokenizer is read from it)")
    if model.remat is not None and not hasattr(jax.checkpoint_policies, model.remat):
        _fail("model.remat", f"unknown jax.checkpoint_policies name {model.remat!r}")


def _check_algorithm(algorithm: AlgorithmConfig) -> None:
    from arlarena_jax.objectives.presets import PRESETS

    if algorithm.method not in PRESETS:
        close = difflib.get_close_matches(algorithm.method.lower(), list(PRESETS), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(PRESETS)}"
        _fail("algorithm.method", f"unknown method preset {algorithm.method!r} ({hint})")
    _at_least(algorithm, "algorithm", 1, "max_num_gen_batches")
    _at_least(algorithm, "algorithm", 0, "cold_start_steps")


def _check_monitor(monitor: MonitorConfig) -> None:
    _at_least(monitor, "monitor", 1, "window", "min_history", "rollback_after")
    for name in ("grad_norm_spike_factor", "entropy_blowup_factor"):
        value = getattr(monitor, name)
        if value is not None and not value > 1:
            _fail(f"monitor.{name}", f"must be > 1 or null, got {value!r}")
    for name in ("format_drop", "kl_bound", "log_ratio_bound", "clipfrac_bound"):
        value = getattr(monitor, name)
        if value is not None and not value > 0:
            _fail(f"monitor.{name}", f"must be > 0 or null, got {value!r}")
    fraction = monitor.entropy_collapse_fraction
    if fraction is not None and not 0 < fraction < 1:
        _fail("monitor.entropy_collapse_fraction", f"must lie in (0, 1) or null, got {fraction!r}")


def validate(config: Config) -> Config:
    """Check the rules that span fields; return ``config`` unchanged or raise ConfigError."""
    env, sampler, trainer, mesh = config.env, config.sampler, config.trainer, config.mesh
    _check_model(config.model)
    _at_least(env, "env", 1, "train_batch_size", "group_size", "max_turns", "eval_batch_size")
    _at_least(env, "env", 0, "history_length", "seed", "eval_seed", "num_workers")
    if not env.step_timeout_s > 0:
        _fail("env.step_timeout_s", f"must be > 0, got {env.step_timeout_s!r}")
    _at_least(env.sokoban, "env.sokoban", 1, "num_boxes", "search_depth")
    _at_least(env.sokoban, "env.sokoban", 3, "dim_room")
    if env.prompt == "compact" and env.name != "sokoban":
        _fail("env.prompt", f"'compact' exists only for sokoban, not {env.name!r}")
    _at_least(sampler, "sampler", 1, "max_concurrent_decodes", "max_prefill_length")
    _at_least(sampler, "sampler", 1, "max_new_tokens", "steps_per_call")
    if any(not s for s in sampler.stop_strings):
        _fail("sampler.stop_strings", "stop strings must be non-empty")
    _check_sampling(sampler.train, "sampler.train")
    _check_sampling(sampler.eval, "sampler.eval")
    _check_algorithm(config.algorithm)
    _check_optimizer(config.optim, "optim")
    _check_optimizer(config.sft, "sft")
    _at_least(config.sft, "sft", 1, "num_episodes", "epochs", "steps", "batch_size")
    _at_least(trainer, "trainer", 1, "ppo_epochs", "keep_checkpoints")
    _at_least(trainer, "trainer", 1, "mini_batch_size", "micro_batch_size")
    _at_least(trainer, "trainer", 0, "total_steps", "eval_every", "eval_episodes", "save_every")
    if trainer.mini_batch_size % trainer.micro_batch_size:
        _fail(
            "trainer.mini_batch_size",
            f"{trainer.mini_batch_size} is not a multiple of trainer.micro_batch_size "
            f"{trainer.micro_batch_size}",
        )
    _at_least(mesh, "mesh", 1, "data", "fsdp", "tensor")
    shards = mesh.data * mesh.fsdp
    for key, rows in (
        ("trainer.micro_batch_size", trainer.micro_batch_size),
        ("sft.batch_size", config.sft.batch_size),
    ):
        if rows % shards:
            _fail(key, f"{rows} rows do not split over mesh data*fsdp = {shards}")
    _check_monitor(config.monitor)
    return config
