"""A two-process ``jax.distributed`` run of the RL update step on CPU (localhost coordinator)
agrees with the same step in one process (issue 6).

Each of two worker processes has 2 CPU devices; together they form a (data=2, fsdp=2) mesh and
run ``tests/helpers/distributed_update.py`` (parameters sharded by the partition rules, rows
placed with ``put_rows``, old log-probs gathered with ``to_host``). This process runs the same
function on a mesh of 4 of its 8 host devices. Expected: the same parameters and metrics up to
float32 reduction-order rounding (atol 1e-5; AdamW at lr 1e-2 moves parameters by ~2e-2, so a wrong
gradient or a missed mini-batch would be far outside it). Skips when this JAX has no CPU
collectives for several processes.
"""

from __future__ import annotations

import jax
import numpy as np

from arlarena_jax.models import make_mesh
from tests.helpers.distributed_update import run
from tests.helpers.processes import ROOT, run_workers

WORKER = ROOT / "tests" / "helpers" / "distributed_update.py"


def test_two_process_update_equals_single_process(tmp_path):
    out = tmp_path / "two_process.npz"
    run_workers(WORKER, str(out))
    single = run(make_mesh(data=2, fsdp=2, devices=jax.devices()[:4]))
    two = dict(np.load(out))
    assert set(two) == set(single)
    assert any(k.startswith("param/") for k in single)
    for key, value in single.items():
        np.testing.assert_allclose(two[key], value, atol=1e-5, rtol=1e-5, err_msg=key)
    assert single["metric/grad_norm"].shape == (2,)  # two mini-batches
    assert np.all(single["metric/grad_norm"] > 0)
