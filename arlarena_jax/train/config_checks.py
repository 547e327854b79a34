"""The rules of a config that span fields, checked on its resolution.

:func:`check` is a pure function of a :class:`~arlarena_jax.train.resolution.Resolved` (the
pinned config, the environment's spec, the method's settings): it looks nothing up. Every
failure is one :class:`ConfigError` line naming the key, e.g.
``config key 'trainer.mini_batch_size': 100 is not a multiple of trainer.micro_batch_size 32``.
:func:`validate` resolves a plain :class:`~arlarena_jax.train.config.Config` first (what
:func:`arlarena_jax.train.config_io.config_from_dict` runs on every config it builds).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Iterator
from typing import Any

from arlarena_jax.models.lora import invalid_lora
from arlarena_jax.sampler.engine import invalid_engine
from arlarena_jax.train.config import (
    DEVICE_COUNT,
    Config,
    EnvCommon,
    MeshConfig,
    ModelConfig,
    TrainerConfig,
)
from arlarena_jax.train.monitor import invalid_monitor
from arlarena_jax.train.optim import invalid_optim
from arlarena_jax.train.resolution import Resolved, config_error, resolve_run
from envs import registry
from envs.registry import EnvSpec


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


def ignored_env_keys(run: Config | Resolved) -> list[str]:
    """One warning line for each common ``env`` key set away from its default that the chosen
    environment ignores (its ``EnvSpec.ignores``), for the trajectory-row caps under turn rows,
    and for ``trainer.eval_episodes`` where the environment fixes its evaluation's size."""
    run = resolve_run(run)
    config, spec = run.config, run.env
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
    raise config_error(key, message)


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


def _having(trait: str) -> str:
    """The registered environments that have ``trait`` (for an error message)."""
    names = [n for n in registry.names() if getattr(registry.get(n), trait) is not None]
    return ", ".join(names) or "none"


def _check_prompt(env: Any, spec: EnvSpec) -> None:
    """``env.prompt`` is one of the environment's formats."""
    spec.task_format(env)


def _check_eval_split(env: Any, spec: EnvSpec, trainer: TrainerConfig) -> None:
    """``trainer.eval_split`` is a split the environment declares (``EnvSpec.splits``)."""
    splits = spec.splits
    if trainer.eval_split not in splits:
        _fail(
            "trainer.eval_split",
            f"{trainer.eval_split!r} is not a split of environment {env.name!r} "
            f"(its splits: {', '.join(splits)})",
        )


def _check_reward(env: Any, spec: EnvSpec) -> None:
    """``env.reward`` is a mode, and ``dense`` only where the environment has progress."""
    from envs.rewards import MODES

    if env.reward not in MODES:
        _fail("env.reward", f"must be one of {', '.join(MODES)}, got {env.reward!r}")
    if env.reward == "dense" and spec.native_reward != "dense" and spec.progress is None:
        _fail(
            "env.reward",
            f"env {env.name!r} has no honest progress signal for dense rewards "
            f"(environments with one: {_having('progress')})",
        )
    if env.reward_normalise and env.reward != "dense":
        _fail("env.reward_normalise", f"needs env.reward: dense, got {env.reward!r}")
    if env.reward_normalise and spec.progress is None:
        _fail(
            "env.reward_normalise",
            f"env {env.name!r} has no progress signal to normalise by "
            f"(environments with one: {_having('progress')})",
        )


def _check_rows(env: Any, spec: EnvSpec) -> None:
    """``env.rows`` is a layout the environment supports, and its token caps are positive."""
    supported = spec.rows
    if env.rows is not None and env.rows not in supported:
        _fail(
            "env.rows",
            f"env {env.name!r} supports {', '.join(supported)} rows, not {env.rows!r}",
        )
    _at_least(env, "env", 1, "max_observation_tokens", "max_right_tokens")


def _check_device_rollout(env: Any, spec: EnvSpec) -> None:
    """``env.device_rollout`` only where the environment declares it, with turn rows and the
    environment's own reward (its prompt format is checked when the rollout is built)."""
    if not env.device_rollout:
        return
    if spec.device_env is None:
        _fail(
            "env.device_rollout",
            f"env {env.name!r} has no on-device rollout (environments with one: "
            f"{_having('device_env')})",
        )
    if env.rows not in (None, "turn"):
        _fail("env.device_rollout", f"needs turn rows, got env.rows {env.rows!r}")
    native = env.reward == "native" or (
        env.reward == spec.native_reward and not env.reward_normalise
    )
    if not native:
        _fail("env.device_rollout", f"plays the native reward only, got env.reward {env.reward!r}")


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
    """Resolve ``config`` (:func:`~arlarena_jax.train.resolution.resolve_run`) and
    :func:`check` it; return ``config`` unchanged or raise ConfigError."""
    check(resolve_run(config))
    return config


def check(run: Resolved) -> Resolved:
    """The rules that span fields, a pure function of the resolution: ``run`` unchanged, or
    one ConfigError line naming the first key that breaks one."""
    config, spec = run.config, run.env
    env, sampler, trainer, mesh = config.env, config.sampler, config.trainer, config.mesh
    check_numbers(config)
    _check_model(config.model)
    _at_least(env, "env", 1, "train_batch_size", "group_size", "max_turns", "eval_batch_size")
    _at_least(env, "env", 0, "history_length", "seed", "eval_seed", "num_workers")
    if not env.step_timeout_s > 0:
        _fail("env.step_timeout_s", f"must be > 0, got {env.step_timeout_s!r}")
    _check_prompt(env, spec)
    _check_eval_split(env, spec, trainer)
    _at_most_block("env.eval_seed", env.eval_seed + trainer.eval_episodes)
    _check_rows(env, spec)
    _check_device_rollout(env, spec)
    _check_reward(env, spec)
    _check(invalid_engine(sampler), "sampler")
    if any(not s for s in sampler.stop_strings):
        _fail("sampler.stop_strings", "stop strings must be non-empty")
    if env.device_rollout and len(sampler.stop_strings) > 1:
        _fail("sampler.stop_strings", "env.device_rollout takes at most one stop string")
    _check(invalid_optim(config.optim), "optim")
    _check(invalid_optim(config.sft.optim), "sft.optim")
    _check(invalid_optim(config.critic.optim), "critic.optim")
    if not config.critic.cliprange_value > 0:
        _fail("critic.cliprange_value", f"must be > 0, got {config.critic.cliprange_value!r}")
    _at_least(config.sft, "sft", 1, "num_episodes", "epochs", "steps", "batch_size")
    _at_least(config.sft, "sft", 0, "save_every_s", "continue_steps")
    if config.sft.continue_steps and not config.sft.enabled:
        _fail("sft.continue_steps", "continues a cloning: needs sft.enabled=true")
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
    return run
