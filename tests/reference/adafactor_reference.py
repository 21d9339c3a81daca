#!/usr/bin/env python3
"""An independent reference for shardtune's Adafactor (runtime/fsdp/adafactor.h): the update of
Hugging Face transformers' `Adafactor.step`, in plain PyTorch, in float64 (the exact answer that
shardtune's float32 is held to), one tensor at a time:

  - step t (counted per tensor, from 1); RMS(x) = ||x||_2 / sqrt(numel);
  - lr_t = lr, or with relative_step min(1e-6 t if warmup_init else 1e-2, 1 / sqrt(t)); with
    scale_parameter times max(eps2, RMS(p)) of the parameter before the update;
  - beta2t = 1 - t^decay_rate; s = g^2 + eps1;
  - a matrix (r x c): row = beta2t row + (1 - beta2t) mean(s, over columns), col likewise over rows;
    u = rsqrt(row / mean(row))[:, None] * rsqrt(col)[None, :] * g;
    a vector: v = beta2t v + (1 - beta2t) s; u = rsqrt(v) * g;
  - u = u / max(1, RMS(u) / clip_threshold) * lr_t;
  - with beta1: m = beta1 m + (1 - beta1) u, u = m;
  - p = p - weight_decay lr_t p (when weight_decay != 0), then p = p - u.

Each case is a list of flat parameters, each a list of tensors (name, shape), with its settings
and learning rate. It writes the initial parameters, the gradients of every step and, after the
last step, the parameters and every statistic (row and column means, vector moments, first
moments), all as raw little-endian float32 files (the reference's float64 results rounded once),
with cases.json describing them. tests/unit/adafactor_test.cpp and tests/mpi/adafactor_fsdp_test.cpp
hold shardtune to them.

Usage: python3 tests/reference/adafactor_reference.py OUT_DIR
"""
import json
import math
import os
import sys

import torch

STEPS = 20


def rms(x):
    return x.norm(2) / math.sqrt(x.numel())


def adafactor_step(p, g, state, cfg, lr):
    """One update of tensor p (float64) from gradient g, as transformers.Adafactor.step."""
    state["step"] += 1
    t = state["step"]
    rel = lr
    if cfg["relative_step"]:
        rel = min(1e-6 * t if cfg["warmup_init"] else 1e-2, 1.0 / math.sqrt(t))
    scale = max(cfg["eps2"], rms(p).item()) if cfg["scale_parameter"] else 1.0
    step_lr = scale * rel
    beta2t = 1.0 - t ** cfg["decay_rate"]
    s = g * g + cfg["eps1"]
    if p.dim() == 2:
        state["row"] = beta2t * state["row"] + (1 - beta2t) * s.mean(dim=1)
        state["col"] = beta2t * state["col"] + (1 - beta2t) * s.mean(dim=0)
        r = (state["row"] / state["row"].mean()).rsqrt()
        c = state["col"].rsqrt()
        u = r[:, None] * c[None, :] * g
    else:
        state["vec"] = beta2t * state["vec"] + (1 - beta2t) * s
        u = state["vec"].rsqrt() * g
    u = u / max(1.0, rms(u).item() / cfg["clip_threshold"]) * step_lr
    if cfg["beta1"] > 0:
        state["m"] = cfg["beta1"] * state["m"] + (1 - cfg["beta1"]) * u
        u = state["m"]
    if cfg["weight_decay"] != 0:
        p = p - cfg["weight_decay"] * step_lr * p
    return p - u


DEFAULTS = dict(eps1=1e-30, eps2=1e-3, clip_threshold=1.0, decay_rate=-0.8, beta1=0.0, weight_decay=0.0,
                scale_parameter=False, relative_step=False, warmup_init=False)

# Shapes that cut rows in the middle when sharded over 2, 3 or 4 ranks, a one-row and a one-column
# matrix, vectors, and a flat of vectors alone.
FLATS = [
    [("a.weight", [48, 40]), ("a.norm", [40]), ("b.weight", [7, 130])],
    [("c.weight", [1, 65]), ("d.weight", [33, 1]), ("e.weight", [96, 24])],
    [("f.norm", [29]), ("g.norm", [64])],
]

CASES = [
    ("trainer_defaults", dict(), 1e-2),
    ("first_moment_and_decay", dict(beta1=0.9, weight_decay=0.1), 3e-3),
    ("relative_scaled", dict(relative_step=True, scale_parameter=True), None),
    ("warmup_init", dict(relative_step=True, warmup_init=True, scale_parameter=True, beta1=0.5), None),
    ("tight_clip", dict(clip_threshold=0.05, decay_rate=-0.5, eps2=1e-2, scale_parameter=True), 5e-2),
]


def main(out):
    os.makedirs(out, exist_ok=True)
    cases = []
    for index, (name, overrides, lr) in enumerate(CASES):
        cfg = dict(DEFAULTS, **overrides)
        gen = torch.Generator().manual_seed(1234 + index)
        params, grads = {}, {}
        for flat in FLATS:
            for tname, shape in flat:
                params[tname] = torch.randn(shape, generator=gen, dtype=torch.float64).float()
                # Gradients whose scale differs from row to row and from step to step, and with zeros.
                g = []
                for step in range(STEPS):
                    x = torch.randn(shape, generator=gen, dtype=torch.float64)
                    x = x * (10.0 ** (-(torch.arange(x.numel(), dtype=torch.float64) // 37 % 4))).reshape(shape)
                    x[(torch.arange(x.numel()) % 23 == 0).reshape(shape)] = 0.0
                    g.append(x.float())
                grads[tname] = g
        files = {}

        def write(key, tensor):
            fname = f"{name}.{key}.f32"
            tensor.detach().to(torch.float32).contiguous().numpy().tofile(os.path.join(out, fname))
            files[key] = fname

        for tname, p in params.items():
            write(f"{tname}.param0", p)
            write(f"{tname}.grads", torch.stack(grads[tname]))
            p64 = p.double()
            state = {"step": 0}
            if p.dim() == 2:
                state["row"] = torch.zeros(p.shape[0], dtype=torch.float64)
                state["col"] = torch.zeros(p.shape[1], dtype=torch.float64)
            else:
                state["vec"] = torch.zeros(p.shape, dtype=torch.float64)
            if cfg["beta1"] > 0:
                state["m"] = torch.zeros(p.shape, dtype=torch.float64)
            for step in range(STEPS):
                p64 = adafactor_step(p64, grads[tname][step].double(), state, cfg, lr)
            write(f"{tname}.param", p64)
            for key in ("row", "col", "vec", "m"):
                if key in state:
                    write(f"{tname}.{key}", state[key])
        cases.append(dict(name=name, config=cfg, lr=lr if lr is not None else 0.0, steps=STEPS,
                          flats=[[dict(name=t, shape=s) for t, s in flat] for flat in FLATS], files=files))
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(cases, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
