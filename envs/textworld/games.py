"""Generating one TextWorld game: the difficulty tiers, ``tw-make`` through the Python API, the
content hash and the atomic write (docs/environments.md §10.2).

* ``w2-o3-q4`` / ``w4-o6-q8``: ``tw-make custom --world-size W --nb-objects O --quest-length Q
  --seed S`` (the quest length also caps its depth, as ``tw-make`` sets it).
* ``cooking``: ``tw-make tw-cooking --recipe 1 --take 1 --go 6 --open --cook --cut --seed S
  --recipe-seed S --split {train,valid,test}``: a validation or test game also draws its
  ingredients from the challenge's own valid or test foods.

A game is identified by :func:`content_hash`, the SHA-256 of its serialisation without the
metadata (which holds the seed) and the knowledge base (the same for every game of a tier): two
seeds that generate the same game have the same hash. Compiling writes ``<name>.z8`` (the story
file) and ``<name>.json`` (the game, which the engine reads beside it) into a scratch folder, then
moves them into place, the ``.json`` first: a game whose ``.z8`` exists is complete.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from envs.textworld.engine import quiet, start, textworld


@dataclasses.dataclass(frozen=True)
class Tier:
    """A difficulty tier: ``tw-make custom`` sizes, or the cooking challenge."""

    name: str
    world_size: int = 0
    nb_objects: int = 0
    quest_length: int = 0
    cooking: bool = False


TIERS = {
    tier.name: tier
    for tier in (
        Tier("w2-o3-q4", world_size=2, nb_objects=3, quest_length=4),
        Tier("w4-o6-q8", world_size=4, nb_objects=6, quest_length=8),
        Tier("cooking", cooking=True),
    )
}
COOKING = {"recipe": 1, "take": 1, "go": 6, "open": True, "cook": True, "cut": True, "drop": False}


@dataclasses.dataclass(frozen=True)
class Generated:
    """One generated game on disk."""

    seed: int
    file: str  # the .z8, relative to the split folder
    hash: str  # content_hash of the game
    walkthrough: tuple[str, ...]
    solvable: bool  # replaying the walkthrough on the engine wins

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "walkthrough": list(self.walkthrough)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Generated:
        return cls(**{**data, "walkthrough": tuple(data["walkthrough"])})


def make_game(tier: Tier, seed: int, split: str) -> Any:
    """The ``textworld.Game`` of ``tier`` for ``seed`` (``split``: the cooking foods)."""
    tw = textworld()
    options = tw.GameOptions()
    options.seeds = int(seed)
    if tier.cooking:
        from textworld.challenges.tw_cooking import cooking

        settings = {**COOKING, "recipe_seed": int(seed), "split": _cooking_split(split)}
        with quiet():  # the challenge plays its walkthrough on jericho
            return cooking.make(settings, options)
    options.nb_rooms = tier.world_size
    options.nb_objects = tier.nb_objects
    chaining = options.chaining
    chaining.min_length = chaining.max_length = chaining.max_depth = tier.quest_length
    return tw.generator.make_game(options)


def _cooking_split(split: str) -> str:
    """tw-cooking's food split of ours: train, valid or test."""
    return {"train": "train", "validation": "valid"}.get(split, "test")


def content_hash(game: Any) -> str:
    """SHA-256 of the game's serialisation without ``metadata`` and ``KB`` (see module doc)."""
    data = game.serialize()
    data.pop("metadata", None)
    data.pop("KB", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def game_name(tier: Tier, seed: int) -> str:
    return f"tw-{tier.name}-s{seed}"


def compile_into(game: Any, folder: Path, name: str) -> Path:
    """Compile ``game`` to ``folder/name.z8`` and ``.json`` atomically (see module doc)."""
    tw = textworld()
    folder.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=folder))
    try:
        options = tw.GameOptions()
        options.path = str(scratch / f"{name}.z8")
        options.force_recompile = True
        tw.generator.compile_game(game, options)
        os.replace(scratch / f"{name}.json", folder / f"{name}.json")
        os.replace(scratch / f"{name}.z8", folder / f"{name}.z8")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return folder / f"{name}.z8"


def wins(game_file: Path, walkthrough: tuple[str, ...]) -> bool:
    """Whether replaying ``walkthrough`` from the reset wins the game on the engine."""
    env = start(str(game_file))
    try:
        with quiet():
            state = env.reset()
            for command in walkthrough:
                state, _, done = env.step(command)
                if done:
                    break
        return bool(state["won"])
    finally:
        env.close()


def generate(tier_name: str, seed: int, split: str, folder: str) -> Generated:
    """Generate, compile and check one game of ``tier_name`` into ``folder`` (picklable: the
    build's worker processes call it)."""
    tier = TIERS[tier_name]
    game = make_game(tier, seed, split)
    walkthrough = tuple(game.walkthrough or ())
    path = compile_into(game, Path(folder), game_name(tier, seed))
    return Generated(
        seed=int(seed),
        file=path.name,
        hash=content_hash(game),
        walkthrough=walkthrough,
        solvable=bool(walkthrough) and wins(path, walkthrough),
    )
