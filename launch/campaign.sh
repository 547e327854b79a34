#!/usr/bin/env bash
# Run sweep files one after another, each until it is done, at the lowest CPU priority (nice 19):
# a long CPU campaign (issue 39's SmolLM2 runs) that yields the cores to anything else on the
# machine and resumes where it stopped when started again (every sweep resumes its runs).
#   nohup launch/campaign.sh configs/sweeps/smollm2_textworld.yaml ... > campaign.log 2>&1 &
# A sweep's exit status: 0 done, 1 some run failed (left for `arlarena sweep --retry-failed`),
# 2 a bad sweep file, 75 stopped (a run past its budget.minutes_per_run, or a signal): run again.
set -u
ROUNDS=${CAMPAIGN_ROUNDS:-20}
for sweep in "$@"; do
  for ((round = 1; round <= ROUNDS; round++)); do
    echo "[$(date -u +%FT%TZ)] $sweep: round $round"
    nice -n 19 python -m arlarena_jax sweep "$sweep" --workers 1
    rc=$?
    echo "[$(date -u +%FT%TZ)] $sweep: exit $rc"
    case $rc in
      0 | 1) break ;;
      75) continue ;;
      *) exit "$rc" ;;
    esac
  done
done
