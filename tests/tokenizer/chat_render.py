"""Renders chat data with a model's own Jinja chat template, as transformers' apply_chat_template
does (python3-jinja2, the same environment), and says where each assistant turn lies in the text.

usage: chat_render.py TEMPLATE BOS EOS DATA.jsonl OUT_DIR [--date-string D] [--generation-prompt]

Writes, one JSON string per line:
  OUT_DIR/texts.jsonl     the rendered text of each conversation
  OUT_DIR/prefixes.jsonl  for each assistant turn of each conversation, the text up to where its
                          learned part starts, then the text up to where it ends
and OUT_DIR/turns.json: for each conversation, how many assistant turns it has.

An assistant turn's learned part is its content and the token that ends the turn, as the template
writes them: it starts where rendering the conversation up to the turn before it ends (after the
assistant's header, for the Llama 3 formats) and ends where rendering up to the turn itself ends.
"""
import argparse
import datetime
import json
import os

import jinja2
import jinja2.ext
import jinja2.sandbox


def environment():
    # transformers' (utils/chat_template_utils.py): a sandbox, trim_blocks and lstrip_blocks, loop
    # controls, and its globals and filter.
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env


def messages_of(record):
    if "messages" in record:
        return [{"role": m["role"], "content": m["content"]} for m in record["messages"]]
    roles = {"human": "user", "gpt": "assistant"}
    return [{"role": roles.get(t["from"], t["from"]), "content": t["value"]} for t in record["conversations"]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("template")
    ap.add_argument("bos")
    ap.add_argument("eos")
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--date-string")
    ap.add_argument("--generation-prompt", action="store_true")
    a = ap.parse_args()
    with open(a.template, encoding="utf-8") as f:
        template = environment().from_string(f.read())
    extra = {"date_string": a.date_string} if a.date_string else {}
    llama3 = "<|start_header_id|>" in open(a.template, encoding="utf-8").read()
    header = "<|start_header_id|>assistant<|end_header_id|>\n\n" if llama3 else ""

    def render(messages, generation_prompt=False):
        return template.render(messages=messages, bos_token=a.bos, eos_token=a.eos,
                               add_generation_prompt=generation_prompt, **extra)

    os.makedirs(a.out, exist_ok=True)
    texts, prefixes, turns = [], [], []
    with open(a.data, encoding="utf-8") as f:
        for line in f:
            messages = messages_of(json.loads(line))
            text = render(messages, a.generation_prompt)
            texts.append(text)
            n = 0
            for k, m in enumerate(messages):
                if m["role"] != "assistant":
                    continue
                before, through = render(messages[:k]), render(messages[:k + 1])
                assert text.startswith(through) and through.startswith(before + header), (before, through)
                prefixes += [before + header, through]
                n += 1
            turns.append(n)
    for name, lines in (("texts.jsonl", texts), ("prefixes.jsonl", prefixes)):
        with open(os.path.join(a.out, name), "w", encoding="utf-8") as f:
            f.writelines(json.dumps(t, ensure_ascii=False) + "\n" for t in lines)
    with open(os.path.join(a.out, "turns.json"), "w") as f:
        json.dump(turns, f)


if __name__ == "__main__":
    main()
