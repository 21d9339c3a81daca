"""Changes the stored bytes of one tensor of a safetensors file or folder in place, for tests that
damage a model folder: patch_tensor(FOLDER_OR_FILE, NAME, EDIT) calls EDIT(data, begin, end) with
the file's bytes (a bytearray) and the tensor's byte range in it, then writes the file back."""
import json
import os
import struct


def patch_tensor(where, name, edit):
    path = where
    if os.path.isdir(where):
        index = os.path.join(where, "model.safetensors.index.json")
        path = os.path.join(where, json.load(open(index))["weight_map"][name] if os.path.exists(index)
                            else "model.safetensors")
    data = bytearray(open(path, "rb").read())
    n = struct.unpack("<Q", data[:8])[0]
    begin, end = json.loads(data[8:8 + n])[name]["data_offsets"]
    edit(data, 8 + n + begin, 8 + n + end)
    open(path, "wb").write(bytes(data))
