#!/usr/bin/env bash
# Train on one GPU box (one or several GPUs, one process): installs jax[cuda12] of the pinned
# JAX version, then runs the same command as on CPU. The mesh comes from the config
# (mesh.data / mesh.fsdp / mesh.tensor; their product must equal the number of GPUs).
#   launch/gpu.sh CONFIG [key=value ...]
# SIGTERM (a spot instance's shutdown notice) or Ctrl-C stops the run after saving, with exit
# status 75 (EX_TEMPFAIL): a supervisor restarts the same command on 75 (systemd:
# RestartForceExitStatus=75), and the run resumes. python replaces this shell (exec), so the
# signal reaches it and its status is the script's.
set -euo pipefail
cd "$(dirname "$0")/.."
config="${1:?usage: launch/gpu.sh CONFIG [key=value ...]}"
shift
python3 -m pip install -q -e .
jax_version="$(python3 -c 'import jax; print(jax.__version__)')"
python3 -m pip install -q "jax[cuda12]==${jax_version}"
python3 -c 'import jax; d = jax.devices(); assert d[0].platform == "gpu", d; print(len(d), "GPUs")'
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}"
exec python3 -m arlarena_jax train "$config" "$@"
