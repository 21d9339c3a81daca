#!/usr/bin/env bash
# What a checkpoint written in the background ([checkpoint] async) costs training, against the
# same checkpoint saved in the foreground. Two runs of one job, one after the other: bench/cpu_model.sh's
# 0.12B Llama, fp32 with AdamW's moments saved (1.4 GB a checkpoint), RANKS ranks on this machine,
# context SEQ, a checkpoint every EVERY steps, STEPS steps; checkpoints under WORK_DIR.
#   - blocking: each save stops training for its whole time ("saved in S s" in the log);
#   - async: training stops for the save's start and its commit ("begun in", "committed in"), and
#     the steps that run while the copy and the write are under way may be slower. Their extra time
#     is each such step's time less the median of the run's other steps (from metrics.jsonl).
# Prints per save: the blocking time, the async run's extra time, and extra / blocking (the target
# is 0.10 or less); and the CPU seconds the background writes took. Step 1 (warm-up) and the last
# step (its save blocks in both runs) are left out.
# KEEP_LAST (environment; default 1): [checkpoint] keep_last, so that each save but the first prunes one.
# usage: bench/async_ckpt.sh [BUILD_DIR] [WORK_DIR] [RANKS] [SEQ] [EVERY] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
work=${2:-/var/tmp/shardtune-async-bench}
ranks=${3:-2}
seq=${4:-256}
every=${5:-4}
steps=${6:-25}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset OMP_NUM_THREADS OPENBLAS_NUM_THREADS
"$root/bench/cpu_model.sh" "$build" "$work"
for mode in blocking async; do
  out="$work/run-$mode"
  rm -rf "$out"
  mkdir -p "$out"
  cat >"$work/$mode.toml" <<TOML
[job]
name = "async-bench-$mode"
output_dir = "$out"
[slurm]
ntasks_per_node = $ranks
[launch]
launcher = "mpirun"
device = "cpu"
collective_timeout_s = 600.0
[model]
path = "$work/model"
init = "pretrained"
[data]
format = "synthetic"
[train]
batch_size_training = 1
context_length = $seq
max_train_step = $steps
mixed_precision = false
run_validation = false
lr_scheduler = "step"
[fsdp]
activation_checkpointing = false
save_optimizer = true
[checkpoint]
every_steps = $every
keep_last = ${KEEP_LAST:-1}
async = $([ "$mode" = async ] && echo true || echo false)
[metrics]
log_every_steps = 1
TOML
  "$build/bin/shardtune" run "$work/$mode.toml" -n "$ranks" >"$work/$mode.log" 2>&1 ||
    { tail -20 "$work/$mode.log"; exit 1; }
done
/usr/bin/python3 - "$work" "$steps" "$ranks" <<'PY'
import json, re, statistics, sys
work, steps = sys.argv[1], int(sys.argv[2])

def run(mode):
    out = f"{work}/run-{mode}"
    times = {r["step"]: r["step_seconds"] for r in map(json.loads, open(f"{out}/metrics.jsonl")) if "step" in r}
    return out, times, open(f"{out}/logs/rank-00000.log").read().splitlines()

_, _, log = run("blocking")
# A sharded save's checksums are taken during the update of the step it follows: that time, on the
# training thread, is the save's own, in both runs.
TAKEN = r"(?:; \d+ tensors' checksums taken during the update in ([0-9.]+) s)?"
blocking = [float(m.group(2)) + float(m.group(3) or 0) for l in log
            if (m := re.search(r"checkpoint committed: .*step-(\d+) \(saved in ([0-9.]+) s" + TAKEN + r"\)", l))
            and int(m.group(1)) < steps]
_, times, log = run("async")
# Which steps ran while a save was under way: from the step after its start to the boundary of its commit.
step, begun, windows, stood = 0, None, [], 0.0
for l in log:
    if m := re.search(r"\] step (\d+)/", l):
        step = int(m.group(1))
    elif m := re.search(r"checkpoint of step (\d+): begun in ([0-9.]+) s.*background" + TAKEN + "$", l):
        begun = int(m.group(1))
        stood += float(m.group(2)) + float(m.group(3) or 0)
    elif m := re.search(r"written in the background; committed in ([0-9.]+) s", l):
        windows.append(range(begun + 1, step + 1))
        stood += float(m.group(1))
inside = {s for w in windows for s in w}
quiet = sorted(s for s in times if s not in inside and 1 < s < steps)
median = statistics.median(times[s] for s in quiet)
extra = sum(times[s] - median for s in inside if s < steps) + stood
# The same against each save's own neighbours (the two quiet steps before it and the two after):
# this machine has slow spells of several steps, which a run-wide median counts against the save.
local = stood
for w in windows:
    near = [s for s in quiet if s < w.start][-2:] + [s for s in quiet if s >= w.stop][:2]
    local += sum(times[s] - statistics.median(times[n] for n in near) for s in w if s < steps)
saves = len(windows)
mean_blocking = statistics.mean(blocking)
print(f"steps: median {median:.3f} s without a save under way ({len(quiet)} steps)")
print(f"blocking save: {mean_blocking:.3f} s each (mean of {len(blocking)}: {', '.join(f'{b:.2f}' for b in blocking)})")
print(f"async save: {extra / saves:.3f} s of extra training time each against the run's median step, "
      f"{local / saves:.3f} s against its neighbour steps ({saves} saves, {len(inside)} steps under way, "
      f"{stood / saves:.3f} s of it at the step boundaries and in the update)")
print(f"extra / blocking: {extra / saves / mean_blocking:.3f} (run's median), {local / saves / mean_blocking:.3f} (neighbours)")
# The CPU the background writes took from training, per rank and save: on a machine whose cores
# training keeps busy, the least extra time they can cost; unlike step times, free of the noise of
# other work on the machine.
cpu = [float(m.group(1)) for r in range(int(sys.argv[3]))
       for l in open(f"{work}/run-async/logs/rank-{r:05d}.log")
       if (m := re.search(r"written in [0-9.]+ s \(([0-9.]+) s of CPU\)", l))]
print(f"background CPU: {statistics.mean(cpu):.3f} s a rank and save (mean of {len(cpu)}); "
      f"/ blocking: {statistics.mean(cpu) / mean_blocking:.3f}")
print(f"shardtune's own cost of a background save (boundaries, update, writer CPU): "
      f"{(stood / saves + statistics.mean(cpu)) / mean_blocking:.3f} of blocking")
PY
# What the machine charges for the disk writes themselves: a compute loop on every core, alone and
# while RANKS writers put one save's bytes on the disk with O_DIRECT (no shardtune involved). On a
# virtual machine whose disk is emulated on the same cores, the loop slows by the host's work.
/usr/bin/python3 - "$work" "$ranks" <<'PY'
import mmap, os, re, statistics, subprocess, sys, time
work, ranks = sys.argv[1], int(sys.argv[2])
size = max(int(m.group(1)) for l in open(f"{work}/run-async/logs/rank-00000.log")
           if (m := re.search(r"this rank's state \([0-9.]+ MiB, (\d+) bytes\)", l)))
go = f"{work}/go"
SPIN = "import time\nt = time.perf_counter()\nx = 0\nfor i in range(25_000_000): x += i * i\nprint(time.perf_counter() - t)"
WRITE = """import mmap, os, sys, time
path, size, go = sys.argv[1], int(sys.argv[2]), sys.argv[3]
chunk = 16 << 20
buf = mmap.mmap(-1, chunk)
buf.write(b"\\x01" * chunk)
view = memoryview(buf)
while not os.path.exists(go): time.sleep(0.005)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
for off in range(0, size, chunk):
    n = min(chunk, size - off)
    os.pwrite(fd, view[:(n + 4095) // 4096 * 4096], off)
os.fdatasync(fd)
os.close(fd)
os.unlink(path)
"""

def spins(cores):
    procs = [subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True) for _ in range(cores)]
    return statistics.mean(float(p.communicate()[0]) for p in procs)

cores = os.cpu_count()
alone, beside = [], []
for trial in range(3):
    alone.append(spins(cores))
    if os.path.exists(go): os.unlink(go)
    writers = [subprocess.Popen([sys.executable, "-c", WRITE, f"{work}/write-{r}.bin", str(size), go]) for r in range(ranks)]
    time.sleep(1.0)  # their buffers filled
    open(go, "w").close()
    beside.append(spins(cores))
    for w in writers: w.wait()
os.unlink(go)
charge = statistics.mean(beside) - statistics.mean(alone)
print(f"machine: a compute loop on each of {cores} cores took {statistics.mean(alone):.3f} s alone, "
      f"{statistics.mean(beside):.3f} s while {ranks} writers put {ranks} x {size / 2**20:.0f} MiB on the disk "
      f"(O_DIRECT; means of 3): the disk writes of one save cost each core {charge:.3f} s")
PY
