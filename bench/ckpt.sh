#!/usr/bin/env bash
# Checkpoint save/load bandwidth at world size 4 against the raw disk (see ckpt_bench.cpp), with
# the shared-file alternative through each of Open MPI's MPI-IO components (ROMIO, then OMPIO);
# then shardtune-ckpt's commands on a checkpoint of the same model, with bandwidth and peak memory.
# usage: bench/ckpt.sh [BUILD_DIR] [WORK_DIR] [LAYERS] [ROUNDS]   (12 layers: ~3.4 GB per checkpoint)
#        CKPT_BENCH_TOOLS_ONLY=1 bench/ckpt.sh ...: shardtune-ckpt's commands alone
set -euo pipefail
build=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}
work=${2:-/var/tmp/shardtune-ckpt-bench}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for io in romio321 ompio; do
  [ -n "${CKPT_BENCH_TOOLS_ONLY:-}" ] && break
  OMPI_MCA_io=$io mpirun -x OMPI_MCA_io -np 4 --oversubscribe --bind-to none --mca btl_tcp_if_include lo \
    --mca oob_tcp_if_include lo "$build/bin/ckpt_bench" "$work" "${3:-12}" "${4:-3}"
done

# shardtune-ckpt on a checkpoint of the same model: each command's bandwidth and peak memory, and
# its ratio to the raw disk measured just before it (16 MiB O_DIRECT writes + fdatasync of as many
# bytes as the command writes: the fastest way this disk takes them, some 3x the page cache's
# rate here; the command's reads compete with its writes on the same disk). The page cache is dropped
# before each command and each raw measurement where this user may (root), so every read is cold.
tools=$work/tools
rm -rf "$tools" && mkdir -p "$tools"
"$build/bin/shardtune-make-model" "$tools/hf" --layers "${3:-12}" --hidden 2048 --intermediate 8192 --vocab 32000 \
  --dtype bf16 >/dev/null
drop() { sync; { echo 1 >/proc/sys/vm/drop_caches; } 2>/dev/null || true; }
raw_write() {  # raw_write BYTES: GB/s
  local mib=$(($1 / 1048576 + 1)) t0 t1
  drop
  t0=$(date +%s.%N)
  # Through the page cache where the file system refuses O_DIRECT (tmpfs), as shardtune then writes.
  dd if=/dev/zero of="$tools/raw" bs=16M count=$((mib / 16 + 1)) oflag=direct conv=fdatasync status=none 2>/dev/null ||
    dd if=/dev/zero of="$tools/raw" bs=16M count=$((mib / 16 + 1)) conv=fdatasync status=none
  t1=$(date +%s.%N)
  rm -f "$tools/raw"
  python3 -c "print(f'{$(( (mib / 16 + 1) * 16 * 1048576 )) / ($t1 - $t0) / 1e9:.2f}')"
}
ckpt_bytes=$(du -sb "$tools/hf" | cut -f1)
ckpt_bytes=$((ckpt_bytes * 2))  # the checkpoint is fp32: twice the bf16 folder
echo "shardtune-ckpt (one process; a Hugging Face folder of the model above in bf16; ratio to raw write of the same bytes):"
# CKPT_BENCH_BASELINE=PATH: another shardtune-ckpt binary, run on each command right after this one's
# (into a folder of its own), for a before/after in the same run.
binaries=("$build/bin/shardtune-ckpt")
[ -n "${CKPT_BENCH_BASELINE:-}" ] && binaries+=("$CKPT_BENCH_BASELINE")
for cmd in "import-hf $tools/hf $tools/full" "reshard $tools/full $tools/sharded -w 4" "verify $tools/sharded" \
  "consolidate $tools/sharded $tools/full2" "export-hf $tools/full2 $tools/hf2 --dtype bf16" \
  "diff $tools/full $tools/full2"; do
 for tool in "${binaries[@]}"; do
  out_dir=$(awk '{print $3}' <<<"$cmd")
  [ "$tool" != "${binaries[0]}" ] && [ -n "$out_dir" ] && [[ "$cmd" != verify* && "$cmd" != diff* ]] && rm -rf "$out_dir"
  raw=$(raw_write "$ckpt_bytes")
  drop
  # shellcheck disable=SC2086
  line=$("$tool" $cmd 2>&1 | tr '\r' '\n' |
    grep -oE "(imported|resharded|consolidated|exported|compared|[0-9]+ slices).*peak memory [0-9]+ MiB" | tail -1) || true
  gbs=$(grep -oE "[0-9.]+ GB/s" <<<"$line" | head -1 | cut -d' ' -f1) || true
  ratio=""
  [ -n "$gbs" ] && ratio=$(python3 -c "print(f'ratio to raw write {$gbs / $raw:.2f} (raw {$raw} GB/s)')")
  label=${cmd%% *}
  [ "$tool" != "${binaries[0]}" ] && label="$label (baseline)"
  printf '  %-23s %s %s\n' "$label" "${line:-FAILED}" "$ratio"
 done
done
rm -rf "$tools"
