#!/usr/bin/env bash
# `shardtune plot`: PNGs of the asked size, not blank, with each run's line colour (gnuplot's first
# two: #9400d3 and #009e73), for a real run, for two runs compared, and for a run whose folder
# name holds quotes and spaces; clear errors for a folder without metrics.jsonl, a run without
# training records, and several runs without --out.
# usage: plot_test.sh SHARDTUNE SOURCE_DIR
set -u
st=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cd "$src" || exit 1
py=/usr/bin/python3
check() { $py tests/cli/png_check.py "$@" || fail "$1 is not the chart it should be"; }

"$st" run configs/tiny-cpu.toml -n 2 --set "job.output_dir=$tmp/real" --set train.max_train_step=30 \
  --set checkpoint.every_steps=0 >"$tmp/real.log" 2>&1 || { fail "the run failed"; tail -5 "$tmp/real.log"; }
"$st" plot "$tmp/real" --width 640 --height 400 >"$tmp/out" 2>&1 || fail "plot of one run failed: $(cat "$tmp/out")"
for chart in loss lr throughput memory; do
  grep -qx "$tmp/real/plots/$chart.png" "$tmp/out" || fail "plot did not name $chart.png"
  check "$tmp/real/plots/$chart.png" 640 400 9400d3
done
[[ -e "$tmp/real/plots/margins.png" ]] && fail "an SFT run got DPO's margins chart"

# A second run, made up, with a name no shell or gnuplot string should trip on.
odd="$tmp/it's \"odd\" \$x"
mkdir -p "$odd"
$py - "$odd/metrics.jsonl" <<'PY'
import json, math, sys
with open(sys.argv[1], "w") as f:
    for s in range(1, 31):
        f.write(json.dumps({"step": s, "epoch": 1, "loss": 5 * math.exp(-s / 10), "lr": 1e-3, "tokens": 256,
                            "step_seconds": 0.02, "tokens_per_second": 12000 + 50 * s, "peak_rss_bytes": 200 << 20,
                            "gpu_peak_allocated_bytes": 1 << 30, "gpu_peak_reserved_bytes": 3 << 29}) + "\n")
    f.write(json.dumps({"eval_epoch": 1, "after_step": 30, "val_loss": 0.3, "val_perplexity": math.exp(0.3)}) + "\n")
    f.write('{"step": 31, "ep')  # cut short by a kill
PY
"$st" plot "$tmp/real" "$odd" --out "$tmp/compare" --width 640 --height 400 >"$tmp/out2" 2>&1 ||
  fail "plot of two runs failed: $(cat "$tmp/out2")"
for chart in loss lr throughput memory; do check "$tmp/compare/$chart.png" 640 400 9400d3 009e73; done
"$st" plot "$odd" --width 640 --height 400 >/dev/null 2>&1 || fail "plot of a run named $odd failed"
[ -s "$odd/plots/loss.png" ] || fail "no loss.png under $odd/plots"

expect_error() {  # expect_error TEXT ARGS...: plot fails, naming TEXT
  local text=$1
  shift
  if "$st" plot "$@" >"$tmp/err" 2>&1; then
    fail "plot $* succeeded"
  elif ! grep -qF -- "$text" "$tmp/err"; then
    fail "plot $*: the error does not say '$text': $(cat "$tmp/err")"
  fi
}
mkdir -p "$tmp/empty" "$tmp/none"
: >"$tmp/empty/metrics.jsonl"
expect_error "$tmp/none/metrics.jsonl: no metrics.jsonl" "$tmp/none"
expect_error "$tmp/empty/metrics.jsonl: no training records yet" "$tmp/empty"
expect_error "need --out DIR" "$tmp/real" "$odd"

[ "$failures" -eq 0 ] && echo "plot_test: all checks passed"
exit $((failures > 0))
