"""Where ALFWorld data lives and how its trials and games are found
(docs/environments.md §4.1, §4.2).

Layout (what ``alfworld-download`` produces under ``$ALFWORLD_DATA``, and what the builders in
this package write): ``<root>/json_2.1.1/<split>/<task_type>-<Obj>-<MRecep|None>-<Recep>-<scene>/
trial_<id>/`` with ``traj_data.json``, ``initial_state.pddl`` and, once built, ``game.tw-pddl``.
The task type is the first dash-separated field of the task directory (docs/environments.md §4.7
reads it from the path too).

The evaluation problems ship as one tarball (``../shared/data/alfworld/`` beside the checkout in
this project; point ``ARLARENA_ALFWORLD_TARBALL`` at your own copy); :func:`unpack` extracts it.
"""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

TASK_TYPES = (  # docs/environments.md §4.6, ids 1..6
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
SPLITS = ("train", "valid_seen", "valid_unseen", "valid_train")
JSON_DIR = "json_2.1.1"
GAME_FILE = "game.tw-pddl"
TARBALL_ENV = "ARLARENA_ALFWORLD_TARBALL"
_REPO = Path(__file__).resolve().parents[2]
DEFAULT_TARBALL = _REPO.parent / "shared" / "data" / "alfworld" / "alfworld_json_2.1.1_valid.tar.gz"


def default_tarball() -> Path:
    """``$ARLARENA_ALFWORLD_TARBALL``, else the shared evaluation tarball beside the checkout."""
    return Path(os.environ.get(TARBALL_ENV, DEFAULT_TARBALL))


def unpack(tarball: Path, dest: Path) -> Path:
    """Extract the evaluation tarball into ``dest`` (once) and return ``dest/json_2.1.1``.

    Only regular files and directories under a ``json_2.1.1/`` folder are extracted, re-rooted
    there (the shared tarball has an ``alfworld/`` prefix); no links, no paths leaving ``dest``.
    Python's "data" extraction filter is applied where it exists (3.11.4 on).
    """
    tarball, dest = Path(tarball), Path(dest)
    if not tarball.is_file():
        raise FileNotFoundError(f"ALFWorld tarball not found: {tarball} (set ${TARBALL_ENV})")
    root = dest / JSON_DIR
    marker = dest / f".unpacked-{tarball.name}"
    if marker.exists():
        return root
    with tarfile.open(tarball) as tar:
        members = []
        for m in tar.getmembers():
            parts = Path(m.name).parts
            if not (m.isfile() or m.isdir()) or JSON_DIR not in parts or ".." in parts:
                continue
            m.name = str(Path(*parts[parts.index(JSON_DIR) :]))  # re-rooted at json_2.1.1/
            members.append(m)
        if not members:
            raise ValueError(f"ALFWorld tarball {tarball} holds no {JSON_DIR}/ directory")
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
            tar.extractall(dest, members=members, filter="data")
        else:  # 3.11.0-3.11.3 (Debian 12 ships 3.11.2): members are already plain and inside
            for m in members:
                m.mode &= 0o755  # what the "data" filter does to permissions: no set-id bits
            tar.extractall(dest, members=members)
    marker.touch()
    return root


def task_type_of(path: str | Path) -> str:
    """The task type of a trial or game path: the prefix of its task directory's name."""
    for part in reversed(Path(path).parts):
        name = part.split("-", 1)[0]
        if name in TASK_TYPES:
            return name
    raise ValueError(f"no ALFWorld task type in path {path}")


def _is_candidate(trial: Path, task_types: tuple[str, ...]) -> bool:
    """alfworld-generate's filters: no movable-receptacle or sliced task, a wanted task type."""
    if "movable" in str(trial) or "Sliced" in str(trial):
        return False
    with open(trial / "traj_data.json") as f:
        return json.load(f).get("task_type") in task_types


def find_trials(split_dir: Path, task_types: tuple[str, ...] = TASK_TYPES) -> list[Path]:
    """Sorted trial directories of a split that have an ``initial_state.pddl`` and pass the
    generator's filters (docs/environments.md §4.2)."""
    split_dir = Path(split_dir)
    if not split_dir.is_dir():
        raise FileNotFoundError(f"ALFWorld split directory not found: {split_dir}")
    trials = sorted(p.parent for p in split_dir.glob("**/traj_data.json"))
    return [
        t for t in trials if (t / "initial_state.pddl").is_file() and _is_candidate(t, task_types)
    ]


def find_games(split_dir: Path, task_types: tuple[str, ...] = TASK_TYPES) -> list[Path]:
    """Sorted solvable game files of a split (``AlfredTWEnv.collect_game_files``,
    docs/environments.md §4.2): candidates whose ``game.tw-pddl`` exists and says
    ``"solvable": true``."""
    split_dir = Path(split_dir)
    if not split_dir.is_dir():
        raise FileNotFoundError(f"ALFWorld split directory not found: {split_dir}")
    games = []
    for trial in sorted(p.parent for p in split_dir.glob(f"**/{GAME_FILE}")):
        if not (trial / "traj_data.json").is_file() or not _is_candidate(trial, task_types):
            continue
        with open(trial / GAME_FILE) as f:
            if json.load(f).get("solvable") is True:
                games.append(trial / GAME_FILE)
    return games
