# The bookkeeping of scripts/gpu-check.sh, sourced by it (and by tests/cli/gpu_call_test.sh, which
# runs it on the CPU): each check run under a limit that stops every process it started
# (scripts/run-limited.sh), its row in REPORT_DIR/results.tsv, each stage's state in
# REPORT_DIR/stages.tsv, and report.md rewritten after each, so that a call stopped at its limit
# still leaves the report of what ran and says what it cut short.
# Expects: root (the repository), report (REPORT_DIR, absolute), build_only (0|1).
results="$report/results.tsv"  # name, status, seconds, detail: one row per check, the latest run
stages_file="$report/stages.tsv"  # name, state, detail: one row per stage asked for, the latest call
running_file="$report/running"  # the stage and the check in progress, and when the check started
touch "$results" "$stages_file"

# replace_row FILE NAME FIELDS...: the row named NAME, in place of an earlier one.
replace_row() {
  local file=$1 name=$2
  shift 2
  awk -F'\t' -v n="$name" '$1 != n' "$file" >"$file.new" && mv "$file.new" "$file"
  (IFS=$'\t'; printf '%s\n' "$name	$*") >>"$file"
}

write_report() { python3 "$root/scripts/gpu_check_report.py" "$report" "$build_only" >/dev/null; }

# record NAME STATUS SECONDS DETAIL: the check's row, in place of an earlier one; then the report.
record() {
  replace_row "$results" "$1" "$2" "$3" "$4"
  write_report
}

current_stage=""
# stages_planned LIST: every stage of LIST not run yet, in this call.
stages_planned() {
  local s
  for s in ${1//,/ }; do replace_row "$stages_file" "$s" "not reached" ""; done
}
# stage_begin NAME / stage_end NAME
stage_begin() {
  current_stage=$1
  replace_row "$stages_file" "$1" running ""
  printf '%s\t\t\n' "$1" >"$running_file"
  write_report
}
stage_end() {
  replace_row "$stages_file" "$1" done ""
  current_stage=""
  rm -f "$running_file"
  write_report
}

# check NAME COMMAND...: runs one check, its output in logs/NAME.log; PASS on exit 0, SKIP on 77.
# A check that runs past `limit` seconds (ST_CHECK_LIMIT_S, 300 by default; `limit=N check ...`
# for one check) is stopped, with every process it started, and fails, so one hung rank cannot
# spend a whole device call. ST_CHECKS (an extended regular expression): only the checks it
# matches, with the environment, configure, build and the programs' link order always.
check_limit=${ST_CHECK_LIMIT_S:-300}
plain() { sed 's/\x1b\[[0-9;]*m//g' "$1"; }  # a log without GoogleTest's colours
check() {
  local name=$1
  shift
  if [ -n "${ST_CHECKS:-}" ] && [[ ! "$name" =~ ^(configure|build|link_order)$ ]] && ! grep -qE "$ST_CHECKS" <<<"$name"; then
    return 0
  fi
  local t0=$SECONDS
  echo "== $name"
  printf '%s\t%s\t%s\n' "$current_stage" "$name" "$(date +%s)" >"$running_file"
  bash "$root/scripts/run-limited.sh" "${limit:-$check_limit}" bash -c '"$@"' "$name" "$@" >"$report/logs/$name.log" 2>&1
  local rc=$?
  printf '%s\t\t\n' "$current_stage" >"$running_file"
  local status=PASS detail=""
  if [ $rc -eq 77 ]; then
    status=SKIP
  elif [ $rc -eq 124 ]; then
    status=FAIL
    detail="stopped after ${limit:-$check_limit} s"
  elif [ $rc -ne 0 ]; then
    status=FAIL
    # The first line that says what failed (a test's failure, a crash), not a library's warning.
    detail=$(plain "$report/logs/$name.log" | grep -v -E "dlopen error|Perhaps a missing symbol" |
      grep -m1 -E "Failure|FAIL|Segmentation fault|Assertion|error|Error" | cut -c1-200 | tr '\t' ' ')
    [ -n "$detail" ] || detail="exit $rc"
  else
    # A test program that skipped tests (a missing fixture, no GPU) still exits 0: say so.
    local skipped
    skipped=$(plain "$report/logs/$name.log" | grep -m1 -oE '\[  SKIPPED \] [0-9]+ tests?,' | grep -oE '[0-9]+')
    [ -n "$skipped" ] && detail="$skipped GoogleTest tests skipped"
  fi
  record "$name" "$status" "$((SECONDS - t0))" "$detail"
  echo "   $status ($((SECONDS - t0)) s) $detail"
  return $rc
}

# cut_short LIMIT_S: after the call's limit stopped gpu-check.sh (scripts/gpu-call.sh), the check it
# was running fails as cut short, its stage says so, and the stages after it say they did not run.
cut_short() {
  local limit=$1 stage="" name="" started=""
  [ -f "$running_file" ] && IFS=$'\t' read -r stage name started <"$running_file"
  if [ -n "$name" ]; then
    replace_row "$results" "$name" FAIL "$(($(date +%s) - started))" "cut short: the call's limit of $limit s stopped it"
  fi
  if [ -n "$stage" ]; then
    replace_row "$stages_file" "$stage" "cut short" "the call's limit of $limit s stopped it${name:+ during $name}"
  fi
  awk -F'\t' -v OFS='\t' -v l="$limit" '$2 == "not reached" { $2 = "not run"; $3 = "the call'"'"'s limit of " l " s came first" } 1' \
    "$stages_file" >"$stages_file.new" && mv "$stages_file.new" "$stages_file"
  rm -f "$running_file"
  write_report
}
