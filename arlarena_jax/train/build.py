"""Everything a run needs, built from a :class:`~arlarena_jax.train.config.Config`.

Everything environment-specific comes from the environment's registry entry
(:func:`env_spec`, :class:`envs.registry.EnvSpec`). The tokenizers "tiny-<env>" ("tiny-sokoban",
"tiny-alfworld") are built deterministically: a byte-level BPE (``train_tiny``, 512 ids) trained
on expert demonstrations of a fixed set of tasks (``EnvSpec.tokenizer_episodes`` seeds from 2³¹
onwards, disjoint from training and evaluation seeds; ALFWorld plays training games) in the run's
prompt format. The same config always gives the same vocabulary, so checkpoints and Hugging Face
exports stay loadable.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from arlarena_jax.errors import ConfigError
from arlarena_jax.models import QwenForCausalLM, load_pretrained, make_mesh, preset, shard_model
from arlarena_jax.models.lora import add_lora, merged_model
from arlarena_jax.objectives import presets
from arlarena_jax.objectives.compose import Objective, check_requirements
from arlarena_jax.rollout.policy import SamplerPolicy
from arlarena_jax.rollout.trajectory import TrajectoryRows
from arlarena_jax.sampler import Engine, EngineConfig
from arlarena_jax.sampler.placement import replica_model, sampler_mesh
from arlarena_jax.tokenization import load_tokenizer, stop_token_ids, train_tiny
from arlarena_jax.train import resolution
from arlarena_jax.train.config import Config
from arlarena_jax.train.config_checks import check_mesh_devices
from arlarena_jax.train.resolution import (
    Resolved,
    is_built_tokenizer,
    model_dir,
    resolve_run,
    rl_stream_seed,
    tokenizer_dir,
)
from arlarena_jax.train.update import TRAINER_INPUTS
from envs import registry
from envs.base import EnvBatch
from envs.registry import EnvSpec
from envs.rewards import ShapedRewards
from envs.text import TaskFormat

TOKENIZER_SEED_BASE = 2**31
TINY_VOCAB = 512  # a built "tiny-<env>" tokenizer's corpus size is its spec's tokenizer_episodes
# Seed ranges: training tasks draw from [0, 2^30), demonstrations from [2^30, 2^31), the
# tokenizer's corpus from 2^31; an evaluation of the test split from eval_seed upwards in the
# block [2^31 + 2^20, 2^31 + 2^30), of the validation split in [2^31 + 2^30, 2^32), of the
# training split (a fit check) in [2^29, 2^30). Seed-generated environments (Sokoban's rooms)
# are split by these blocks; the others play their split's own tasks (EnvSpec.make_batch).
DEMO_SEED_BASE = 2**30
EVAL_SEED_BASE = 2**31 + 2**20
# each block holds EVAL_BLOCK_SIZE seeds (train.config checks eval_seed + episodes against it)
EVAL_SEED_BLOCKS = {"train": 2**29, "test": EVAL_SEED_BASE, "validation": 2**31 + 2**30}


def env_spec(run: Config | Resolved) -> EnvSpec:
    """The registry entry of ``env.name`` (the resolution's); an unregistered name is a
    one-line ConfigError."""
    return _parts(run)[1]


def _parts(run: Config | Resolved) -> tuple[Config, EnvSpec]:
    """The config and the environment's spec: the resolution's, or looked up for a plain
    Config."""
    if isinstance(run, Resolved):
        return run.config, run.env
    return run, resolution.env_spec(run.env.name)


def task_format(run: Config | Resolved) -> TaskFormat:
    """The environment's prompt format named by ``env.prompt``."""
    config, spec = _parts(run)
    return spec.task_format(config.env)


def check_data(run: Config | Resolved, *, training: bool = True) -> None:
    """A one-line ConfigError now, rather than mid-run, when the environment's data is missing:
    its evaluation tasks, and its training tasks when ``training`` or when the tiny tokenizer is
    built from them; and when two of its splits share an episode
    (:func:`envs.registry.check_disjoint`)."""
    config, spec = _parts(run)
    spec.task_format(config.env)
    spec.check_data(config.env, training or config.model.tokenizer == f"tiny-{spec.name}")
    if training:
        check_splits_disjoint(run)


def check_splits_disjoint(run: Config | Resolved) -> None:
    """A one-line ConfigError when two of the environment's splits share an episode
    (:func:`envs.registry.check_disjoint`)."""
    config, spec = _parts(run)
    registry.check_disjoint(spec, config.env)


def make_envs(run: Config | Resolved, num_envs: int, split: str = "train") -> EnvBatch:
    """``num_envs`` environments of the run's kind playing ``split``'s episodes (``train``,
    ``validation`` or ``test``: ``EnvSpec.make_batch``)."""
    config, spec = _parts(run)
    env = config.env
    batch = spec.make_batch(env, num_envs, split)
    native = env.reward == "native" or (
        env.reward == spec.native_reward and not env.reward_normalise
    )
    if native:
        return batch
    return ShapedRewards(
        batch,
        env.reward,
        win_reward=spec.single_reward(env),
        progress=spec.progress,
        normalise=env.reward_normalise,
    )


def demonstrations(config: Config, seeds) -> list:
    """Expert (prompt, reply) samples through the run's prompts (docs/environments.md §5.2)."""
    from arlarena_jax.train import demos

    env_spec(config)
    return demos.demonstrations(config.env, seeds)


def build_tokenizer(config: Config, episodes: int | None = None) -> Any:
    """The run's tokenizer (see module doc for the built "tiny-<env>" vocabularies; ``episodes``
    replaces the env spec's ``tokenizer_episodes``, the built vocabulary's corpus, for a quick
    stand-in)."""
    name = config.model.tokenizer
    if is_built_tokenizer(name):
        spec = env_spec(config)
        if name != f"tiny-{spec.name}" or spec.expert is None or spec.tokenizer_episodes < 1:
            built = [f"tiny-{n}" for n in registry.names() if registry.get(n).expert is not None]
            raise ConfigError(
                f"config key 'model.tokenizer': {name!r} does not fit env.name "
                f"{config.env.name!r} (built tokenizers: {built})"
            )
        episodes = spec.tokenizer_episodes if episodes is None else episodes
        seeds = range(TOKENIZER_SEED_BASE, TOKENIZER_SEED_BASE + episodes)
        texts = [d.prompt + d.reply for d in demonstrations(config, seeds)]
        return train_tiny(texts, vocab_size=TINY_VOCAB, isolate=spec.tokenizer_isolate)
    return load_tokenizer(tokenizer_dir(config.model))


def build_mesh(config: Config) -> Mesh | None:
    """The device mesh of ``config.mesh`` (None for a single device); a mesh that does not span
    the available devices is a one-line ConfigError naming the mesh keys and the device count."""
    m = config.mesh
    if m.data * m.fsdp * m.tensor == 1:
        return None
    check_mesh_devices(m, jax.device_count())
    return make_mesh(data=m.data, fsdp=m.fsdp, tensor=m.tensor)


def build_model(config: Config, tokenizer: Any, mesh: Mesh | None, seed: int) -> QwenForCausalLM:
    """A local Hugging Face checkpoint, or a random model of a preset's shape whose vocabulary
    fits the tokenizer (rounded up to a multiple of 64); with ``model.lora``, fresh adapters
    (B = 0: the base model's function) on its targeted linears."""
    model = _base_model(config, tokenizer, mesh, seed)
    if config.model.lora is None:
        return model
    add_lora(model, config.model.lora, seed=seed)
    return shard_model(model, mesh) if mesh is not None else model


def _base_model(config: Config, tokenizer: Any, mesh: Mesh | None, seed: int) -> QwenForCausalLM:
    """:func:`build_model` before any LoRA adapters."""
    dtype, param_dtype = jnp.dtype(config.model.dtype), jnp.dtype(config.model.param_dtype)
    path = model_dir(config.model)
    if path is not None:
        try:
            return load_pretrained(
                path,
                mesh=mesh,
                dtype=dtype,
                param_dtype=param_dtype,
                remat=config.model.remat,
                num_layers=config.model.num_layers,
            )
        except (OSError, ValueError) as error:  # hf_io names the file or the tensor
            raise ConfigError(
                f"config key 'model.path': cannot load the model in {path}: {error}"
            ) from error
    vocab = 64 * math.ceil(len(tokenizer) / 64)
    shape = preset(config.model.name)
    if vocab > shape.vocab_size:
        shape = dataclasses.replace(shape, vocab_size=vocab)
    model = QwenForCausalLM(
        shape,
        dtype=dtype,
        param_dtype=param_dtype,
        remat=config.model.remat,
        rngs=nnx.Rngs(seed),
    )
    return shard_model(model, mesh) if mesh is not None else model


def build_objective(run: Config | Resolved) -> Objective:
    """The method of ``algorithm.method`` with its resolved settings. An objective reading an
    input the trainer cannot compute is refused in one line, before anything is built."""
    run = resolve_run(run)
    method = run.config.algorithm.method
    objective = presets.PRESETS[presets.preset_key(method)].build(run.method)
    try:
        check_requirements(objective, TRAINER_INPUTS)
    except ValueError as exc:
        raise ConfigError(f"config key 'algorithm.method': {method!r}: {exc}") from None
    return objective


def row_layout(run: Config | Resolved) -> TrajectoryRows | None:
    """The rollout's row layout: ``env.rows``, or the environment's default; None for turn rows
    (docs/environments.md §1.8)."""
    config, spec = _parts(run)
    rows = config.env.rows or spec.rows[0]
    if rows == "turn":
        return None
    return TrajectoryRows(config.env.max_observation_tokens, config.env.max_right_tokens)


def eval_episodes(config: Config, split: str | None = None) -> int:
    """Episodes per evaluation of ``split`` (default ``trainer.eval_split``): the environment's
    own count where its protocol fixes one (``EnvSpec.eval_episodes``), else
    ``trainer.eval_episodes``."""
    spec = env_spec(config)
    if spec.eval_episodes is not None:
        return spec.eval_episodes(config.env, split or config.trainer.eval_split)
    return config.trainer.eval_episodes


def eval_seeds(config: Config, split: str | None = None) -> list[int]:
    """The seeds an evaluation of ``split`` (default ``trainer.eval_split``) plays, one episode
    each: ``eval_seed`` upwards in the split's own block (see the seed ranges above), so every
    evaluation of a split plays the same episodes and two splits never share a seed."""
    split = split or config.trainer.eval_split
    start = EVAL_SEED_BLOCKS[split] + config.env.eval_seed
    return list(range(start, start + eval_episodes(config, split)))


def response_width(config: Config) -> int:
    """The widest response side of a training row: one reply for turn rows, the whole right
    side for trajectory rows."""
    layout = row_layout(config)
    max_new = config.sampler.max_new_tokens
    return max_new if layout is None else layout.response_limit(max_new)


def build_policy(config: Config, model: QwenForCausalLM, tokenizer: Any, mesh: Mesh | None):
    """The sampler engine over ``model`` (the ``sampler`` section's engine settings, stop ids:
    the tokenizer's end-of-turn ids, then ``sampler.stop_token_ids``) and the policy the rollout
    calls. The engine runs on :func:`~arlarena_jax.sampler.placement.sampler_mesh`: the
    training ``mesh`` with one process; with several, this process's devices, holding a replica
    of the weights (a collective: every process builds its sampler at the same point)."""
    s = config.sampler
    engine_settings = {f.name: getattr(s, f.name) for f in dataclasses.fields(EngineConfig)}
    stops = (*stop_token_ids(tokenizer, model_dir(config.model)), *s.stop_token_ids)
    engine_settings["stop_token_ids"] = tuple(dict.fromkeys(stops))
    settings = EngineConfig(**engine_settings)
    sampled = merged_model(model)  # LoRA: the sampler runs merged weights (docs/models.md)
    sampler = sampler_mesh(mesh, sampled, settings)
    sampled = replica_model(sampled, mesh, sampler)
    engine = Engine(sampled, settings, sampling=s.train, mesh=sampler)
    policy = SamplerPolicy(
        engine,
        tokenizer,
        s.train,
        s.eval,
        s.max_new_tokens,
        enable_thinking=s.enable_thinking,
        stop_strings=tuple(s.stop_strings),
        seed=rl_stream_seed(config),  # the evaluation copy reseeds it (evaluation.eval_policy)
    )
    return engine, policy


def build_device_rollout(config: Config, policy: SamplerPolicy):
    """The on-device rollout of ``env.device_rollout``
    (:class:`~arlarena_jax.rollout.device.DeviceRollout`); an environment or prompt format that
    cannot play on device is a one-line ConfigError."""
    from arlarena_jax.rollout.device import DeviceRollout
    from arlarena_jax.rollout.policy import chat_prompt_ids
    from envs.device import PromptEncoder

    spec = env_spec(config)
    if spec.device_env is None:
        raise ConfigError(
            f"config key 'env.device_rollout': environment {spec.name!r} has no on-device rollout"
        )
    tokenizer = policy.tokenizer
    encoder = PromptEncoder(
        prompt=lambda content: chat_prompt_ids(tokenizer, content, policy.enable_thinking),
        text=policy.encode_text,
        max_prompt_tokens=policy.engine.max_prefill_length,
    )
    device_env = spec.device_env(config.env, encoder)
    return DeviceRollout(
        device_env,
        policy.engine,
        tokenizer,
        stop_strings=policy.stop_strings,
        max_turns=config.env.max_turns,
        history_length=config.env.history_length,
    )
