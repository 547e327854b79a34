#!/usr/bin/env bash
# Run sweep files one after another, each until it is done, at the lowest CPU priority (nice 19):
# a long CPU campaign (issue 39's SmolLM2 runs) that yields the cores to anything else on the
# machine and resumes where it stopped when started again (every sweep resumes its runs).
#   nohup launch/campaign.sh configs/sweeps/smollm2_textworld.yaml ... > campaign.log 2>&1 &
# A sweep's exit status: 0 done, 2 a bad sweep file (the campaign stops), 75 stopped (a run past
# its budget.minutes_per_run, or a signal): run again; 1 some run failed (e.g. killed for
# memory): run again with --retry-failed (the failed runs resume from their last save), at most
# CAMPAIGN_RETRIES times (default 2) before going on to the next sweep.
set -u
ROUNDS=${CAMPAIGN_ROUNDS:-20}
RETRIES=${CAMPAIGN_RETRIES:-2}
for sweep in "$@"; do
  failed=0
  for ((round = 1; round <= ROUNDS; round++)); do
    retry=()
    [ "$failed" -gt 0 ] && retry=(--retry-failed)
    echo "[$(date -u +%FT%TZ)] $sweep: round $round ${retry[*]}"
    nice -n 19 python -m arlarena_jax sweep "$sweep" --workers 1 "${retry[@]}"
    rc=$?
    echo "[$(date -u +%FT%TZ)] $sweep: exit $rc"
    case $rc in
      0) break ;;
      1) failed=$((failed + 1)); [ "$failed" -gt "$RETRIES" ] && break ;;
      75) continue ;;
      *) exit "$rc" ;;
    esac
  done
done
