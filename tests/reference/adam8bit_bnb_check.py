#!/usr/bin/env python3
"""The numpy reference of 8-bit AdamW (adam8bit_reference.py, whose cases shardtune matches bit
for bit) against bitsandbytes itself, on a GPU machine that has it: each 8-bit case's 20 steps
through bitsandbytes' CUDA kernel (functional.optimizer_update_8bit_blockwise, "adam", with the
reference's own maps, which are bitsandbytes' as torch >= 2.0 builds them), from the same
parameters and gradients.

They round differently where the reference documents it (__powf and __fdividef, fused
multiply-adds in the kernel), so this measures how far apart that leaves them: after the first
step, the share of codes that differ and whether every difference is one code apart (a value at
a midpoint rounded the other way); after 20 steps, the largest difference of a parameter relative
to the largest |parameter update| of the run. It asserts the first step's codes agree on 99% of
the elements or more with no difference beyond one code, and the 20th step's parameters within 1%
of the run's largest update. Prints one line a case. Exits 0 with a note when bitsandbytes or a
GPU is missing.

Usage: python3 tests/reference/adam8bit_bnb_check.py REFERENCE_DIR (written by adam8bit_reference.py)
"""
import json
import os
import sys

import numpy as np


def main(ref):
    try:
        import torch
        import bitsandbytes.functional as F
    except Exception as e:  # noqa: BLE001 (any import failure means: not on this machine)
        print(f"bitsandbytes is not importable here ({e}): nothing compared")
        return 0
    if not torch.cuda.is_available():
        print("no GPU: nothing compared")
        return 0
    doc = json.load(open(os.path.join(ref, "cases.json")))
    raw = lambda name, dtype: np.fromfile(os.path.join(ref, name), dtype)  # noqa: E731
    dev = torch.device("cuda")
    qmap1 = torch.from_numpy(raw(doc["maps"]["signed"], np.float32)).to(dev)
    qmap2 = torch.from_numpy(raw(doc["maps"]["unsigned"], np.float32)).to(dev)
    bad = 0
    for c in doc["cases"]:
        if c["fp32_state"] or c["bf16_params"] or c["bf16_grads"]:
            continue  # the fp32 kernel, and bf16 (whose kernel takes bf16 gradients with bf16 parameters)
        n, steps = c["numel"], c["steps"]
        p = torch.from_numpy(raw(c["p0"], np.float32).copy()).to(dev)
        grads = torch.from_numpy(raw(c["grads"], np.float32).copy()).to(dev).view(steps, n)
        blocks = (n + 255) // 256
        s1 = torch.zeros(n, dtype=torch.uint8, device=dev)
        s2 = torch.zeros(n, dtype=torch.uint8, device=dev)
        a1 = torch.zeros(blocks, dtype=torch.float32, device=dev)
        a2 = torch.zeros(blocks, dtype=torch.float32, device=dev)
        first = None
        largest_update = 0.0
        for t in range(1, steps + 1):
            before = p.clone()
            F.optimizer_update_8bit_blockwise("adam", grads[t - 1].contiguous(), p, s1, s2, c["beta1"], c["beta2"], 0.0,
                                              0.0, c["eps"], t, c["lr"], qmap1, qmap2, a1, a2,
                                              weight_decay=c["weight_decay"])
            finite = torch.isfinite(p - before)
            largest_update = max(largest_update, float((p - before)[finite].abs().max()))
            if t == 1:
                first = (s1.cpu().numpy().copy(), s2.cpu().numpy().copy())
        want1 = raw(c["first"]["codes1"], np.uint8)[:n]
        want2 = raw(c["first"]["codes2"], np.uint8)[:n]
        d1 = np.abs(first[0].astype(int) - want1.astype(int))
        d2 = np.abs(first[1].astype(int) - want2.astype(int))
        agree = 1 - (np.count_nonzero(d1) + np.count_nonzero(d2)) / (2 * n)
        far = int(max(d1.max(), d2.max()))
        want_p = raw(c["last"]["p"], np.float32)
        got_p = p.cpu().numpy()
        finite = np.isfinite(want_p) & np.isfinite(got_p)
        worst = float(np.abs(got_p - want_p)[finite].max()) / largest_update
        ok = agree >= 0.99 and far <= 1 and worst <= 0.01
        bad += 0 if ok else 1
        print(f"{c['name']}: step 1 codes agree on {agree:.4%} (furthest apart: {far} code); after {steps} steps the "
              f"parameters differ by {worst:.2e} of the largest update{'' if ok else '  <- FAIL'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
