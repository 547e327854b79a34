"""The trainer's typed configuration: nested frozen dataclasses and their cross-field rules.

A :class:`Config` has one section per concern (``model``, ``env``, ``sampler``, ``algorithm``,
``optim``, ``sft``, ``trainer``, ``mesh``, ``monitor``). Defaults are the paper's ALFWorld
settings (docs/algorithms.md §8) where the reference gives a value, otherwise small safe values.
YAML loading, dotted overrides and dumping live in :mod:`arlarena_jax.train.config_io`;
:func:`validate` checks the rules that span fields. Every failure is a :class:`ConfigError`
whose message is one line naming the key path, e.g.
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
import difflib
import math
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from arlarena_jax.errors import ConfigError
from arlarena_jax.models.lora import LoRAConfig, invalid_lora
from arlarena_jax.objectives.presets import (
    PRESETS,
    MethodSettings,
    invalid_settings,
    preset_key,
    settings,
)
from arlarena_jax.sampler.engine import EngineConfig, invalid_engine
from arlarena_jax.sampler.sampling import SamplingParams
from arlarena_jax.train.monitor import MonitorSettings, invalid_monitor
from arlarena_jax.train.optim import SFT_OPTIM, OptimConfig, invalid_optim
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


def check_mesh_devices(mesh: MeshConfig, devices: int) -> None:
    """A mesh of more than one device must span exactly the ``devices`` there are."""
    size = mesh.data * mesh.fsdp * mesh.tensor
    if size != 1 and size != devices:
        hint = "set them to 1" if devices == 1 else f"their product must be {devices}, or 1"
        _fail(
            "mesh",
            f"mesh.data*mesh.fsdp*mesh.tensor = {mesh.data}*{mesh.fsdp}*{mesh.tensor} = {size} "
            f"devices, but {devices} {'is' if devices == 1 else 'are'} available ({hint})",
        )


def ignored_env_keys(config: Config) -> list[str]:
    """One warning line for each common ``env`` key set away from its default that the chosen
    environment ignores (its ``EnvSpec.ignores``), for the trajectory-row caps under turn rows,
    and for ``trainer.eval_episodes`` where the environment fixes its evaluation's size."""
    spec = registry.get(config.env.name)
    defaults = EnvCommon()
    lines = [
        f"config key 'env.{key}' has no effect for env {spec.name!r} ({reason})"
        for key, reason in spec.ignores.items()
        if getattr(config.env, key) != getattr(defaults, key)
    ]
    if (config.env.rows or spec.rows[0]) == "turn":
        lines += [
            f"config key 'env.{key}' has no effect with turn rows (it caps trajectory rows)"
            for key in ("max_observation_tokens", "max_right_tokens")
            if getattr(config.env, key) != getattr(defaults, key)
        ]
    if (
        spec.eval_episodes is not None
        and config.trainer.eval_episodes != TrainerConfig().eval_episodes
    ):
        lines.append(
            f"config key 'trainer.eval_episodes' has no effect for env {spec.name!r} (its "
            "evaluation plays every problem a fixed number of times)"
        )
    return lines


def _fail(key: str, message: str) -> None:
    raise ConfigError(f"config key {key!r}: {message}")


def _at_least(section: object, prefix: str, minimum: float, *names: str) -> None:
    for name in names:
        value = getattr(section, name)
        if value is not None and not value >= minimum:  # NaN fails too
            _fail(f"{prefix}.{name}", f"must be >= {minimum:g}, got {value!r}")


def _check(problems: Iterator[tuple[str, str]], prefix: str) -> None:
    """Fail on the first ``(field, message)`` a section's own validator reports."""
    for field, message in problems:
        _fail(f"{prefix}.{field}", message)


def _check_async(trainer: TrainerConfig) -> None:
    """``trainer.max_staleness`` is an int >= 0; ``partial_rollouts`` needs it > 0."""
    k = trainer.max_staleness
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        _fail("trainer.max_staleness", f"must be an integer >= 0, got {k!r}")
    if trainer.partial_rollouts and k == 0:
        _fail("trainer.partial_rollouts", "needs trainer.max_staleness > 0 (0: synchronous)")


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
    if model.lora is not None:
        _check(invalid_lora(model.lora), "model.lora")
    if model.num_layers is not None and model.path is None:
        _fail("model.num_layers", "keeps the first layers of model.path, which is null")
    if model.num_layers is not None and model.num_layers < 1:
        _fail("model.num_layers", f"must be >= 1 or null, got {model.num_layers}")


def explicit_knobs(algorithm: Any) -> dict[str, Any]:
    """The ``algorithm`` fields set in the config (not null): the method's overrides."""
    fields = (f.name for f in dataclasses.fields(algorithm) if f.name != "method")
    return {
        name: getattr(algorithm, name) for name in fields if getattr(algorithm, name) is not None
    }


def environment_recipe(config: Config) -> dict[str, Any]:
    """The environment's release-script values for the method (its ``EnvSpec.method_settings``),
    e.g. WebShop's SAMPO cold start of 5 where the preset (ALFWorld's scripts) has 15."""
    from envs import registry

    recipes = registry.get(config.env.name).method_settings
    return dict(recipes.get(preset_key(config.algorithm.method), {}))


ASYNC_ROLLOUT_IS = "token"  # asynchronous RL's default correction: TIS (decoupled PPO)


def method_settings(config: Config) -> MethodSettings:
    """The run's resolved method settings: the preset's defaults < the environment's recipe for
    the method < ``algorithm.*`` set in the config.

    Asynchronous runs (``trainer.max_staleness`` > 0) default to a trust-region loss: where
    ``algorithm.rollout_is`` is left null, the loss is weighted by token TIS,
    ``min(exp(lp_old − lp_rollout), rollout_is_threshold)`` (docs/algorithms.md §4.13), so a
    stale rollout's tokens count by how likely the proximal policy (lp_old) finds them;
    ``rollout_is: disabled`` keeps the method's loss alone."""
    overrides = {**environment_recipe(config), **explicit_knobs(config.algorithm)}
    resolved = settings(config.algorithm.method, **overrides)
    if config.trainer.max_staleness > 0 and resolved.rollout_is is None:
        resolved = dataclasses.replace(resolved, rollout_is=ASYNC_ROLLOUT_IS)
    return resolved


def _check_env_name(env: Any) -> None:
    """``env.name`` is registered and ``env.prompt`` is one of its formats."""
    if env.name not in registry.names():
        _fail("env.name", registry.unknown_message(env.name))
    registry.get(env.name).task_format(env)


def _check_eval_split(env: Any, trainer: TrainerConfig) -> None:
    """``trainer.eval_split`` is a split the environment declares (``EnvSpec.splits``)."""
    splits = registry.get(env.name).splits
    if trainer.eval_split not in splits:
        _fail(
            "trainer.eval_split",
            f"{trainer.eval_split!r} is not a split of environment {env.name!r} "
            f"(its splits: {', '.join(splits)})",
        )


def _check_reward(env: Any) -> None:
    """``env.reward`` is a mode, and ``dense`` only where the environment has progress."""
    from envs.rewards import MODES

    spec = registry.get(env.name)
    if env.reward not in MODES:
        _fail("env.reward", f"must be one of {', '.join(MODES)}, got {env.reward!r}")
    having = [n for n in registry.names() if registry.get(n).progress is not None]
    if env.reward == "dense" and spec.native_reward != "dense" and spec.progress is None:
        _fail(
            "env.reward",
            f"env {env.name!r} has no honest progress signal for dense rewards "
            f"(environments with one: {', '.join(having)})",
        )
    if env.reward_normalise and env.reward != "dense":
        _fail("env.reward_normalise", f"needs env.reward: dense, got {env.reward!r}")
    if env.reward_normalise and spec.progress is None:
        _fail(
            "env.reward_normalise",
            f"env {env.name!r} has no progress signal to normalise by "
            f"(environments with one: {', '.join(having)})",
        )


def _check_rows(env: Any) -> None:
    """``env.rows`` is a layout the environment supports, and its token caps are positive."""
    supported = registry.get(env.name).rows
    if env.rows is not None and env.rows not in supported:
        _fail(
            "env.rows",
            f"env {env.name!r} supports {', '.join(supported)} rows, not {env.rows!r}",
        )
    _at_least(env, "env", 1, "max_observation_tokens", "max_right_tokens")


def _check_device_rollout(env: Any) -> None:
    """``env.device_rollout`` only where the environment declares it, with turn rows and the
    environment's own reward (its prompt format is checked when the rollout is built)."""
    if not env.device_rollout:
        return
    spec = registry.get(env.name)
    having = [n for n in registry.names() if registry.get(n).device_env is not None]
    if spec.device_env is None:
        _fail(
            "env.device_rollout",
            f"env {env.name!r} has no on-device rollout (environments with one: "
            f"{', '.join(having) or 'none'})",
        )
    if env.rows not in (None, "turn"):
        _fail("env.device_rollout", f"needs turn rows, got env.rows {env.rows!r}")
    native = env.reward == "native" or (
        env.reward == spec.native_reward and not env.reward_normalise
    )
    if not native:
        _fail("env.device_rollout", f"plays the native reward only, got env.reward {env.reward!r}")


def _check_algorithm(algorithm: Any) -> None:
    try:
        preset = PRESETS[preset_key(algorithm.method)]
    except ValueError as exc:
        _fail("algorithm.method", str(exc))
    explicit = explicit_knobs(algorithm)
    for name in explicit:
        if name not in preset.knobs:
            _fail(
                f"algorithm.{name}",
                f"method {preset_key(algorithm.method)!r} does not read it "
                f"(its settings: {', '.join(preset.knobs)})",
            )
    _check(invalid_settings(MethodSettings(**{**preset.defaults, **explicit})), "algorithm")


def _check_method(config: Config) -> None:
    """The method's settings, the environment's recipe for it included, are in range."""
    _check_algorithm(config.algorithm)
    try:
        method_settings(config)
    except ValueError as exc:  # a recipe value the method does not read or out of range
        _fail("algorithm.method", str(exc))


def resolve(config: Config) -> Config:
    """``config`` with every value pinned: the method's settings it reads filled in (the rest
    stay null), ``trainer.rl_seed`` null when it equals ``trainer.seed`` (the same streams:
    :func:`rl_stream_seed`) and ``trainer.run_dir`` derived when null. What a run dumps and
    prints."""
    resolved = method_settings(config)
    knobs = PRESETS[preset_key(config.algorithm.method)].knobs
    algorithm = dataclasses.replace(
        config.algorithm, **{name: getattr(resolved, name) for name in knobs}
    )
    trainer = config.trainer
    if trainer.rl_seed == trainer.seed:
        trainer = dataclasses.replace(trainer, rl_seed=None)
    run_dir = trainer.run_dir or default_run_dir(dataclasses.replace(config, trainer=trainer))
    trainer = dataclasses.replace(trainer, run_dir=run_dir)
    return dataclasses.replace(config, algorithm=algorithm, trainer=trainer)


def default_run_dir(config: Config) -> str:
    """``runs/<env>/<method>_seed<seed>``, ``…_seed<seed>_rl<rl_seed>`` when ``trainer.rl_seed``
    is set."""
    method = preset_key(config.algorithm.method)
    rl = "" if config.trainer.rl_seed is None else f"_rl{config.trainer.rl_seed}"
    return f"runs/{config.env.name}/{method}_seed{config.trainer.seed}{rl}"


def rl_stream_seed(config: Config) -> int:
    """The seed of RL's streams (training task draws, the training sampler): ``trainer.seed``
    when ``trainer.rl_seed`` is null or equal to it (so such a run repeats one without it), else
    the first 63 bits of NumPy's ``SeedSequence([seed, rl_seed])``: never a small integer, so it
    does not replay the evaluation stream (``seed + 1``) or another run's."""
    seed, rl_seed = config.trainer.seed, config.trainer.rl_seed
    if rl_seed is None or rl_seed == seed:
        return seed
    import numpy as np

    return int(np.random.SeedSequence([seed, rl_seed]).generate_state(1, np.uint64)[0] >> 1)


def model_dir(model: ModelConfig) -> str | None:
    """``model.path`` as a directory (an embedded model's name resolved to its cache directory by
    :func:`arlarena_jax.models.fetch.model_directory`); None without a path."""
    from arlarena_jax.models.fetch import model_directory

    return None if model.path is None else model_directory(model.path)


def tokenizer_dir(model: ModelConfig) -> str | None:
    """The directory the tokenizer is read from (``model.tokenizer``, else ``model.path``),
    names of embedded models resolved; None for a built ``tiny-<env>`` tokenizer."""
    from arlarena_jax.models.fetch import model_directory

    if is_built_tokenizer(model.tokenizer):
        return None
    return model_dir(model) if model.tokenizer is None else model_directory(model.tokenizer)


def is_built_tokenizer(name: str | None) -> bool:
    """Whether ``model.tokenizer`` names a built ``tiny-<env>`` vocabulary (no such folder)."""
    return name is not None and name.startswith("tiny-") and not Path(name).exists()


INT32_MAX = 2**31 - 1  # sizes and steps reach JAX programs as int32
INT64_MAX = 2**63 - 1  # seeds feed jax.random.key and NumPy generators, which take 64 bits


def _number_problems(value: Any, key: str) -> Iterator[tuple[str, str]]:
    """``(key, message)`` for every number under ``value`` (a section, a sequence or a scalar)
    that is not finite or does not fit int32 (int64 for seeds: ``seed``, ``eval_seed``)."""
    if dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            yield from _number_problems(getattr(value, field.name), f"{key}.{field.name}")
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _number_problems(item, key)
    elif isinstance(value, bool):
        return
    elif isinstance(value, float) and not math.isfinite(value):
        yield key, f"must be a finite number, got {value!r}"
    elif isinstance(value, int) and key.endswith("seed") and abs(value) > INT64_MAX:
        yield key, f"must lie within ±{INT64_MAX:,} (int64), got {value:,}"
    elif isinstance(value, int) and not key.endswith("seed") and abs(value) > INT32_MAX:
        yield key, f"must lie within ±{INT32_MAX:,} (int32), got {value:,}"


def check_numbers(config: Config) -> None:
    """Every float of ``config`` is finite and every integer fits int32, a seed int64 (one line
    naming the first key that is not)."""
    for field in dataclasses.fields(config):
        for key, message in _number_problems(getattr(config, field.name), field.name):
            _fail(key, message)


EVAL_BLOCK_SIZE = 2**29  # seeds in each split's evaluation block (train.build's seed ranges)


def _at_most_block(key: str, end: int) -> None:
    """An evaluation's seeds stay inside their split's seed block (train.build's seed ranges:
    2^29 seeds each), so no two splits share a seed."""
    if end > EVAL_BLOCK_SIZE:
        _fail(key, f"the evaluation's seeds end at {end}, past its split's block of 2^29 seeds")


def validate(config: Config) -> Config:
    """Check the rules that span fields; return ``config`` unchanged or raise ConfigError."""
    env, sampler, trainer, mesh = config.env, config.sampler, config.trainer, config.mesh
    check_numbers(config)
    _check_model(config.model)
    _at_least(env, "env", 1, "train_batch_size", "group_size", "max_turns", "eval_batch_size")
    _at_least(env, "env", 0, "history_length", "seed", "eval_seed", "num_workers")
    if not env.step_timeout_s > 0:
        _fail("env.step_timeout_s", f"must be > 0, got {env.step_timeout_s!r}")
    _check_env_name(env)
    _check_eval_split(env, trainer)
    _at_most_block("env.eval_seed", env.eval_seed + trainer.eval_episodes)
    _check_rows(env)
    _check_device_rollout(env)
    _check_reward(env)
    _check(invalid_engine(sampler), "sampler")
    if any(not s for s in sampler.stop_strings):
        _fail("sampler.stop_strings", "stop strings must be non-empty")
    if env.device_rollout and len(sampler.stop_strings) > 1:
        _fail("sampler.stop_strings", "env.device_rollout takes at most one stop string")
    _check_method(config)
    _check(invalid_optim(config.optim), "optim")
    _check(invalid_optim(config.sft.optim), "sft.optim")
    _check(invalid_optim(config.critic.optim), "critic.optim")
    if not config.critic.cliprange_value > 0:
        _fail("critic.cliprange_value", f"must be > 0, got {config.critic.cliprange_value!r}")
    _at_least(config.sft, "sft", 1, "num_episodes", "epochs", "steps", "batch_size")
    _at_least(config.sft, "sft", 0, "save_every_s")
    micro = config.sft.micro_batch_size
    if micro is not None and (micro < 1 or config.sft.batch_size % micro):
        _fail(
            "sft.micro_batch_size",
            f"must divide sft.batch_size {config.sft.batch_size} (or be null), got {micro}",
        )
    _at_least(trainer, "trainer", 1, "ppo_epochs", "keep_checkpoints", "eval_episodes")
    _at_least(trainer, "trainer", 1, "mini_batch_size", "micro_batch_size", "prompt_widths")
    _at_least(trainer, "trainer", 0, "total_steps", "eval_every", "save_every", "seed", "rl_seed")
    _check_async(trainer)
    if trainer.partial_rollouts and env.device_rollout:
        _fail(
            "trainer.partial_rollouts",
            "env.device_rollout plays a batch as one program: no "
            "decode call to switch weights between",
        )
    if trainer.mini_batch_size % trainer.micro_batch_size:
        _fail(
            "trainer.mini_batch_size",
            f"{trainer.mini_batch_size} is not a multiple of trainer.micro_batch_size "
            f"{trainer.micro_batch_size}",
        )
    _at_least(mesh, "mesh", 1, "data", "fsdp", "tensor")
    devices = DEVICE_COUNT.get()
    if devices is not None and mesh.data * mesh.fsdp * mesh.tensor > 1:
        check_mesh_devices(mesh, devices())
    shards = mesh.data * mesh.fsdp
    for key, rows in (
        ("trainer.micro_batch_size", trainer.micro_batch_size),
        ("sft.batch_size", config.sft.batch_size),
        ("sft.micro_batch_size", config.sft.micro_batch_size or config.sft.batch_size),
    ):
        if rows % shards:
            _fail(key, f"{rows} rows do not split over mesh data*fsdp = {shards}")
    _check(invalid_monitor(config.monitor), "monitor")
    return config
