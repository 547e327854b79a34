"""``python -m arlarena_jax ...`` is the ``arlarena`` command."""

import sys

from arlarena_jax.cli import main

sys.exit(main())
