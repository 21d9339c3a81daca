#!/usr/bin/env bash
# What [fsdp] cpu_offload costs a training step, against the same run without it, alternating:
# bench/cpu_model.sh's 0.12B Llama (train_bench, fp32, sequence 256, one row per rank), FULL_SHARD
# over RANKS ranks (default 2), ROUNDS rounds (default 3). On the CPU the offloaded shards are host
# memory either way: the difference is the path's own copies (the shard into the gathered buffer
# at every shard count, the reduced gradient down). On a GPU (DEVICE=cuda, MODEL_DIR of a model
# that fits it) it prices the host optimizer step and the copies over PCIe.
# usage: bench/offload.sh [BUILD_DIR] [WORK_DIR] [STEPS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
work=${2:-/var/tmp/shardtune-cpu-peer}
steps=${3:-5}
ranks=${RANKS:-2}
device=${DEVICE:-cpu}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model=${MODEL_DIR:-}
if [ -z "$model" ]; then
  "$root/bench/cpu_model.sh" "$build" "$work"
  model=$work/model
fi
py=$(command -v /usr/bin/python3 || command -v python3)
# run ARGS...: "tokens/s peak-device-GiB peak-RSS-MiB" of one train_bench run.
run() {
  mpirun -np "$ranks" --bind-to none --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    -x GLIBC_TUNABLES=glibc.malloc.hugetlb=1 \
    "$build/bin/train_bench" "$model" --device "$device" --fp32 --seq 256 --micro-batch 1 --steps "$steps" --warmup 1 "$@" |
    $py -c "import json,sys; d=json.loads([l for l in sys.stdin if l.startswith('{')][-1]); print(d['tokens_per_s'], d.get('peak_allocated_gib', 0), d['peak_rss_mib'])"
}
echo "training steps, $(basename "$model"), fp32, FULL_SHARD over $ranks rank(s) on $device, sequence 256, median of $steps steps:"
printf '%-6s %14s %16s %8s %14s %16s %14s %16s\n' round "plain tok/s" "offload tok/s" ratio "plain dev GiB" "offload dev GiB" \
  "plain RSS MiB" "offload RSS MiB"
for round in $(seq "${ROUNDS:-3}"); do
  read -r plain plain_dev plain_rss < <(run)
  read -r offload offload_dev offload_rss < <(run --cpu-offload)
  printf '%-6s %14.1f %16.1f %8.3f %14.2f %16.2f %14.0f %16.0f\n' "$round" "$plain" "$offload" \
    "$($py -c "print($offload / $plain)")" "$plain_dev" "$offload_dev" "$plain_rss" "$offload_rss"
done
