#!/usr/bin/env python3
"""Hugging Face's Rust tokenizers (the `tokenizers` package) on a corpus, for bench/tokenizer_rust.sh.

  tokenizer_rust.py TOKENIZER_JSON CORPUS --ids OUT.jsonl     ids of each line, as JSON arrays
  tokenizer_rust.py TOKENIZER_JSON CORPUS --bench N           tokens/s over N passes (JSON)

Lines are encoded without special tokens, as shardtune-tokenize does. The thread count is
whatever RAYON_NUM_THREADS says (set it before this starts; 1 for one thread).
"""
import json
import sys
import time

from tokenizers import Tokenizer


def main():
    path, corpus, mode, arg = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    tokenizer = Tokenizer.from_file(path)
    # Cut on b'\n', then each line decoded as UTF-8 with invalid bytes replaced (maximal subparts
    # become U+FFFD), as the JavaScript reference and shardtune-tokenize read their input. A
    # leading U+FEFF stays text.
    data = open(corpus, "rb").read()
    lines = [line.decode("utf-8", errors="replace") for line in data.split(b"\n")]
    if data.endswith(b"\n"):
        lines.pop()
    if mode == "--ids":
        with open(arg, "w") as out:
            for enc in tokenizer.encode_batch(lines, add_special_tokens=False):
                out.write(json.dumps(enc.ids) + "\n")
        return
    tokenizer.encode_batch(lines, add_special_tokens=False)  # warm-up
    tokens = 0
    start = time.perf_counter()
    for _ in range(int(arg)):
        tokens += sum(len(e.ids) for e in tokenizer.encode_batch(lines, add_special_tokens=False))
    seconds = time.perf_counter() - start
    print(json.dumps({"tokens": tokens, "seconds": seconds, "tokens_per_second": tokens / seconds}))


if __name__ == "__main__":
    main()
