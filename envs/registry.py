"""The environment registry: one :class:`EnvSpec` per environment, looked up by ``env.name``.

The trainer (``arlarena_jax.train.build``), the config schema (``env.name``, ``env.prompt``) and
the CLI read everything environment-specific from here. The built-in environments are
registered in :mod:`envs.builtin`, one line each, loaded on the first lookup; a new environment
lives in ``envs/<name>/`` and adds one line there (or calls :func:`register` itself).

A spec's functions take the trainer's ``env`` config section, duck-typed: it has ``name``,
``train_batch_size``, ``group_size``, ``max_turns``, ``history_length``, ``prompt``,
``num_workers``, ``step_timeout_s``, ``data_path``, ``eval_seed`` and one section per environment
with settings (``env.<name>``, of the spec's ``settings`` type). Nothing here imports the trainer.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from arlarena_base.errors import ConfigError
from envs.base import EnvBatch
from envs.text import Expert, TaskFormat

# The three splits every environment declares, disjoint and fixed: training episodes, the
# validation episodes that every choice reads (a recipe, a best step, an early stop), and the test
# episodes a result is reported on (docs/environments.md §1.11).
SPLITS = ("train", "validation", "test")


def _no_data_check(env: Any, training: bool) -> None:
    return None


def _ten(env: Any) -> float:
    return 10.0  # ALFWorld's and Sokoban's win reward


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """Everything the trainer needs to know about one environment (see the module doc).

    * ``make_batch(env, num_envs, split)``: ``num_envs`` environments playing the episodes of
      ``split`` (one of :data:`SPLITS`).
    * ``split_members(env)``: per split, the identities of its episodes (game content hashes,
      goal indices, problem ids) for the start-up check that no two splits share one
      (:func:`check_disjoint`); None: the splits are seed ranges the trainer keeps apart
      (Sokoban's generated rooms).
    * ``splits``: the splits the environment declares, each a valid ``trainer.eval_split``
      (the built-in environments: all of :data:`SPLITS`).
    * ``formats``: the prompt formats by ``env.prompt`` value (the config's default is
      ``"paper"``); only these values validate (:meth:`task_format`).
    * ``expert(env)``: the scripted expert behind demonstrations and the tiny tokenizer's corpus
      (None: the environment has none, so no cloning and no ``tiny-<name>`` tokenizer).
    * ``check_data(env, training)``: raise a one-line :class:`ConfigError` when the data the run
      needs is missing (``training``: the training tasks are needed too).
    * ``settings``: the type of the environment's own config section ``env.<name>`` (None: none).
    * ``tokenizer_episodes``: expert episodes in the ``tiny-<name>`` tokenizer's corpus.
    * ``tokenizer_isolate``: characters the ``tiny-<name>`` tokenizer always encodes alone (never
      merged with a neighbour).
    * ``device_env(env, encoder)``: the environment as one on-device program with its prompt
      format (:class:`envs.device.DeviceEnv`) for the formats that allow it; None: host rollouts
      only.
    * ``paper``: the paper-scale ``env`` settings (``configs/<name>/base_qwen3_4b.yaml``).
    * ``method_settings``: per method preset, hyper-parameter overrides from this
      environment's release scripts (``{method: {field: value}}``).
    * ``commands(subparsers)``: adds the environment's own ``arlarena`` subcommands (optional).
    * ``eval_episodes(env, split)``: the number of evaluation episodes the environment's
      protocol fixes for ``split`` (math: every problem k times, for avg@k); None:
      ``trainer.eval_episodes``.
    * ``native_reward``, ``progress``, ``single_reward(env)``: what the environment's own reward
      is (``single`` or ``dense``), its progress signal where it has an honest one
      (:class:`envs.rewards.Progress`), and the winning step's reward under ``env.reward: single``
      (:mod:`envs.rewards`).
    * ``rows``: the row layouts the environment's formats support (``env.rows``), the default
      first: ``"turn"`` (one row per turn) and/or ``"trajectory"`` (one row per episode, the
      format continues the conversation, docs/environments.md §1.8).
    * ``moves``: where a step takes an action index, the actions' names in index order (Sokoban:
      still, up, down, left, right); ``arlarena serve`` takes ``{"move": name}`` and steps index
      0, a no-op, once at start (compiling a JAX batch's step before any session). Empty: the
      environment takes text commands.
    * ``ignores``: the common ``env`` keys the environment does not read, each with the reason
      (``{"num_workers": "its batch runs in-process"}``); the CLI warns when one is set away from
      its default.
    """

    name: str
    make_batch: Callable[[Any, int, str], EnvBatch]
    formats: Mapping[str, TaskFormat]
    expert: Callable[[Any], Expert] | None = None
    check_data: Callable[[Any, bool], None] = _no_data_check
    settings: type | None = None
    tokenizer_episodes: int = 32
    tokenizer_isolate: str = ""
    device_env: Callable[[Any, Any], Any] | None = None
    paper: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    method_settings: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    commands: Callable[[Any], None] | None = None
    ignores: Mapping[str, str] = dataclasses.field(default_factory=dict)
    rows: tuple[str, ...] = ("turn",)
    moves: tuple[str, ...] = ()  # action names by index (see the class doc); empty: text actions
    eval_episodes: Callable[[Any, str], int] | None = None
    split_members: Callable[[Any], Mapping[str, Collection[Hashable]]] | None = None
    splits: tuple[str, ...] = SPLITS  # the splits the environment declares (trainer.eval_split)
    native_reward: str = "single"  # what the environment's own reward is: single or dense
    progress: Any = None  # envs.rewards.Progress: the honest progress signal (None: none)
    single_reward: Callable[[Any], float] = _ten  # the winning step's reward for env.reward single

    def __post_init__(self) -> None:
        if not self.rows or not set(self.rows) <= {"turn", "trajectory"}:
            raise ValueError(
                f"environment rows must be 'turn' and/or 'trajectory', got {self.rows}"
            )
        if not self.splits or not set(self.splits) <= set(SPLITS):
            raise ValueError(f"environment splits must be among {SPLITS}, got {self.splits}")
        if len(set(self.moves)) != len(self.moves) or not all(map(str.isidentifier, self.moves)):
            raise ValueError(f"environment moves must be distinct names, got {self.moves}")
        if not self.name or not self.name.isidentifier():
            raise ValueError(f"environment name must be an identifier, got {self.name!r}")
        if not self.formats:
            raise ValueError(f"environment {self.name!r} needs at least one prompt format")
        for field in ("formats", "paper", "method_settings", "ignores"):
            frozen = MappingProxyType(dict(getattr(self, field)))
            object.__setattr__(self, field, frozen)

    @property
    def prompts(self) -> tuple[str, ...]:
        """The valid ``env.prompt`` values."""
        return tuple(self.formats)

    def task_format(self, env: Any) -> TaskFormat:
        """The format of ``env.prompt``; another value is a one-line ConfigError."""
        prompt = env.prompt
        if prompt not in self.formats:
            having = [n for n in names() if prompt in get(n).formats]
            where = f"only for {', '.join(having)}" if having else "for no environment"
            raise ConfigError(
                f"config key 'env.prompt': {prompt!r} exists {where}, not {self.name!r} "
                f"(its prompts: {', '.join(self.formats)})"
            )
        return self.formats[prompt]


def check_split(split: str) -> str:
    """``split`` if it is one of :data:`SPLITS`, else a one-line ValueError naming them."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    return split


def overlaps(members: Mapping[str, Collection[Hashable]]) -> list[tuple[str, str, list]]:
    """Every pair of splits that share an episode, with (up to three of) the shared ones, in
    :data:`SPLITS` order."""
    named = [name for name in SPLITS if name in members]
    found = []
    for i, first in enumerate(named):
        for second in named[i + 1 :]:
            shared = set(members[first]) & set(members[second])
            if shared:
                found.append((first, second, sorted(shared, key=str)[:3]))
    return found


def check_disjoint(spec: EnvSpec, env: Any) -> None:
    """Refuse, in one ConfigError line, splits of ``env`` that share an episode."""
    if spec.split_members is None:
        return
    found = overlaps(spec.split_members(env))
    if found:
        first, second, shared = found[0]
        raise ConfigError(
            f"environment {spec.name!r}: splits {first!r} and {second!r} overlap "
            f"(e.g. {', '.join(map(str, shared))}): the splits must be disjoint"
        )


_SPECS: dict[str, EnvSpec] = {}
_builtins_loaded = False


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        import envs.builtin  # noqa: F401  (registers the built-in environments)


def register(spec: EnvSpec) -> EnvSpec:
    """Add ``spec`` under ``spec.name``; a name taken by another spec is a ValueError."""
    _load_builtins()
    known = _SPECS.get(spec.name)
    if known is not None and known is not spec:
        raise ValueError(f"environment {spec.name!r} is already registered")
    _SPECS[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove ``name`` (tests that register a toy environment clean up with it)."""
    _SPECS.pop(name, None)


def names() -> tuple[str, ...]:
    """The registered environment names, sorted."""
    _load_builtins()
    return tuple(sorted(_SPECS))


def unknown_message(name: str, known: Sequence[str] | None = None) -> str:
    """One line for an unregistered ``name``, with a close match when there is one."""
    known = names() if known is None else known
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown environment {name!r} ({hint}registered: {', '.join(known)})"


def get(name: str) -> EnvSpec:
    """The spec registered as ``name``; an unknown name is a one-line ValueError."""
    _load_builtins()
    try:
        return _SPECS[name]
    except KeyError:
        raise ValueError(unknown_message(name)) from None
