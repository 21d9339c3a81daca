#!/usr/bin/env python3
"""bench/memory_peak.py against a snapshot whose peak is known: blocks live before the history
began (one freed in it, one whose free was requested and not completed), an address reused, stacks of shardtune's C++, of a model's Python and of
torch alone; and a file that is not a snapshot refused, naming it."""
import json
import os
import pickle
import subprocess
import sys
import tempfile

script = sys.argv[1]
cpp = [{"filename": "??", "line": 0, "name": "at::native::empty_cuda(...)"},
       {"filename": "??", "line": 0, "name": "shardtune::fsdp::FlatParam::accumulate_grad(unsigned long, at::Tensor const&)"}]
python = [{"filename": "/usr/lib/python3/dist-packages/torch/nn/functional.py", "line": 5, "name": "linear"},
          {"filename": "/models/modeling_llama.py", "line": 10, "name": "forward"}]
torch_only = [{"filename": "/usr/lib/python3/dist-packages/torch/optim/adamw.py", "line": 7, "name": "_init_group"}]
A, B, C, D = 0x1000, 0x2000, 0x3000, 0x4000
events = [
    {"action": "alloc", "addr": C, "size": 200, "frames": cpp},
    {"action": "free_requested", "addr": B, "size": 50, "frames": []},
    {"action": "free_completed", "addr": B, "size": 50, "frames": []},
    {"action": "alloc", "addr": D, "size": 300, "frames": python},  # the peak: A + C + D
    {"action": "free_completed", "addr": C, "size": 200, "frames": cpp},
    {"action": "alloc", "addr": C, "size": 10, "frames": torch_only},  # C's address again
]
blocks = [{"address": a, "size": s, "state": "active_allocated", "frames": f}
          for a, s, f in [(A, 100, []), (D, 300, python), (C, 10, torch_only)]]
blocks.append({"address": B, "size": 50, "state": "inactive", "frames": []})
snapshot = {"segments": [{"device": 0, "address": A, "total_size": 1 << 20, "blocks": blocks}],
            "device_traces": [events]}

with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "snapshot.pickle")
    with open(path, "wb") as f:
        pickle.dump(snapshot, f)
    out = json.loads(subprocess.run([sys.executable, script, path, "--json"], check=True, capture_output=True,
                                    text=True).stdout)
    assert out["peak_bytes"] == 600 and out["peak_event"] == 3 and out["live_blocks"] == 3, out
    groups = {g["origin"]: g["bytes"] for g in out["groups"]}
    assert groups == {"shardtune::fsdp::FlatParam::accumulate_grad": 200, "modeling_llama.py:10 forward": 300,
                      "(before the history)": 100}, groups
    # A block from before the history whose free was requested in it but had not completed (a
    # stream still used it): live from the start to the end.
    E = 0x5000
    pending = dict(snapshot, device_traces=[events + [{"action": "free_requested", "addr": E, "size": 40,
                                                       "frames": []}]])
    pending["segments"] = [{"device": 0, "blocks": blocks + [{"address": E, "size": 40,
                                                              "state": "active_pending_free", "frames": []}]}]
    with open(path, "wb") as f:
        pickle.dump(pending, f)
    out = json.loads(subprocess.run([sys.executable, script, path, "--json"], check=True, capture_output=True,
                                    text=True).stdout)
    assert out["peak_bytes"] == 640 and out["peak_event"] == 3 and out["live_blocks"] == 4, out
    assert {g["origin"]: g["bytes"] for g in out["groups"]}["(before the history)"] == 140, out["groups"]
    # The start is the peak when nothing the history does rises above it.
    quiet = dict(snapshot, device_traces=[[events[1], events[2]]])
    quiet["segments"] = [{"device": 0, "blocks": [blocks[0]]}]
    with open(path, "wb") as f:
        pickle.dump(quiet, f)
    out = json.loads(subprocess.run([sys.executable, script, path, "--json"], check=True, capture_output=True,
                                    text=True).stdout)
    assert out["peak_bytes"] == 150 and out["peak_event"] == -1, out
    # Text output names the groups too.
    text = subprocess.run([sys.executable, script, path], check=True, capture_output=True, text=True).stdout
    assert "GiB allocated at the peak" in text and "(before the history)" in text, text
    # Not a snapshot: a clear error naming the file, a non-zero exit.
    bad = os.path.join(tmp, "bad.pickle")
    with open(bad, "wb") as f:
        f.write(b"not a pickle")
    r = subprocess.run([sys.executable, script, bad], capture_output=True, text=True)
    assert r.returncode != 0 and bad in r.stderr, (r.returncode, r.stderr)
print("memory_peak.py: the peak, its live blocks by origin, and a bad file refused")
