"""Without the ``alfworld`` extra, every command that needs the engine stops before any work with
one line that names the extra (exit status 2, as for a bad config). The extra's absence is
simulated by making ``envs.alfworld.engine.available`` answer False; ``.ci/run`` also runs these
commands in an environment that really lacks it (``.ci/check_install.py``)."""

from __future__ import annotations

import pytest

from arlarena_jax.cli import main
from envs.alfworld import engine


@pytest.fixture
def no_engine(monkeypatch):
    monkeypatch.setattr(engine, "available", lambda: False)


@pytest.mark.parametrize(
    "command",
    [
        ["alfworld", "build", "{tmp}"],
        ["alfworld", "generate", "{tmp}"],
        ["train", "configs/alfworld/sampo_tiny.yaml", "trainer.run_dir={tmp}"],
        ["eval", "configs/alfworld/sampo_tiny.yaml", "trainer.run_dir={tmp}"],
    ],
    ids=["build", "generate", "train", "eval"],
)
def test_engine_commands_name_the_missing_extra_in_one_line(command, no_engine, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main([part.format(tmp=tmp_path) for part in command])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and ".[alfworld]" in err
    assert not any(tmp_path.iterdir())  # nothing was written
