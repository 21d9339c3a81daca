"""Flips one bit of a checkpoint's data: python3 damage_slice.py CHECKPOINT_DIR [RANK_FILE].

The bit is in the middle element of the first parameter slice the manifest lists in RANK_FILE
(rank-00000.h5 by default), so the damage is always in bytes a checksum covers. (A rank file also
holds bytes no checksum covers: the alignment padding before each shard, whose length depends on
where the shard sat in memory, so a byte at a fixed place in the file may be one of them.) Prints
the slice it damaged.
"""
import json
import sys

import h5py

d = sys.argv[1]
name = sys.argv[2] if len(sys.argv) > 2 else "rank-00000.h5"
manifest = json.load(open(f"{d}/manifest.json"))
s = next(s for s in manifest["slices"] if s["kind"] == "param" and s["file"] == name)
with h5py.File(f"{d}/{name}", "r+") as f:
    ds = f[f"/param/{s['dataset']}"]
    v = ds[()]
    v.view("uint32")[s.get("dataset_offset", 0) + s["length"] // 2] ^= 1
    ds[...] = v
print(f"damaged {d}/{name}: param of {s['tensor']}, element {s['offset'] + s['length'] // 2}")
