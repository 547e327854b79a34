#!/usr/bin/env bash
# Keep a long CPU campaign from swapping the machine: every POLL_S seconds (default 20) log the
# resident size of the largest arlarena process and the machine's available memory, and SIGKILL
# that process when it passes LIMIT_GB (default 20). launch/campaign.sh then resumes the killed
# run from its last save (set trainer.save_every: 1 to lose at most one step); a run never loses
# a committed checkpoint this way. Used for issue 39's WebShop runs, whose resident size grew by
# ~2.5 GB an RL step on the 24 GiB VM (docs/real_model.md).
# MATCH (an extended regex over a process's command line) picks the processes watched.
#   nohup launch/memory_watchdog.sh >> memory.log 2>&1 &
set -u
MATCH=${MATCH:-"python.* -m arlarena_jax"}
LIMIT_KB=$(( ${LIMIT_GB:-20} * 1024 * 1024 ))
POLL_S=${POLL_S:-20}
while sleep "$POLL_S"; do
  # -ww: whole command lines (ps cuts them at $COLUMNS otherwise, losing the match)
  line=$(ps -ww -eo pid=,rss=,args= --sort=-rss | grep -E -- "$MATCH" | grep -v -e grep -e memory_watchdog | head -1)
  [ -z "$line" ] && continue
  read -r pid rss _ <<< "$line"
  available=$(free -g | awk '/^Mem/{print $7}')
  echo "$(date -u +%T) pid $pid rss_gb $(awk "BEGIN{printf \"%.1f\", $rss/1048576}") available_gb $available"
  if [ "$rss" -gt "$LIMIT_KB" ]; then
    echo "$(date -u +%T) killing $pid: over ${LIMIT_GB:-20} GB"
    kill -9 "$pid"
  fi
done
