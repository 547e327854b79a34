"""Fixtures the multi-process files share (tests/e2e/test_processes_*.py)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import built_once
from tests.helpers.process_runs import clone, train


@pytest.fixture(scope="session")
def cloned(tmp_path_factory):
    """The shrunk main job's cloned start (one process, tests/helpers/process_runs.py), cloned
    once for the session: the first worker that asks builds it, the others read it."""
    return built_once(tmp_path_factory, "processes_start", lambda out: clone(out / "run")) / "run"


@pytest.fixture(scope="session")
def two_processes(tmp_path_factory, cloned):
    """RL from ``cloned`` as two processes (the shrunk main job's 2 steps, a checkpoint at each),
    run once for the session: (its run directory, each process's output). Read only: a test
    that continues it works on a copy (``copy_run``)."""

    def build(out):
        outputs = train(out / "run", 2, cloned)
        (out / "outputs.json").write_text(json.dumps(outputs))

    folder = built_once(tmp_path_factory, "processes_two", build)
    return folder / "run", json.loads((folder / "outputs.json").read_text())
