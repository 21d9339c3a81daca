#!/usr/bin/env bash
# What goes wrong around a run, through `shardtune run` and the tools, and what must happen then:
#  - a diverging run (an lr that makes the loss infinite within a few steps) ends with the named
#    error and exit 3, commits no checkpoint past the last finite step and keeps the older ones
#    intact (shardtune-ckpt verify); with on_nonfinite = "skip_step" the updates are dropped and
#    counted until max_nonfinite_skips in a row; inf is refused for a float key;
#  - two runs that share a checkpoint folder (spelled differently) cannot run at once;
#  - a profiler folder that cannot be made and a metrics.jsonl that cannot be written cost a
#    warning, not the run;
#  - examples whose responses truncation cuts off entirely are named by file:line and left out; a
#    run where none keeps a learned token fails before training, naming context_length;
#  - resume = "auto" skips a damaged newest checkpoint for the next older one, deleting nothing;
#  - `shardtune status` from another folder, with a damaged job.toml, with a hostile job-id file;
#  - `shardtune plot` of a run folder named like a gnuplot pipe runs nothing;
#  - an output_dir that starts with '-'; a token file of another user is not trusted;
#  - export-hf that fails half way (a file size limit) leaves no partial folder;
#  - `shardtune-ckpt inspect` escapes control characters of tensor names.
# usage: failure_modes_test.sh SHARDTUNE SOURCE_DIR SHARDTUNE_CKPT
set -u
st=$1 src=$2 ckpt=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
py=/usr/bin/python3
cd "$src" || exit 1  # the example jobs name their data and tokenizer relative to the source tree

run() {  # run OUT RANKS [extra --set ...]: the tiny synthetic job, 12 steps, a checkpoint every 4
  local out=$1 ranks=$2
  shift 2
  "$st" run "$src/configs/tiny-cpu.toml" -n "$ranks" --set "job.output_dir=$out" --set train.max_train_step=12 \
    --set checkpoint.every_steps=4 --set train.run_validation=false --set metrics.log_every_steps=1 "$@" \
    >"$tmp/log" 2>&1
}
latest_step() { readlink "$1/checkpoints/latest" | sed 's/step-0*//'; }

# --- Divergence ---------------------------------------------------------------------------------
"$st" validate "$src/configs/tiny-cpu.toml" --set train.lr=inf >"$tmp/log" 2>&1 && fail "lr = inf was accepted"
grep -q "expected a finite number, got inf" "$tmp/log" || fail "lr = inf: $(cat "$tmp/log")"
"$st" validate "$src/configs/tiny-cpu.toml" --set peft.lora_alpha=inf --set train.weight_decay=inf >"$tmp/log" 2>&1 &&
  fail "lora_alpha = inf was accepted"
[ "$(grep -c "expected a finite number" "$tmp/log")" -eq 2 ] || fail "inf alpha and decay: $(cat "$tmp/log")"

run "$tmp/div" 2 --set train.lr=1e30 --set train.warmup_steps=0 --set checkpoint.every_steps=1 --set checkpoint.keep_last=2
rc=$?
[ "$rc" -eq 3 ] || fail "a diverging run exited $rc, not 3: $(tail -3 "$tmp/log")"
grep -q "training diverged: step [0-9]*: the loss is" "$tmp/div/logs/rank-00000.log" || fail "the divergence is not named"
$py - "$tmp/div" <<'PY' || fail "a checkpoint holds a step past the last finite one"
import json, math, os, sys
out = sys.argv[1]
records = [json.loads(l) for l in open(out + "/metrics.jsonl") if '"step":' in l]
finite = [r["step"] for r in records if r["loss"] is not None and math.isfinite(r["loss"])]
steps = sorted(int(d[5:]) for d in os.listdir(out + "/checkpoints") if d.startswith("step-"))
assert steps, "no checkpoint at all"
assert max(steps) <= max(finite), (steps, finite)
print(f"diverged after step {max(finite)}; checkpoints {steps}")
PY
for c in "$tmp"/div/checkpoints/step-*; do
  "$ckpt" verify "$c" >/dev/null 2>&1 || fail "$c does not verify after the divergence"
done

run "$tmp/skip" 2 --set train.lr=1e30 --set train.warmup_steps=0 --set train.on_nonfinite=skip_step \
  --set train.max_nonfinite_skips=3
rc=$?
[ "$rc" -eq 3 ] || fail "skip_step past max_nonfinite_skips exited $rc, not 3"
grep -q "3 non-finite steps in a row" "$tmp/skip/logs/rank-00000.log" || fail "max_nonfinite_skips is not named"
grep -q '"nonfinite": true' "$tmp/skip/metrics.jsonl" || fail "skipped steps are not marked in metrics.jsonl"
grep -q '"nonfinite_skips": 2' "$tmp/skip/metrics.jsonl" || fail "skipped steps are not counted in metrics.jsonl"

# --- One writer per checkpoint folder -------------------------------------------------------------
# The first run's own Open MPI session directory: its mpirun and the second's run at once (tests/CMakeLists.txt).
OMPI_MCA_orte_tmpdir_base="$tmp/mpi-first" "$st" run "$src/configs/tiny-cpu.toml" -n 2 --set "job.output_dir=$tmp/first" \
  --set train.max_train_step=100000 >"$tmp/first.log" 2>&1 &
first=$!
for _ in $(seq 600); do grep -q "training:" "$tmp/first/logs/rank-00000.log" 2>/dev/null && break; sleep 0.2; done
run "$tmp/second" 2 --set "checkpoint.dir=$tmp/first/./checkpoints/"
rc=$?
[ "$rc" -ne 0 ] || fail "a second run writing into the first run's checkpoint folder exited 0"
grep -q "checkpoints.* is in use by shardtune run" "$tmp/log" || fail "the second writer was not refused by name: $(tail -2 "$tmp/log")"
kill -TERM "$first" 2>/dev/null
wait "$first"

# --- Observability never stops training -----------------------------------------------------------
run "$tmp/prof" 2 --set metrics.use_profiler=true --set metrics.profiler_dir=/dev/null/profiler ||
  fail "an unusable profiler folder stopped the run: $(tail -3 "$tmp/log")"
[ "$(grep -c "training goes on without profiling" "$tmp/prof/logs/rank-00000.log")" -eq 1 ] ||
  fail "the profiler failure was not warned about once"
[ "$(latest_step "$tmp/prof")" = 12 ] || fail "the run with an unusable profiler folder did not finish"
mkdir -p "$tmp/full-disk" && ln -s /dev/full "$tmp/full-disk/metrics.jsonl"
run "$tmp/full-disk" 2 || fail "a metrics.jsonl on a full disk stopped the run: $(tail -3 "$tmp/log")"
[ "$(grep -c "training goes on without metrics.jsonl" "$tmp/full-disk/logs/rank-00000.log")" -eq 1 ] ||
  fail "the metrics failure was not warned about once"
[ "$(latest_step "$tmp/full-disk")" = 12 ] || fail "the run with a full metrics disk did not finish"

# --- Truncation that leaves nothing to learn --------------------------------------------------------
$py - "$src/configs/data/tiny-alpaca.json" "$tmp/long.json" <<'PY'
import json, sys
records = json.load(open(sys.argv[1]))[:40]
for i in (5, 17, 30):
    records[i]["instruction"] = " ".join(["describe the weather in a great many words"] * 30)
with open(sys.argv[2], "w") as f:
    f.write("[\n" + ",\n".join(json.dumps(r) for r in records) + "\n]\n")
PY
alpaca() {  # OUT [--set ...]: the tiny alpaca job on long.json, padding
  local out=$1
  shift
  "$st" run "$src/configs/tiny-alpaca.toml" -n 2 --set "job.output_dir=$out" --set "data.train_file=$tmp/long.json" \
    --set data.val_fraction=0 --set train.batching_strategy=padding --set train.max_train_step=3 \
    --set train.batch_size_training=2 "$@" >"$tmp/log" 2>&1
}
alpaca "$tmp/cut" --set train.context_length=128 || fail "the run with three cut examples failed: $(tail -3 "$tmp/log")"
grep -q "3 of 40 training examples keep no learned token once cut to context_length = 128" "$tmp/log" ||
  fail "the cut examples were not counted: $(grep -m2 -i 'learned\|warn' "$tmp/log")"
grep -q "long.json:7, .*long.json:19, .*long.json:32" "$tmp/log" || fail "the cut examples were not named by line"
grep -q "3 example(s) left out" "$tmp/log" || fail "the cut examples were not left out"
alpaca "$tmp/none" --set train.context_length=8 && fail "a run where every response is cut off exited 0"
grep -q "no training example of .* keeps a learned token: cut to \[train\] context_length = 8" "$tmp/log" ||
  fail "the run without learned tokens did not name context_length: $(grep -m1 -i error "$tmp/log")"
[ -e "$tmp/none/metrics.jsonl" ] && fail "the run without learned tokens trained"

# --- resume = "auto" past a damaged checkpoint --------------------------------------------------------
run "$tmp/fallback" 2 --set checkpoint.keep_last=5 || fail "the fallback run failed"
bad=$tmp/fallback/checkpoints/step-0000012
$py "$src/tests/cli/damage_slice.py" "$bad" >/dev/null
run "$tmp/fallback" 2 --set train.max_train_step=10 --set checkpoint.keep_last=5 || fail "a damaged newest checkpoint stopped the resume: $(tail -3 "$tmp/log")"
grep -q "skipping checkpoint $bad: it does not load" "$tmp/fallback/logs/rank-00000.log" ||
  fail "the damaged checkpoint was not named"
grep -q "resuming at step 8 " "$tmp/fallback/logs/rank-00000.log" || fail "the next older checkpoint was not resumed"
[ -d "$bad" ] && fail "the damaged checkpoint is still in the way of the next start"
ls -d "$bad".damaged-* >/dev/null 2>&1 || fail "the damaged checkpoint was not kept"
for c in 4 8; do ln -sfn /dev/null "$tmp/fallback/checkpoints/step-000000$c/manifest.json"; done
$py "$src/tests/cli/damage_slice.py" "$tmp/fallback/checkpoints/step-0000010" >/dev/null
before=$(ls "$tmp/fallback/checkpoints" | tr '\n' ' ')
n0=$failures
run "$tmp/fallback" 2 --set train.max_train_step=14 --set checkpoint.keep_last=5 && fail "a job whose checkpoints are all damaged exited 0"
grep -q "none of the 3 checkpoint(s) under .* loads, so the job cannot resume; nothing was deleted" "$tmp/log" ||
  fail "all damaged: $(grep -m1 -i 'error\|critical' "$tmp/log")"
[ "$(ls -d "$tmp"/fallback/checkpoints/step-0000010 "$tmp"/fallback/checkpoints/step-000000[48] | wc -l)" -eq 3 ] ||
  fail "damaged checkpoints were moved or deleted when none loaded"
[ "$failures" -eq "$n0" ] || {  # what the start saw and did, rank by rank
  echo "checkpoints before: $before; after: $(ls "$tmp/fallback/checkpoints" | tr '\n' ' ')"
  grep -h "resum\|skipping\|starting fresh\|none of\|committed\|set aside\|exit" "$tmp/log" | cut -c1-400
}

# --- status and plot --------------------------------------------------------------------------------
mkdir -p "$tmp/proj"
(cd "$tmp/proj" && "$st" run "$src/configs/tiny-cpu.toml" -n 2 --set job.output_dir=runs/x --set train.max_train_step=4 \
  --set checkpoint.every_steps=4 >"$tmp/log" 2>&1) || fail "the relative run failed"
(cd / && "$st" status "$tmp/proj/runs/x" >"$tmp/status" 2>&1) || fail "status from / failed"
grep -q "last checkpoint: $tmp/proj/runs/x/checkpoints/step-0000004" "$tmp/status" || fail "status from /: $(cat "$tmp/status")"
# A resolved job file of an older version, with the paths as the user wrote them.
sed -i "s#$tmp/proj/##g" "$tmp/proj/runs/x/job.toml"
(cd / && "$st" status "$tmp/proj/runs/x" >"$tmp/status" 2>&1) || fail "status with relative paths failed"
grep -q "last checkpoint: $tmp/proj/runs/x/checkpoints/step-0000004" "$tmp/status" ||
  fail "status did not resolve relative paths from the run folder: $(cat "$tmp/status")"
echo 'this is = not [toml' >"$tmp/proj/runs/x/job.toml"
printf '1;touch %s/pwned\n' "$tmp" >"$tmp/proj/runs/x/slurm-job-ids"
"$st" status "$tmp/proj/runs/x" >"$tmp/status" 2>&1 || fail "status with a damaged job.toml failed: $(cat "$tmp/status")"
grep -q "job.toml cannot be read" "$tmp/status" || fail "the damaged job.toml is not reported"
grep -q "last step: *4 " "$tmp/status" || fail "status said nothing more after a damaged job.toml: $(cat "$tmp/status")"
grep -q "not a Slurm job id" "$tmp/status" || fail "the hostile job id was not refused"
[ -e "$tmp/pwned" ] && fail "the job id file ran a command"
pipe="|touch pwned2;x"
cp -r "$tmp/proj/runs/x" "$tmp/$pipe"
(cd "$tmp" && "$st" plot "$pipe" >"$tmp/log" 2>&1) || fail "plot of an odd folder name failed: $(cat "$tmp/log")"
[ -e "$tmp/pwned2" ] && fail "gnuplot ran the folder name as a command"
[ -s "$tmp/$pipe/plots/loss.png" ] || fail "plot did not draw into the odd folder"

# --- Odd paths and other users' files ---------------------------------------------------------------
(cd "$tmp" && "$st" run "$src/configs/tiny-cpu.toml" -n 2 --set job.output_dir=-dash --set train.max_train_step=2 \
  >"$tmp/log" 2>&1) || fail "an output_dir that starts with '-' failed: $(tail -3 "$tmp/log")"
mkdir -p "$tmp/data" && cp "$src/configs/data/tiny-alpaca.json" "$tmp/data/train.json"
shared() { "$st" run "$src/configs/tiny-alpaca.toml" -n 2 --set "job.output_dir=$1" --set "data.train_file=$tmp/data/train.json" \
  --set train.max_train_step=1 >"$tmp/log" 2>&1; }
shared "$tmp/t1" || fail "the token cache run failed"
tokens=$(ls "$tmp"/data/.train.json.training.*.tokens)
if chown 65534 "$tokens" 2>/dev/null; then  # only root can give a file away
  shared "$tmp/t2" || fail "the run after another user's token file failed"
  grep -q "ignoring the token file $tokens: it belongs to user 65534" "$tmp/log" || fail "another user's token file was trusted"
  grep -q "tokens cached by an earlier run" "$tmp/log" && fail "another user's tokens were trained on"
fi

# --- A tool's output folder appears whole or not at all -----------------------------------------------
# A file size limit stands in for a full disk: the export fails half way and leaves nothing, so the
# rerun is not refused as a folder that is not empty.
(ulimit -f 64; trap '' XFSZ; "$ckpt" export-hf "$tmp/prof/checkpoints/step-0000012" "$tmp/hf" >"$tmp/log" 2>&1) &&
  fail "export-hf past a file size limit exited 0"
ls -d "$tmp"/hf* >/dev/null 2>&1 && fail "a failed export-hf left files behind: $(ls -d "$tmp"/hf*)"
"$ckpt" export-hf "$tmp/prof/checkpoints/step-0000012" "$tmp/hf" >"$tmp/log" 2>&1 ||
  fail "export-hf after a failed one: $(cat "$tmp/log")"
[ -s "$tmp/hf/config.json" ] || fail "export-hf wrote no config.json"

# --- inspect escapes what a manifest names ----------------------------------------------------------
c=$tmp/prof/checkpoints/step-0000012
$py - "$c/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["version"] = 2
m.pop("checksum", None); m.pop("crc32", None)
for k in [k for k in m if k.startswith("manifest_crc")]: m.pop(k)
name = "model.norm.weight"
m["tensors"]["model.norm.weight\u001b[2J\u0007"] = m["tensors"].pop(name)
for s in m["slices"]:
    if s["tensor"] == name:
        s["tensor"] = "model.norm.weight\u001b[2J\u0007"
json.dump(m, open(sys.argv[1], "w"))
PY
"$ckpt" inspect "$c" >"$tmp/inspect" 2>&1 || fail "inspect of a renamed tensor failed: $(cat "$tmp/inspect")"
grep -q $'\x1b' "$tmp/inspect" && fail "inspect printed an escape character"
grep -q 'model.norm.weight\\u001b\[2J\\u0007' "$tmp/inspect" || fail "inspect did not show the name escaped: $(cat "$tmp/inspect")"

[ "$failures" -eq 0 ] && echo "PASS" || { echo "$failures failure(s)"; exit 1; }
