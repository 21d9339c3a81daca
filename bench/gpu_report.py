#!/usr/bin/env python3
"""The table of bench/gpu.sh: each run of runs.jsonl (train_bench and torch_baseline.py output,
one JSON object per line) with its achieved TFLOP/s, MFU against the GPU's bf16 data-sheet peak
and against the measured matmul, and shardtune's tokens/s over each at the same configuration.
Writes bench.json and bench.md into OUT_DIR.  usage: gpu_report.py RUNS_JSONL OUT_DIR
"""
import json, subprocess, sys
results, out = sys.argv[1], sys.argv[2]
runs = [json.loads(l) for l in open(results) if l.strip()]
matmul = next((r for r in runs if r["engine"] == "torch.matmul"), None)
name = matmul["device"] if matmul else subprocess.run(
    ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
# bf16 dense tensor-core peaks from NVIDIA's data sheets, TFLOP/s.
peaks = [("H200", 989.4), ("H100 PCIe", 756.0), ("H100", 989.4), ("A100", 312.0), ("L40S", 362.05), ("A10", 125.0)]
spec = next((p for key, p in peaks if key in name), None)
flops = next((r["flops_per_token"] for r in runs if r["engine"] == "shardtune"), None)
rows = []
for r in runs:
    if r["engine"] == "torch.matmul":
        continue
    achieved = r["tokens_per_s"] * flops / 1e12 if flops else None
    ours = next((s for s in runs if s["engine"] == "shardtune" and s["activation_checkpointing"] == r["activation_checkpointing"]
                 and s["micro_batch"] == r["micro_batch"] and not s.get("packed") and not s.get("cudnn_attention")
                 and s.get("adamw", "fused") == "fused"), None)
    rows.append(dict(r, tflops=achieved,
                     mfu_spec=achieved / spec if achieved and spec else None,
                     mfu_matmul=achieved / matmul["tflops_per_s"] if achieved and matmul else None,
                     shardtune_ratio=ours["tokens_per_s"] / r["tokens_per_s"] if ours and ours is not r else None))
doc = {"device": name, "bf16_peak_tflops_spec": spec, "matmul_tflops": matmul["tflops_per_s"] if matmul else None,
       "flops_per_token": flops, "seq": 2048, "runs": rows}
json.dump(doc, open(f"{out}/bench.json", "w"), indent=1)
f = lambda v, p=2: "-" if v is None else f"{v:.{p}f}"
lines = [f"## Llama 3.2 1B shapes, sequence 2048, bf16 mixed precision, world size 1, {name}", "",
         f"bf16 peak (data sheet): {f(spec, 1)} TFLOP/s; bf16 8192³ matmul measured: "
         f"{f(doc['matmul_tflops'], 1)} TFLOP/s; FLOPs per token (torchtitan): {f(flops / 1e9 if flops else None)} G", "",
         "| engine | activation ckpt | packed | cuDNN attention | micro-batch | tokens/s | TFLOP/s | MFU (peak) | MFU (matmul) | peak GiB | shardtune ÷ this |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
yes_no = lambda v: "yes" if v else "no"
for r in rows:
    cudnn = yes_no(r["cudnn_attention"]) if "cudnn_attention" in r else "PyTorch's choice"
    engine = r["engine"] + (", AdamW an operation at a time" if r.get("adamw") == "ops" else "")
    lines.append(f"| {engine} | {yes_no(r['activation_checkpointing'])} | {yes_no(r.get('packed'))} | {cudnn} "
                 f"| {r['micro_batch']} | {r['tokens_per_s']:.0f} | {f(r['tflops'], 1)} | {f(r['mfu_spec'] and 100 * r['mfu_spec'], 1)}% "
                 f"| {f(r['mfu_matmul'] and 100 * r['mfu_matmul'], 1)}% | {r['peak_allocated_gib']:.1f} | {f(r['shardtune_ratio'])} |")
open(f"{out}/bench.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
