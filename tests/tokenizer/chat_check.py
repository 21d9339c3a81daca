"""Holds shardtune's chat examples to the Jinja rendering and Hugging Face's tokenizer.

usage: chat_check.py RENDER_DIR REFERENCE_TEXT_IDS REFERENCE_PREFIX_IDS SHARDTUNE_OUT {assistant|all}

RENDER_DIR is chat_render.py's output; the two reference files hold the ids Hugging Face's tokenizer
gives its texts and prefixes (one JSON array a line); SHARDTUNE_OUT is `shardtune-tokenize --chat`'s.
Checks, conversation by conversation: the same text, the same ids, and labels that are the ids on
exactly the assistant turns' tokens (train_on = assistant: from the first token that encoding the
text up to the turn's start does not reproduce, through the turn's end-of-turn token) or on every
token but the conversation's opening BOS (all: packed after another example, it would be learned as
what follows that example's end), -100 elsewhere. Exit 1 on any difference.
"""
import json
import os
import sys


def lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def main():
    render_dir, text_ids_path, prefix_ids_path, ours_path, train_on = sys.argv[1:6]
    texts = lines(os.path.join(render_dir, "texts.jsonl"))
    turns = json.load(open(os.path.join(render_dir, "turns.json")))
    text_ids, prefix_ids, ours = lines(text_ids_path), lines(prefix_ids_path), lines(ours_path)
    failures = 0

    def fail(i, why):
        nonlocal failures
        failures += 1
        print(f"FAIL: conversation {i + 1} ({ours[i]['where'] if i < len(ours) else '?'}): {why}")

    if not (len(texts) == len(text_ids) == len(ours) == len(turns)) or len(prefix_ids) != 2 * sum(turns):
        print(f"FAIL: counts differ: {len(texts)} texts, {len(text_ids)} encoded, {len(ours)} from shardtune")
        return 1
    p = 0
    for i, (text, ids, mine) in enumerate(zip(texts, text_ids, ours)):
        spans = []
        for _ in range(turns[i]):
            spans.append((common_prefix(prefix_ids[p], ids), common_prefix(prefix_ids[p + 1], ids)))
            p += 2
        if mine["text"] != text:
            fail(i, f"text {json.dumps(mine['text'])} != Jinja's {json.dumps(text)}")
            continue
        if mine["ids"] != ids:
            at = common_prefix(mine["ids"], ids)
            fail(i, f"ids differ from token {at}: {mine['ids'][at:at + 8]} != {ids[at:at + 8]}")
            continue
        want = list(ids) if train_on == "all" else [-100] * len(ids)
        if train_on == "all" and ids:
            want[0] = -100  # each Llama chat format opens with BOS
        if train_on != "all":
            for a, b in spans:
                if not 0 < a < b <= len(ids):
                    fail(i, f"an assistant turn spans tokens {a}..{b} of {len(ids)}")
                want[a:b] = ids[a:b]
        if mine["labels"] != want:
            diff = [k for k in range(len(want)) if mine["labels"][k] != want[k]]
            fail(i, f"labels differ at tokens {diff[:10]} (assistant spans {spans})")
    print(f"{len(texts)} conversations, {sum(turns)} assistant turns, {sum(map(len, text_ids))} tokens compared")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
