"""tensorboardX without PyTorch's import.

``tensorboardX.writer`` imports ``torch`` at module level when it is installed, only to name
``torch.Tensor`` in type hints; that import costs ~1.2 s of every ``arlarena`` process's start-up on
a machine that has PyTorch (the test environment has it, and so do many researchers'). Tensors we
log are floats and NumPy arrays, so :func:`import_tensorboardx` imports the package once with
``torch`` hidden (``sys.modules["torch"] = None`` makes ``import torch`` raise ImportError, which
tensorboardX handles) and then un-hides it, so a later ``import torch`` works as usual.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType


def import_tensorboardx() -> ModuleType:
    """``tensorboardX``, imported without importing ``torch`` unless torch is already loaded."""
    if "tensorboardX" in sys.modules or "torch" in sys.modules:
        return importlib.import_module("tensorboardX")
    sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        return importlib.import_module("tensorboardX")
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]
