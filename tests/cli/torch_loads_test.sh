#!/usr/bin/env bash
# What the programs load (cmake/ShardtuneDeps.cmake): every symbol of every library they map
# resolves (ldd -r: functions too, as a call would); where the build made a copy of libtorch_cpu.so
# without the libraries it does not use, they load that copy, and fewer libraries than with
# LibTorch's own (which LD_LIBRARY_PATH, searched before a run path, puts back); and they need the
# C++ library before any of LibTorch's, or carry it linked statically, so that a C++ library function
# binds to the C++ library even where LibTorch exports one of its own (a wheel's libtorch.so:
# std::filesystem, cmake/ShardtuneDeps.cmake).
# usage: torch_loads_test.sh TRIMMED_COPY_OR_EMPTY ORIGINAL PROGRAM...
set -u
trimmed=$1 original=$2
shift 2
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
for program in "$@"; do
  out=$(ldd -r "$program" 2>&1)
  bad=$(grep "undefined symbol\|not found" <<<"$out" | head -3)
  [ -z "$bad" ] || fail "$program: $bad"
  needed=$(readelf -d "$program" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  # First of all: any library before it that exports C++ library functions (a wheel's LibTorch,
  # a library with a static C++ library inside) would have them bound to its copies. Or none at
  # all, where the compiler links the C++ library statically (a GCC of its own on an H200 machine,
  # 2026-11-29): then the program defines the functions it calls itself, and they bind there.
  cxx=$(grep -n -m1 '^libstdc++' <<<"$needed" | cut -d: -f1)
  torch=$(grep -n -m1 -E '^lib(torch|c10)' <<<"$needed" | cut -d: -f1)
  [ -n "$torch" ] || fail "$program needs no LibTorch library: $(tr '\n' ' ' <<<"$needed")"
  own=$(readelf -Ws "$program" | awk '$4 == "FUNC" && $7 != "UND"' | grep -c _ZNSt10filesystem)
  if [ -z "$cxx" ] && [ "$own" -gt 0 ]; then
    echo "$program: the C++ library linked statically ($own std::filesystem functions of its own)"
  elif [ "$cxx" != 1 ]; then
    fail "$program does not need the C++ library first: $(tr '\n' ' ' <<<"$needed")"
  fi
  n=$(grep -c '=>' <<<"$out")
  if [ -n "$trimmed" ]; then
    grep -q "libtorch_cpu[^ ]* => $trimmed " <<<"$out" || fail "$program does not load $trimmed: $(grep libtorch_cpu <<<"$out")"
    whole=$(LD_LIBRARY_PATH=$(dirname "$original") ldd "$program" | grep -c '=>')
    ((n < whole)) || fail "$program loads $n libraries with the copy, $whole with LibTorch's own"
    echo "$program: $n libraries (with LibTorch's own libtorch_cpu.so: $whole), every symbol resolved"
  else
    echo "$program: $n libraries, every symbol resolved"
  fi
done
exit $((failures > 0))
