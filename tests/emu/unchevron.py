#!/usr/bin/env python3
"""Rewrites a .cu file's kernel launches for the host compiler (cuda_emu.h):
    name<T, U><<<grid, block, shared, stream>>>(args);
becomes
    ::cuda_emu::launch("file:line name<T, U>", [&] { name<T, U>(args); }, grid, block, shared, stream);
Everything else is left as it is. Usage: unchevron.py IN OUT"""
import re
import sys

LAUNCH = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;{}]*>)?)\s*<<<")


def closing(text, start, opening, close):
    """The index of the bracket closing the one at text[start]."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == opening:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced {opening} from offset {start}")


def rewrite(text, name):
    out, pos = [], 0
    for m in LAUNCH.finditer(text):
        if m.start() < pos:
            continue
        config_end = text.index(">>>", m.end())
        config = text[m.end():config_end]
        args_start = config_end + 3
        while text[args_start].isspace():
            args_start += 1
        if text[args_start] != "(":
            raise ValueError(f"{name}: no arguments after the launch at offset {m.start()}")
        args_end = closing(text, args_start, "(", ")")
        kernel = m.group(1)
        line = text.count("\n", 0, m.start()) + 1
        where = f"{name}:{line} {kernel}"
        out.append(text[pos:m.start()])
        out.append(f'::cuda_emu::launch("{where}", [&] {{ {kernel}{text[args_start:args_end + 1]}; }}, {config})')
        pos = args_end + 1
    out.append(text[pos:])
    return "".join(out)


def main():
    source, target = sys.argv[1], sys.argv[2]
    with open(source, encoding="utf-8") as f:
        text = f.read()
    name = source.rsplit("/", 1)[-1]
    result = rewrite(text, name)
    if "<<<" in result:
        raise SystemExit(f"{source}: a launch this script did not understand")
    with open(target, "w", encoding="utf-8") as f:
        f.write(f'#line 1 "{source}"\n')
        f.write(result)


if __name__ == "__main__":
    main()
