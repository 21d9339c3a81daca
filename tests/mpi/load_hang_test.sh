#!/usr/bin/env bash
# Runs load_hang at 3 ranks and checks that the load fails fast on the ranks left waiting, naming
# the lost rank, instead of hanging the job.
# usage: load_hang_test.sh MPIEXEC LOAD_HANG reader|remote|absent
set -u
mpiexec=$1 prog=$2 scenario=$3
log=$(mktemp) dir=$(mktemp -d)
trap 'rm -rf "$log" "$dir"' EXIT
start=$(date +%s)
timeout 100 "$mpiexec" -np 3 --oversubscribe --bind-to none --mca btl self,vader,tcp \
  --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo "$prog" "$scenario" "$dir/model" >"$log" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
cat "$log"
fail() { echo "FAIL: $*"; exit 1; }
[ "$rc" -ne 0 ] || fail "the job exited 0"
[ "$rc" -ne 124 ] || fail "the job hung until timeout(1) killed it"
[ "$elapsed" -le 45 ] || fail "the job took ${elapsed}s to fail; the collective timeout is 2 s"
grep -q "loaded$" "$log" && fail "a rank finished loading"
case $scenario in
  reader) lost=0 wait="barrier #[0-9]* on group 'node' (3 ranks)" ;;
  remote) lost=0 wait="receive #[0-9]* on group 'loading' (3 ranks)" ;;
  absent) lost=2 wait="barrier #[0-9]* on group 'world' (3 ranks)" ;;
esac
grep -q "CAUGHT lost peer: $wait did not finish within 2.0 s; ranks that never arrived: $lost\." "$log" \
  || fail "no error naming the wait ($wait) and rank $lost alone as lost"
for r in 0 1 2; do
  [ "$r" = "$lost" ] && continue
  grep -qE "ranks that never arrived: ([0-9]+, )*$r[.,]" "$log" && fail "rank $r, which was waiting, is named as lost"
done
echo "PASS: failed in ${elapsed}s with exit code $rc"
