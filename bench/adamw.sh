#!/usr/bin/env bash
# AdamW's fused host step against the operation-at-a-time path (see adamw_bench.cpp).
# usage: bench/adamw.sh [BUILD_DIR] [MILLIONS_OF_PARAMETERS] [STEPS]
set -euo pipefail
build=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}
"$build/bin/adamw_bench" "${2:-64}" "${3:-7}"
