"""Shared starts: one cloned policy that runs of different methods begin their RL from.

The paper starts every method from the same behaviour-cloned policy. A *start* is an ordinary run
directory written by ``arlarena sft`` (cloning, the held-out evaluation of the cloned policy, and
the cloned parameters saved as checkpoint step 0). A run with ``sft.init_from=<that directory>``
takes the start's parameters instead of cloning, and the start's evaluation as its own step-0
evaluation: the same parameters, evaluation seeds and sampling settings give the same numbers.

Which runs may share a start is decided by :func:`cloning_settings`: every config key except the
ones that only act after cloning (:data:`RL_ONLY`: the method, the RL optimizer, the RL batch
shape and schedule, the stability monitor, the training sampler, where the run writes). Anything
not listed there (the model, the environment, ``sft.*``, the evaluation, ``trainer.seed``, which
also seeds the model's initialisation) is part of the start, so a key added later is shared only
once someone lists it here. :func:`start_key` hashes those settings; :func:`check_start` refuses,
in one line naming the first key that differs, a start cloned under other settings.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from arlarena_jax.errors import ConfigError
from arlarena_jax.train.config import Config
from arlarena_jax.train.layout import commit_marker
from arlarena_jax.train.resolution import Resolved, resolve

# Keys (a section or a dotted key) that only act after cloning; runs that differ only in these
# share one start.
RL_ONLY = (
    "algorithm",
    "optim",
    "critic",  # built from the cloned policy, after cloning
    "monitor",
    "sampler.train",
    "env.train_batch_size",
    "env.group_size",
    "env.num_workers",
    "env.step_timeout_s",
    "trainer.total_steps",
    "trainer.ppo_epochs",
    "trainer.mini_batch_size",
    "trainer.micro_batch_size",
    "trainer.prompt_widths",  # how the RL update's micro-batches are cut, not what they compute
    "trainer.eval_every",
    "trainer.run_dir",
    "trainer.save_every",
    "trainer.keep_checkpoints",
    "trainer.export_hf",
    "sft.init_from",
    "sft.continue_steps",  # cloning after the start's: the start is the same
    "sft.save_every_s",  # how often cloning saves its state, not what it makes
    "sft.micro_batch_size",  # how cloning's gradient is summed (memory), not what it makes
    "trainer.use_rollout_log_probs",  # the RL update's lp_old
    "trainer.max_staleness",  # asynchronous RL
    "trainer.partial_rollouts",
    "trainer.rl_seed",  # RL's own streams (train.config.rl_stream_seed)
)
START_STEP = 0  # the checkpoint step that holds a start's cloned policy


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested dict as ``{dotted key: value}``."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out |= flatten(value, f"{dotted}.")
        else:
            out[dotted] = value
    return out


def is_rl_only(key: str) -> bool:
    """Whether the dotted ``key`` only acts after cloning (it or a section holding it is listed
    in :data:`RL_ONLY`)."""
    return any(key == k or key.startswith(f"{k}.") for k in RL_ONLY)


def cloning_settings(config: Config) -> dict[str, Any]:
    """The dotted keys and values of ``config`` that shape its cloned policy and its evaluation
    (every key not in :data:`RL_ONLY`), in a fixed order."""
    from arlarena_jax.train.config_io import config_to_dict

    flat = flatten(config_to_dict(config))
    return {key: flat[key] for key in sorted(flat) if not is_rl_only(key)}


def start_key(config: Config) -> str:
    """12 hex digits of SHA-256 over :func:`cloning_settings`: equal for runs that may share a
    start, so the same cloning config maps to the same start directory in every sweep."""
    text = json.dumps(cloning_settings(config), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def equivalent_start(parent: Path, config: Config) -> Path | None:
    """A start directory under ``parent`` whose stored ``config.yaml`` has ``config``'s cloning
    settings, whatever its name: a start cloned before the schema gained a key (its hash then
    differed) is the same start, and is reused rather than cloned again. None when there is
    none (unreadable configs are skipped)."""
    from arlarena_jax.train.config_io import load_config

    if not parent.is_dir():
        return None
    ours = cloning_settings(config)
    for directory in sorted(parent.iterdir()):
        stored = directory / "config.yaml"
        if not stored.is_file():
            continue
        try:
            if cloning_settings(load_config(stored)) == ours:
                return directory
        except (ConfigError, OSError, ValueError):
            continue
    return None


def cloned_policy(directory: Path) -> Path:
    """The file that marks a start's cloned policy as saved (its step-0 checkpoint's commit)."""
    return commit_marker(directory, START_STEP)


def check_start(config: Config | Resolved) -> None:
    """``sft.init_from`` (when set) is a finished start cloned with this config's cloning
    settings; otherwise one :class:`ConfigError` line naming the key or the missing piece."""
    config = resolve(config)
    start = config.sft.init_from
    if start is None:
        return
    where = "config key 'sft.init_from'"
    if not config.sft.enabled:
        raise ConfigError(f"{where}: needs sft.enabled=true (the run starts from a cloned policy)")
    directory = Path(start)
    stored_file = directory / "config.yaml"
    if not stored_file.is_file():
        raise ConfigError(f"{where}: {directory} is not a run directory (no config.yaml)")
    if not cloned_policy(directory).is_file():
        raise ConfigError(
            f"{where}: {directory} has no cloned policy (no checkpoint step {START_STEP}); "
            f"run `arlarena sft` there first"
        )
    from arlarena_jax.train.config_io import load_config

    theirs, ours = cloning_settings(load_config(stored_file)), cloning_settings(config)
    for key in sorted(set(theirs) | set(ours)):
        if theirs.get(key) != ours.get(key):
            raise ConfigError(
                f"{where}: {directory} was cloned with {key}={theirs.get(key)!r}, this run has "
                f"{key}={ours.get(key)!r}"
            )
