"""The math problems (spec environments §5, "Data"; ``../shared/data/README.md``).

Files ``<name>.jsonl.gz`` (or ``<name>.jsonl``), one JSON object per line:
``{"id": str, "question": str, "answer": str[, "subject": str, "level": int | str]}``.
Training: ``math_l3to5_train`` (8,523 MATH problems, levels 3-5, SimpleRL's set); evaluation:
``aime2024`` and ``aime2025`` (30 each). The folder is ``env.data_path`` in a config, else
``$ARLARENA_MATH_DATA``, else ``../shared/data/math`` beside the checkout. Every problem in a
file is reported as one line naming the file and the line number (:class:`DataError`).

An empty ``answer`` is kept, not an error: the training set has two (lines 5055 and 5159, multiple
choice questions whose answer was lost upstream). They are in the original's 8,523 too, and
score 0 whatever the model says (math-verify parses nothing from ``\\boxed{}``).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "DATA_ENV_VAR",
    "EVAL_FILES",
    "TRAIN_FILES",
    "DataError",
    "Problem",
    "default_data_dir",
    "load_problems",
    "load_split",
]

DATA_ENV_VAR = "ARLARENA_MATH_DATA"
TRAIN_FILES = ("math_l3to5_train",)
EVAL_FILES = ("aime2024", "aime2025")
SUFFIXES = (".jsonl.gz", ".jsonl")
_REPO = Path(__file__).resolve().parents[2]  # the folder holding the `envs` package


class DataError(ValueError):
    """A missing or malformed math data file (a one-line message)."""


@dataclasses.dataclass(frozen=True)
class Problem:
    """One problem; ``dataset`` is the file it came from (its name without the suffix)."""

    id: str
    question: str
    answer: str
    subject: str = ""
    level: str | int | None = None
    dataset: str = ""


def default_data_dir() -> Path:
    """``$ARLARENA_MATH_DATA`` if set, else ``<repo root>/../shared/data/math``."""
    env = os.environ.get(DATA_ENV_VAR)
    return Path(env) if env else _REPO.parent / "shared" / "data" / "math"


def _problem(obj: Any, dataset: str) -> Problem:
    """One line's object as a Problem; ValueError (a short reason) when it is not one."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    for key in ("id", "question", "answer"):
        if key not in obj:
            raise ValueError(f"missing {key!r}")
        value = obj[key]
        if not isinstance(value, str):
            raise ValueError(f"{key!r} must be a string, got {type(value).__name__}")
        if not value.strip() and key != "answer":
            raise ValueError(f"{key!r} is empty")
    subject = obj.get("subject", "")
    if not isinstance(subject, str):
        raise ValueError(f"'subject' must be a string, got {type(subject).__name__}")
    level = obj.get("level")
    if level is not None and (isinstance(level, bool) or not isinstance(level, str | int)):
        raise ValueError(f"'level' must be an int or a string, got {type(level).__name__}")
    return Problem(obj["id"], obj["question"], obj["answer"], subject, level, dataset)


def _dataset_name(path: Path) -> str:
    """The file name without ``.jsonl.gz``/``.jsonl``."""
    for suffix in SUFFIXES:
        if path.name.endswith(suffix):
            return path.name[: -len(suffix)]
    return path.stem


@functools.lru_cache(maxsize=16)
def _load_cached(path: Path, mtime_ns: int) -> tuple[Problem, ...]:
    """The problems of ``path`` as of ``mtime_ns`` (the cache key)."""
    dataset = _dataset_name(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    problems = []
    ids: dict[str, int] = {}
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    problem = _problem(json.loads(line), dataset)
                except ValueError as error:  # JSONDecodeError included
                    raise DataError(f"{path}: line {number}: {error}") from None
                if problem.id in ids:
                    raise DataError(
                        f"{path}: line {number}: id {problem.id!r} repeats line {ids[problem.id]}"
                    )
                ids[problem.id] = number
                problems.append(problem)
    except (OSError, EOFError, UnicodeDecodeError) as error:  # a corrupt gzip, bad bytes
        raise DataError(f"{path}: unreadable: {error}") from None
    if not problems:
        raise DataError(f"{path}: no problems")
    return tuple(problems)


def load_problems(path: Path | str) -> tuple[Problem, ...]:
    """All problems of one ``.jsonl.gz``/``.jsonl`` file, in file order (cached per mtime).

    Raises :class:`DataError` (one line: the file, the line number, the reason) for bad JSON, a
    missing or non-string id, question or answer, an empty id or question (an empty answer is
    allowed, see the module docstring), a repeated id, or an unreadable file.
    """
    path = Path(path).resolve()
    try:
        mtime_ns = path.stat().st_mtime_ns
    except OSError:
        raise DataError(
            f"math data file not found: {path} (set env.data_path or ${DATA_ENV_VAR})"
        ) from None
    return _load_cached(path, mtime_ns)


def _find_file(folder: Path, name: str) -> Path:
    """``folder/name.jsonl.gz``, else ``folder/name.jsonl``; a one-line DataError if neither."""
    for suffix in SUFFIXES:
        if (folder / f"{name}{suffix}").is_file():
            return folder / f"{name}{suffix}"
    raise DataError(
        f"math data file not found: {folder / (name + SUFFIXES[0])} "
        f"(set the config key env.data_path or ${DATA_ENV_VAR} to the folder holding it)"
    )


def load_split(data_dir: Path | str | None, names: Iterable[str]) -> tuple[Problem, ...]:
    """The problems of the files ``names`` (e.g. :data:`TRAIN_FILES`) in ``data_dir``, in order.

    ``data_dir=None`` reads :func:`default_data_dir`. Each problem's ``dataset`` is its file name.
    """
    folder = Path(data_dir) if data_dir is not None else default_data_dir()
    if not folder.is_dir():
        raise DataError(
            f"math data folder not found: {folder} "
            f"(set the config key env.data_path or ${DATA_ENV_VAR})"
        )
    problems: list[Problem] = []
    for name in names:
        problems.extend(load_problems(_find_file(folder, name)))
    return tuple(problems)
