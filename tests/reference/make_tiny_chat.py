#!/usr/bin/env python3
"""Writes the tiny chat example of configs/: conversations (JSON Lines, OpenAI-style messages, some
with a system prompt, one to three exchanges) about a small set of facts the tiny debug Llama can
learn, and a byte-level BPE tokenizer like Llama 3.1's: its special tokens <|begin_of_text|>,
<|end_of_text|>, <|start_header_id|>, <|end_header_id|> and <|eot_id|>, and in its
tokenizer_config.json Meta's Llama 3.1 chat template (tests/fixtures/chat_templates/llama31.jinja).
Deterministic: rerunning gives the same files.
usage: make_tiny_chat.py OUT_DIR [CONVERSATIONS] [MERGES]"""
import json
import os
import random
import sys

import tiny_bpe

out_dir = sys.argv[1]
n_conversations = int(sys.argv[2]) if len(sys.argv) > 2 else 800
n_merges = int(sys.argv[3]) if len(sys.argv) > 3 else 300
here = os.path.dirname(os.path.abspath(__file__))
template = open(os.path.join(here, "../../tests/fixtures/chat_templates/llama31.jinja"), encoding="utf-8").read()
rng = random.Random(31)
facts = [
    ("What color is the sky?", "The sky is blue."),
    ("What color is grass?", "Grass is green."),
    ("How many legs does a cat have?", "A cat has four legs."),
    ("How many legs does a bird have?", "A bird has two legs."),
    ("What is two plus three?", "Two plus three is five."),
    ("What is four plus four?", "Four plus four is eight."),
    ("Where does the sun rise?", "The sun rises in the east."),
    ("Where does the sun set?", "The sun sets in the west."),
    ("What do bees make?", "Bees make honey."),
    ("What falls from clouds?", "Rain falls from clouds."),
    ("What is frozen water?", "Frozen water is ice."),
    ("What do cows drink?", "Cows drink water."),
    ("Which animal barks?", "A dog barks."),
    ("What is the opposite of hot?", "The opposite of hot is cold."),
    ("What is the opposite of up?", "The opposite of up is down."),
    ("How many days are in a week?", "A week has seven days."),
]
systems = ["You are a helpful assistant.", "Answer in one short sentence."]
with open(os.path.join(out_dir, "tiny-chat.jsonl"), "w", encoding="utf-8") as f:
    for _ in range(n_conversations):
        turns = [{"role": "system", "content": rng.choice(systems)}] if rng.random() < 0.4 else []
        for question, answer in rng.sample(facts, rng.randint(1, 3)):
            turns += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        f.write(json.dumps({"messages": turns}) + "\n")

# Merges learned on the conversations' words and the template's own text.
header = "system user assistant Cutting Knowledge Date: December 2023 Today Date: 26 Jul 2024"
text = " ".join([header] * 50 + [q + " " + a for q, a in facts] * 50 + systems * 20)
specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
tokenizer = tiny_bpe.train(text, n_merges, specials)
folder = os.path.join(out_dir, "tiny-chat-tokenizer")
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
    json.dump(tokenizer, f, ensure_ascii=False, indent=1)
with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
    json.dump({"bos_token": specials[0], "eos_token": "<|eot_id|>", "clean_up_tokenization_spaces": False,
               "model_max_length": 256, "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template},
              f, ensure_ascii=False, indent=1)
print(f"{n_conversations} conversations; tokenizer of {len(tokenizer['model']['vocab']) + len(specials)} tokens")
