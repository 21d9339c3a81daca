#!/usr/bin/env python3
"""PyTorch's own figures for bench/gpu.sh, on the same GPU in the same run as shardtune's.

  torch_baseline.py matmul
      bf16 matrix product of 8192 x 8192 x 8192: achieved TFLOP/s (the reachable peak).
  torch_baseline.py train MODEL_DIR --seq 2048 --micro-batch B [--checkpointing] [--compile]
                    [--sdpa default|flash|efficient|cudnn]
      transformers' LlamaForCausalLM (SDPA attention) built from MODEL_DIR/config.json with
      random fp32 weights, sharded by FSDP2's fully_shard per decoder block and at the root with
      bf16 parameters and fp32 gradient reduction (shardtune's mixed precision), at world size 1;
      optionally each block wrapped for activation checkpointing and/or compiled with
      torch.compile (torchtitan's recipe). Like for like with train_bench: the same tokens per
      step; AdamW fused (torch.optim.AdamW(fused=True), the kernel shardtune runs on a GPU) with
      shardtune's hyper-parameters (lr 1e-5, betas 0.9/0.999, eps 1e-8, no weight decay); the
      clock read with the device idle before and after each whole step, optimizer included.
      --sdpa restricts scaled_dot_product_attention to one backend (default: PyTorch's choice);
      the attention kernels one profiled step ran are printed either way.

Prints one JSON object; exits 3 when the micro-batch does not fit.
"""
import argparse
import json
import os
import re
import sys
import time


def matmul(args):
    import torch

    n = 8192
    a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 20
    start.record()
    for _ in range(reps):
        torch.matmul(a, b)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / reps
    print(json.dumps({"engine": "torch.matmul", "device": torch.cuda.get_device_name(),
                      "tflops_per_s": 2 * n**3 / seconds / 1e12}))


# shardtune's AdamW (runtime/fsdp/adamw.h's defaults, bench/train_bench.cpp's learning rate).
# Allocator events a --memory-snapshot keeps (train_bench keeps as many).
SNAPSHOT_EVENTS = 200000
ADAMW = {"lr": 1e-5, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "fused": True}
TIMING = "device synchronised before and after each step, AdamW included"  # train_bench's words
ATTENTION = re.compile(r"flash|fmha|attention|sdpa|cudnn", re.I)  # as bench/trace_summary.py


def sdpa_backends(choice):
    """A context that restricts scaled_dot_product_attention to one backend ('default': none)."""
    import contextlib
    if choice == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([{"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                         "cudnn": SDPBackend.CUDNN_ATTENTION}[choice]])


def attention_kernels(step):
    """The attention kernels one more step runs on the GPU: {name: milliseconds}."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        raise
    except Exception as e:  # the row's figures stand without the kernels' names
        return {f"profiler failed: {type(e).__name__}: {e}"[:120]: 0.0}
    found = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and ATTENTION.search(e.name):
            us = getattr(e, "device_time", None) or getattr(e, "cuda_time", 0.0)
            found[e.name[:120]] = found.get(e.name[:120], 0.0) + us / 1e3
    return {k: round(v, 3) for k, v in sorted(found.items(), key=lambda kv: -kv[1])}


def train(args):
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import LlamaConfig, LlamaForCausalLM

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=0, world_size=1)
    torch.cuda.set_device(0)
    config = LlamaConfig.from_pretrained(args.model)
    config.use_cache = False
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).float()
    layers = model.model.layers
    for i, block in enumerate(layers):
        if args.checkpointing:
            from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

            block = checkpoint_wrapper(block, preserve_rng_state=False)
        if args.compile:
            block = torch.compile(block)  # a graph break in transformers' block is not an error
        layers[i] = block
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in layers:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    optimizer = torch.optim.AdamW(model.parameters(), **ADAMW)
    generator = torch.Generator(device="cuda").manual_seed(1)

    def step():
        ids = torch.randint(0, config.vocab_size, (args.micro_batch, args.seq), device="cuda", generator=generator)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()  # the host reads the loss, as shardtune's step does

    times = []
    try:
        with sdpa_backends(args.sdpa):
            for i in range(args.warmup + args.steps):
                if i == args.warmup:
                    torch.cuda.reset_peak_memory_stats()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                step()
                torch.cuda.synchronize()
                if i >= args.warmup:
                    times.append(time.perf_counter() - t0)
            peak_allocated, peak_reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
            if args.memory_snapshot:
                # Two more steps with the allocator's history recorded (it slows them: not timed),
                # as train_bench --memory-snapshot records its own.
                torch.cuda.memory._record_memory_history(max_entries=SNAPSHOT_EVENTS)
                for _ in range(2):
                    step()
                torch.cuda.synchronize()
                torch.cuda.memory._dump_snapshot(args.memory_snapshot)
                torch.cuda.memory._record_memory_history(enabled=None)
            attention = attention_kernels(step)
    except torch.OutOfMemoryError as e:
        print(f"micro-batch {args.micro_batch} does not fit: {e}", file=sys.stderr)
        sys.exit(3)
    times.sort()
    median = times[len(times) // 2]
    tokens = args.micro_batch * args.seq
    print(json.dumps({
        "engine": "pytorch-fsdp2" + ("-compile" if args.compile else ""),
        "device": torch.cuda.get_device_name(), "torch": torch.__version__, "world_size": 1,
        "seq": args.seq, "micro_batch": args.micro_batch, "activation_checkpointing": args.checkpointing,
        "steps": args.steps, "step_seconds_median": median, "step_seconds_min": times[0],
        "step_seconds_max": times[-1], "tokens_per_s": tokens / median,
        "adamw": "fused", "adamw_hyper": {k: v for k, v in ADAMW.items() if k != "fused"},
        "timing": TIMING,
        "sdpa": args.sdpa, "attention_kernels": attention,
        "peak_allocated_gib": peak_allocated / 2**30, "peak_reserved_gib": peak_reserved / 2**30}))
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("matmul")
    t = sub.add_parser("train")
    t.add_argument("model")
    t.add_argument("--seq", type=int, default=2048)
    t.add_argument("--micro-batch", type=int, default=4)
    t.add_argument("--checkpointing", action="store_true")
    t.add_argument("--compile", action="store_true")
    t.add_argument("--sdpa", choices=["default", "flash", "efficient", "cudnn"], default="default")
    t.add_argument("--steps", type=int, default=10)
    t.add_argument("--warmup", type=int, default=3)
    t.add_argument("--memory-snapshot", help="after the timed steps, two more with the caching allocator's history "
                   "recorded, its snapshot written to this file (bench/memory_peak.py reads it)")
    args = parser.parse_args()
    matmul(args) if args.what == "matmul" else train(args)


if __name__ == "__main__":
    main()
