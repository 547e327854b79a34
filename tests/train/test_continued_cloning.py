"""Continued cloning (``sft.continue_steps``): more cloning steps after a start, with a fresh
optimizer, on the tiny Sokoban config cut to seconds.

The law checked: continuing a shared start's policy (``sft.init_from``) by N steps gives the same
parameters as a run that clones itself with the start's settings and then continues by N steps.
Both continue from the same parameters (the start's step-0 checkpoint holds exactly the float32
parameters its cloning made, and cloning is deterministic given ``sft.seed``), with the same
fresh optimizer, schedule and batch order, so they agree to float32 rounding (1e-6 absolute,
allowing XLA to order a reduction differently in another compiled program). And such a run
evaluates its own starting policy, while a plain run from the start takes the start's evaluation.
A continued cloning stopped by SIGTERM saves its state and the same command ends at the same
parameters (1e-6: the resumed process compiles its programs afresh).
"""

from __future__ import annotations

import signal
import subprocess
import sys

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
from tests.helpers.processes import signal_when
from tests.helpers.tiny_runs import SAMPO_TINY, SMALL, train_tiny

CONTINUE = 12  # continued cloning steps (the start clones SMALL's 4); a stop lands among them


def run(directory, *extra: str):
    """A tiny run without RL steps (cloning, or a start's policy, then its step-0 evaluation),
    its policy exported in Hugging Face format (``directory/hf``)."""
    return train_tiny(SAMPO_TINY, SMALL, directory, 0, "trainer.export_hf=true", *extra)


def weights(directory) -> dict[str, np.ndarray]:
    """The exported policy's tensors."""
    (shard,) = sorted((directory / "hf").glob("*.safetensors"))
    return load_file(shard)


def count_step0_evaluations(monkeypatch) -> list[int]:
    """One entry per step-0 evaluation (``Run.evaluate`` at step 0) made from now on."""
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


@pytest.fixture(scope="module")
def continued(start, tmp_path_factory):
    """A run continuing the start's cloning by CONTINUE steps, and its step-0 evaluations."""
    directory = tmp_path_factory.mktemp("continued")
    with pytest.MonkeyPatch.context() as monkeypatch:
        calls = count_step0_evaluations(monkeypatch)
        run(directory, f"sft.init_from={start}", f"sft.continue_steps={CONTINUE}")
    return directory, calls


def test_continuing_a_start_equals_continuing_ones_own_cloning(start, continued, tmp_path):
    (shared, evaluations), own = continued, tmp_path / "own"
    assert len(evaluations) == 1  # its own policy's, not the start's copied
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


def test_a_plain_run_from_the_start_takes_its_evaluation(start, tmp_path, monkeypatch):
    """The counter's other side: without continued cloning, no step-0 evaluation is made."""
    evaluations = count_step0_evaluations(monkeypatch)
    run(tmp_path / "plain", f"sft.init_from={start}")
    assert evaluations == []
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


def test_a_stopped_continued_cloning_resumes_to_the_same_policy(start, continued, tmp_path):
    """SIGTERM once the continued cloning has saved step 3 of 12 (it saves after every step
    here): one stop line naming the phase, exit 75; the same command then continues from the
    saved step and ends where an uninterrupted run ends."""
    steps = CONTINUE
    extra = [f"sft.init_from={start}", f"sft.continue_steps={steps}"]
    argv = [sys.executable, "-m", "arlarena_jax", "train", SAMPO_TINY, *SMALL]
    argv += ["trainer.total_steps=0", "trainer.export_hf=true", "sft.save_every_s=0.001"]
    stopped = tmp_path / "stopped"
    argv += [*extra, f"trainer.run_dir={stopped}"]
    saves = stopped / CONTINUED_CHECKPOINTS

    def saved() -> bool:
        return saves.is_dir() and any(
            p.name.isdigit() and int(p.name) >= 3 for p in saves.iterdir()
        )

    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        signal_when([proc], 0, signal.SIGTERM, saved)
        out = proc.communicate(timeout=300)[0]
    finally:
        proc.kill()
    assert proc.returncode == 75, out
    (line,) = [ln for ln in out.splitlines() if "stopped by" in ln]
    assert "SIGTERM during continued cloning at step " in line and f" of {steps};" in line, line
    again = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"continued cloning: {steps} steps" in again.stdout
    assert "continuing after step" in again.stdout
    uninterrupted, _ = continued
    for name, value in weights(uninterrupted).items():
        np.testing.assert_allclose(weights(stopped)[name], value, rtol=0, atol=1e-6, err_msg=name)
