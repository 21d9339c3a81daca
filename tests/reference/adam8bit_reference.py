#!/usr/bin/env python3
"""An independent reference for shardtune's 8-bit AdamW (runtime/fsdp/adam8bit.h): bitsandbytes'
block-wise 8-bit Adam update (kOptimizerStatic8bit2StateBlockwise, AdamW8bit with
min_8bit_size = 0), written in numpy float32 from bitsandbytes' CUDA kernel, vectorised over
blocks where shardtune loops over elements:

  - the maps: create_dynamic_map(signed=True) for the first moment, (signed=False) for the second,
    from torch's float32 linspace (tests/reference/nf4_reference.py, linspace_f32);
  - state: one uint8 code per element and one fp32 absmax per block of 256, both starting at 0;
    a tensor's last short block is filled with phantom elements (first-moment code 128,
    second-moment code 0, gradient 0) that count towards its absmax, as the kernel's loads fill it;
  - a step: decode (map[code] * absmax), s2 = s2 * b2 + ((1 - b2) * g) * g, s1 = s1 * b1 + (1 - b1) * g
    (a non-finite g zeroes both and leaves p); absmax = max |s| over the block; p = p + step_size *
    (s1 / (sqrt(s2) + c2 * eps)), then p = p * (1 - lr * wd) when wd > 0; codes by quantize_2D's
    binary search of s / absmax, a first-moment code of the wrong sign moved one code over.

Tensors of fewer than 4096 elements (bitsandbytes' min_8bit_size) keep fp32 moments, updated as
its 32-bit kernel (kOptimizer32bit2State) does: s1 = s1 * b1 + (1 - b1) * g, s2 = s2 * b2 + (1 - b2) *
(g * g), the same parameter update and decay, no check for non-finite gradients.

The documented rounding choices, where bitsandbytes' CUDA kernel rounds otherwise: c1 = fp32(1 -
b1^t) and c2 = fp32(sqrt(1 - b2^t)) are worked out in float64 (the kernel: __powf in fp32);
divisions are IEEE (the kernel: __fdividef, within 2 ulp); no multiply and add is fused (nvcc
contracts them by default). bf16 parameters are rounded to bf16 after the update and again after
the decay, as the kernel stores T twice.

For each case it writes the initial parameters, the gradients of every step, and the state after
the first and the last step (parameters, both codes, both absmax), as raw little-endian files, with
cases.json describing them; plus code cases: values at and around every midpoint of both maps,
with the codes quantize_2D gives them. tests/unit/adam8bit_test.cpp holds shardtune to them bit
for bit.

Usage: python3 tests/reference/adam8bit_reference.py OUT_DIR
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nf4_reference import linspace_f32  # noqa: E402

F32 = np.float32
BLOCK = 256


def dynamic_map(signed):
    data = []
    for i in range(7):
        b = linspace_f32(2 ** i + 1 if signed else 2 ** (i + 1) + 1)
        means = (b[:-1] + b[1:]) / F32(2)
        scale = F32(10.0 ** (i - 6))
        data += [float(v) for v in scale * means]
        if signed:
            data += [float(v) for v in -scale * means]
    data += [0.0, 1.0]
    assert len(data) == 256
    return np.array(sorted(data), F32)


MAPS = {True: dynamic_map(True), False: dynamic_map(False)}


def encode(x, signed):
    """quantize_2D<SIGNED>: seven halvings from pivot 127, then the nearer neighbour by fp32
    midpoints; the search's bounds start at -1 (signed) or 0, and 1. NaN ends at code 0."""
    code = MAPS[signed]
    x = np.asarray(x, F32)
    pivot = np.full(x.shape, 127, np.int64)
    upper_pivot = np.full(x.shape, 255, np.int64)
    lower_pivot = np.zeros(x.shape, np.int64)
    lower = np.full(x.shape, F32(-1.0 if signed else 0.0), F32)
    upper = np.full(x.shape, F32(1.0), F32)
    val = code[pivot]
    i = 64
    while i > 0:
        above = x > val
        lower_pivot = np.where(above, pivot, lower_pivot)
        lower = np.where(above, val, lower)
        upper_pivot = np.where(above, upper_pivot, pivot)
        upper = np.where(above, upper, val)
        pivot = np.where(above, pivot + i, pivot - i)
        val = code[pivot]
        i //= 2
    up = np.where(x > (upper + val) * F32(0.5), upper_pivot, pivot)
    down = np.where(x < (lower + val) * F32(0.5), lower_pivot, pivot)
    return np.where(x > val, up, down).astype(np.uint8)


def to_bf16(x):
    """float32 -> bfloat16 -> float32, round to nearest even (NaN kept)."""
    bits = np.asarray(x, F32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return np.where(np.isnan(x), x, rounded.astype(np.uint32).view(F32)).astype(F32)


def scalars(lr, b1, b2, eps, wd, step):
    c1 = F32(1.0 - b1 ** step)
    c2 = F32(np.sqrt(1.0 - b2 ** step))
    lr = F32(lr)
    return {
        "b1": F32(b1), "b2": F32(b2), "omb1": F32(1) - F32(b1), "omb2": F32(1) - F32(b2),
        "c2eps": F32(c2 * F32(eps)), "step_size": F32(F32(-lr * c2) / c1),
        "decays": wd > 0, "decay": F32(F32(1) - F32(lr * F32(wd))),
    }


def step(p, g, c1, c2, a1, a2, s, bf16):
    """One step of a whole tensor (p, g: n elements; codes: whole blocks; absmax: per block)."""
    n = p.size
    blocks = a1.size
    full = blocks * BLOCK
    gf = np.zeros(full, F32)
    gf[:n] = g
    q1 = c1.copy()
    q2 = c2.copy()
    q1[n:] = 128  # phantoms
    q2[n:] = 0
    gf = gf.reshape(blocks, BLOCK)
    finite = np.isfinite(gf)
    with np.errstate(all="ignore"):
        v = MAPS[False][q2].reshape(blocks, BLOCK) * a2[:, None]
        s2 = np.where(finite, v * s["b2"] + (s["omb2"] * gf) * gf, F32(0)).astype(F32)
        m = MAPS[True][q1].reshape(blocks, BLOCK) * a1[:, None]
        s1 = np.where(finite, m * s["b1"] + s["omb1"] * gf, F32(0)).astype(F32)
        max1 = np.abs(s1).max(axis=1).astype(F32)
        max2 = np.abs(s2).max(axis=1).astype(F32)
        upd = (s["step_size"] * (s1 / (np.sqrt(s2) + s["c2eps"]))).astype(F32).reshape(-1)[:n]
        new_p = (p + upd).astype(F32)
        if bf16:
            new_p = to_bf16(new_p)
        if s["decays"]:
            new_p = (new_p * s["decay"]).astype(F32)
            if bf16:
                new_p = to_bf16(new_p)
        p = np.where(finite.reshape(-1)[:n], new_p, p).astype(F32)
        k1 = encode(s1 / max1[:, None], True)
        wrong = np.signbit(MAPS[True][k1]) != np.signbit(s1)
        k1 = np.where(wrong, np.where(s1 > 0, k1.astype(np.int64) + 1, k1.astype(np.int64) - 1), k1) % 256
        k2 = encode(s2 / max2[:, None], False)
    return p, k1.astype(np.uint8).reshape(-1), k2.reshape(-1), max1, max2


def step32(p, g, m, v, s, bf16):
    """bitsandbytes' 32-bit Adam step of a small tensor (fp32 moments)."""
    with np.errstate(all="ignore"):
        m = (m * s["b1"] + s["omb1"] * g).astype(F32)
        v = (v * s["b2"] + s["omb2"] * (g * g)).astype(F32)
        new_p = (p + s["step_size"] * (m / (np.sqrt(v) + s["c2eps"]))).astype(F32)
        if bf16:
            new_p = to_bf16(new_p)
        if s["decays"]:
            new_p = (new_p * s["decay"]).astype(F32)
            if bf16:
                new_p = to_bf16(new_p)
    return new_p, m, v


def gradients(rng, n, steps, kind):
    """Gradients with the spread of a real model's: blocks of very different scales, exact zeros,
    and (kind "nonfinite") a NaN and infinities at one step."""
    out = []
    scale = F32(10.0) ** rng.uniform(-6, 0, size=(n + BLOCK - 1) // BLOCK).astype(F32)
    for t in range(steps):
        g = (rng.standard_normal(n).astype(F32) * np.repeat(scale, BLOCK)[:n]).astype(F32)
        g[rng.random(n) < 0.02] = 0
        if kind == "bf16_grad":
            g = to_bf16(g)
        if kind == "zero_block" and n > BLOCK:
            g[:BLOCK] = 0  # a block that never moves: absmax 0 throughout
        if kind == "nonfinite" and t == 3:
            g[1] = np.nan
            g[n // 2] = np.inf
            g[-1] = -np.inf
        out.append(g)
    return out


def cases(rng):
    out = []
    plan = [
        ("whole_blocks", 4 * BLOCK, "plain", 0.0, False),
        ("short_last_block", 1000, "plain", 0.0, False),
        ("weight_decay", 4099, "plain", 0.01, False),
        ("one_short_block", 37, "plain", 0.0, False),
        ("zero_block", 3 * BLOCK + 5, "zero_block", 0.0, False),
        ("nonfinite_gradients", 700, "nonfinite", 0.0, False),
        ("bf16_gradients", 1500, "bf16_grad", 0.01, False),
        ("bf16_parameters", 1300, "plain", 0.01, True),
        ("fp32_moments", 2000, "fp32_state", 0.01, False),
        ("fp32_moments_bf16_parameters", 900, "fp32_state", 0.01, True),
    ]
    for name, n, kind, wd, bf16 in plan:
        if kind == "fp32_state":  # a small tensor: the state is the two fp32 moments
            steps = 20
            p0 = rng.standard_normal(n).astype(F32) * F32(0.05)
            if bf16:
                p0 = to_bf16(p0)
            gs = gradients(rng, n, steps, "plain")
            p, m, v = p0.copy(), np.zeros(n, F32), np.zeros(n, F32)
            first = None
            for t in range(1, steps + 1):
                p, m, v = step32(p, gs[t - 1], m, v, scalars(1e-3, 0.9, 0.999, 1e-8, wd, t), bf16)
                if t == 1:
                    first = (p.copy(), m.copy(), v.copy())
            out.append({"name": name, "numel": n, "steps": steps, "lr": 1e-3, "beta1": 0.9, "beta2": 0.999,
                        "eps": 1e-8, "weight_decay": wd, "bf16_params": bf16, "bf16_grads": False, "fp32_state": True,
                        "p0": p0, "grads": np.concatenate(gs), "first": first, "last": (p, m, v)})
            continue
        steps = 20
        p0 = rng.standard_normal(n).astype(F32) * F32(0.05)
        if bf16:
            p0 = to_bf16(p0)
        gs = gradients(rng, n, steps, kind)
        blocks = (n + BLOCK - 1) // BLOCK
        p, c1, c2 = p0.copy(), np.zeros(blocks * BLOCK, np.uint8), np.zeros(blocks * BLOCK, np.uint8)
        a1, a2 = np.zeros(blocks, F32), np.zeros(blocks, F32)
        lr = 1e-3
        first = None
        for t in range(1, steps + 1):
            p, c1, c2, a1, a2 = step(p, gs[t - 1], c1, c2, a1, a2, scalars(lr, 0.9, 0.999, 1e-8, wd, t), bf16)
            if t == 1:
                first = (p.copy(), c1.copy(), c2.copy(), a1.copy(), a2.copy())
        out.append({"name": name, "numel": n, "steps": steps, "lr": lr, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                    "weight_decay": wd, "bf16_params": bf16, "bf16_grads": kind == "bf16_grad", "fp32_state": False,
                    "p0": p0,
                    "grads": np.concatenate(gs), "first": first, "last": (p, c1, c2, a1, a2)})
    return out


def code_cases():
    """Values at, just below and just above every midpoint of both maps, the maps' own values, the
    ends and beyond, zeros of both signs and NaN."""
    out = {}
    for signed in (True, False):
        m = MAPS[signed]
        mids = ((m[:-1] + m[1:]) * F32(0.5)).astype(F32)
        xs = [m, mids, np.nextafter(mids, F32(-2)), np.nextafter(mids, F32(2)),
              np.array([-1.0, 1.0, -1.5, 1.5, 0.0, -0.0, np.nan, 1e-9, -1e-9], F32)]
        x = np.concatenate(xs).astype(F32)
        out["signed" if signed else "unsigned"] = (x, encode(x, signed))
    return out


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20261129)

    def save(name, array):
        path = os.path.join(out, name)
        np.ascontiguousarray(array).tofile(path)
        return name

    doc = {"maps": {"signed": save("map_signed.f32", MAPS[True]), "unsigned": save("map_unsigned.f32", MAPS[False])},
           "codes": {}, "cases": []}
    for which, (x, code) in code_cases().items():
        doc["codes"][which] = {"x": save(f"codes_{which}_x.f32", x), "code": save(f"codes_{which}.u8", code)}
    for c in cases(rng):
        entry = {k: c[k] for k in ("name", "numel", "steps", "lr", "beta1", "beta2", "eps", "weight_decay",
                                   "bf16_params", "bf16_grads", "fp32_state")}
        entry["p0"] = save(f"{c['name']}_p0.f32", c["p0"])
        entry["grads"] = save(f"{c['name']}_grads.f32", c["grads"])
        for when in ("first", "last"):
            if c["fp32_state"]:
                p, m, v = c[when]
                entry[when] = {"p": save(f"{c['name']}_{when}_p.f32", p), "m": save(f"{c['name']}_{when}_m.f32", m),
                               "v": save(f"{c['name']}_{when}_v.f32", v)}
                continue
            p, c1, c2, a1, a2 = c[when]
            entry[when] = {"p": save(f"{c['name']}_{when}_p.f32", p), "codes1": save(f"{c['name']}_{when}_c1.u8", c1),
                           "codes2": save(f"{c['name']}_{when}_c2.u8", c2),
                           "absmax1": save(f"{c['name']}_{when}_a1.f32", a1),
                           "absmax2": save(f"{c['name']}_{when}_a2.f32", a2)}
        doc["cases"].append(entry)
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(f"{len(doc['cases'])} cases of 8-bit AdamW written to {out}")


if __name__ == "__main__":
    main(sys.argv[1])
