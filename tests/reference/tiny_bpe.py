"""A small byte-level BPE tokenizer.json set up exactly like Llama 3's (the same pre-tokenizer regex,
GPT-2's byte-level alphabet, special tokens after the vocabulary), its merges learned on a text's
words with their leading space. Deterministic. Used by make_tiny_alpaca.py and make_tiny_chat.py."""
import collections

REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
         r"\s+(?!\S)|\s+")


def byte_chars():
    """GPT-2's byte-level alphabet: byte -> the character that stands for it."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    byte_char, extra = {}, 0
    for b in range(256):
        if b in printable:
            byte_char[b] = chr(b)
        else:
            byte_char[b] = chr(256 + extra)
            extra += 1
    return byte_char


def train(text, n_merges, specials):
    """The tokenizer.json (a dict) of merges learned on `text` split at spaces."""
    byte_char = byte_chars()
    counts = collections.Counter()
    for i, w in enumerate(text.split(" ")):
        if w:
            counts[tuple(byte_char[b] for b in ((" " if i else "") + w).encode("utf-8"))] += 1
    vocab = {byte_char[b]: b for b in range(256)}
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for word, c in counts.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append([a, b])
        vocab[a + b] = len(vocab)
        merged = collections.Counter()
        for word, c in counts.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += c
        counts = merged
    added = [{"id": len(vocab) + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(specials)]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": REGEX}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }
