#!/usr/bin/env python3
"""What is live at the peak of a CUDA caching allocator snapshot, by where it was allocated.

usage: bench/memory_peak.py SNAPSHOT.pickle [--top N] [--json]

SNAPSHOT is PyTorch's snapshot format, as torch.cuda.memory._dump_snapshot writes it
(bench/torch_baseline.py --memory-snapshot) and train_bench --memory-snapshot writes shardtune's.
The device's event history (allocations, frees) is replayed from the state it started in: the
blocks live at the end that it never touched, and those whose first event in it is a free. At
the event where the allocated bytes are highest, the live blocks are grouped by
their origin: the first frame of shardtune's own code (a C++ function in namespace shardtune),
else the first Python frame outside torch itself (the model's code, the baseline's script), else
the innermost frame; blocks allocated before the history began have no stack ("before the
history": parameters, optimizer state and whatever else lives across steps).
"""
import argparse
import json
import os
import pickle
import re
import sys

BEFORE = "(before the history)"


def origin(frames):
    """The group a block's allocation stack falls in."""
    if not frames:
        return "(no stack)"
    for f in frames:
        name = f.get("name", "")
        if "shardtune::" in name:
            return re.sub(r"\(.*", "", name)  # the function, without its parameter list
    for f in frames:
        filename = f.get("filename", "")
        if filename.endswith(".py") and f"{os.sep}torch{os.sep}" not in filename:
            return f"{os.path.basename(filename)}:{f.get('line', 0)} {f.get('name', '')}"
    return frames[0].get("name", "") or "(no name)"


def live_at_peak(snapshot, device=0):
    """(peak bytes, index of the peak event or -1 for the start, {addr: (size, frames)} live there)."""
    traces = snapshot.get("device_traces", [])
    events = traces[device] if device < len(traces) else []
    end = {}
    for segment in snapshot.get("segments", []):
        if segment.get("device", 0) != device:
            continue
        for block in segment.get("blocks", []):
            if block.get("state") == "active_allocated":
                end[block["address"]] = (block["size"], block.get("frames", []))
    # An address's first event in the history says whether it was live when the history began: a
    # free, requested or completed, yes (of that size), an allocation, no; an address the history
    # never touched is live at the start if it is at the end. (The history keeps the latest
    # events: where it dropped older ones, it begins later.) A free requested is complete only
    # once the streams that used the block are done with it: until then the block stays live.
    first = {}
    for e in events:
        if e["action"] in ("alloc", "free_requested", "free_completed"):
            first.setdefault(e["addr"], e)
    live = {a: v for a, v in end.items() if a not in first}
    for a, e in first.items():
        if e["action"] != "alloc":
            live[a] = (e["size"], [])
    total = sum(s for s, _ in live.values())
    peak, peak_index, peak_live = total, -1, dict(live)
    for i, e in enumerate(events):
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], e.get("frames", []))
            total += e["size"]
        elif e["action"] == "free_completed" and e["addr"] in live:
            total -= live.pop(e["addr"])[0]
        else:
            continue
        if total > peak:
            peak, peak_index, peak_live = total, i, dict(live)
    return peak, peak_index, peak_live


def summarise(snapshot, top=15, device=0):
    peak, index, live = live_at_peak(snapshot, device)
    groups = {}
    for size, frames in live.values():
        key = origin(frames) if frames else BEFORE
        count, total = groups.get(key, (0, 0))
        groups[key] = (count + 1, total + size)
    rows = sorted(groups.items(), key=lambda kv: -kv[1][1])
    shown = [{"origin": k, "blocks": c, "bytes": b} for k, (c, b) in rows[:top]]
    rest = rows[top:]
    if rest:
        shown.append({"origin": f"({len(rest)} other origins)", "blocks": sum(c for _, (c, _) in rest),
                      "bytes": sum(b for _, (_, b) in rest)})
    return {"peak_bytes": peak, "peak_event": index, "live_blocks": len(live), "groups": shown}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("snapshot")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        with open(args.snapshot, "rb") as f:
            snapshot = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError) as e:
        sys.exit(f"memory_peak.py: cannot read {args.snapshot}: {e}")
    if not isinstance(snapshot, dict) or "segments" not in snapshot:
        sys.exit(f"memory_peak.py: {args.snapshot} is not a caching allocator snapshot (no 'segments')")
    s = summarise(snapshot, args.top, args.device)
    if args.json:
        print(json.dumps(s))
        return
    gib = 2.0 ** 30
    print(f"{args.snapshot}: {s['peak_bytes'] / gib:.2f} GiB allocated at the peak "
          f"(event {s['peak_event']}), {s['live_blocks']} blocks")
    for g in s["groups"]:
        print(f"  {g['bytes'] / gib:8.3f} GiB  {g['blocks']:6d} blocks  {g['origin']}")


if __name__ == "__main__":
    main()
