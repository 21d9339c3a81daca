#!/usr/bin/env bash
# Sharded checkpoints end to end, through `shardtune run`:
#  - 20 steps straight and 10 steps + checkpoint + a new job resuming for 10 give identical losses
#    and bitwise identical final parameters and optimizer state (same world size);
#  - a checkpoint saved at 4 ranks resumes at 2 and at 3 ranks, continuing the same data order,
#    with losses within 1e-5 of the uninterrupted run;
#  - files are plain HDF5 that h5py reads, with checksums that are zlib's CRC-32;
#  - under HSDP every replica writes its part, the same checkpoint as one replica writing alone,
#    and a resume that shares the parts between replicas continues as the straight run;
#  - a corrupt slice is refused with the file named; uncommitted directories are never resumed;
#  - an explicit resume path is used by the first start only, not again by a requeued one;
#  - [checkpoint] async: a checkpoint written in the background equals the blocking one of the same
#    step, sharded and full; the copy's size is the planner's; a kill at every phase of a background
#    save leaves the previous checkpoint to resume;
#  - diff compares the training state and the optimizer moments too; export-hf keeps the
#    checkpoint's dtype unless asked; import-hf refuses integer (quantised) tensors as training
#    does, and ignores RoPE frequency tensors as transformers does, on every path.
# Each start costs seconds of loading on every rank, so: runs that only need a checkpoint to begin
# from copy the resumed job's step-10 one instead of training to it; runs whose world size is not
# the point use 2 ranks; independent 2-rank jobs run two at a time.
# usage: checkpoint_test.sh SHARDTUNE SOURCE_DIR SHARDTUNE_CKPT
set -u
st=$1 src=$2 ckpt=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
py=/usr/bin/python3

# Global batch 12 at every world size; StepLR keeps the learning rate independent of the run length.
# The output goes to $log: $tmp/log, or a job's own where jobs run side by side (see bg).
log=$tmp/log
run() {  # run OUT RANKS BATCH STEPS [extra --set ...]
  local out=$1 ranks=$2 batch=$3 steps=$4
  shift 4
  "$st" run "$src/configs/tiny-cpu.toml" -n "$ranks" --set "job.output_dir=$out" --set train.batch_size_training="$batch" \
    --set train.max_train_step="$steps" --set train.lr_scheduler=step --set train.run_validation=false \
    --set fsdp.save_optimizer=true --set checkpoint.every_steps=10 "$@" >"$log" 2>&1
}
# seed OUT: a new job directory whose newest checkpoint is the resumed job's step 10 (4 ranks).
seed() {
  mkdir -p "$1" && cp -r "$tmp/resumed/checkpoints" "$1/"
  rm -rf "$1/checkpoints/step-0000020"
  ln -sfn step-0000010 "$1/checkpoints/latest"
}
# bg FUNCTION ARGS...: runs it in the background, at most two at a time (jobs of 2 ranks: no more
# processes than one 4-rank job), its output in a log of its own ($log); its failures come back as
# its exit status. join: waits for them all.
running=0 started=0
bg() {
  if [ "$running" -ge 2 ]; then
    wait -n
    failures=$((failures + $?)) running=$((running - 1))
  fi
  started=$((started + 1))
  (
    failures=0 log="$tmp/log-$started"
    # Its mpiruns' own Open MPI session directory: two mpiruns ending and starting at once race on a
    # shared one (tests/CMakeLists.txt).
    export OMPI_MCA_orte_tmpdir_base="$tmp/mpi-session-$started"
    "$@"
    exit $((failures > 255 ? 255 : failures))
  ) &
  running=$((running + 1))
}
join() {
  while [ "$running" -gt 0 ]; do
    wait -n
    failures=$((failures + $?)) running=$((running - 1))
  done
}
losses() { grep '"step":' "$1/metrics.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/'; }
slices() {
  $py - "$1" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for s in sorted(m["slices"], key=lambda s: (s["kind"], s["tensor"], s["offset"])):
    print(s["kind"], s["tensor"], s["offset"], s["crc32_blocks"])
PY
}
full_equals_sharded() {  # FULL_DIR SHARDED_DIR: every tensor of the full file is the slices put together
  $py - "$1" "$2" <<'PY' || fail "full checkpoint $1 and sharded $2 disagree"
import json, sys, h5py, numpy
full, sharded = sys.argv[1], sys.argv[2]
m = json.load(open(sharded + "/manifest.json"))
with h5py.File(full + "/model.h5", "r") as f:
    for name, t in m["tensors"].items():
        for kind in ("param", "exp_avg", "exp_avg_sq"):
            a = f[f"/{kind}/{name}"][()]
            assert list(a.shape) == t["shape"], (name, a.shape)
            flat = numpy.zeros(a.size, numpy.float32)
            for s in m["slices"]:
                if s["kind"] == kind and s["tensor"] == name:
                    with h5py.File(f"{sharded}/{s['file']}", "r") as r:
                        o = s.get("dataset_offset", 0)  # where the slice starts in its dataset
                        flat[s["offset"]:s["offset"] + s["length"]] = r[f"/{kind}/{s['dataset']}"][o:o + s["length"]]
            assert numpy.array_equal(flat, a.reshape(-1)), (kind, name)
print("full checkpoint equals the sharded one,", len(m["tensors"]), "tensors")
PY
}

run "$tmp/straight" 4 3 20 || fail "straight run: $(tail -5 "$tmp/log")"
# Both saves (steps 10 and 20) took their checksums during the update before them; verify and the
# resumes below read them back.
taken=$(grep -c "checkpoint committed: .*(saved in [0-9.]* s; 12 tensors' checksums taken during the update" \
  "$tmp/straight/logs/rank-00000.log")
[ "$taken" = 2 ] || fail "$taken of 2 saves took their checksums during the update"
# Each rank wrote most of its shards straight from memory: all but the partial pages at the ends of
# each of its 12 shards (349 KiB in all here; 0.86-0.88 went in place). A shard whose dataset did
# not start at its memory's place within a page would be copied whole.
for r in 0 1 2 3; do
  grep "rank-0000$r.h5: .* bytes written in place" "$tmp/straight/logs/rank-0000$r.log" | tail -1 |
    awk '{ for (i = 1; i < NF; i++) if ($(i + 1) == "of") { done = $i; total = $(i + 4) } }
         END { exit !(total > 0 && done >= 0.8 * total) }' ||
    fail "rank $r wrote less than 0.8 of its shards in place: $(grep "written in place" "$tmp/straight/logs/rank-0000$r.log" | tail -1)"
done
run "$tmp/resumed" 4 3 10 || fail "first half: $(tail -5 "$tmp/log")"
run "$tmp/resumed" 4 3 20 || fail "second half: $(tail -5 "$tmp/log")"
grep -q "resuming at step 10" "$tmp/resumed/logs/rank-00000.log" || fail "the second half did not resume"

# An explicit resume path is where the job's first start begins; a requeued start (Slurm's restart
# count above 0) continues from the job's own newest checkpoint instead of retraining from it. The
# first start runs at 3 ranks: its losses are also the 3-rank case of the other world sizes below.
once="$tmp/resume-once"
run "$once" 3 4 20 --set "checkpoint.resume=$tmp/resumed/checkpoints/step-0000010" ||
  fail "resume from an explicit path: $(tail -5 "$tmp/log")"
grep -q "resuming at step 10" "$once/logs/rank-00000.log" || fail "the explicit path was not resumed"
cp "$once/metrics.jsonl" "$tmp/ws3.jsonl"
SLURM_RESTART_COUNT=1 run "$once" 3 4 25 --set "checkpoint.resume=$tmp/resumed/checkpoints/step-0000010" ||
  fail "requeued start: $(tail -5 "$tmp/log")"
grep -q "continuing from the run's own checkpoint $once/checkpoints/step-0000020" "$once/logs/rank-00000.log" ||
  fail "a requeued start went back to the explicit resume path"
grep -q "resuming at step 20" "$once/logs/rank-00000.log" || fail "the requeued start did not resume at step 20"
[ "$(losses "$tmp/straight")" = "$(losses "$tmp/resumed")" ] || fail "resumed losses differ from the straight run's"
[ "$(losses "$tmp/straight" | wc -l)" -eq 20 ] || fail "expected 20 losses"
a=$(slices "$tmp/straight/checkpoints/step-0000020/manifest.json")
b=$(slices "$tmp/resumed/checkpoints/step-0000020/manifest.json")
[ "$(echo "$a" | grep -c '^exp_avg_sq ')" -gt 10 ] || fail "the final checkpoint lists no optimizer slices"
[ -n "$a" ] && [ "$a" = "$b" ] || fail "final parameters or moments differ"

# [checkpoint] async: step 10's save is copied and written in the background while step 11 trains,
# and committed at a later boundary. Its copy is held back 1 s (SHARDTUNE_TEST_SAVE_DELAY_S), so
# step 11's optimizer update must wait for it: a copy taken after the update would differ. Same
# shapes as the straight run, so its checkpoints and losses must be the straight run's, bit for bit.
SHARDTUNE_TEST_SAVE_DELAY_S=copy:1 run "$tmp/async" 4 3 20 --set checkpoint.async=true ||
  fail "async run: $(tail -5 "$tmp/log")"
grep -q "checkpoint committed: $tmp/async/checkpoints/step-0000010 (written in the background;" \
  "$tmp/async/logs/rank-00000.log" || fail "step 10 was not written in the background"
[ "$(losses "$tmp/straight")" = "$(losses "$tmp/async")" ] || fail "the async run's losses differ from the straight run's"
for step in 10 20; do
  a=$(slices "$tmp/straight/checkpoints/step-00000$step/manifest.json")
  b=$(slices "$tmp/async/checkpoints/step-00000$step/manifest.json")
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "the async checkpoint of step $step differs from the blocking one"
done
# What each rank wrote is the planner's checkpoint_state_bytes (shards and both moments). On the CPU
# the shards are written as they are: no copy in host memory, none planned; on a GPU the copy is
# that size.
"$st" plan "$src/configs/tiny-cpu.toml" --json --set checkpoint.async=true --set fsdp.save_optimizer=true \
  >"$tmp/plan.json" 2>&1 || fail "plan: $(cat "$tmp/plan.json")"
"$st" plan "$src/configs/tiny-cpu.toml" --json --set checkpoint.async=true --set fsdp.save_optimizer=true \
  --set launch.device=cuda --set slurm.gpus_per_node=4 >"$tmp/plan-gpu.json" 2>&1 || fail "GPU plan: $(cat "$tmp/plan-gpu.json")"
$py - "$tmp/plan.json" "$tmp/plan-gpu.json" "$tmp"/async/logs/rank-0000*.log <<'PY' || fail "the planner's checkpoint state is not what the ranks wrote"
import json, re, sys
plan, gpu = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
state = plan["checkpoint_state_bytes"]
logs = [open(path).read() for path in sys.argv[3:]]
wrote = [int(m.group(1)) for text in logs for m in re.finditer(r"this rank's state \([0-9.]+ MiB, ([0-9]+) bytes\) is written \(the next optimizer update waits", text)]
assert len(wrote) == 4, wrote
worst = max(abs(w - state) / state for w in wrote)
print(f"async: {max(wrote)} bytes written per rank at most, planned {state:.0f} (worst difference {worst:.2e})")
assert worst < 0.01, worst  # shards are padded to the world size: a few elements each
assert plan["checkpoint_copy_bytes"] == 0 and "checkpoint copy" not in plan["parts_bytes"], plan
assert gpu["checkpoint_copy_bytes"] == gpu["checkpoint_state_bytes"] == state, gpu
PY
# Full: the writers put their pieces into model.h5 from the copy, in the background (held back 1 s
# while step 11 trains); the file is the straight run's step-10 slices put together.
SHARDTUNE_TEST_SAVE_DELAY_S=write:1 run "$tmp/asyncfull" 4 3 12 --set checkpoint.async=true --set fsdp.checkpoint_type=full ||
  fail "async full run: $(tail -5 "$tmp/log")"
grep -q "checkpoint committed: $tmp/asyncfull/checkpoints/step-0000010 (written in the background;" \
  "$tmp/asyncfull/logs/rank-00000.log" || fail "the full step-10 checkpoint was not written in the background"
full_equals_sharded "$tmp/asyncfull/checkpoints/step-0000010" "$tmp/straight/checkpoints/step-0000010"

# Other world sizes: the same data order, losses within 1e-5. The world sizes split the products
# differently, so the losses round differently: fsdp_equivalence_test holds each split's fp32 loss
# within 64 u of the float64 result (measured: 5 u), so two runs differ by at most 128 u = 7.6e-6.
# 3 ranks (global batch 4 x 3) is the explicit resume above; 2 ranks (6 x 2) resumes here.
seed "$tmp/ws2"
run "$tmp/ws2" 2 6 20 || fail "resume at 2 ranks: $(tail -5 "$tmp/log")"
cp "$tmp/ws2/metrics.jsonl" "$tmp/ws2.jsonl"
for ranks in 2 3; do
  $py - "$tmp/straight/metrics.jsonl" "$tmp/ws$ranks.jsonl" <<'PY' || fail "losses at $ranks ranks drift from the uninterrupted run"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"step":' in l][10:]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"step":' in l]
assert len(b) == 10, len(b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"resumed at another world size: worst relative loss difference {worst:.2e}")
sys.exit(0 if worst < 1e-5 else 1)
PY
done

# Another global batch: the same 3 samples per rank at 2 and 3 ranks (global batch 6 and 9
# instead of 12). The global order continues at the sample the checkpoint stopped at, with
# nothing skipped or repeated.
for ranks in 2 3; do
  out="$tmp/gb$ranks"
  seed "$out"
  run "$out" "$ranks" 3 20 || fail "resume at $ranks ranks, batch 3: $(tail -5 "$tmp/log")"
  $py - "$tmp/resumed/metrics.jsonl" "$out/metrics.jsonl" "$ranks" <<'PY' || fail "the global order did not continue at $ranks ranks"
import json, sys
before = [json.loads(l)["samples"] for l in open(sys.argv[1]) if '"step":' in l][:10]
after = [json.loads(l)["samples"] for l in open(sys.argv[2]) if '"step":' in l]
width = 3 * int(sys.argv[3])
ranges = before + after
assert before[-1][1] == 120 and after[0][0] == 120, (before[-1], after[0])
assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), "a gap or an overlap in the global order"
# Whole steps of the new batch, and a short last one at the end (sample 240: 20 steps of 12).
assert all(b - a == width for a, b in after[:-1]), after
assert after[-1][1] == 240 and after[-1][1] - after[-1][0] <= width, after
print(f"resumed at {sys.argv[3]} ranks: samples {after[0][0]}..{after[-1][1]} follow 0..120 in steps of {width}")
PY
done

# Standard HDF5, real CRC-32: h5py reads a slice, zlib checks it against the manifest.
$py - "$tmp/straight/checkpoints/step-0000020" <<'PY' || fail "h5py could not read the checkpoint back"
import json, sys, zlib, h5py, numpy
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
s = next(s for s in m["slices"] if s["kind"] == "param" and s["tensor"] == "model.norm.weight")
with h5py.File(f"{d}/{s['file']}", "r") as f:
    o = s.get("dataset_offset", 0)  # a rank file's dataset holds its whole shard: the slice starts here
    a = f[f"/param/{s['dataset']}"][o:o + s["length"]]
assert a.dtype == numpy.float32 and a.shape == (s["length"],), (a.dtype, a.shape)
block = m["crc32_block"]  # a CRC-32 per block of this many elements
assert [zlib.crc32(a[i:i + block].tobytes()) for i in range(0, len(a), block)] == s["crc32_blocks"], "checksum"
print("h5py read", s["dataset"], "from", s["file"], "checksum ok")
PY

# checkpoint_type = "full": one file of whole tensors that h5py reads as arrays of their shape,
# equal to the sharded checkpoint's slices put together, and resumable at another world size. The
# full runs stop at step 10 (the straight run's step 10 is the sharded twin): their length is not the point.
run "$tmp/full" 4 3 10 --set fsdp.checkpoint_type=full || fail "full checkpoint run: $(tail -5 "$tmp/log")"
[ "$(ls "$tmp/full/checkpoints/step-0000010")" = "$(printf 'manifest.json\nmodel.h5')" ] || fail "a full checkpoint is one file"
full_equals_sharded "$tmp/full/checkpoints/step-0000010" "$tmp/straight/checkpoints/step-0000010"
# HSDP (2 replicas of shard groups of 2): each replica writes half of each shard, so every rank
# writes a quarter of the checkpoint, sharded or full; the checkpoint holds bit for bit what the
# replica of rank 0 alone writes ([checkpoint] fully_parallel = false: two files), read back by h5py;
# and a resume, whose replicas read half each and share it, continues as the run that never stopped.
hsdp=(--set fsdp.sharding_strategy=HYBRID_SHARD --set fsdp.hsdp_shard_size=2)
run "$tmp/hsdp" 4 3 10 "${hsdp[@]}" || fail "HSDP run: $(tail -5 "$tmp/log")"
run "$tmp/hsdpone" 4 3 10 "${hsdp[@]}" --set checkpoint.fully_parallel=false || fail "HSDP run, one replica writing: $(tail -5 "$tmp/log")"
run "$tmp/hsdpfull" 4 3 10 "${hsdp[@]}" --set fsdp.checkpoint_type=full || fail "HSDP full run: $(tail -5 "$tmp/log")"
full_equals_sharded "$tmp/hsdpfull/checkpoints/step-0000010" "$tmp/hsdp/checkpoints/step-0000010"
full_equals_sharded "$tmp/hsdpfull/checkpoints/step-0000010" "$tmp/hsdpone/checkpoints/step-0000010"
$py - "$tmp/hsdp/checkpoints/step-0000010" "$tmp/hsdpone/checkpoints/step-0000010" <<'PY' || fail "HSDP writers do not share the checkpoint evenly"
import json, math, sys
for ckpt, files in ((sys.argv[1], 4), (sys.argv[2], 2)):
    m = json.load(open(ckpt + "/manifest.json"))
    written = {}
    for s in m["slices"]:
        written[s["file"]] = written.get(s["file"], 0) + 4 * s["length"]
    total = sum(written.values())
    assert total == 3 * 4 * sum(math.prod(t["shape"]) for t in m["tensors"].values()), total
    assert sorted(written) == [f"rank-{r:05d}.h5" for r in range(files)], sorted(written)
    most = max(written.values())
    # Each rank's share, but an element a tensor and kind (padding, the parts of an odd shard).
    assert most <= total / files + 3 * 4 * len(m["tensors"]), (ckpt, most, total)
    print(f"{files} writers: the largest wrote {most / total:.3f} of the checkpoint ({total} bytes of state)")
PY
# The resume: steps 11-12 as the straight run's.
run "$tmp/hsdp" 4 3 12 "${hsdp[@]}" || fail "HSDP resume: $(tail -5 "$tmp/log")"
grep -q "resuming at step 10" "$tmp/hsdp/logs/rank-00000.log" || fail "the HSDP run did not resume"
run "$tmp/hsdpstraight" 4 3 12 "${hsdp[@]}" --set checkpoint.every_steps=0 || fail "HSDP straight run: $(tail -5 "$tmp/log")"
[[ "$(losses "$tmp/hsdp" | tail -2)" == "$(losses "$tmp/hsdpstraight" | tail -2)" ]] ||
  fail "the resumed HSDP run's steps 11-12 differ from the straight run's"
mkdir -p "$tmp/fullws2" && cp -r "$tmp/full/checkpoints" "$tmp/fullws2/"
run "$tmp/fullws2" 2 6 20 --set fsdp.checkpoint_type=full || fail "resume from a full checkpoint: $(tail -5 "$tmp/log")"
$py - "$tmp/straight/metrics.jsonl" "$tmp/fullws2/metrics.jsonl" <<'PY' || fail "losses after resuming from a full checkpoint drift"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"step":' in l][10:]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"step":' in l]
sys.exit(0 if len(b) == 10 and max(abs(x - y) / abs(x) for x, y in zip(a, b)) < 1e-5 else 1)
PY

# Conversions: consolidate equals the sharded original; export-hf writes safetensors that a plain
# reader (header JSON + numpy) finds equal to the full checkpoint; import-hf of that comes back
# identical; diff tells equal from different.
c20="$tmp/straight/checkpoints/step-0000020"
"$ckpt" consolidate "$c20" "$tmp/consolidated" 2>/dev/null || fail "consolidate failed"
"$ckpt" diff "$c20" "$tmp/consolidated" >/dev/null || fail "consolidate changed the parameters"
"$ckpt" export-hf "$c20" "$tmp/hf" --dtype fp32 --max-shard-bytes 100000 2>/dev/null || fail "export-hf failed"
[ -f "$tmp/hf/model.safetensors.index.json" ] && [ -f "$tmp/hf/config.json" ] || fail "export-hf did not write an index and config.json"
$py - "$tmp/hf" "$tmp/consolidated" <<'PY' || fail "the exported safetensors disagree with the checkpoint"
import json, struct, sys, h5py, numpy
hf, full = sys.argv[1], sys.argv[2]
index = json.load(open(hf + "/model.safetensors.index.json"))["weight_map"]
with h5py.File(full + "/model.h5", "r") as f:
    for name, file in index.items():
        raw = open(f"{hf}/{file}", "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        meta = json.loads(raw[8:8 + n])[name]
        b, e = meta["data_offsets"]
        a = numpy.frombuffer(raw[8 + n + b:8 + n + e], dtype="<f4").reshape(meta["shape"])
        assert meta["dtype"] == "F32" and numpy.array_equal(a, f[f"/param/{name}"][()]), name
print("export-hf:", len(index), "tensors equal to the checkpoint")
PY
"$ckpt" import-hf "$tmp/hf" "$tmp/imported" 2>/dev/null || fail "import-hf failed"
"$ckpt" diff --params-only "$tmp/imported" "$c20" >/dev/null || fail "import-hf of the export differs from the checkpoint"
# The whole diff sees what import-hf cannot bring back: the step, the cursor and AdamW's moments.
"$ckpt" diff "$tmp/imported" "$c20" >"$tmp/diff" 2>/dev/null && fail "diff found nothing between an import (step 0) and step 20"
grep -q "^state step: 0 vs 20" "$tmp/diff" || fail "diff does not name the steps: $(head -3 "$tmp/diff")"
grep -q "^exp_avg model.norm.weight: only in $c20" "$tmp/diff" || fail "diff does not name the moments only one holds"
"$ckpt" diff "$tmp/straight/checkpoints/step-0000010" "$c20" >/dev/null && fail "diff found no difference between steps 10 and 20"
# Same weights, other moments: a difference (diff once compared the weights alone).
moments="$tmp/moments" && cp -r "$c20" "$moments"
$py - "$moments" <<'PY'
import json, sys, h5py
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
s = next(s for s in m["slices"] if s["kind"] == "exp_avg")
with h5py.File(f"{d}/{s['file']}", "r+") as f:
    ds = f[f"/exp_avg/{s['dataset']}"]
    v = ds[()]
    v[s.get("dataset_offset", 0)] += 1.0
    ds[...] = v
PY
"$ckpt" diff --params-only "$c20" "$moments" >/dev/null 2>&1 || fail "--params-only compared more than the weights"
"$ckpt" diff "$c20" "$moments" >"$tmp/diff" 2>&1 && fail "diff missed a changed optimizer moment"
# (The change also breaks the slice's checksum, which diff reports: either way it read the moments.)
grep -q "^exp_avg .* max abs 1.000e+00\|exp_avg of .* fails its checksum" "$tmp/diff" ||
  fail "the changed moment is not named: $(grep -v 'max abs 0.000e+00' "$tmp/diff" | head -3)"
# export-hf keeps the checkpoint's dtype: fp32 master weights stay fp32 unless --dtype asks.
"$ckpt" export-hf "$c20" "$tmp/hfdefault" 2>"$tmp/err" || fail "export-hf with the default dtype failed"
grep -q "exporting as fp32" "$tmp/err" || fail "export-hf does not say its dtype: $(cat "$tmp/err")"
$py - "$tmp/hfdefault" <<'PY' || fail "the default export is not fp32"
import json, struct, sys
d = sys.argv[1]
raw = open(d + "/model.safetensors", "rb").read(8 + 100000)
header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
dtypes = {v["dtype"] for k, v in header.items() if k != "__metadata__"}
assert dtypes == {"F32"}, dtypes
assert json.load(open(d + "/config.json"))["torch_dtype"] == "float32"
PY
"$ckpt" export-hf "$c20" "$tmp/hfbf16" --dtype bf16 2>/dev/null && "$ckpt" import-hf "$tmp/hfbf16" "$tmp/importedbf16" 2>/dev/null ||
  fail "bf16 export and import"
"$ckpt" export-hf "$tmp/importedbf16" "$tmp/hfbf16again" 2>"$tmp/err" || fail "export of a bf16 import"
grep -q "exporting as bf16: the dtype of the folder it was imported from" "$tmp/err" || fail "a bf16 import exports as $(cat "$tmp/err")"

# Integer (quantised) tensors are refused by import-hf as by training, naming the tensor; nothing is
# written. RoPE frequency tensors (older Llama 2 conversions) are ignored with a note, by import-hf
# and by training, whole or streamed, LoRA's base identity included.
for kind in int8 inv_freq; do
  cp -r "$tmp/hf" "$tmp/hf-$kind"
  $py - "$tmp/hf-$kind" "$kind" <<'PY'
import json, struct, sys
import numpy
d, kind = sys.argv[1], sys.argv[2]
index = json.load(open(d + "/model.safetensors.index.json"))
name = "model.norm.weight"
file = index["weight_map"][name]
raw = open(f"{d}/{file}", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
tensors = {k: (v, raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in header.items() if k != "__metadata__"}
if kind == "int8":
    meta, data = tensors[name]
    tensors[name] = (dict(meta, dtype="I8"), numpy.frombuffer(data, "<f4").astype(numpy.int8).tobytes())
else:
    for l in range(2):
        extra = f"model.layers.{l}.self_attn.rotary_emb.inv_freq"
        tensors[extra] = ({"dtype": "F32", "shape": [4]}, numpy.ones(4, "<f4").tobytes())
        index["weight_map"][extra] = file
    json.dump(index, open(d + "/model.safetensors.index.json", "w"))
out_header, blob = {}, b""
for k, (meta, data) in tensors.items():
    out_header[k] = {"dtype": meta["dtype"], "shape": meta["shape"], "data_offsets": [len(blob), len(blob) + len(data)]}
    blob += data
h = json.dumps(out_header).encode()
h += b" " * (-len(h) % 8)
open(f"{d}/{file}", "wb").write(struct.pack("<Q", len(h)) + h + blob)
PY
done
"$ckpt" import-hf "$tmp/hf-int8" "$tmp/imported-int8" 2>"$tmp/err" && fail "import-hf accepted an I8 tensor"
grep -q "model.norm.weight is stored as I8" "$tmp/err" || fail "import-hf does not name the I8 tensor: $(cat "$tmp/err")"
[[ -e "$tmp/imported-int8" ]] && fail "a refused import left $tmp/imported-int8"
"$ckpt" import-hf "$tmp/hf-inv_freq" "$tmp/imported-inv_freq" 2>"$tmp/err" || fail "import-hf refused rotary_emb.inv_freq: $(cat "$tmp/err")"
grep -q "ignoring 2 tensor(s) that transformers does not load either" "$tmp/err" || fail "import-hf does not note the ignored tensors"
"$ckpt" diff "$tmp/imported" "$tmp/imported-inv_freq" >/dev/null || fail "the inv_freq folder imported other weights"
from_inv_freq() {  # from_inv_freq HOW: 2 steps from the folder with inv_freq tensors, loaded as HOW says
  "$st" run "$src/configs/tiny-cpu.toml" -n 2 --set model.preset=none --set "model.path=$tmp/hf-inv_freq" \
    --set model.init=pretrained --set train.max_train_step=2 --set "job.output_dir=$tmp/invfreq-${1//[.=]/-}" --set "$1" \
    >"$log" 2>&1 || fail "training from a folder with inv_freq ($1): $(grep -m2 -i error "$log")"
  grep -q "ignoring 2 tensor(s) that transformers does not load either" "$log" || fail "$1: no note of the ignored tensors"
}
# The exported folder is a model shardtune trains from.
from_hf() {
  "$st" run "$src/configs/tiny-cpu.toml" -n 2 --set model.preset=none --set "model.path=$tmp/hf" --set model.init=pretrained \
    --set train.max_train_step=2 --set "job.output_dir=$tmp/fromhf" >"$log" 2>&1 || fail "training from the exported folder: $(tail -3 "$log")"
}
for how in "fsdp.low_cpu_fsdp=false" "fsdp.low_cpu_fsdp=true" "peft.method=lora"; do
  bg from_inv_freq "$how"
done
bg from_hf
# reshard 4 -> 1, 2, 3, 8: M files, the same tensors to the byte (parameters and moments).
for m in 1 2 3 8; do
  "$ckpt" reshard "$c20" "$tmp/reshard$m" -w "$m" 2>/dev/null || fail "reshard to $m failed"
  [ "$(ls "$tmp/reshard$m" | grep -c '^rank-.*\.h5$')" -eq "$m" ] || fail "reshard to $m: not $m files"
  "$ckpt" diff "$c20" "$tmp/reshard$m" >/dev/null || fail "reshard to $m changed the parameters"
  "$ckpt" consolidate "$tmp/reshard$m" "$tmp/reshard$m-full" 2>/dev/null
  $py - "$tmp/consolidated/model.h5" "$tmp/reshard$m-full/model.h5" <<'PY' || fail "reshard to $m changed the optimizer state"
import sys, h5py, numpy
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
    for kind in ("param", "exp_avg", "exp_avg_sq"):
        for name in a[kind]:
            assert numpy.array_equal(a[kind][name][()], b[kind][name][()]), (kind, name)
PY
done
# A job of 2 ranks resumes from the checkpoint resharded for 2.
mkdir -p "$tmp/fromreshard/checkpoints" && cp -r "$tmp/reshard2" "$tmp/fromreshard/checkpoints/step-0000020"
run "$tmp/fromreshard" 2 6 25 || fail "resume from a resharded checkpoint: $(tail -5 "$tmp/log")"
grep -q "resuming at step 20" "$tmp/fromreshard/logs/rank-00000.log" || fail "did not resume from the resharded checkpoint"

# A bit flipped in a slice: resume refuses, naming the file; the files stay as they were.
bad="$tmp/corrupt"
mkdir -p "$bad" && cp -r "$tmp/straight/checkpoints" "$bad/"
$py "$src/tests/cli/damage_slice.py" "$bad/checkpoints/step-0000020" rank-00001.h5 >/dev/null
"$ckpt" verify "$tmp/straight/checkpoints/step-0000020" >/dev/null || fail "shardtune-ckpt verify rejects a good checkpoint"
"$ckpt" verify "$bad/checkpoints/step-0000020" >"$tmp/verify" 2>&1 && fail "shardtune-ckpt verify accepts a corrupt checkpoint"
grep -q "BAD .*rank-00001.h5: param of .*checksum mismatch" "$tmp/verify" || fail "verify does not name the bad slice: $(cat "$tmp/verify")"
[ "$(grep -c '^BAD' "$tmp/verify")" -eq 1 ] || fail "verify should find exactly one bad slice"
"$ckpt" inspect "$tmp/straight/checkpoints/step-0000020" | grep -q "step 20 .* saved by 4 ranks" || fail "inspect output"
# resume = "auto": the damaged newest checkpoint is skipped, named, and kept aside; the job resumes
# from the next older one. (Any world size reads every slice, whole, checksum and all: 2 ranks here.)
sum_before=$(cd "$bad"/checkpoints/step-0000020 && md5sum * | md5sum)
run "$bad" 2 6 12 || fail "a corrupt newest checkpoint stopped the job: $(tail -3 "$tmp/log")"
grep -q "skipping checkpoint $bad/checkpoints/step-0000020: .*rank-00001.h5.*fails its checksum" "$tmp/log" ||
  fail "the corruption error does not name the file: $(grep -m1 -i 'error\|skipping' "$tmp/log")"
grep -q "resuming at step 10 " "$tmp/log" || fail "the job did not resume from the older checkpoint"
aside=$(ls -d "$bad"/checkpoints/step-0000020.damaged-* 2>/dev/null | head -1)
[ -n "$aside" ] && [ "$sum_before" = "$(cd "$aside" && md5sum * | md5sum)" ] || fail "the damaged checkpoint was not kept as it was"

# A truncated rank file, and a missing one, in the checkpoint given as [checkpoint] resume: refused, naming the file.
trunc="$tmp/truncated"
mkdir -p "$trunc" && cp -r "$tmp/straight/checkpoints" "$trunc/"
truncate -s 4096 "$trunc/checkpoints/step-0000020/rank-00002.h5"
"$ckpt" verify "$trunc/checkpoints/step-0000020" >"$tmp/verify" 2>&1 && fail "verify accepts a truncated file"
grep -q "rank-00002.h5" "$tmp/verify" || fail "verify does not name the truncated file"
run "$trunc" 2 6 30 --set checkpoint.resume="$trunc/checkpoints/step-0000020" && fail "a truncated checkpoint was resumed"
grep -q "rank-00002.h5" "$tmp/log" || fail "the truncation error does not name the file"
gone="$tmp/missingfile"
mkdir -p "$gone" && cp -r "$tmp/straight/checkpoints" "$gone/"
rm "$gone/checkpoints/step-0000020/rank-00003.h5"
run "$gone" 2 6 30 --set checkpoint.resume="$gone/checkpoints/step-0000020" && fail "a checkpoint with a missing file was resumed"
grep -q "rank-00003.h5 listed in the manifest is missing" "$tmp/log" || fail "the missing file is not named"

# Disk full during a save: the checkpoint directory on a 2 MiB tmpfs holds the step-10 checkpoint
# (copied there) but not a second one. Every rank fails with the same error, nothing partial is
# left, and the step-10 checkpoint still verifies: for a blocking save (of step 20), and for one
# written in the background (of step 15), whose failure surfaces at a later step boundary. (Needs a
# private mount namespace: skipped where not allowed.)
disk_full() {  # disk_full NAME STEP [extra --set ...]: the save of STEP fails
  local full_disk="$tmp/$1" step=$2 rc
  shift 2
  mkdir -p "$full_disk/checkpoints"
  export -f run
  export st src tmp log
  unshare --mount --propagation private bash -c '
    mount -t tmpfs -o size=2m tmpfs "$0/checkpoints" || exit 3
    cp -r "$tmp/resumed/checkpoints/step-0000010" "$0/checkpoints/" && ln -s step-0000010 "$0/checkpoints/latest" ||
      echo "could not copy the step-10 checkpoint onto the tmpfs"
    run "$0" 2 6 20 "${@:2}"; rc=$?
    ls -A "$0/checkpoints" > "$0/listing"
    "$1" verify "$0/checkpoints/step-0000010" > "$0/verify" 2>&1 || echo unverified >> "$0/listing"
    exit $rc' "$full_disk" "$ckpt" "$@"
  rc=$?
  if [ "$rc" -eq 3 ]; then
    echo "disk-full check skipped: cannot mount a tmpfs here"
    return
  fi
  [ "$rc" -ne 0 ] || fail "$1: a save onto a full disk did not fail the job"
  grep -q "checkpoint at step $step failed; nothing was committed" "$log" || fail "$1: no clear disk-full error: $(grep -m2 -i error "$log")"
  [ "$(grep -c "checkpoint at step $step failed" "$full_disk"/logs/rank-0000*.log | awk -F: '{s+=$2} END {print s}')" -ge 2 ] \
    || fail "$1: not every rank reported the failed save"
  grep -q "^\.tmp" "$full_disk/listing" && fail "$1: a partial checkpoint directory was left on the full disk"
  grep -q unverified "$full_disk/listing" && fail "$1: the step-10 checkpoint no longer verifies"
  grep -q "^step-0000010$" "$full_disk/listing" || fail "$1: the step-10 checkpoint is gone"
}
if unshare --mount --propagation private true 2>/dev/null; then
  disk_full diskfull 20
  disk_full diskfull-async 15 --set checkpoint.async=true --set checkpoint.every_steps=5
fi

# Uncommitted directories (no manifest, or a temporary one) are never resumed.
part="$tmp/partial"
mkdir -p "$part" && cp -r "$tmp/resumed/checkpoints" "$part/"
mkdir -p "$part/checkpoints/step-0000030" "$part/checkpoints/.tmp-step-0000040"
cp "$part/checkpoints/step-0000020/rank-00000.h5" "$part/checkpoints/step-0000030/"
run "$part" 2 6 25 || fail "resume next to partial checkpoints failed: $(tail -5 "$tmp/log")"
grep -q "resuming at step 20" "$part/logs/rank-00000.log" || fail "did not resume from the newest committed checkpoint"

# SIGKILL at every phase of a save written in the background (of step 15, every 5 steps; step 10 is
# committed): the job dies, and a new job resumes from a checkpoint that verifies, the new one only
# if it was committed (and `latest` names it). The files are written on the save's own thread, while step 16 trains; the
# commit comes at a later step boundary. (exactly_once kills the saves that block, at every phase.)
# Each job begins at the copied step 10 (2 ranks), so the killed start resumes too: the new job's
# own output says where it resumed, not the rank log both write.
kill_case() {  # kill_case PHASE:RANK
  local phase=${1%%:*} who=${1##*:} out="$tmp/kill-${1%%:*}" want
  seed "$out"
  SHARDTUNE_TEST_KILL_AT="$phase@15:$who" run "$out" 2 6 20 --set checkpoint.async=true --set checkpoint.every_steps=5 &&
    fail "the job survived a SIGKILL at $phase"
  [ -d "$out/checkpoints/step-0000010" ] || fail "$phase: the earlier checkpoint is gone"
  run "$out" 2 6 20 || fail "$phase: the job after the crash failed: $(tail -5 "$log")"
  case "$phase" in
    renamed|latest-updated) want=15 ;;
    *) want=10 ;;
  esac
  grep -q "resuming at step $want" "$log" || fail "$phase: did not resume at step $want"
  # Killed between the rename and the link: the start that resumes the new checkpoint moves `latest` to it.
  [ "$phase" != renamed ] || grep -q "latest now names step-0000015, the checkpoint resumed" "$out/logs/rank-00000.log" ||
    fail "renamed: the resumed start did not point latest at step 15"
  "$ckpt" verify "$out/checkpoints/step-00000$want" >/dev/null || fail "$phase: the resumed checkpoint does not verify"
  [ -z "$(ls -A "$out/checkpoints" | grep '^\.tmp')" ] || [ "$want" = 10 ] || fail "$phase: a temporary directory was left"
}
for point in started:0 files-written:1 manifest-written:0 renamed:0 latest-updated:0; do
  bg kill_case "$point"
done
join

if [ "$failures" -eq 0 ]; then echo "checkpoint_test: all checks passed"; else echo "checkpoint_test: $failures failure(s)"; fi
[ "$failures" -eq 0 ]
