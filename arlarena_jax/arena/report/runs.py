"""Find run directories and read one: its config, its logged metrics and its sweep state.

A run directory holds ``config.yaml`` (the resolved training config) and ``tensorboard/`` (event
files; a run's evaluation metrics, logged as ``<trainer.eval_split>/…``, read back as ``val/…``).
The paths given may be run directories or any folder above them. The sweep state is
``sweep_state.json`` (``{"state": ..., "error": ...}``, written by the sweep's job wrapper);
without it the state is ``unknown``. Evaluations of the run's final policy under other settings
(``arlarena eval-run``, a sweep's ``evaluate_on``) are ``evaluations/<name>/metrics.json``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from arlarena_jax.arena.evaluate import read_evaluations
from arlarena_jax.arena.report.events import EventLog, Series, TextEvent, read_events
from arlarena_jax.errors import ConfigError
from arlarena_jax.train.metrics import evaluation_key

CONFIG_FILE, LOG_DIR, STATE_FILE = "config.yaml", "tensorboard", "sweep_state.json"
# tag prefixes that are no RL step's metrics: cloning's and continued cloning's (logged per
# cloning step), evaluations
NOT_TRAINING = ("sft/", "sft_continued/", "val/", "timing/sft")


@dataclasses.dataclass(frozen=True)
class Run:
    """One run: where it is, its config (nested dict), its metrics and its recorded state."""

    path: Path
    config: dict[str, Any]
    scalars: dict[str, Series]
    texts: list[TextEvent]
    state: str = "unknown"
    error: str | None = None
    evaluations: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # by name

    @property
    def env(self) -> str:
        return str(self.config["env"]["name"])

    @property
    def method(self) -> str:
        return str(self.config["algorithm"]["method"])

    @property
    def seed(self) -> int:
        """The replicate's seed: ``trainer.rl_seed`` when set (seeds of one shared start), else
        ``trainer.seed``."""
        trainer = self.config["trainer"]
        rl_seed = trainer.get("rl_seed")
        return int(trainer["seed"] if rl_seed is None else rl_seed)

    @property
    def eval_split(self) -> str:
        """The split its evaluations played (``trainer.eval_split``); a run from before the
        splits existed evaluated on the test games."""
        return str((self.config.get("trainer") or {}).get("eval_split") or "test")

    @property
    def split_label(self) -> str:
        """:attr:`eval_split`, saying so where the run predates the splits (its choices, if
        any, read the same test games)."""
        before = "eval_split" not in (self.config.get("trainer") or {})
        return "test, before the protocol" if before else self.eval_split

    @property
    def last_step(self) -> int:
        """The newest RL step logged (0: none yet)."""
        steps = [
            int(s.steps[-1])
            for tag, s in self.scalars.items()
            if len(s.steps) and not tag.startswith(NOT_TRAINING)
        ]
        return max(steps, default=0)


def is_run_dir(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file() and (path / LOG_DIR).is_dir()


def find_run_dirs(paths: Iterable[Path]) -> list[Path]:
    """Every run directory at or below ``paths``, sorted; a missing path or none found raises."""
    found: set[Path] = set()
    paths = [Path(p) for p in paths]
    for path in paths:
        if not path.exists():
            raise ConfigError(f"no such run directory or folder: {str(path)!r}")
        candidates = [path, *(c.parent for c in path.rglob(CONFIG_FILE))]
        found |= {c.resolve() for c in candidates if is_run_dir(c)}
    if not found:
        where = ", ".join(repr(str(p)) for p in paths) or "(no paths given)"
        raise ConfigError(
            f"no runs found under {where}: a run directory holds {CONFIG_FILE} and {LOG_DIR}/"
        )
    return sorted(found)


def read_config(path: Path) -> dict[str, Any]:
    """The run's config as a nested dict; it must name ``env.name``, ``algorithm.method`` and
    ``trainer.seed``."""
    file = path / CONFIG_FILE
    try:
        config = yaml.safe_load(file.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"{file}: not valid YAML ({type(err).__name__})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{file}: expected a mapping, got {type(config).__name__}")
    for section, key in (("env", "name"), ("algorithm", "method"), ("trainer", "seed")):
        if not isinstance(config.get(section), dict) or config[section].get(key) is None:
            raise ConfigError(f"{file}: missing key '{section}.{key}'")
    return config


def read_state(path: Path) -> tuple[str, str | None]:
    """``(state, error)`` from ``sweep_state.json``; ``("unknown", None)`` without one."""
    file = path / STATE_FILE
    if not file.is_file():
        return "unknown", None
    try:
        record = json.loads(file.read_text())
    except (OSError, ValueError):
        return "unknown", f"unreadable {STATE_FILE}"
    if not isinstance(record, dict):
        return "unknown", f"unreadable {STATE_FILE}"
    error = record.get("error")
    return str(record.get("state", "unknown")), None if error is None else str(error)


def load_run(path: Path) -> Run:
    """Read one run directory."""
    log: EventLog = read_events(path / LOG_DIR)
    state, error = read_state(path)
    config = read_config(path)
    split = (config.get("trainer") or {}).get("eval_split")
    scalars = {evaluation_key(tag, split): series for tag, series in log.scalars.items()}
    return Run(path, config, scalars, log.texts, state, error, read_evaluations(path))


def load_runs(paths: Iterable[Path]) -> list[Run]:
    """Every run at or below ``paths``."""
    return [load_run(p) for p in find_run_dirs(paths)]
