#!/usr/bin/env python3
"""The table of bench/gpu.sh: each run of runs.jsonl (train_bench and torch_baseline.py output,
one JSON object per line) with its achieved TFLOP/s, MFU against the GPU's bf16 data-sheet peak
and against the measured matmul, and shardtune's tokens/s over each at the same configuration.
Writes bench.json and bench.md into OUT_DIR.  usage: gpu_report.py RUNS_JSONL OUT_DIR
"""
import gzip, json, os, re, subprocess, sys
results, out = sys.argv[1], sys.argv[2]
runs = [json.loads(l) for l in open(results) if l.strip()]
ATTENTION = re.compile(r"flash|fmha|attention|sdpa|cudnn", re.I)  # as bench/trace_summary.py


def traced_attention(path):
    """The attention kernels of shardtune's traced steps (train_bench --trace): {name: ms}."""
    if not os.path.exists(path):
        return None
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    found = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and ATTENTION.search(e["name"]):
            found[e["name"][:120]] = found.get(e["name"][:120], 0.0) + e["dur"] / 1e3
    return {k: round(v, 3) for k, v in sorted(found.items(), key=lambda kv: -kv[1])}


def kernel_kinds(kernels):
    """flash, cuDNN, efficient (memory-efficient) or other, from the attention kernels' names."""
    kinds = set()
    for name in kernels:
        low = name.lower()
        kinds.add("flash" if "flash" in low else "cuDNN" if "cudnn" in low else
                  "efficient" if "fmha" in low or "efficient" in low or "mem_eff" in low else "other")
    return "+".join(sorted(kinds)) or "none seen"


def measured(r):
    """Whether a shardtune run chose its attention kernel per shape, as training does (train_bench --attention)."""
    return r.get("attention", "measured") == "measured"


ASKED = {"measured": "per shape, timed", "no-cudnn": "cuDNN left out", "cudnn": "cuDNN allowed"}
# shardtune's default row was traced (bench/gpu.sh): its attention kernels are those of the trace.
shardtune_kernels = traced_attention(os.path.join(out, "trace.json.gz"))
for r in runs:
    if r["engine"] == "shardtune" and measured(r) and not r.get("packed") and shardtune_kernels is not None:
        r.setdefault("attention_kernels", shardtune_kernels)
matmul = next((r for r in runs if r["engine"] == "torch.matmul"), None)
def gpu_name():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True).stdout.strip()
    except OSError:  # no NVIDIA driver (the CPU test of this report)
        return "no GPU"


name = matmul["device"] if matmul else gpu_name()
# bf16 dense tensor-core peaks from NVIDIA's data sheets, TFLOP/s.
peaks = [("H200", 989.4), ("H100 PCIe", 756.0), ("H100", 989.4), ("A100", 312.0), ("L40S", 362.05), ("A10", 125.0)]
spec = next((p for key, p in peaks if key in name), None)
flops = next((r["flops_per_token"] for r in runs if r["engine"] == "shardtune"), None)
rows = []
for r in runs:
    if r["engine"] == "torch.matmul":
        continue
    achieved = r["tokens_per_s"] * flops / 1e12 if flops else None
    if r["engine"] == "shardtune":
        chose = r.get("attention_choices") or {}
        attention = ASKED.get(r.get("attention", "measured"), "?") + (
            f" (cuDNN for {sum(chose.values())} of {len(chose)} shapes)" if chose else "") + (
            f": {kernel_kinds(r['attention_kernels'])}" if "attention_kernels" in r else "")
    else:
        attention = f"{r.get('sdpa', 'default')}: {kernel_kinds(r.get('attention_kernels', {}))}"
    ours = next((s for s in runs if s["engine"] == "shardtune" and s["activation_checkpointing"] == r["activation_checkpointing"]
                 and s["micro_batch"] == r["micro_batch"] and not s.get("packed") and measured(s)
                 and s.get("adamw", "fused") == "fused" and not s.get("unfused")
                 and not s.get("uncheckpointed_blocks")), None)
    # Like for like: the same AdamW and the same timing window as the shardtune row compared with.
    unlike = [k for k in ("adamw_hyper", "timing") if ours and ours is not r and r.get(k) != ours.get(k)]
    rows.append(dict(r, tflops=achieved, attention=attention, unlike=unlike,
                     mfu_spec=achieved / spec if achieved and spec else None,
                     mfu_matmul=achieved / matmul["tflops_per_s"] if achieved and matmul else None,
                     shardtune_ratio=ours["tokens_per_s"] / r["tokens_per_s"] if ours and ours is not r else None))
doc = {"device": name, "bf16_peak_tflops_spec": spec, "matmul_tflops": matmul["tflops_per_s"] if matmul else None,
       "flops_per_token": flops, "seq": 2048, "runs": rows}
json.dump(doc, open(f"{out}/bench.json", "w"), indent=1)
f = lambda v, p=2: "-" if v is None else f"{v:.{p}f}"
lines = [f"## Llama 3.2 1B shapes, sequence 2048, bf16 mixed precision, world size 1, {name}", "",
         f"bf16 peak (data sheet): {f(spec, 1)} TFLOP/s; bf16 8192³ matmul measured: "
         f"{f(doc['matmul_tflops'], 1)} TFLOP/s; FLOPs per token (6·N + 12·L·d·T, a tied head counted once, docs/metrics.md): {f(flops / 1e9 if flops else None)} G", "",
         "Both engines: AdamW " + "; ".join(sorted({json.dumps(r.get("adamw_hyper"), sort_keys=True) for r in rows})) + "; timing: "
         + "; ".join(sorted({str(r.get("timing")) for r in rows})) + ".", "",
         "| engine | activation ckpt | packed | attention (asked: kernels run) | micro-batch | tokens/s | TFLOP/s | MFU (peak) | MFU (matmul) | peak GiB | shardtune ÷ this |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
yes_no = lambda v: "yes" if v else "no"
for r in rows:
    engine = r["engine"] + (", AdamW an operation at a time" if r.get("adamw") == "ops" else "") + (
        ", LibTorch's fused AdamW" if r.get("adamw") == "torch-fused" else "") + (
        f", unfused: {'+'.join(r['unfused'])}" if r.get("unfused") else "") + (
        f", the last {r['uncheckpointed_blocks']} blocks not checkpointed" if r.get("uncheckpointed_blocks") else "")
    lines.append(f"| {engine} | {yes_no(r['activation_checkpointing'])} | {yes_no(r.get('packed'))} | {r['attention']} "
                 f"| {r['micro_batch']} | {r['tokens_per_s']:.0f} | {f(r['tflops'], 1)} | {f(r['mfu_spec'] and 100 * r['mfu_spec'], 1)}% "
                 f"| {f(r['mfu_matmul'] and 100 * r['mfu_matmul'], 1)}% | {r['peak_allocated_gib']:.1f} | {f(r['shardtune_ratio'])}"
                 + (f" (not like for like: {', '.join(r['unlike'])} differ)" if r["unlike"] else "") + " |")
lines += ["", "Attention kernels by run (ms over the profiled step or steps):", ""]
for r in rows:
    if r.get("attention_kernels"):
        lines.append(f"- {r['engine']} ({r['attention']}, micro-batch {r['micro_batch']}): "
                     + ", ".join(f"`{k}` {v}" for k, v in r["attention_kernels"].items()))
# What is live at each engine's peak (bench/memory_peak.py over --memory-snapshot's history).
snapshots = [(e, f"{out}/memory-{e}.json") for e in ("shardtune", "pytorch")]
if any(os.path.exists(p) for _, p in snapshots):
    lines += ["", "Live at the peak, by where it was allocated (two more steps with the allocator's history, "
              "the largest micro-batch without activation checkpointing):", ""]
    for e, p in snapshots:
        if not os.path.exists(p):
            lines.append(f"- {e}: no snapshot")
            continue
        s = json.load(open(p))
        lines.append(f"- {e}: {s['peak_bytes'] / 2**30:.2f} GiB at the peak, {s['live_blocks']} blocks")
        lines += [f"  - {g['bytes'] / 2**30:.3f} GiB, {g['blocks']} blocks: `{g['origin']}`" for g in s["groups"]]
open(f"{out}/bench.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
