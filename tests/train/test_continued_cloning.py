"""Continued cloning (``sft.continue_steps``): more cloning steps after a start, with a fresh
optimizer, on the tiny Sokoban config cut to seconds.

The law checked: continuing a shared start's policy (``sft.init_from``) by N steps gives the same
parameters as a run that clones itself with the start's settings and then continues by N steps.
Both continue from the same parameters (the start's step-0 checkpoint holds exactly the float32
parameters its cloning made, and cloning is deterministic given ``sft.seed``), with the same
fresh optimizer, schedule and batch order, so they agree to float32 rounding (1e-6 absolute,
allowing XLA to order a reduction differently in another compiled program). And such a run
evaluates its own starting policy, while a plain run from the start takes the start's evaluation.
"""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import load_file

from arlarena_jax.errors import ConfigError
from arlarena_jax.train import run as run_module
from arlarena_jax.train.cloning import CLONING_CHECKPOINTS, CONTINUED_CHECKPOINTS
from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.held_out import held_out_path, read_records
from arlarena_jax.train.metrics import read_scalars
from arlarena_jax.train.start import start_key
from tests.helpers.tiny_runs import SAMPO_TINY, SMALL, train_tiny

CONTINUE = 2  # continued cloning steps (the start clones SMALL's 4)


def run(directory, *extra: str):
    """A tiny run without RL steps (cloning, or a start's policy, then its step-0 evaluation),
    its policy exported in Hugging Face format (``directory/hf``)."""
    return train_tiny(SAMPO_TINY, SMALL, directory, 0, "trainer.export_hf=true", *extra)


def weights(directory) -> dict[str, np.ndarray]:
    """The exported policy's tensors."""
    (shard,) = sorted((directory / "hf").glob("*.safetensors"))
    return load_file(shard)


@pytest.fixture
def step0_evaluations(monkeypatch) -> list[int]:
    """One entry per step-0 evaluation (``Run.evaluate`` at step 0) the test's runs make."""
    calls: list[int] = []
    original = run_module.Run.evaluate

    def counting(self, step=None):
        if step == 0:
            calls.append(step)
        return original(self, step)

    monkeypatch.setattr(run_module.Run, "evaluate", counting)
    return calls


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    directory = tmp_path_factory.mktemp("start")
    run(directory)
    return directory


def test_continuing_a_start_equals_continuing_ones_own_cloning(start, tmp_path, step0_evaluations):
    shared, own = tmp_path / "shared", tmp_path / "own"
    run(shared, f"sft.init_from={start}", f"sft.continue_steps={CONTINUE}")
    assert len(step0_evaluations) == 1  # its own policy's, not the start's copied
    run(own, f"sft.continue_steps={CONTINUE}")
    continued, cloned, base = weights(shared), weights(own), weights(start)
    assert continued.keys() == cloned.keys() == base.keys()
    for name, value in continued.items():
        np.testing.assert_allclose(value, cloned[name], rtol=0, atol=1e-6, err_msg=name)
    assert any(not np.array_equal(continued[k], base[k]) for k in base)  # it did train
    assert read_records(held_out_path(shared, 0)) == read_records(held_out_path(own, 0))
    for directory in (shared, own):
        scalars = read_scalars(directory / "tensorboard")
        assert scalars["sft_continued/steps"] == [(0, float(CONTINUE))]
        assert [s for s, _ in scalars["sft_continued/loss"]] == list(range(CONTINUE))
        assert not (directory / CONTINUED_CHECKPOINTS).exists()  # gone once step 0 is saved
        assert not (directory / CLONING_CHECKPOINTS).exists()
    assert "sft/steps" not in read_scalars(shared / "tensorboard")  # it cloned nothing else


def test_a_plain_run_from_the_start_takes_its_evaluation(start, tmp_path, step0_evaluations):
    """The counter's other side: without continued cloning, no step-0 evaluation is made."""
    run(tmp_path / "plain", f"sft.init_from={start}")
    assert step0_evaluations == []
    assert read_records(held_out_path(tmp_path / "plain", 0)) == read_records(
        held_out_path(start, 0)
    )


def test_continued_cloning_shares_the_start_and_is_checked():
    base = load_config(SAMPO_TINY, SMALL)
    assert start_key(load_config(SAMPO_TINY, [*SMALL, "sft.continue_steps=7"])) == start_key(base)
    with pytest.raises(ConfigError, match=r"sft\.continue_steps.*sft\.enabled=true"):
        load_config(SAMPO_TINY, [*SMALL, "sft.enabled=false", "sft.continue_steps=2"])
    with pytest.raises(ConfigError, match=r"sft\.continue_steps"):
        load_config(SAMPO_TINY, [*SMALL, "sft.continue_steps=-1"])
