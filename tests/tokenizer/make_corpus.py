#!/usr/bin/env python3
"""Writes the tokenizer test corpus: at least 10,000 lines, the same on every run. Mixes prose in
many scripts (multilingual.txt), lines of this project's code and docs (code_sample.txt, a fixed
sample, so the corpus does not change with the code),
numbers, runs of spaces, tabs and carriage returns, emoji, special tokens written in text, and
invalid UTF-8 (stray continuation bytes, truncated sequences, overlong forms, surrogates).
usage: make_corpus.py OUT_FILE [LINES]"""
import os
import random
import sys

out_path = sys.argv[1]
target = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
rng = random.Random(20261121)

here = os.path.dirname(os.path.abspath(__file__))
prose = [l.rstrip("\n").replace("\\u200b", "\u200b") for l in open(os.path.join(here, "multilingual.txt"), encoding="utf-8")]
code = [l.rstrip("\n") for l in open(os.path.join(here, "code_sample.txt"), encoding="utf-8")]
specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
            "<|reserved_special_token_5|>", "<s>", "</s>", "<unk>", "<|eot_id", "<s", "< s>"]
invalid = [b"\xff", b"\xfe\xfe", b"\x80", b"\xbf\x80", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc0\xaf",
           b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"a\xc3(b"]
spaces = [" ", "  ", "   ", "\t", "\t\t", " \t ", "\r", "\r\r", "        ", "\u00a0", "\u3000", "\u2003", "\u180e", "\ufeff"]
emoji = ["😀", "🎉", "👍🏽", "👩‍💻", "🇩🇪", "❤️", "🚀", "🔥🔥🔥", "🏳️‍🌈", "🧑‍🤝‍🧑"]


def number():
    kind = rng.randrange(6)
    if kind == 0:
        return str(rng.randrange(10 ** rng.randrange(1, 15)))
    if kind == 1:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randrange(0, 8)}f}"
    if kind == 2:
        return f"{rng.uniform(0, 1):.3e}"
    if kind == 3:
        return f"{rng.randrange(1, 10 ** 9):,}"
    if kind == 4:
        return "0x" + format(rng.randrange(2 ** 32), "x")
    return "-".join(str(rng.randrange(100)) for _ in range(3))


def words(text):
    return text.split(" ")


def mixed_line():
    parts = []
    for _ in range(rng.randrange(1, 8)):
        kind = rng.randrange(9)
        if kind <= 2:
            ws = words(rng.choice(prose))
            a = rng.randrange(len(ws))
            parts.append(" ".join(ws[a:a + rng.randrange(1, 8)]))
        elif kind == 3:
            parts.append(number())
        elif kind == 4:
            parts.append(rng.choice(spaces) * rng.randrange(1, 4))
        elif kind == 5:
            parts.append(rng.choice(emoji))
        elif kind == 6:
            parts.append(rng.choice(specials))
        elif kind == 7:
            parts.append(rng.choice(code).strip())
        else:
            parts.append("".join(rng.choice("'\"`~!@#$%^&*()_+-=[]{}|;:,./<>?\\") for _ in range(rng.randrange(1, 6))))
    sep = rng.choice([" ", "", " ", "  ", "\t"])
    return sep.join(parts)


lines = []
lines.extend(prose)
lines.extend(code[:: max(1, len(code) // 3000)])
while len(lines) < target:
    lines.append(mixed_line())
rng.shuffle(lines)
with open(out_path, "wb") as out:
    for i, line in enumerate(lines):
        data = line.encode("utf-8")
        if i % 37 == 0:  # invalid UTF-8 at a random place
            cut = rng.randrange(len(data) + 1)
            data = data[:cut] + rng.choice(invalid) + data[cut:]
        out.write(data.replace(b"\n", b" ") + b"\n")
print(f"{len(lines)} lines written to {out_path}")
