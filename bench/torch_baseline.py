#!/usr/bin/env python3
"""PyTorch's own figures for bench/gpu.sh, on the same GPU in the same run as shardtune's.

  torch_baseline.py matmul
      bf16 matrix product of 8192 x 8192 x 8192: achieved TFLOP/s (the reachable peak).
  torch_baseline.py train MODEL_DIR --seq 2048 --micro-batch B [--checkpointing] [--compile]
      transformers' LlamaForCausalLM (SDPA attention) built from MODEL_DIR/config.json with
      random fp32 weights, sharded by FSDP2's fully_shard per decoder block and at the root with
      bf16 parameters and fp32 gradient reduction (shardtune's mixed precision), AdamW, at world
      size 1; optionally each block wrapped for activation checkpointing and/or compiled with
      torch.compile (torchtitan's recipe). Same tokens per step as train_bench.

Prints one JSON object; exits 3 when the micro-batch does not fit.
"""
import argparse
import json
import os
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
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    generator = torch.Generator(device="cuda").manual_seed(1)

    times = []
    try:
        for step in range(args.warmup + args.steps):
            ids = torch.randint(0, config.vocab_size, (args.micro_batch, args.seq), device="cuda", generator=generator)
            if step == args.warmup:
                torch.cuda.reset_peak_memory_stats()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            loss.item()  # the host waits, as shardtune's step does when it reads its loss
            if step >= args.warmup:
                times.append(time.perf_counter() - t0)
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
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30}))
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
    t.add_argument("--steps", type=int, default=10)
    t.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    matmul(args) if args.what == "matmul" else train(args)


if __name__ == "__main__":
    main()
