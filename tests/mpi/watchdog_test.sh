#!/usr/bin/env bash
# Runs watchdog_hang at 3 ranks and checks that the job fails fast, naming the guilty rank.
# usage: watchdog_test.sh MPIEXEC WATCHDOG_HANG absent|staggered|late|pending
set -u
mpiexec=$1 prog=$2 scenario=$3
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
timeout 90 "$mpiexec" -np 3 --oversubscribe --bind-to none --mca btl self,vader,tcp \
  --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo "$prog" "$scenario" >"$log" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
cat "$log"
fail() { echo "FAIL: $*"; exit 1; }
if [ "$scenario" = late ]; then
  [ "$rc" -eq 0 ] || fail "a rank 0.5 s late within a 2 s timeout failed the job (exit $rc)"
  [ "$(grep -c "finished with the right sum" "$log")" -eq 3 ] || fail "not every rank got the right sum"
  grep -qE "collective timeout|lost peer" "$log" && fail "the watchdog fired"
  echo "PASS: no false alarm"
  exit 0
fi
[ "$rc" -ne 0 ] || fail "the job exited 0"
[ "$rc" -ne 124 ] || fail "the job hung until timeout(1) killed it"
[ "$elapsed" -le 30 ] || fail "the job took ${elapsed}s to fail; the collective timeout is 2 s"
grep -q "lost peer: all_reduce #1 on group 'world' (3 ranks) did not finish within 2.0 s" "$log" \
  || fail "no timeout error naming the collective"
grep -q "ranks that never arrived: 2\." "$log" || fail "the absent rank 2 is not named, or not alone"
grep -q "ranks that never arrived: 1" "$log" && fail "rank 1, which was waiting, is named as absent"
grep -q "the collective finished" "$log" && fail "a collective completed despite the hang"
if [ "$scenario" = pending ]; then
  # The second all-reduce gives up with the first one's error, not after 2 s more. Ranks 0 and 1
  # each say so as the error unwinds, before they abort; the first to abort may kill the other
  # before it gets there, so at least one says it.
  [ "$(grep -c "that nobody waited for failed: lost peer: all_reduce #2 on group 'world' given up: an earlier collective failed: all_reduce #1" "$log")" -ge 1 ] ||
    fail "the all-reduce in flight behind the failed one did not give up at once"
  grep -q "all_reduce #2 on group 'world' (3 ranks) did not finish" "$log" && fail "the second all-reduce waited out its own timeout"
fi
echo "PASS: failed in ${elapsed}s with exit code $rc"
