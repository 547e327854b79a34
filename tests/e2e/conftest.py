"""Fixtures the multi-process files share (tests/e2e/test_processes_*.py)."""

from __future__ import annotations

import pytest

from tests.conftest import built_once
from tests.helpers.process_runs import clone


@pytest.fixture(scope="session")
def cloned(tmp_path_factory):
    """The shrunk main job's cloned start (one process, tests/helpers/process_runs.py), cloned
    once for the session: the first worker that asks builds it, the others read it."""
    return built_once(tmp_path_factory, "processes_start", lambda out: clone(out / "run")) / "run"
