#!/usr/bin/env bash
# The GPU call's limits, on the CPU: scripts/run-limited.sh stops every process its command
# started (a nested `timeout`, a `setsid`, a double fork, a nested run-limited.sh), at the limit and
# when the command leaves something behind; scripts/gpu-call.sh, with a stand-in for gpu-check.sh
# that runs gpu-check-lib.sh's real checks and stages, leaves no process of the check it cut short,
# and its report names that check and stage as cut short and the stages after them as not run.
# usage: gpu_call_test.sh REPO WORK_DIR
set -u
repo=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# A sleep unique to this run, so that the test finds its own processes alone.
mark="$$$RANDOM"
# alive PATTERN: the live (not zombie) processes whose command line holds PATTERN.
alive() { ps -eo stat=,pid=,args= | awk '$1 !~ /^Z/' | grep -F -- "$1" | grep -v -e grep -e awk; }
limited=$repo/scripts/run-limited.sh

# 1. Past its limit: the command's own `timeout`, a `setsid` child and a double-forked one all go.
t0=$(date +%s%N)
ST_KILL_AFTER_S=2 bash "$limited" 2 bash -c "timeout 300 sleep 301.$mark & setsid sleep 302.$mark & (sleep 303.$mark &); wait"
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
[ $rc -eq 124 ] || fail "run-limited past its limit: exit $rc, not 124"
((ms >= 1900 && ms < 8000)) || fail "run-limited with a 2 s limit returned after $ms ms"
survivors=$(alive ".$mark")
[ -z "$survivors" ] || fail "processes survived their limit: $survivors"

# 2. An outer limit stops an inner run-limited.sh and everything under it, before the inner limit.
bash "$limited" 2 bash "$limited" 60 bash -c "timeout 300 sleep 304.$mark & setsid sleep 305.$mark & wait"
rc=$?
[ $rc -eq 124 ] || fail "nested run-limited: exit $rc, not 124"
survivors=$(alive ".$mark")
[ -z "$survivors" ] || fail "processes survived the outer limit: $survivors"

# 3. A command that ends in time keeps its exit status, and what it left running is stopped.
bash "$limited" 30 bash -c "setsid sleep 306.$mark & exit 5"
rc=$?
[ $rc -eq 5 ] || fail "run-limited: the command's exit 5 came back as $rc"
survivors=$(alive ".$mark")
[ -z "$survivors" ] || fail "a process the command left behind survived: $survivors"

# 4. gpu-call.sh stops a stand-in check in its second stage; the report says so.
standin=$work/standin.sh
cat >"$standin" <<EOF
# gpu-check.sh's arguments: --stages LIST REPORT_DIR
stages=\$2 report=\$3 root=$repo build_only=0
mkdir -p "\$report/logs"
echo "stand-in machine" >"\$report/machine.txt"
source "\$root/scripts/gpu-check-lib.sh"
stage_quick() { check quick_check true; }
stage_slow() { limit=60 check sleeper bash -c "timeout 300 sleep 307.$mark & setsid sleep 308.$mark & wait"; }
stage_later() { check later_check true; }
stages_planned "\$stages"
for s in \${stages//,/ }; do stage_begin "\$s"; "stage_\$s"; stage_end "\$s"; done
EOF
out=$work/out
ST_GPU_CHECK=$standin ST_GPU_CALL_WORK=$work/gc bash "$repo/scripts/gpu-call.sh" quick,slow,later 4 "$out" >"$work/call.log" 2>&1
rc=$?
[ $rc -eq 124 ] || fail "gpu-call past its limit: exit $rc, not 124 ($(tail -3 "$work/call.log"))"
survivors=$(alive ".$mark")
[ -z "$survivors" ] || fail "processes of the cut-short check survived gpu-call: $survivors"
report=$out/report.md
[ -f "$report" ] || fail "gpu-call brought back no report.md"
if [ -f "$report" ]; then
  grep -qE '^\| quick_check \| PASS \|' "$report" || fail "the check that finished is not PASS: $(cat "$report")"
  grep -qE "^\| sleeper \| FAIL \| [0-9]+ \| cut short: the call's limit of 4 s stopped it \|" "$report" ||
    fail "the check the limit stopped is not named as cut short: $(cat "$report")"
  grep -qE '^\| quick \| done \|' "$report" || fail "stage quick is not done: $(cat "$report")"
  grep -qE "^\| slow \| cut short \| the call's limit of 4 s stopped it during sleeper \|" "$report" ||
    fail "stage slow is not cut short: $(cat "$report")"
  grep -qE "^\| later \| not run \| the call's limit of 4 s came first \|" "$report" ||
    fail "stage later is not 'not run': $(cat "$report")"
  grep -q later_check "$report" && fail "the stage after the limit ran: $(cat "$report")"
fi
tar tzf "$out/logs.tgz" | grep -q '^stages.tsv$' || fail "logs.tgz lacks stages.tsv"
grep -q "stopped the check; report.md says what it cut short" "$out/console.log" ||
  fail "console.log does not say the limit stopped the check"

# A second call into the same folder runs the stage left out; the earlier calls' checks stay.
ST_GPU_CHECK=$standin ST_GPU_CALL_WORK=$work/gc bash "$repo/scripts/gpu-call.sh" later 30 "$out" >"$work/call2.log" 2>&1
rc=$?
# Exit 1: the report still holds the first call's failed check (gpu_check_report.py).
[ $rc -eq 1 ] || fail "the second gpu-call: exit $rc, not 1 ($(tail -3 "$work/call2.log"))"
grep -qE '^\| later_check \| PASS \|' "$report" || fail "the second call's check is missing: $(cat "$report")"
grep -qE '^\| later \| done \|' "$report" || fail "stage later is not done after the second call: $(cat "$report")"
grep -qE '^\| sleeper \| FAIL \|' "$report" || fail "the first call's cut-short check was lost: $(cat "$report")"

[ $failures -eq 0 ] && echo "gpu_call_test: all passed"
exit $((failures > 0))
