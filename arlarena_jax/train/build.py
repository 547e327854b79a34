"""Everything a run needs, built from a :class:`~arlarena_jax.train.config.Config`.

The tokenizers "tiny-sokoban" and "tiny-alfworld" are built deterministically: a byte-level BPE
(``train_tiny``, 512 ids) trained on expert demonstrations of a fixed set of tasks (seeds 2³¹
onwards, disjoint from training and evaluation seeds; ALFWorld plays training games) in the run's
prompt format. The same config always gives the same vocabulary, so checkpoints and Hugging Face
exports stay loadable.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh

from arlarena_jax.models import QwenForCausalLM, load_pretrained, make_mesh, preset, shard_model
from arlarena_jax.objectives import presets
from arlarena_jax.objectives.compose import GroupFilter, Objective
from arlarena_jax.rollout.policy import SamplerPolicy
from arlarena_jax.rollout.prompts import SOKOBAN_COMPACT_FORMAT, TaskFormat, get_task_format
from arlarena_jax.sampler import Engine, EngineConfig, SamplingParams
from arlarena_jax.tokenization import load_tokenizer, stop_token_ids, train_tiny
from arlarena_jax.train.config import Config, ConfigError
from envs.base import EnvBatch

TOKENIZER_SEED_BASE = 2**31
# Built tokenizers and how many expert episodes their corpus holds (an ALFWorld episode costs a
# second or two of engine time; its prompts are long, so fewer episodes cover the vocabulary).
TINY_TOKENIZER_EPISODES = {"tiny-sokoban": 256, "tiny-alfworld": 32}
TINY_VOCAB = 512
# Seed ranges: training tasks draw from [0, 2^30), demonstrations from [2^30, 2^31), evaluation
# from eval_seed upwards in its own block of [2^31 + 2^20, 2^32).
DEMO_SEED_BASE = 2**30
EVAL_SEED_BASE = 2**31 + 2**20


def task_format(config: Config) -> TaskFormat:
    """The prompt format: the paper's templates, or the compact Sokoban prompt."""
    if config.env.prompt == "compact":
        if config.env.name != "sokoban":
            raise ConfigError("config key 'env.prompt': 'compact' exists for sokoban only")
        return SOKOBAN_COMPACT_FORMAT
    return get_task_format(config.env.name)


def expert_replies(config: Config):
    """The scripted Sokoban expert's reply function for the run's prompt."""
    from envs.sokoban.expert import expert_replies as full
    from envs.sokoban.expert import short_expert_replies

    return short_expert_replies if config.env.prompt == "compact" else full


def check_env(config: Config) -> None:
    """A one-line ConfigError for an environment that has not arrived yet."""
    if config.env.name not in ("sokoban", "alfworld"):
        raise ConfigError(
            f"config key 'env.name': {config.env.name!r} environments arrive with their own "
            "issue; 'sokoban' and 'alfworld' run today"
        )


def alfworld_games(config: Config, split: str) -> tuple[str, ...]:
    """Solvable game files of ``env.data_path/json_2.1.1/<split>`` (sorted)."""
    from envs.alfworld.data import JSON_DIR, find_games

    if config.env.data_path is None:
        raise ConfigError(
            "config key 'env.data_path': ALFWorld needs the directory holding json_2.1.1/ "
            "(build it with `arlarena alfworld build` and `arlarena alfworld generate`)"
        )
    folder = Path(config.env.data_path) / JSON_DIR / split
    games = find_games(folder) if folder.is_dir() else []
    if not games:
        raise ConfigError(
            f"config key 'env.data_path': no solvable ALFWorld games in {folder} "
            "(build them with `arlarena alfworld build` / `arlarena alfworld generate`)"
        )
    return tuple(str(g) for g in games)


def check_data(config: Config, *, training: bool = True) -> None:
    """A one-line ConfigError now, rather than mid-run, when the environment's data is missing:
    ALFWorld's evaluation games, and its training games when ``training`` or when the tiny
    tokenizer is built from them."""
    check_env(config)
    if config.env.name != "alfworld":
        return
    from envs.alfworld import engine

    if not engine.available():
        raise ConfigError(
            f"config key 'env.name': 'alfworld' needs the real engine: {engine.INSTALL_HINT}"
        )
    alfworld_games(config, config.env.alfworld.eval_split)
    if training or config.model.tokenizer == "tiny-alfworld":
        alfworld_games(config, "train")


def _split(config: Config, purpose: str) -> str:
    if purpose not in ("train", "eval"):
        raise ValueError(f"purpose must be 'train' or 'eval', got {purpose!r}")
    return "train" if purpose == "train" else config.env.alfworld.eval_split


def make_envs(config: Config, num_envs: int, purpose: str = "train") -> EnvBatch:
    """``num_envs`` environments of the run's kind for training or evaluation tasks.

    Sokoban: one jitted, vmapped batch (seeds tell the two apart). ALFWorld: the games of the
    ``train`` split or of ``env.alfworld.eval_split``, in ``env.num_workers`` pool processes
    (0: in this process).
    """
    check_env(config)
    if config.env.name == "alfworld":
        from envs.alfworld.env import AlfworldFactory
        from envs.local import LocalEnvBatch
        from envs.pool import EnvPool

        factory = AlfworldFactory(
            alfworld_games(config, _split(config, purpose)), max_steps=config.env.max_turns
        )
        workers = min(config.env.num_workers, num_envs)
        if workers == 0:
            return LocalEnvBatch(factory, num_envs)
        return EnvPool(factory, num_envs, workers, step_timeout=config.env.step_timeout_s)
    from envs.sokoban.batch import SokobanBatch
    from envs.sokoban.env import EnvParams

    s = config.env.sokoban
    params = EnvParams(
        dim_room=s.dim_room,
        num_boxes=s.num_boxes,
        max_steps=config.env.max_turns,
        search_depth=s.search_depth,
    )
    return SokobanBatch(num_envs, params)


def demonstrations(config: Config, seeds) -> list:
    """Expert (prompt, reply) samples through the run's prompts (spec environments §6)."""
    from arlarena_jax.train import demos

    check_env(config)
    seeds = list(seeds)
    if config.env.name == "alfworld":
        if not seeds:
            return []
        n = config.env.train_batch_size * config.env.group_size
        envs = make_envs(config, min(len(seeds), n), "train")
        try:
            return demos.alfworld_demonstrations(
                envs,
                alfworld_games(config, "train"),
                seeds,
                task_format=task_format(config),
                max_turns=config.env.max_turns,
                history_length=config.env.history_length,
                think=config.env.alfworld.expert_think,
            )
        finally:
            envs.close()
    return demos.sokoban_demonstrations(
        seeds,
        task_format=task_format(config),
        max_turns=config.env.max_turns,
        history_length=config.env.history_length,
        replies=expert_replies(config),
    )


def build_tokenizer(config: Config) -> Any:
    """The run's tokenizer (see module doc for the built "tiny-<env>" vocabularies)."""
    name = config.model.tokenizer
    if name is not None and name.startswith("tiny-") and not Path(name).exists():
        if name != f"tiny-{config.env.name}" or name not in TINY_TOKENIZER_EPISODES:
            raise ConfigError(
                f"config key 'model.tokenizer': {name!r} does not fit env.name "
                f"{config.env.name!r} (built tokenizers: {sorted(TINY_TOKENIZER_EPISODES)})"
            )
        seeds = range(TOKENIZER_SEED_BASE, TOKENIZER_SEED_BASE + TINY_TOKENIZER_EPISODES[name])
        texts = [d.prompt + d.reply for d in demonstrations(config, seeds)]
        return train_tiny(texts, vocab_size=TINY_VOCAB)
    return load_tokenizer(name if name is not None else config.model.path)


def build_mesh(config: Config) -> Mesh | None:
    """The device mesh of ``config.mesh`` (None for a single device)."""
    m = config.mesh
    if m.data * m.fsdp * m.tensor == 1:
        return None
    return make_mesh(data=m.data, fsdp=m.fsdp, tensor=m.tensor)


def build_model(config: Config, tokenizer: Any, mesh: Mesh | None, seed: int) -> QwenForCausalLM:
    """A local Hugging Face checkpoint, or a random model of a preset's shape whose vocabulary
    fits the tokenizer (rounded up to a multiple of 64)."""
    dtype, param_dtype = jnp.dtype(config.model.dtype), jnp.dtype(config.model.param_dtype)
    if config.model.path is not None:
        return load_pretrained(
            config.model.path,
            mesh=mesh,
            dtype=dtype,
            param_dtype=param_dtype,
            remat=config.model.remat,
        )
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


def build_objective(config: Config) -> Objective:
    """The method preset, with the dynamic-sampling overrides of ``config.algorithm``.

    A preset whose advantages need critic values (GAE: ``ppo``) is refused here, before anything
    is built: the trainer has no critic model yet."""
    objective = presets.build(config.algorithm.method, env=config.preset_env)
    if objective.advantage.name == "gae":
        raise ConfigError(
            f"config key 'algorithm.method': {config.algorithm.method!r} uses GAE advantages, "
            "which need a critic; the trainer has none yet (critic-free presets: grpo, gigpo, "
            "sampo, ...)"
        )
    a = config.algorithm
    if objective.group_filter is not None and (
        a.max_num_gen_batches is not None or a.cold_start_steps is not None
    ):
        f = objective.group_filter
        objective = objective._replace(
            group_filter=GroupFilter(
                max_num_gen_batches=a.max_num_gen_batches or f.max_num_gen_batches,
                cold_start_steps=(
                    f.cold_start_steps if a.cold_start_steps is None else a.cold_start_steps
                ),
            )
        )
    return objective


def _sampling(section) -> SamplingParams:
    return SamplingParams(temperature=section.temperature, top_p=section.top_p, top_k=section.top_k)


def build_policy(config: Config, model: QwenForCausalLM, tokenizer: Any, mesh: Mesh | None):
    """The sampler engine over ``model`` and the policy the rollout calls."""
    s = config.sampler
    engine = Engine(
        model,
        EngineConfig(
            max_concurrent_decodes=s.max_concurrent_decodes,
            max_prefill_length=s.max_prefill_length,
            max_decode_length=s.max_new_tokens,
            stop_token_ids=stop_token_ids(tokenizer, config.model.path),
            steps_per_call=s.steps_per_call,
            cache_dtype=s.cache_dtype,
            min_prefill_bucket=min(128, s.max_prefill_length),
        ),
        sampling=_sampling(s.train),
        mesh=mesh,
    )
    policy = SamplerPolicy(
        engine,
        tokenizer,
        _sampling(s.train),
        _sampling(s.eval),
        s.max_new_tokens,
        enable_thinking=s.enable_thinking,
        stop_strings=tuple(s.stop_strings),
        seed=config.trainer.seed,
    )
    return engine, policy
