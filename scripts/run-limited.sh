#!/usr/bin/env bash
# Runs COMMAND for at most LIMIT_S seconds, then stops every process it started, wherever that
# process went: GNU timeout alone stops only its own process group, and a `timeout` or `setsid`
# inside COMMAND (a check's own limit, mpirun's ranks, torch.compile's workers) leaves that group,
# so an outer kill misses it and the orphan keeps the GPU, the build folder and its ports.
# Each process COMMAND starts inherits a tag in its environment (ST_RUN_TAG_<id>=1, kept across
# setsid, setpgid and double forks); on the limit, and again after COMMAND ends, every process
# carrying the tag is sent TERM and, KILL_AFTER_S seconds later (10 by default), KILL. Nested runs
# each add their own tag, so an outer limit stops the inner runs too.
# Exit status: COMMAND's, or 124 when the limit stopped it.
# usage: scripts/run-limited.sh LIMIT_S COMMAND [ARGS...]   (ST_KILL_AFTER_S: the grace period)
set -u
[ $# -ge 2 ] || { echo "usage: scripts/run-limited.sh LIMIT_S COMMAND [ARGS...]" >&2; exit 2; }
limit=$1
shift
grace=${ST_KILL_AFTER_S:-10}
tag="ST_RUN_TAG_$$_${RANDOM}${RANDOM}"

# The pids of the live processes carrying the tag (never this script, which does not carry it).
tagged() {
  local f pid
  for f in /proc/[0-9]*/environ; do
    pid=${f#/proc/}
    pid=${pid%/environ}
    [ "$pid" = "$$" ] && continue
    grep -qz "^$tag=1\$" "$f" 2>/dev/null && echo "$pid"
  done
}

# stop_tagged: TERM to every tagged process, KILL to those still there after the grace period.
stop_tagged() {
  local pids waited=0
  pids=$(tagged)
  [ -n "$pids" ] || return 0
  kill -TERM $pids 2>/dev/null
  while [ $waited -lt $((grace * 10)) ]; do
    pids=$(tagged)
    [ -n "$pids" ] || return 0
    sleep 0.1
    waited=$((waited + 1))
  done
  kill -KILL $(tagged) 2>/dev/null
  return 0
}

# COMMAND in the background, and its deadline polled every 0.2 s. A signal that stops this script
# (an outer limit) stops COMMAND's processes first.
env "$tag=1" "$@" &
child=$!
trap 'stop_tagged; exit 143' TERM INT HUP
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }
deadline=$(($(now_ms) + limit * 1000))
timed_out=0
while kill -0 "$child" 2>/dev/null; do
  if [ "$(now_ms)" -ge "$deadline" ]; then
    timed_out=1
    break
  fi
  sleep 0.2
done
if [ $timed_out -eq 1 ]; then
  stop_tagged
  wait "$child" 2>/dev/null
  exit 124
fi
wait "$child"
rc=$?
stop_tagged  # what COMMAND left running behind it (a daemon, an orphaned rank)
exit "$rc"
