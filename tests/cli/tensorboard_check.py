"""Reads a run's TensorBoard event files as TensorBoard does and holds them to its metrics.jsonl.

The files are decoded with python3-protobuf, from TensorFlow's Event and Summary messages compiled
here by protoc (tests/reference/tensorboard/*.proto), and every TFRecord's two CRCs are checked with
a CRC-32C computed bit by bit below. Files are read in name order; a SessionLog START at step N
drops what earlier files hold at steps >= N, and a later value of a tag at a step replaces an
earlier one (TensorBoard's rules for a restarted run). What remains must be exactly the scalars of
metrics.jsonl, each the float32 of the record's value, with the tags docs/metrics.md lists.

usage: tensorboard_check.py RUN_DIR [MIN_FILES]
"""
import glob
import importlib
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = os.path.join(HERE, "..", "reference", "tensorboard")
PERF = {"flops", "step_seconds", "compute_seconds", "comm_wait_seconds", "data_wait_seconds", "tokens_per_second",
        "mfu", "counted_flops", "peak_rss_bytes", "gpu_peak_allocated_bytes", "gpu_peak_reserved_bytes"}


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    blob = open(path, "rb").read()
    at = 0
    while at < len(blob):
        head = blob[at:at + 8]
        (length,) = struct.unpack("<Q", head)
        (length_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        assert length_crc == masked(head), f"{path}: bad length CRC at byte {at}"
        data = blob[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[at + 12 + length:at + 16 + length])
        assert data_crc == masked(data), f"{path}: bad data CRC at byte {at}"
        at += 16 + length
        yield data


def expected_scalars(record):
    """(step, {tag: value}) of one metrics.jsonl record, as docs/metrics.md maps them."""
    out = {}
    def put(tag, v):
        if v is None:
            out[tag] = math.nan
        elif isinstance(v, bool):
            out[tag] = 1.0 if v else 0.0
        elif isinstance(v, (int, float)):
            out[tag] = float(v)
    if "step" in record:
        for key, v in record.items():
            if key in ("step", "samples", "sample_ids"):
                continue
            if key == "sources":
                for name, count in v.items():
                    put(f"train/samples/{name}", count)
            else:
                put(("perf/" if key in PERF else "train/") + key, v)
        return record["step"], out
    for key, v in record.items():
        if key == "after_step":
            continue
        if key == "val_sources":
            for name, figures in v.items():
                for k, x in figures.items():
                    put(f"val/{name}/{k.removeprefix('val_')}", x)
        else:
            put("val/epoch" if key == "eval_epoch" else "val/" + key.removeprefix("val_"), v)
    return record["after_step"], out


def main():
    run = sys.argv[1]
    min_files = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(["protoc", f"-I{PROTOS}", f"--python_out={out}", "event.proto", "summary.proto"], check=True)
        sys.path.insert(0, out)
        event_pb2 = importlib.import_module("event_pb2")
    files = sorted(glob.glob(f"{run}/tensorboard/events.out.tfevents.*"))
    assert len(files) >= min_files, f"{len(files)} event file(s), expected at least {min_files}: {files}"
    held = {}  # (tag, step) -> value
    purged = 0
    for path in files:
        events = [event_pb2.Event.FromString(r) for r in records(path)]
        assert events and events[0].file_version == "brain.Event:2", f"{path}: first event {events[:1]}"
        for e in events[1:]:
            if e.WhichOneof("what") == "session_log":
                assert e.session_log.status == event_pb2.SessionLog.START, e
                gone = [k for k in held if k[1] >= e.step]
                purged += len(gone)
                for k in gone:
                    del held[k]
            elif e.WhichOneof("what") == "summary":
                for v in e.summary.value:
                    assert v.WhichOneof("value") == "simple_value", v
                    held[(v.tag, e.step)] = v.simple_value
    want = {}
    for line in open(f"{run}/metrics.jsonl"):
        step, scalars = expected_scalars(json.loads(line))
        for tag, value in scalars.items():
            assert (tag, step) not in want, f"metrics.jsonl holds {tag} twice at step {step}"
            want[(tag, step)] = value
    missing = sorted(set(want) - set(held))
    extra = sorted(set(held) - set(want))
    assert not missing and not extra, f"missing {missing[:5]}, extra (duplicates that survive) {extra[:5]}"
    for key, value in want.items():
        f32 = struct.unpack("<f", struct.pack("<f", value))[0] if math.isfinite(value) else value
        got = held[key]
        assert (math.isnan(got) and math.isnan(f32)) or got == f32, f"{key}: {got} in TensorBoard, {value} in metrics.jsonl"
    tags = sorted({t for t, _ in held})
    print(f"tensorboard: {len(files)} file(s), {len(held)} scalars of {len(tags)} tags equal metrics.jsonl, "
          f"{purged} superseded by a restart; CRCs valid")


if __name__ == "__main__":
    main()
