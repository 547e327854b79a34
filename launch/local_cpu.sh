#!/usr/bin/env bash
# Train on a laptop or workstation CPU (no accelerator).
#   launch/local_cpu.sh [CONFIG] [key=value ...]
# Default: the embedded main job, tiny Qwen3 on Sokoban with SAMPO.
# Ctrl-C or SIGTERM stops the run at its next safe point after saving, with exit status 75
# (EX_TEMPFAIL): run the same command again to resume. python replaces this shell (exec), so the
# signal reaches it and its status is the script's.
set -euo pipefail
cd "$(dirname "$0")/.."
config="${1:-configs/sokoban/sampo_tiny.yaml}"
shift || true
python3 -m pip install -q -e .
export JAX_PLATFORMS=cpu
exec python3 -m arlarena_jax train "$config" "$@"
