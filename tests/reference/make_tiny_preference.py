#!/usr/bin/env python3
"""Writes the tiny DPO example's preference pairs (configs/data/tiny-preference.jsonl): the questions
of the tiny chat example (make_tiny_chat.py), some after a system prompt, each with its right answer
chosen and the same sentence with another answer's last word rejected ("What color is the sky?":
"The sky is blue." over "The sky is west."): the pairs differ where the answer is, not in words
the right answers of other questions also hold.
Conversational pairs as TRL takes them: the prompt a list of messages, the answers strings.
Deterministic.
usage: make_tiny_preference.py OUT_FILE [PAIRS]"""
import json
import random
import sys

out = sys.argv[1]
n_pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 600
facts = [  # (question, the chat example's answer, one word)
    ("What color is the sky?", "The sky is blue.", "Blue."),
    ("What color is grass?", "Grass is green.", "Green."),
    ("How many legs does a cat have?", "A cat has four legs.", "Four."),
    ("How many legs does a bird have?", "A bird has two legs.", "Two."),
    ("What is two plus three?", "Two plus three is five.", "Five."),
    ("What is four plus four?", "Four plus four is eight.", "Eight."),
    ("Where does the sun rise?", "The sun rises in the east.", "East."),
    ("Where does the sun set?", "The sun sets in the west.", "West."),
    ("What do bees make?", "Bees make honey.", "Honey."),
    ("What falls from clouds?", "Rain falls from clouds.", "Rain."),
    ("What is frozen water?", "Frozen water is ice.", "Ice."),
    ("What do cows drink?", "Cows drink water.", "Water."),
    ("Which animal barks?", "A dog barks.", "Dog."),
    ("What is the opposite of hot?", "The opposite of hot is cold.", "Cold."),
    ("What is the opposite of up?", "The opposite of up is down.", "Down."),
    ("How many days are in a week?", "A week has seven days.", "Seven."),
]
systems = ["You are a helpful assistant.", "Answer in one short sentence."]
rng = random.Random(53)
with open(out, "w", encoding="utf-8") as f:
    for _ in range(n_pairs):
        i, j = rng.sample(range(len(facts)), 2)
        right, other = facts[i][1], facts[j][1]
        last, wrong = right.rstrip(".").split()[-1], other.rstrip(".").split()[-1]
        if last == wrong:
            continue
        prompt = [{"role": "system", "content": rng.choice(systems)}] if rng.random() < 0.4 else []
        prompt.append({"role": "user", "content": facts[i][0]})
        rejected = right[: right.rindex(last)] + wrong + "."
        f.write(json.dumps({"prompt": prompt, "chosen": right, "rejected": rejected}) + "\n")
