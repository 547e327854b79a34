"""The parts of ``arlarena serve`` that need no OpenEnv: episode panels and the session batch
source (recycling, Sokoban's compiled-once copies, shutdown)."""

from __future__ import annotations

import sys

import pytest

from envs.serving.panels import BLOCK_SIZE, Panels
from envs.serving.source import BatchSource
from envs.sokoban.batch import SokobanBatch
from envs.sokoban.env import EnvParams

BLOCKS = {"train": 2**29, "test": 2**31 + 2**20, "validation": 2**31 + 2**30}


def test_a_panel_index_is_a_fixed_seed_of_its_split_block():
    panels = Panels(BLOCKS, offset=3)
    assert panels.seed("test", 0) == 2**31 + 2**20 + 3
    assert panels.seed("validation", 7) == 2**31 + 2**30 + 10
    for bad in (-1, BLOCK_SIZE - 3, True, 1.5):
        with pytest.raises(ValueError, match="index must"):
            panels.seed("test", bad)
    with pytest.raises(ValueError, match="split must be one of train, test, validation"):
        panels.seed("dev", 0)


class Counted:
    """A stand-in batch that counts its lifecycle."""

    def __init__(self, split: str) -> None:
        self.split, self.closed = split, False

    def close(self) -> None:
        self.closed = True


def test_a_given_back_batch_serves_the_next_session_of_its_split():
    source = BatchSource(Counted)
    first = source.take("test")
    source.give_back("test", first)
    assert source.take("test") is first  # recycled
    other = source.take("test")  # the first is lent: a new one
    assert other is not first and source.take("train").split == "train"
    assert source.stats() == {"made": 3, "lent": 3, "idle": 0}
    source.give_back("test", other)
    source.give_back("test", other)  # twice: once
    assert source.stats()["idle"] == 1
    source.close()
    assert first.closed and other.closed
    with pytest.raises(RuntimeError, match="shutting down"):
        source.take("test")


def test_sokoban_sessions_share_the_compiled_programs_and_not_the_state():
    template = SokobanBatch(1, EnvParams(dim_room=6, num_boxes=1, max_steps=5))
    source = BatchSource(lambda split: template)
    a = source.take("test")
    b = source.take("test")  # a.fresh()
    assert b is not a and b._step is a._step
    a.reset([11])
    b.reset([12])
    assert a.grids().tolist() != b.grids().tolist()
    moved = a.step([1])
    assert b.step([0]).observations[0].text != moved.observations[0].text


def test_serve_without_the_openenv_extra_is_one_line(monkeypatch, capsys):
    """Without openenv (simulated: its import fails) the command stops in one line naming the
    extra, before binding a port or building an environment."""
    from arlarena_jax import cli

    served = ("envs.serving.environment", "envs.serving.models", "envs.serving.server")
    for name in [m for m in sys.modules if m.split(".")[0] == "openenv" or m in served]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "openenv", None)
    with pytest.raises(SystemExit) as stop:
        cli.main(["serve", "sokoban", "--port", "0"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "arlarena serve needs the openenv extra" in err[0]
