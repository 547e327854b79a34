#!/usr/bin/env bash
# Train on a Cloud TPU v5 pod slice: runs the same command on every worker; each process calls
# jax.distributed.initialize (the entry point does it when TPU_WORKER_HOSTNAMES lists several
# hosts), and the mesh in the config spans all chips of the slice.
#   launch/tpu_pod.sh TPU_NAME ZONE CONFIG [key=value ...]
# SIGTERM on the workers (a maintenance event or spot pre-emption) stops the run after saving:
# the workers exit with status 75 (EX_TEMPFAIL) and so does this script, after one line; run it
# again with the same arguments (a queued-resources loop: resubmit on 75) and the run resumes.
set -euo pipefail
tpu="${1:?usage: launch/tpu_pod.sh TPU_NAME ZONE CONFIG [key=value ...]}"
zone="${2:?zone}"
config="${3:?config}"
shift 3
repo="${ARLARENA_REPO:-https://github.com/arlarena/arlarena-jax.git}"
overrides="$(printf ' %q' "$@")"
gcloud compute tpus tpu-vm ssh "$tpu" --zone "$zone" --worker=all --command "
  set -e
  if [ ! -d arlarena-jax ]; then git clone -q $repo arlarena-jax; fi
  cd arlarena-jax && git pull -q
  python3 -m pip install -q -e . 'jax[tpu]' -f https://storage.googleapis.com/jax-releases/libtpu_releases.html
  exec python3 -m arlarena_jax train $config $overrides
" || status=$?
if [ "${status:-0}" -eq 75 ]; then
  echo "tpu_pod.sh: the run stopped after saving; run the same command again to resume" >&2
fi
exit "${status:-0}"
