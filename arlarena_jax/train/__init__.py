"""Training: behaviour cloning, RL, checkpoints, metrics, configs."""

from arlarena_jax.tensorboardx_import import import_tensorboardx

import_tensorboardx()  # before metrics.py and checkpoint_verify.py import from it (see that module)
