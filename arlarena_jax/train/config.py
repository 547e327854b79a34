"""The trainer's typed configuration: nested frozen dataclasses and their cross-field rules.

A :class:`Config` has one section per concern (``model``, ``env``, ``sampler``, ``algorithm``,
``optim``, ``sft``, ``trainer``, ``mesh``, ``monitor``). Defaults are the paper's ALFWorld
settings (docs/algorithms.md §8) where the reference gives a value, otherwise small safe values.
YAML loading, dotted overrides and dumping live in :mod:`arlarena_jax.train.config_io`;
:mod:`~arlarena_jax.train.resolution` resolves a config once (the environment's spec, the
method's settings, the run's pinned values) and :mod:`~arlarena_jax.train.config_checks` checks
the rules that span fields on that resolution. Every failure is a :class:`ConfigError` whose
message is one line naming the key path, e.g.
``config key 'trainer.mini_batch_size': 100 is not a multiple of trainer.micro_batch_size 32``.

Batch semantics follow verl (docs/environments.md §1.1): ``env.train_batch_size`` task groups of
``env.group_size`` trajectories per step; the turn rows are split into mini-batches of
``trainer.mini_batch_size`` rows (one optimizer step each) and micro-batches of
``trainer.micro_batch_size`` rows, each aggregated on its own as verl's per-GPU micro-batch is
(so the paper's per-GPU value reproduces its loss normalisation).
"""

from __future__ import annotations

import contextvars
import dataclasses
import typing
from collections.abc import Callable
from typing import Literal

from arlarena_jax.models.lora import LoRAConfig
from arlarena_jax.objectives.presets import (
    MethodSettings,
)
from arlarena_jax.sampler.engine import EngineConfig
from arlarena_jax.sampler.sampling import SamplingParams
from arlarena_jax.train.monitor import MonitorSettings
from arlarena_jax.train.optim import SFT_OPTIM, OptimConfig
from envs import registry

DTypeName = Literal["float32", "bfloat16"]


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    name: str = "tiny"  # a preset of arlarena_jax.models.PRESETS, used when path is null
    # A local Hugging Face directory (config.json + safetensors) or an embedded model's name
    # (smollm2-135m-instruct: `arlarena model fetch` puts it in the model cache).
    path: str | None = None
    tokenizer: str | None = "tiny-sokoban"  # "tiny-<env.name>" (built), a directory, null = path
    dtype: DTypeName = "float32"  # compute dtype
    param_dtype: DTypeName = "float32"
    remat: str | None = None  # a jax.checkpoint_policies name, e.g. "nothing_saveable"
    # LoRA: train low-rank adapters only ({rank, alpha, targets}); null: full fine-tuning
    lora: LoRAConfig | None = None
    # Keep only the first N decoder layers of model.path (null: all): the real tokenizer, chat
    # template and embeddings on a shallow network that compiles in seconds, for checks of the
    # pipeline (the end-to-end tests); what it generates is not the model's behaviour.
    num_layers: int | None = None


@dataclasses.dataclass(frozen=True)
class EnvCommon:
    """The ``env`` keys every environment reads; :data:`EnvConfig` adds one section per
    registered environment that declares its own settings."""

    name: str = "alfworld"  # a registered environment (envs.registry.names())
    train_batch_size: int = 16  # task groups per step (data.train_batch_size)
    group_size: int = 8  # trajectories per group (env.rollout.n)
    max_turns: int = 50  # env.max_steps
    history_length: int = 2
    prompt: str = "paper"  # a format of the env's spec; Sokoban: "compact", one char per cell
    eval_batch_size: int = 128  # validation environments run at once (group size 1)
    seed: int = 0
    eval_seed: int = 0  # offset of the held-out seeds (the trainer keeps them apart from training)
    num_workers: int = 0  # host environment pool processes (0: in-process / JAX-native)
    step_timeout_s: float = 60.0  # per step call to a pool worker
    data_path: str | None = None  # ALFWorld: the root holding json_2.1.1/<split>/ games
    # How the rollout makes training rows: "turn" (one per agent turn, the prompt rebuilt every
    # turn) or "trajectory" (one per episode, the conversation continued; observation tokens
    # masked out of the loss). null: the environment's default (EnvSpec.rows).
    rows: str | None = None
    max_observation_tokens: int = 256  # trajectory rows: an observation's token cap
    max_right_tokens: int = 8192  # trajectory rows: responses + observations of one episode
    # The reward the rollout sees: native (the environment's own), single (the win reward only)
    # or dense (per-turn progress; envs/rewards.py). reward_normalise: dense rewards over the
    # episode's maximum progress (a won episode's sum to 1).
    reward: str = "native"
    reward_normalise: bool = False
    # Play whole episode batches as one on-device program (JAX-native environments that declare
    # EnvSpec.device_env: Sokoban with the compact prompt; turn rows, the native reward).
    device_rollout: bool = False


def _env_config() -> type:
    """``EnvCommon`` plus a section ``env.<name>`` of type ``EnvSpec.settings`` for every
    registered environment that has one (``env.sokoban.dim_room``, ``env.alfworld.test_split``):
    adding an environment adds its section without touching this module."""
    sections = [
        (spec.name, spec.settings, dataclasses.field(default_factory=spec.settings))
        for spec in map(registry.get, registry.names())
        if spec.settings is not None
    ]
    cls = dataclasses.make_dataclass(
        "EnvConfig",
        sections,
        bases=(EnvCommon,),
        frozen=True,
        namespace={"__doc__": "The ``env`` section: common keys and each environment's own."},
    )
    cls.__module__ = __name__
    return cls


EnvConfig = _env_config()


TRAIN_SAMPLING = SamplingParams()
EVAL_SAMPLING = SamplingParams(temperature=0.6, top_p=0.95, top_k=20)  # the paper's validation


@dataclasses.dataclass(frozen=True)
class SamplerConfig(EngineConfig):
    """The engine's settings (:class:`~arlarena_jax.sampler.EngineConfig`: slots, prompt and
    response lengths, ``stop_token_ids`` added to the tokenizer's) plus how the policy samples."""

    train: SamplingParams = TRAIN_SAMPLING
    eval: SamplingParams = EVAL_SAMPLING
    stop_strings: tuple[str, ...] = ()
    enable_thinking: bool | None = None  # null: the chat template's default


def _algorithm_config() -> type:
    """``method`` plus every :class:`~arlarena_jax.objectives.presets.MethodSettings` field, each
    ``null`` by default: null takes the method's value (its preset's, or its environment's
    release-script value), anything else overrides it."""
    knobs = [
        (name, tp | None, dataclasses.field(default=None))
        for name, tp in typing.get_type_hints(MethodSettings).items()
    ]
    cls = dataclasses.make_dataclass(
        "AlgorithmConfig",
        [("method", str, dataclasses.field(default="sampo")), *knobs],
        frozen=True,
        namespace={"__doc__": "The method preset and its settings (null: the method's value)."},
    )
    cls.__module__ = __name__
    return cls


AlgorithmConfig = _algorithm_config()


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    enabled: bool = False
    num_episodes: int = 512  # expert episodes (Sokoban: demo rooms); successful ones are kept
    epochs: int = 1
    steps: int | None = None  # optimizer steps; overrides epochs when set
    batch_size: int = 16
    # rows per gradient pass (null: the whole batch); the batch's gradients are summed over its
    # micro-batches (a lax.scan), so peak memory is one micro-batch's and the update is the same
    micro_batch_size: int | None = None
    optim: OptimConfig = SFT_OPTIM
    seed: int = 0
    # seconds of cloning between saves of its state (run_dir/checkpoints_sft), so a hard kill
    # loses at most that much; 0 = save only when stopped by a signal
    save_every_s: float = 300.0
    # a run directory written by `arlarena sft` (a shared start, arlarena_jax/train/start.py):
    # take its cloned policy (checkpoint step 0) and its evaluation instead of cloning
    init_from: str | None = None
    # continued cloning: after the start's cloning (the shared start's, or this run's own), this
    # many more steps on the same demonstrations, with a fresh optimizer and sft.optim's schedule
    # over them; the run then evaluates that policy as its own start (RL's alternative of the
    # same cost, sharing the start: docs/arena.md "Shared starts")
    continue_steps: int = 0


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    total_steps: int = 200  # RL iterations (1 epoch = 1 step in the scripts); 0: no RL
    ppo_epochs: int = 1
    mini_batch_size: int = 256  # turn rows per optimizer step (ppo_mini_batch_size)
    micro_batch_size: int = 32  # rows per aggregated micro-batch (ppo_micro_batch_size_per_gpu)
    # prompt widths compiled per packed batch width for the update, the log-prob passes and a
    # critic's passes: 1 runs every micro-batch at its batch's width; k also compiles the k - 1
    # next narrower buckets and runs each micro-batch at the narrowest that holds its prompts (the
    # same values, less left padding computed where a batch's prompts differ in length)
    prompt_widths: int = 1
    seed: int = 0
    # RL's own randomness (the training tasks drawn, the training sampler's stream); null: the
    # streams of ``seed``. RL-only: runs that differ in it share one cloned start, whose cloning,
    # initialisation and evaluation stream stay ``seed``'s (:func:`rl_stream_seed`).
    rl_seed: int | None = None
    eval_every: int = 5  # test_freq; 0 = never
    eval_at_start: bool = True
    eval_episodes: int = 128  # held-out seeds per evaluation
    # the split the run's evaluations play: validation (what a choice may read: a recipe, a
    # best step) or test (what a result reports; choices never read it); train: a fit check
    eval_split: str = "test"
    run_dir: str | None = (
        None  # metrics, checkpoints, exports; null: runs/<env>/<method>_seed<seed>
    )
    save_every: int = 10  # 0 = only at the end
    keep_checkpoints: int = 3
    export_hf: bool = False  # write a Hugging Face directory at the end
    # lp_old = the sampler's behaviour log-probs instead of a trainer pass (Tunix's
    # use_rollout_logps). Off by default: the recomputed ones differ (actor/rollout_lp_abs_diff).
    use_rollout_log_probs: bool = False
    # Asynchronous RL (docs/architecture.md, "Asynchronous RL"): the rollout an update consumes
    # may come from parameters at most this many updates old; 0: the synchronous loop.
    max_staleness: int = 0
    # episodes in flight switch to newly published parameters between decode calls (needs
    # max_staleness > 0); every token keeps its own version and behaviour log-prob
    partial_rollouts: bool = False


CRITIC_OPTIM = OptimConfig(lr=1e-5, warmup_ratio=0.0, schedule="constant")


@dataclasses.dataclass(frozen=True)
class CriticConfig:
    """PPO's critic, built when the method's objective needs values (``ppo``'s GAE; docs/
    algorithms.md §3.7c). It takes the policy's ``trainer.mini_batch_size``,
    ``micro_batch_size`` and ``ppo_epochs``."""

    # separate: verl's layout, a Qwen with a scalar head initialised from the policy;
    # head: a value head on the policy's hidden states (held constant), cheaper on a CPU
    model: Literal["separate", "head"] = "separate"
    optim: OptimConfig = CRITIC_OPTIM  # its own optimizer (the internal PPO script: lr 1e-5)
    cliprange_value: float = 0.5  # ε_v of the clipped value loss (verl cliprange_value)
    # a token-classification directory (a critic export, run_dir/hf_critic) to start from;
    # null: from the policy's weights and a fresh head
    path: str | None = None
    seed: int = 0  # the fresh head's initialisation


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    data: int = 1
    fsdp: int = 1
    tensor: int = 1


@dataclasses.dataclass(frozen=True)
class Config:
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    sampler: SamplerConfig = dataclasses.field(default_factory=SamplerConfig)
    algorithm: AlgorithmConfig = dataclasses.field(default_factory=AlgorithmConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    sft: SFTConfig = dataclasses.field(default_factory=SFTConfig)
    trainer: TrainerConfig = dataclasses.field(default_factory=TrainerConfig)
    critic: CriticConfig = dataclasses.field(default_factory=CriticConfig)
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)
    monitor: MonitorSettings = dataclasses.field(default_factory=MonitorSettings)


# How many devices the mesh may span, asked only when the mesh spans more than one: unset (the
# default) skips the check, so validation needs no devices; the CLI sets ``jax.device_count``
# while it loads a config, so a mesh too large is reported before the batch splits over it.
DEVICE_COUNT: contextvars.ContextVar[Callable[[], int] | None] = contextvars.ContextVar(
    "arlarena_device_count", default=None
)
