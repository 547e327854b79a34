"""A config resolved once: what every later stage of a run reads.

:func:`resolve_run` turns a :class:`~arlarena_jax.train.config.Config` into a frozen
:class:`Resolved`: the config with every value pinned (the method's settings it reads, the run
directory, ``trainer.rl_seed``), the environment's registry entry (:class:`envs.registry.EnvSpec`)
and the method's settings (:class:`~arlarena_jax.objectives.presets.MethodSettings`: the preset's
defaults < the environment's recipe < ``algorithm.*``), plus the model's architecture, read on
first use. A name nothing registers (``env.name``, ``algorithm.method``) or a method setting out
of range is one ConfigError line here; the rules that span fields are then a pure function of
the resolution (:func:`arlarena_jax.train.config_checks.check`).

The CLI resolves a config once as it loads it (:func:`arlarena_jax.train.config_io.load_run`)
and hands the :class:`Resolved` on; :func:`resolve_run` returns a :class:`Resolved` unchanged,
so a stage given one never resolves again, and a library caller may pass a plain Config.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arlarena_jax.errors import ConfigError
from arlarena_jax.objectives.presets import (
    PRESETS,
    MethodSettings,
    invalid_settings,
    preset_key,
)
from arlarena_jax.train.config import Config, ModelConfig
from envs import registry
from envs.registry import EnvSpec

if TYPE_CHECKING:
    from arlarena_jax.models.config import QwenConfig


def config_error(key: str, message: str) -> ConfigError:
    """The one-line error of a config key."""
    return ConfigError(f"config key {key!r}: {message}")


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A config resolved once (module doc). ``config`` is pinned: what a run dumps."""

    config: Config
    env: EnvSpec
    method: MethodSettings

    @functools.cached_property
    def architecture(self) -> QwenConfig | None:
        """The model's architecture: ``model.path``'s config.json (cut to ``model.num_layers``)
        or the preset; None when the config.json cannot be read (building the model says why)."""
        from arlarena_jax.models.config import PRESETS as MODEL_PRESETS
        from arlarena_jax.models.config import QwenConfig

        model = self.config.model
        if model.path is None:
            return MODEL_PRESETS.get(model.name)
        try:
            shape = QwenConfig.from_json(model_dir(model))
        except (OSError, ValueError):
            return None
        layers = model.num_layers
        if layers is None or not 1 <= layers <= shape.num_hidden_layers:
            return shape
        return dataclasses.replace(shape, num_hidden_layers=layers)


def resolve_run(config: Config | Resolved) -> Resolved:
    """``config`` resolved (module doc); a :class:`Resolved` is returned as it is."""
    if isinstance(config, Resolved):
        return config
    spec = env_spec(config.env.name)
    method = _method_settings(config, spec)
    return Resolved(_pinned(config, method), spec, method)


def env_spec(name: str) -> EnvSpec:
    """The registry entry of ``env.name``; an unregistered name is a one-line ConfigError."""
    if name not in registry.names():
        raise config_error("env.name", registry.unknown_message(name))
    return registry.get(name)


def explicit_knobs(algorithm: Any) -> dict[str, Any]:
    """The ``algorithm`` fields set in the config (not null): the method's overrides."""
    fields = (f.name for f in dataclasses.fields(algorithm) if f.name != "method")
    return {
        name: getattr(algorithm, name) for name in fields if getattr(algorithm, name) is not None
    }


ASYNC_ROLLOUT_IS = "token"  # asynchronous RL's default correction: TIS (decoupled PPO)


def _method_settings(config: Config, spec: EnvSpec) -> MethodSettings:
    """The run's method settings: the preset's defaults < the environment's recipe for the
    method (its ``EnvSpec.method_settings``, e.g. WebShop's SAMPO cold start of 5 where the
    preset, ALFWorld's scripts, has 15) < ``algorithm.*`` set in the config.

    Asynchronous runs (``trainer.max_staleness`` > 0) default to a trust-region loss: where
    ``algorithm.rollout_is`` is left null, the loss is weighted by token TIS,
    ``min(exp(lp_old − lp_rollout), rollout_is_threshold)`` (docs/algorithms.md §4.13), so a
    stale rollout's tokens count by how likely the proximal policy (lp_old) finds them;
    ``rollout_is: disabled`` keeps the method's loss alone. A method nothing registers, a
    setting it does not read or a value out of range is one ConfigError line naming the key
    (``algorithm.method`` for the environment's recipe)."""
    algorithm = config.algorithm
    try:
        preset = PRESETS[preset_key(algorithm.method)]
    except ValueError as exc:
        raise config_error("algorithm.method", str(exc)) from None
    explicit = explicit_knobs(algorithm)
    recipe = spec.method_settings.get(preset_key(algorithm.method), {})
    reads = f"(its settings: {', '.join(preset.knobs)})"
    for name in explicit:
        if name not in preset.knobs:
            raise config_error(
                f"algorithm.{name}",
                f"method {preset_key(algorithm.method)!r} does not read it {reads}",
            )
    unused = [name for name in recipe if name not in preset.knobs]  # the environment's
    if unused:
        raise config_error(
            "algorithm.method",
            f"method {preset_key(algorithm.method)!r} does not read {', '.join(unused)} {reads}",
        )
    resolved = MethodSettings(**{**preset.defaults, **recipe, **explicit})
    for field, message in invalid_settings(resolved):
        if field in explicit:
            raise config_error(f"algorithm.{field}", message)
        raise config_error("algorithm.method", f"{field} {message}")  # the recipe's value
    if config.trainer.max_staleness > 0 and resolved.rollout_is is None:
        resolved = dataclasses.replace(resolved, rollout_is=ASYNC_ROLLOUT_IS)
    return resolved


def _pinned(config: Config, method: MethodSettings) -> Config:
    """``config`` with every value pinned: the method's settings it reads filled in (the rest
    stay null), ``trainer.rl_seed`` null when it equals ``trainer.seed`` (the same streams:
    :func:`rl_stream_seed`) and ``trainer.run_dir`` derived when null. What a run dumps and
    prints."""
    knobs = PRESETS[preset_key(config.algorithm.method)].knobs
    algorithm = dataclasses.replace(
        config.algorithm, **{name: getattr(method, name) for name in knobs}
    )
    trainer = config.trainer
    if trainer.rl_seed == trainer.seed:
        trainer = dataclasses.replace(trainer, rl_seed=None)
    run_dir = trainer.run_dir or default_run_dir(dataclasses.replace(config, trainer=trainer))
    trainer = dataclasses.replace(trainer, run_dir=run_dir)
    return dataclasses.replace(config, algorithm=algorithm, trainer=trainer)


def resolve(config: Config | Resolved) -> Config:
    """``config`` with every value pinned (:func:`_pinned`): what a run dumps and prints."""
    return resolve_run(config).config


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
