"""Two ``jax.distributed`` processes each decode their own prompts on their own devices, with
weights refreshed from a training mesh over both (issue 65).

Each of two worker processes (2 CPU devices each) runs ``tests/helpers/distributed_sampler.py``:
the trainer's parameters on a (data=2, fsdp=2) mesh over all 4 devices, each process's engine on
a (data=2) mesh over its own 2, three requests on process 0 and five (other lengths, one of two
samples) on process 1, decoded before and after a refresh to new weights. The processes' decode
loops differ in length and in inserts, so one decode program over both would deadlock: the
workers are killed and the test fails after 240 s. Expected on each process: the new weights
exactly (a gather and slices, no arithmetic), and the greedy tokens of the unsharded engine in
this process for the same requests and weights (log-probs within 1e-5: the same float32 model
with its decode slots split over two devices).
"""

from __future__ import annotations

import numpy as np

from tests.helpers import distributed_sampler as worker
from tests.helpers.processes import ROOT, run_workers

WORKER = ROOT / "tests" / "helpers" / "distributed_sampler.py"


def test_each_process_decodes_its_own_prompts_on_its_refreshed_replica(tmp_path):
    logs = run_workers(WORKER, str(tmp_path))
    got = [dict(np.load(tmp_path / f"process_{i}.npz")) for i in (0, 1)]
    trained = {k: v for k, v in got[0].items() if k.startswith("seed")}
    references = {seed: worker.loaded(seed, trained) for seed in (0, 1)}
    for process, out in enumerate(got):
        assert tuple(out["mesh"]) == (2, 1, 1)  # data over the process's 2 devices
        params = [k for k in out if k.startswith("param/")]
        assert params and len(params) == len(trained) // 2
        for key in params:
            want = trained[key.replace("param/", "seed1/")]
            np.testing.assert_array_equal(out[key], want, err_msg=key)
        for name, seed in (("before", 0), ("after", 1)):
            engine = worker.Engine(references[seed], worker.ENGINE, sampling=worker.GREEDY)
            tokens, log_probs = worker.decode(engine, process)
            np.testing.assert_array_equal(out[f"{name}/tokens"], worker.ragged(tokens, np.int32))
            want = worker.ragged(log_probs, np.float32)
            np.testing.assert_allclose(out[f"{name}/log_probs"], want, atol=1e-5)
        assert out["refresh_s"] > 0
    assert not np.array_equal(got[1]["before/tokens"], got[1]["after/tokens"])
    assert all("refresh" in log for log in logs)
