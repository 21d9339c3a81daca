#!/usr/bin/env bash
# The command line as a user meets it: example jobs validate, bad jobs fail with exit code 2 and
# run nothing, and `shardtune run` starts real MPI ranks that log per rank.
# usage: cli_test.sh SHARDTUNE SOURCE_DIR MAKE_MODEL
set -u
st=$1 src=$2 make_model=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for f in "$src"/configs/*.toml; do
  "$st" validate "$f" >"$tmp/out" 2>"$tmp/err" || fail "validate $f: $(cat "$tmp/err")"
  # The resolved job is itself a valid job file that resolves to the same text.
  "$st" validate "$tmp/out" >"$tmp/again" 2>/dev/null || fail "resolved $f does not validate"
  cmp -s "$tmp/out" "$tmp/again" || fail "resolving $f twice changes it"
done

for f in "$src"/tests/fixtures/jobs/bad/*.toml; do
  "$st" validate "$f" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ "$rc" -eq 2 ] || fail "validate $f exited $rc, expected 2"
  [ -s "$tmp/out" ] && fail "validate $f printed a resolved job"
  grep -q "nothing was run" "$tmp/err" || fail "validate $f: no summary line"
  grep -q "$(basename "$f")" "$tmp/err" || fail "validate $f: the error does not name the file"
done

# A bad override is caught before mpirun starts.
"$st" run "$src/configs/tiny-cpu.toml" --set train.lr=fast --set "job.output_dir=$tmp/never" 2>"$tmp/err"
[ $? -eq 2 ] || fail "run with a bad --set did not exit 2"
grep -q "\-\-set train.lr=fast: error: train.lr" "$tmp/err" || fail "bad --set not reported: $(cat "$tmp/err")"
[ -e "$tmp/never" ] && fail "a failed validation created the output directory"

# HYBRID_SHARD with a shard group that does not divide the local world.
"$st" run "$src/configs/tiny-cpu.toml" -n 3 --set fsdp.sharding_strategy=HYBRID_SHARD \
  --set fsdp.hsdp_shard_size=2 --set "job.output_dir=$tmp/hsdp3" 2>"$tmp/err"
[ $? -eq 2 ] || fail "HSDP 2 on 3 ranks was not rejected"
grep -q "shard group 2 vs world 3" "$tmp/err" || fail "HSDP error lacks the values: $(cat "$tmp/err")"

# A job that asks for a GPU on a machine without one fails before training, saying why: never a
# silent CPU run.
if ! nvidia-smi -L >/dev/null 2>&1; then
  "$st" run "$src/configs/tiny-cpu.toml" -n 2 --set launch.device=cuda --set "job.output_dir=$tmp/cuda" \
    --set train.max_train_step=5 >"$tmp/log" 2>&1
  rc=$?
  [ "$rc" -ne 0 ] || fail "device = cuda without a GPU exited 0"
  grep -q 'device = "cuda" but this rank sees no GPU' "$tmp/log" || fail "no clear message: $(tail -5 "$tmp/log")"
  [ -e "$tmp/cuda/metrics.jsonl" ] && fail "device = cuda without a GPU trained"
  ls "$tmp"/cuda/checkpoints/step-* >/dev/null 2>&1 && fail "device = cuda without a GPU wrote checkpoints"
fi

# A real local run: 2 ranks train, each logging to its own file. Started from an environment
# without GLIBC_TUNABLES, the ranks get huge pages for malloc from the launcher.
out="$tmp/run2"
if env -u GLIBC_TUNABLES "$st" run "$src/configs/tiny-cpu.toml" -n 2 --set "job.output_dir=$out" --set train.max_train_step=40 \
     >"$tmp/log" 2>&1; then
  for r in 0 1; do
    f=$(printf '%s/logs/rank-%05d.log' "$out" "$r")
    [ -s "$f" ] || fail "missing $f"
    grep -q "\[rank $r/2 node 0 host " "$f" || fail "$f lacks rank/node/host prefixes"
    grep -q "preflight passed" "$f" || fail "$f: no preflight result"
    grep -q "malloc: tcmalloc (gperftools)" "$f" || fail "$f: the rank's malloc is not tcmalloc: $(grep "malloc:" "$f")"
    grep -q "done: 40 steps" "$f" || fail "$f: training did not finish its 40 steps"
  done
  "$st" validate "$out/job.toml" >/dev/null 2>&1 || fail "the resolved job written for the ranks does not validate"
else
  fail "shardtune run -n 2 failed: $(tail -20 "$tmp/log")"
fi

# One writer per output directory. A directory whose lock another process holds refuses `run`
# and `submit`, naming the holder, and nothing in it changes.
locked="$tmp/locked"
mkdir -p "$locked"
echo "the job of another writer" >"$locked/job.toml"
echo "a test holder" >"$locked/.shardtune.lock"
(exec 9<>"$locked/.shardtune.lock" && flock 9 && exec sleep 120) &
holder=$!
deadline=$((SECONDS + 30))
while flock -n "$locked/.shardtune.lock" true && ((SECONDS < deadline)); do sleep 0.2; done
for cmd in run submit; do
  "$st" "$cmd" "$src/configs/tiny-cpu.toml" --set "job.output_dir=$locked" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ "$rc" -ne 0 ] || fail "$cmd into a locked output directory exited 0"
  grep -q "$locked is in use by a test holder" "$tmp/err" || fail "$cmd into a locked directory: $(cat "$tmp/err")"
done
grep -qx "the job of another writer" "$locked/job.toml" || fail "a refused writer changed job.toml"
[ -e "$locked/shardtune.sbatch" ] && fail "a refused submit wrote its script"
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

# A run holds the lock while its ranks train (mpirun inherits it), and frees it when they end.
held="$tmp/held"
# (Its own Open MPI session directory: its mpirun and the second's run at once, tests/CMakeLists.txt.)
OMPI_MCA_orte_tmpdir_base="$tmp/mpi-first" "$st" run "$src/configs/tiny-cpu.toml" -n 2 --set "job.output_dir=$held" \
  --set train.max_train_step=100000 \
  >"$tmp/first.log" 2>&1 &
first=$!
deadline=$((SECONDS + 180))
until [ -s "$held/metrics.jsonl" ] || ((SECONDS > deadline)); do sleep 0.5; done
[ -s "$held/metrics.jsonl" ] || fail "the first run did not start training: $(tail -5 "$tmp/first.log")"
"$st" run "$src/configs/tiny-cpu.toml" -n 2 --set "job.output_dir=$held" >"$tmp/out" 2>"$tmp/err"
[ $? -ne 0 ] || fail "a second run into a directory in use exited 0"
grep -q "$held is in use by shardtune run on .* pid $first, since " "$tmp/err" ||
  fail "the second run does not name the first: $(cat "$tmp/err")"
kill -TERM "$first"
wait "$first"
flock -n "$held/.shardtune.lock" true || fail "the lock outlived the run"

# Deterministic: the same seed and world size give bit-identical losses, whatever the environment
# asks of glibc's malloc (this run's turns its huge pages off; the ranks allocate with tcmalloc).
if GLIBC_TUNABLES=glibc.malloc.hugetlb=0 "$st" run "$src/configs/tiny-cpu.toml" -n 2 --set "job.output_dir=$tmp/run2b" \
     --set train.max_train_step=40 >"$tmp/log" 2>&1; then
  strip() { sed 's/, "step_seconds".*//' "$1"; }
  [ "$(grep -c '"step":' "$out/metrics.jsonl")" -eq 40 ] || fail "metrics.jsonl does not have one line per step"
  [ "$(strip "$out/metrics.jsonl")" = "$(strip "$tmp/run2b/metrics.jsonl")" ] || fail "two identical runs gave different losses"
else
  fail "the second run failed: $(tail -20 "$tmp/log")"
fi

# HSDP at world size 4 with shard groups of 2.
if "$st" run "$src/configs/tiny-cpu.toml" -n 4 --set fsdp.sharding_strategy=HYBRID_SHARD \
     --set fsdp.hsdp_shard_size=2 --set "job.output_dir=$tmp/hsdp4" --set train.max_train_step=20 >"$tmp/log" 2>&1; then
  grep -q "HYBRID_SHARD: 2 shard group(s) of 2 rank(s), replicated 2x" "$tmp/log" || fail "HSDP layout not logged"
else
  fail "HSDP run failed: $(tail -20 "$tmp/log")"
fi

# A Hugging Face folder, loaded whole on every rank and streamed into shards: the same weights,
# so the same first losses.
"$make_model" "$tmp/model" --layers 3 --dtype bf16 >/dev/null || fail "shardtune-make-model failed"
for mode in whole streamed; do
  low_cpu=false
  [ "$mode" = streamed ] && low_cpu=true
  "$st" run "$src/configs/tiny-cpu.toml" -n 3 --set model.preset=none --set "model.path=$tmp/model" \
    --set model.init=pretrained --set fsdp.low_cpu_fsdp=$low_cpu --set train.max_train_step=5 \
    --set "job.output_dir=$tmp/$mode" >"$tmp/log" 2>&1 || fail "the $mode run failed: $(tail -20 "$tmp/log")"
done
grep -q "streamed the weights into shards" "$tmp/streamed/logs/rank-00000.log" || fail "the streamed run did not stream"
grep -q "streamed the weights" "$tmp/whole/logs/rank-00000.log" && fail "the whole-model run streamed"
strip() { sed 's/, "step_seconds".*//' "$1"; }
[ -s "$tmp/whole/metrics.jsonl" ] && [ "$(strip "$tmp/whole/metrics.jsonl")" = "$(strip "$tmp/streamed/metrics.jsonl")" ] \
  || fail "streamed and whole-model loading gave different losses"

# init = "random" needs only the folder's config.json: no weight file, no tokenizer (synthetic data),
# whole and streamed, full fine-tuning and LoRA.
mkdir -p "$tmp/configonly" && cp "$tmp/model/config.json" "$tmp/configonly/"
for how in "fsdp.low_cpu_fsdp=false" "fsdp.low_cpu_fsdp=true" "peft.method=lora"; do
  "$st" run "$src/configs/tiny-cpu.toml" -n 2 --set model.preset=none --set "model.path=$tmp/configonly" \
    --set model.init=random --set train.max_train_step=2 --set "$how" --set "job.output_dir=$tmp/configonly-${how//[.=]/-}" \
    >"$tmp/log" 2>&1 || fail "init = random on a folder with config.json alone ($how): $(grep -m2 -i error "$tmp/log")"
done

# Bounds that need the model, checked before anything runs: 50 frozen blocks of a 3-block model
# (validate reads the folder's config.json; a rank checks again where the login node cannot).
"$st" validate "$src/configs/tiny-cpu.toml" --set model.preset=none --set "model.path=$tmp/model" \
  --set model.init=pretrained --set train.freeze_layers=true --set train.num_freeze_layers=50 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || fail "num_freeze_layers = 50 of 3 blocks passed validate"
grep -q "train.num_freeze_layers: num_freeze_layers = 50 but the model has 3 blocks (num_hidden_layers in $tmp/model/config.json)" \
  "$tmp/err" || fail "num_freeze_layers: $(cat "$tmp/err")"
mkdir -p "$tmp/freeze50"
"$st" validate "$src/configs/tiny-cpu.toml" --set "job.output_dir=$tmp/freeze50" --set train.freeze_layers=true --set slurm.ntasks_per_node=2 \
  >"$tmp/freeze50/job.toml" 2>/dev/null || fail "validate of a freeze_layers job"
sed -i 's/^num_freeze_layers = .*/num_freeze_layers = 50/' "$tmp/freeze50/job.toml"
mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader,tcp --mca btl_tcp_if_include lo \
  --mca oob_tcp_if_include lo "$(dirname "$st")/shardtune-rank" "$tmp/freeze50/job.toml" >"$tmp/log" 2>&1
[ $? -eq 2 ] || fail "a rank trained a job freezing 50 of 2 blocks: $(tail -3 "$tmp/log")"
grep -q 'num_freeze_layers = 50 but the model has 2 blocks (num_hidden_layers in preset "tiny")' "$tmp/log" ||
  fail "the rank does not name num_freeze_layers: $(tail -3 "$tmp/log")"
# fp16 needs a GPU: refused by validate for device = "cpu", and by the ranks that find none.
"$st" validate "$src/configs/tiny-cpu.toml" --set train.mixed_precision=true --set train.use_fp16=true >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "train.use_fp16: use_fp16 = true needs a GPU" "$tmp/err" || fail "fp16 on the CPU: $(cat "$tmp/err")"
if [ -z "$(ls /dev/nvidia[0-9]* 2>/dev/null)" ]; then
  "$st" run "$src/configs/tiny-cpu.toml" -n 2 --set launch.device=auto --set train.mixed_precision=true \
    --set train.use_fp16=true --set "job.output_dir=$tmp/fp16auto" >"$tmp/log" 2>&1 && fail "fp16 trained on the CPU"
  grep -q "use_fp16 = true needs a GPU, and this rank trains on the CPU" "$tmp/log" || fail "fp16 under auto: $(tail -3 "$tmp/log")"
  grep -q '"step":' "$tmp/fp16auto/metrics.jsonl" 2>/dev/null && fail "fp16 under auto took a step"
fi

if [ "$failures" -eq 0 ]; then echo "cli_test: all checks passed"; else echo "cli_test: $failures failure(s)"; fi
[ "$failures" -eq 0 ]
