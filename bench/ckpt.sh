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

# shardtune-ckpt on a checkpoint of the same model: each command's time, bandwidth and peak memory,
# and its ratio to the raw disk doing the same I/O, measured right after it: raw_io_bench reads the
# command's input files and writes as many bytes as the command wrote, at once, with O_DIRECT and
# nothing else (the command's reads compete with its writes on the same disk, and so do the raw
# ones). Every read is cold: the page cache is emptied of the inputs first.
tools=$work/tools
rm -rf "$tools" && mkdir -p "$tools"
"$build/bin/shardtune-make-model" "$tools/hf" --layers "${3:-12}" --hidden 2048 --intermediate 8192 --vocab 32000 \
  --dtype bf16 >/dev/null
drop() {  # drop FILE...: out of the page cache (all of it where this user may)
  sync
  { echo 1 >/proc/sys/vm/drop_caches; } 2>/dev/null || python3 -c "
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)" "$@"
}
echo "shardtune-ckpt (one process; a Hugging Face folder of the model above in bf16; ratio: the raw disk's time for the same reads and writes ÷ the command's):"
# CKPT_BENCH_BASELINE=PATH: another shardtune-ckpt binary, run on each command right after this one's
# (into a folder of its own), for a before/after in the same run.
binaries=("$build/bin/shardtune-ckpt")
[ -n "${CKPT_BENCH_BASELINE:-}" ] && binaries+=("$CKPT_BENCH_BASELINE")
for cmd in "import-hf $tools/hf $tools/full" "reshard $tools/full $tools/sharded -w 4" "verify $tools/sharded" \
  "consolidate $tools/sharded $tools/full2" "export-hf $tools/full2 $tools/hf2 --dtype bf16" \
  "diff $tools/full $tools/full2"; do
 for tool in "${binaries[@]}"; do
  read -r name in_dir out_dir _ <<<"$cmd"
  inputs=("$in_dir"/*)
  if [[ "$name" == verify ]]; then out_dir=""; elif [[ "$name" == diff ]]; then inputs+=("$out_dir"/*); out_dir=""; fi
  [ -n "$out_dir" ] && rm -rf "$out_dir"
  drop "${inputs[@]}"
  # shellcheck disable=SC2086
  line=$("$tool" $cmd 2>&1 | tr '\r' '\n' |
    grep -oE "(imported|resharded|consolidated|exported|verified|compared).*peak memory [0-9]+ MiB" | tail -1) || true
  seconds=$(grep -oE " in [0-9.]+ s" <<<"$line" | head -1 | grep -oE "[0-9.]+") || true
  written=0
  [ -n "$out_dir" ] && written=$(du -sb "$out_dir" | cut -f1)
  raw=$("$build/bin/raw_io_bench" "$work/raw" "$written" "${inputs[@]}" | cut -d' ' -f1)
  ratio=""
  [ -n "$seconds" ] && ratio=$(python3 -c "print(f'ratio {$raw / $seconds:.2f} (raw disk {$raw:.2f} s)')")
  label=$name
  [ "$tool" != "${binaries[0]}" ] && label="$label (baseline)"
  printf '  %-23s %s %s\n' "$label" "${line:-FAILED}" "$ratio"
 done
done
rm -rf "$tools"
