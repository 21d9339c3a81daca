#!/usr/bin/env python3
"""Writes the tiny example data of configs/: an alpaca-format file of simple, learnable tasks
(reverse, sort, uppercase, repeat, count, add) and a small byte-level BPE tokenizer.json trained
on it, set up exactly like Llama 3's (same pre-tokenizer regex, byte-level alphabet, special
tokens <|begin_of_text|> and <|end_of_text|>). Deterministic: rerunning gives the same files.
usage: make_tiny_alpaca.py OUT_DIR [EXAMPLES] [MERGES]"""
import json
import os
import random
import sys

import tiny_bpe

out_dir = sys.argv[1]
n_examples = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
n_merges = int(sys.argv[3]) if len(sys.argv) > 3 else 300
rng = random.Random(7)
words = ["cat", "dog", "tree", "river", "stone", "cloud", "apple", "lamp", "ship", "bird", "moon", "road", "book",
         "fire", "snow", "wind", "gold", "rain", "seed", "wolf"]


def task():
    kind = rng.randrange(6)
    w = rng.choice(words)
    if kind == 0:
        return "Reverse the letters of the word.", w, w[::-1]
    if kind == 1:
        nums = [rng.randrange(10) for _ in range(rng.randrange(3, 6))]
        return "Sort the numbers from smallest to largest.", " ".join(map(str, nums)), " ".join(map(str, sorted(nums)))
    if kind == 2:
        return "Write the word in capital letters.", w, w.upper()
    if kind == 3:
        k = rng.randrange(2, 4)
        return f"Repeat the word {k} times.", w, " ".join([w] * k)
    if kind == 4:
        return "How many letters does the word have?", w, str(len(w))
    a, b = rng.randrange(10), rng.randrange(10)
    return "Add the two numbers.", f"{a} {b}", str(a + b)


examples = []
for _ in range(n_examples):
    instruction, inp, output = task()
    examples.append({"instruction": instruction, "input": inp, "output": output})
os.makedirs(os.path.join(out_dir, "tiny-tokenizer"), exist_ok=True)
with open(os.path.join(out_dir, "tiny-alpaca.json"), "w", encoding="utf-8") as f:
    f.write("[\n" + ",\n".join("  " + json.dumps(e) for e in examples) + "\n]\n")

# Merges learned on the text the prompts and responses make (words with their leading space).
preamble = ("Below is an instruction that describes a task, paired with an input that provides further context. "
            "Write a response that appropriately completes the request. ### Instruction: ### Input: ### Response:")
text = " ".join([preamble] * 50 + [" ".join(e.values()) for e in examples])
specials = ["<|begin_of_text|>", "<|end_of_text|>"]
tokenizer = tiny_bpe.train(text, n_merges, specials)
vocab, merges = tokenizer["model"]["vocab"], tokenizer["model"]["merges"]
with open(os.path.join(out_dir, "tiny-tokenizer", "tokenizer.json"), "w", encoding="utf-8") as f:
    json.dump(tokenizer, f, ensure_ascii=False, indent=1)
with open(os.path.join(out_dir, "tiny-tokenizer", "tokenizer_config.json"), "w", encoding="utf-8") as f:
    json.dump({"bos_token": specials[0], "eos_token": specials[1], "clean_up_tokenization_spaces": False,
               "model_max_length": 256, "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=1)
print(f"{len(examples)} examples; tokenizer of {len(vocab) + len(specials)} tokens ({len(merges)} merges)")
