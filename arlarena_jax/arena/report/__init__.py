"""``arlarena report``: the paper's table, collapse detection and training-dynamics plots of runs.

:func:`build_report` reads run directories (``config.yaml`` + ``tensorboard/``), groups them by
environment and method, and writes report.md, report.html, summary.json, runs.csv and
plots/*.png; :func:`add_command` registers the CLI subcommand.
"""

from arlarena_jax.tensorboardx_import import import_tensorboardx

import_tensorboardx()  # before events.py imports from it (see that module)

from arlarena_jax.arena.report.build import build_report  # noqa: E402
from arlarena_jax.arena.report.command import add_command  # noqa: E402
from arlarena_jax.arena.report.model import Report  # noqa: E402

__all__ = ["Report", "add_command", "build_report"]
