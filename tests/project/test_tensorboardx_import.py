"""tensorboardX is imported without PyTorch (see arlarena_jax/tensorboardx_import.py), and torch
stays importable afterwards. Checked in fresh interpreters: this session may have torch loaded."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_trainer_and_the_report_import_tensorboardx_without_torch():
    out = python(
        """
        import sys
        import arlarena_jax.train.metrics, arlarena_jax.train.checkpoint, arlarena_jax.arena.report
        print("tensorboardX" in sys.modules, "torch" in sys.modules)
        """
    )
    assert out == "True False"


def test_torch_is_importable_afterwards_and_an_earlier_torch_is_kept():
    pytest.importorskip("torch")
    out = python(
        """
        import sys
        import arlarena_jax.train.metrics
        import torch
        print(torch.ones(2).sum().item())
        """
    )
    assert out == "2.0"
    out = python(
        """
        import torch
        import arlarena_jax.train.metrics
        import tensorboardX.writer as writer
        print(writer.numpy_compatible is torch.Tensor)
        """
    )
    assert out == "True"  # torch was there first: tensorboardX saw it as usual
