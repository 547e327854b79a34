#!/usr/bin/env bash
# Run sweep files one after another, each until it is done, at the lowest CPU priority (nice 19):
# a long CPU campaign (issue 39's SmolLM2 runs) that resumes where it stopped when started again
# (every sweep resumes its runs from their last save).
#   nohup launch/campaign.sh configs/sweeps/smollm2_textworld.yaml ... > campaign.log 2>&1 &
# It yields the machine to test suites: while a process matching CAMPAIGN_YIELD_TO (default
# "-m pytest|.ci/run") runs, the running sweep is stopped with SIGTERM (its run saves and exits
# 75, freeing its memory: a paused run would keep it) and no round starts until they end. On
# 2 cores even a nice-19 run slows a suite, and its memory can get the suite killed.
# A sweep's exit status: 0 done, 2 a bad sweep file (the campaign stops), 75 stopped (a run past
# its budget.minutes_per_run, or a signal): run again; 1 some run failed (e.g. killed for
# memory): every round passes --retry-failed (the failed runs resume from their last save, also
# those failed before this campaign started), and a sweep that exits 1 more than CAMPAIGN_RETRIES
# times (default 3) is left for the next sweep.
set -u
ROUNDS=${CAMPAIGN_ROUNDS:-1000}  # every yield to tests and every budget stop takes a round
RETRIES=${CAMPAIGN_RETRIES:-3}
YIELD_TO=${CAMPAIGN_YIELD_TO:-"-m pytest|\.ci/run"}
say() { echo "[$(date -u +%FT%TZ)] $*"; }
tests_running() { pgrep -f -- "$YIELD_TO" >/dev/null; }

watch_tests() {  # SIGTERM the sweep of this campaign while tests run
  while sleep 10; do
    tests_running && pkill -TERM -P "$1" -f "arlarena_jax sweep" && say "tests running: sweep stopped"
  done
}
watch_tests $$ &
trap 'kill $! 2>/dev/null' EXIT

for sweep in "$@"; do
  failed=0
  for ((round = 1; round <= ROUNDS; round++)); do
    while tests_running; do sleep 30; done
    say "$sweep: round $round (failed so far: $failed)"
    nice -n 19 python -m arlarena_jax sweep "$sweep" --workers 1 --retry-failed
    rc=$?
    say "$sweep: exit $rc"
    case $rc in
      0) break ;;
      1) failed=$((failed + 1)); [ "$failed" -gt "$RETRIES" ] && break ;;
      75) continue ;;
      *) exit "$rc" ;;
    esac
  done
done
