"""The identity of a Hugging Face folder's weights, from its files with hashlib alone: each tensor's
stored bytes in 1 MiB chunks, the tensor's digest the SHA-256 of its chunks' SHA-256 (hex, one a
line), and the identity the SHA-256 of one line "name tensor-digest" per tensor, sorted by name
(a tied lm_head.weight and rotary_emb.inv_freq left out). usage: weights_identity.py FOLDER"""
import glob, hashlib, json, os, struct, sys

CHUNK = 1 << 20


def identity(folder):
    tied = json.load(open(os.path.join(folder, "config.json"))).get("tie_word_embeddings", False)
    lines = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
            for name, t in header.items():
                if name == "__metadata__" or name.endswith("rotary_emb.inv_freq") or (tied and name == "lm_head.weight"):
                    continue
                begin, end = t["data_offsets"]
                f.seek(8 + n + begin)
                chunks = ""
                for at in range(begin, end, CHUNK):
                    chunks += hashlib.sha256(f.read(min(CHUNK, end - at))).hexdigest() + "\n"
                lines[name] = hashlib.sha256(chunks.encode()).hexdigest()
    return hashlib.sha256("".join(f"{k} {v}\n" for k, v in sorted(lines.items())).encode()).hexdigest()


if __name__ == "__main__":
    print(identity(sys.argv[1]))
