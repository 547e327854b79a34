#!/usr/bin/env bash
# Pause a background campaign (launch/campaign.sh, all of its process group) while a test suite
# or the CI script runs on the same machine, and let it go on when they end: on a 2-core machine
# even a nice-19 campaign's memory traffic slows a suite, and the suite's timing is what CI is
# held to. SIGSTOP/SIGCONT only: nothing is lost (a rollout's worker timeouts may see the pause
# as a hang; the pool then restarts the worker and the episode is masked out as failed).
#   nohup launch/yield_to_tests.sh <campaign pgid> > yield.log 2>&1 &
set -u
PGID=${1:?give the process group id of the campaign: ps -o pgid= -p PID}
PATTERN=${YIELD_PATTERN:-"-m pytest|\.ci/run"}
paused=0
while kill -0 -- "-$PGID" 2>/dev/null; do
  if pgrep -f -- "$PATTERN" >/dev/null; then
    [ "$paused" = 0 ] && echo "[$(date -u +%FT%TZ)] tests running: pausing $PGID"
    kill -STOP -- "-$PGID" 2>/dev/null
    paused=1
  elif [ "$paused" = 1 ]; then
    echo "[$(date -u +%FT%TZ)] tests ended: resuming $PGID"
    kill -CONT -- "-$PGID" 2>/dev/null
    paused=0
  fi
  sleep 5
done
