#!/usr/bin/env bash
# Rank 0's commit at scale: a synthetic Llama 3 70B checkpoint of 512 ranks (AdamW moments: 127,875
# slices, a 28 MB manifest; tests/unit/commit_scale_main.cpp) committed through the real protocol
# into a folder that holds two such checkpoints, then pruned to two. Counted with strace:
#  - the commit parses one manifest (its own, read back before it is written) and makes fewer
#    stat calls than there are rank files (none per slice: the files are checked against one
#    listing, and older checkpoints' commit numbers are read from the head of their manifests);
#  - pruning parses no manifest and stats each removed file at most once.
# The times are printed, not asserted.
# usage: commit_scale_test.sh COMMIT_SCALE
set -u
prog=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
command -v strace >/dev/null || { echo "FAIL: strace is missing (scripts/setup.sh installs it)"; exit 1; }

root=$tmp/checkpoints
for step in 100 200; do "$prog" "$root" commit "$step" >/dev/null || fail "commit of step $step failed"; done
# calls NAME SUMMARY: the calls strace -c counted of the stat family (or NAME), 0 when none.
calls() {
  awk -v want="$1" '$NF ~ want && $(NF-1) ~ /^[0-9]+$/ { n += ($(NF-2) ~ /^[0-9]+$/ && NF >= 6) ? $(NF-2) : $(NF-1) } END { print n + 0 }' "$2"
}
stats='^(stat|lstat|newfstatat|fstatat64|statx|access)$'

strace -f -c -o "$tmp/commit.strace" "$prog" "$root" commit 300 >"$tmp/commit.out" 2>&1 || fail "commit of step 300 failed: $(cat "$tmp/commit.out")"
cat "$tmp/commit.out"
grep -q "^commit: 127875 slices, 1 manifests parsed" "$tmp/commit.out" || fail "the commit parsed more than its own manifest"
n=$(calls "$stats" "$tmp/commit.strace")
echo "commit: $n stat-family calls for 127875 slices in 512 rank files"
[ "$n" -gt 0 ] && [ "$n" -lt 512 ] || fail "the commit made $n stat calls (a stat per slice would be 127875)"
[ -f "$root/step-0000300/manifest.json" ] && [ "$(readlink "$root/latest")" = step-0000300 ] || fail "step 300 is not committed"

strace -f -c -o "$tmp/prune.strace" "$prog" "$root" prune 2 300 >"$tmp/prune.out" 2>&1 || fail "pruning failed: $(cat "$tmp/prune.out")"
cat "$tmp/prune.out"
grep -q "^prune: 0 manifests parsed" "$tmp/prune.out" || fail "pruning parsed manifests"
n=$(calls "$stats" "$tmp/prune.strace")
removed=$(calls '^unlinkat$' "$tmp/prune.strace")
echo "prune: $n stat-family calls, $removed files removed"
[ ! -e "$root/step-0000100" ] && [ -d "$root/step-0000200" ] || fail "pruning to 2 did not remove step 100 alone"
[ "$removed" -ge 513 ] && [ "$n" -le "$removed" ] || fail "pruning: $n stat calls for $removed files removed"

[ "$failures" -eq 0 ] && echo "PASS: a 70B/512-rank commit parses one manifest and stats no slice; pruning parses none"
exit $((failures > 0))
