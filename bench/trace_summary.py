#!/usr/bin/env python3
"""Where a traced step's time goes, from a step profiler trace (train_bench --trace, or a job's
[train] use_profiler): the span of the traced steps, how much of it the GPU was busy (kernels
merged where they overlap), the GPU's idle gaps, and the kernel time grouped by kind and the
largest kernels by name.
usage: trace_summary.py TRACE.json[.gz] [--top N]
"""
import argparse, gzip, json, re
from collections import defaultdict

KINDS = [  # (kind, pattern on the kernel's name), first match wins
    ("nccl", r"nccl"),
    ("attention", r"flash|fmha|attention|sdpa|cudnn"),
    ("matrix products", r"gemm|cutlass|sm90_xmma|wgmma|ampere_|sm80_|cublas|nvjet"),
    ("copies", r"memcpy|memset|copy|cat|index"),
    ("optimizer", r"adam|foreach|multi_tensor"),
    ("reductions", r"reduce|norm|softmax|sum|mean|max"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|silu|mul|add"),
]


def kind(name):
    low = name.lower()
    return next((k for k, p in KINDS if re.search(p, low)), "other")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    opener = gzip.open if a.trace.endswith(".gz") else open
    with opener(a.trace, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    # The GPU rows also hold shardtune's ranges as the GPU ran them (fsdp.*, optimizer.step, ...).
    ranges_on_gpu = re.compile(r"^(fsdp|optimizer|data|checkpoint|train|lora|shardtune)\.")
    kernels = [e for e in events if e.get("cat") == "kernel" and not ranges_on_gpu.match(e["name"])]
    if not events:
        raise SystemExit(f"{a.trace}: no events")
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    span = end - start
    busy, gaps, cursor = 0.0, [], None
    for e in sorted(kernels, key=lambda e: e["ts"]):
        s, t = e["ts"], e["ts"] + e["dur"]
        if cursor is None or s > cursor:
            if cursor is not None:
                gaps.append(s - cursor)
            busy += t - s
            cursor = t
        elif t > cursor:
            busy += t - cursor
            cursor = t
    print(f"traced span {span / 1e3:.1f} ms; GPU busy {busy / 1e3:.1f} ms ({100 * busy / span:.1f}%); "
          f"{len(kernels)} kernels; idle gaps: {len(gaps)}, {sum(gaps) / 1e3:.1f} ms in all, "
          f"{sum(g for g in gaps if g > 100) / 1e3:.1f} ms in gaps over 0.1 ms")
    by_kind, by_name = defaultdict(float), defaultdict(lambda: [0.0, 0])
    for e in kernels:
        by_kind[kind(e["name"])] += e["dur"]
        by_name[e["name"]][0] += e["dur"]
        by_name[e["name"]][1] += 1
    total = sum(by_kind.values()) or 1.0
    print("\n| kernel kind | ms | share of kernel time |\n|---|---|---|")
    for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"| {k} | {v / 1e3:.1f} | {100 * v / total:.1f}% |")
    print(f"\n| largest kernels | calls | ms |\n|---|---|---|")
    for n, (v, c) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:a.top]:
        print(f"| {n[:110]} | {c} | {v / 1e3:.1f} |")
    ranges = defaultdict(float)
    for e in events:
        if e.get("cat") == "user_annotation":
            ranges[e["name"]] += e["dur"]
    if ranges:
        print("\n| shardtune range (CPU side) | ms |\n|---|---|")
        for n, v in sorted(ranges.items(), key=lambda kv: -kv[1])[:a.top]:
            print(f"| {n} | {v / 1e3:.1f} |")


if __name__ == "__main__":
    main()
