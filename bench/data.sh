#!/usr/bin/env bash
# Reading and tokenizing alpaca records, 10k, 50k and 200k in one run (bench/data_bench.cpp):
# both must grow linearly (200k / 10k at most 25x, 20x being exactly linear) and reading must cost
# no more than tokenizing. Prints each size's times and the ratios; exits 1 when a bound fails.
# usage: bench/data.sh [BUILD_DIR] [SIZES...]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(10000 50000 200000)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/bin/data_bench" "$root/configs/data/tiny-tokenizer/tokenizer.json" "$root/configs/data/tiny-alpaca.json" \
  "$tmp" "${sizes[@]}" >"$tmp/results.jsonl"
/usr/bin/python3 - "$tmp/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'records':>8} {'read s':>8} {'tokenize s':>10} {'read / tokenize':>15}")
ok = True
for r in rows:
    ratio = r["read_s"] / r["tokenize_s"]
    ok &= ratio <= 1.0
    print(f"{r['records']:>8} {r['read_s']:>8.3f} {r['tokenize_s']:>10.3f} {ratio:>15.2f}")
first, last = rows[0], rows[-1]
scale = last["records"] / first["records"]
for key, name in (("read_s", "reading"), ("tokenize_s", "tokenizing")):
    growth = last[key] / first[key]
    ok &= growth <= 1.25 * scale
    print(f"{name}: {last['records']} / {first['records']} records took {growth:.1f}x the time "
          f"({scale:.0f}x is linear, {1.25 * scale:.0f}x the bound)")
sys.exit(0 if ok else 1)
PY
