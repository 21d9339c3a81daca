#!/usr/bin/python3
"""The PyTorch-eager peer of shardtune's CPU training, for bench/cpu_peer.sh.

  torch_cpu_peer.py gemm --size N --threads T
      fp32 torch.mm of N x N by N x N on T threads: achieved GFLOP/s (run one per rank
      concurrently under mpirun to measure what the whole machine reaches).
  torch_cpu_peer.py train MODEL_DIR --seq S --micro-batch B --threads T [--foreach]
      The Llama of MODEL_DIR/config.json written as a PyTorch user writes it (nn.Linear, nn.Embedding,
      RMSNorm, rotary embeddings, grouped-query attention as matmul + causal mask + fp32 softmax,
      SwiGLU), random fp32 weights, fp32 training, torch.optim.AdamW (lr 1e-5, betas (0.9, 0.999),
      eps 1e-8, weight decay 0: shardtune's defaults), the mean cross-entropy of next tokens. Under
      mpirun with more than one rank: DistributedDataParallel over gloo. B rows of S random tokens per
      rank per step, as train_bench.

Run it with Debian's /usr/bin/python3, whose torch is the same LibTorch and BLAS as shardtune's.
Rank 0 prints one JSON object: median step time, tokens/s, GFLOP/s by train_bench's FLOP estimate,
and the largest peak RSS of any rank.
"""
import argparse
import json
import math
import os
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def world():
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    return rank, size


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def gemm(args):
    torch.set_num_threads(args.threads)
    n = args.size
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(2):
        torch.mm(a, b)
    times = []
    for _ in range(args.reps):
        start = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - start)
    times.sort()
    rank, size = world()
    print(json.dumps({"engine": "torch.mm", "rank": rank, "world_size": size, "threads": args.threads, "size": n,
                      "gflops_per_s": 2 * n**3 / times[len(times) // 2] / 1e9}), flush=True)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h = cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads", self.heads)
        self.head_dim = cfg.get("head_dim", h // self.heads)
        self.q_proj = nn.Linear(h, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=False)
        self.gate_proj = nn.Linear(h, cfg["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(h, cfg["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(cfg["intermediate_size"], h, bias=False)
        self.input_layernorm = RMSNorm(h, cfg["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(h, cfg["rms_norm_eps"])

    def attention(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        groups = self.heads // self.kv_heads
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim) + mask
        out = torch.matmul(F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), v)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))

    def forward(self, x, cos, sin, mask):
        x = x + self.attention(self.input_layernorm(x), cos, sin, mask)
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        if cfg.get("tie_word_embeddings", False):
            self.lm_head.weight = self.embed_tokens.weight
        dim = self.layers[0].head_dim
        inv_freq = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        freqs = torch.outer(torch.arange(t, dtype=torch.float32), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        mask = torch.full((t, t), torch.finfo(torch.float32).min).triu(1)[None, None]
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


def train(args):
    torch.set_num_threads(args.threads)
    rank, size = world()
    with open(os.path.join(args.model_dir, "config.json")) as f:
        cfg = json.load(f)
    torch.manual_seed(1234)
    model = Llama(cfg)
    for p in model.parameters():
        nn.init.normal_(p, std=cfg.get("initializer_range", 0.02)) if p.dim() > 1 else nn.init.ones_(p)
    if size > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=size)
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                                  foreach=args.foreach)
    gen = torch.Generator().manual_seed(rank)
    times = []
    for step in range(args.warmup + args.steps):
        ids = torch.randint(0, cfg["vocab_size"], (args.micro_batch, args.seq), generator=gen)
        if size > 1:
            dist.barrier()
        start = time.perf_counter()
        logits = model(ids)
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    rss = torch.tensor([peak_rss_mib()])
    median = torch.tensor([sorted(times)[len(times) // 2]])
    if size > 1:
        dist.all_reduce(rss, op=dist.ReduceOp.MAX)
        dist.all_reduce(median, op=dist.ReduceOp.MAX)
    h, layers, heads = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim", h // heads)
    params = sum(p.numel() for p in (model.module if size > 1 else model).parameters())
    # train_bench's estimate (runtime/train/flops.cpp): 6 per parameter outside the embedding, plus attention.
    flops_per_token = 6.0 * (params - cfg["vocab_size"] * h) + 12.0 * layers * heads * head_dim * args.seq
    tokens_per_s = args.micro_batch * args.seq * size / median.item()
    if rank == 0:
        print(json.dumps({"engine": "pytorch-eager" + (" DDP(gloo)" if size > 1 else ""), "world_size": size,
                          "threads": args.threads, "foreach": bool(args.foreach), "parameters": params,
                          "seq": args.seq, "micro_batch": args.micro_batch, "steps": args.steps,
                          "step_seconds_median": median.item(), "tokens_per_s": tokens_per_s,
                          "gflops_per_s": tokens_per_s * flops_per_token / 1e9, "peak_rss_mib": rss.item()}),
              flush=True)
    if size > 1:
        dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    g = sub.add_parser("gemm")
    g.add_argument("--size", type=int, default=2048)
    g.add_argument("--threads", type=int, default=1)
    g.add_argument("--reps", type=int, default=5)
    t = sub.add_parser("train")
    t.add_argument("model_dir")
    t.add_argument("--seq", type=int, default=256)
    t.add_argument("--micro-batch", type=int, default=4)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--steps", type=int, default=5)
    t.add_argument("--warmup", type=int, default=2)
    t.add_argument("--foreach", action="store_true", help="AdamW's multi-tensor implementation")
    t.add_argument("--port", type=int, default=29517)
    args = parser.parse_args()
    gemm(args) if args.what == "gemm" else train(args)


if __name__ == "__main__":
    main()
