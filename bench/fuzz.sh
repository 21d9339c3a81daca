#!/usr/bin/env bash
# Every libFuzzer target (tests/CMakeLists.txt, st_fuzz_target) for SECONDS each, JOBS at a time,
# from its committed seeds plus what earlier runs found (build/tests/fuzz_corpus/<target>).
# Prints one line per target: runs, executions per second, corpus size, coverage, crashes. A
# crash leaves its input in build/tests/fuzz_artifacts/ and fails the script; copy the input into
# tests/fuzz/corpus/<target without _fuzz>/ once fixed, so that CI replays it.
# usage: bench/fuzz.sh [BUILD_DIR] [SECONDS] [JOBS]     (defaults: build, 600, 2)
set -uo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$src/build}
seconds=${2:-600}
jobs=${3:-2}
list="$build/tests/fuzz_targets.txt"
[[ -s "$list" ]] || { echo "no $list: configure and build first (scripts/setup.sh)"; exit 1; }
logs="$build/tests/fuzz_logs"
mkdir -p "$logs"

run_one() {  # run_one NAME MAX_LEN [DICT]
  local name=$1 max_len=$2 dict=${3:-} args=()
  [[ -n "$dict" ]] && args+=("-dict=$src/tests/fuzz/$dict")
  mkdir -p "$build/tests/fuzz_corpus/$name" "$build/tests/fuzz_artifacts"
  "$build/bin/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
    -print_final_stats=1 "${args[@]}" -artifact_prefix="$build/tests/fuzz_artifacts/$name-" \
    "$build/tests/fuzz_corpus/$name" "$src/tests/fuzz/corpus/${name%_fuzz}" >"$logs/$name.log" 2>&1
}

summary() {  # summary NAME RC
  local log="$logs/$1.log" runs rate cov corpus
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
  corpus=$(ls "$build/tests/fuzz_corpus/$1" | wc -l)
  printf '%-26s %s s  %10s runs  %7s/s  cov %6s  corpus %5s  %s\n' "$1" "$seconds" "${runs:-?}" "${rate:-?}" \
    "${cov:-?}" "$corpus" "$( (($2 == 0)) && echo "0 crashes" || echo "CRASH (exit $2): see $log")"
}

echo "fuzzing each target for $seconds s, $jobs at a time ($(nproc) cores)"
failed=0
mapfile -t targets <"$list"
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
  pids=() names=()
  for ((j = i; j < i + jobs && j < ${#targets[@]}; j++)); do
    read -r name max_len dict <<<"${targets[$j]}"
    [[ -n "$name" ]] || continue
    run_one "$name" "$max_len" "$dict" &
    pids+=($!) names+=("$name")
  done
  for k in "${!pids[@]}"; do
    wait "${pids[$k]}"
    rc=$?
    summary "${names[$k]}" "$rc"
    ((rc == 0)) || failed=$((failed + 1))
  done
done
((failed == 0)) || { echo "$failed target(s) crashed"; exit 1; }
