#!/usr/bin/env python3
"""No function longer than a screen: every function body defined at namespace scope in the given
files (folders: their .cpp and .h files, subfolders included) is at most LIMIT lines, counted from
the first line of its signature to its closing brace. Comments and string literals are blanked
before braces are counted. `--allow FILE:NAME` exempts the function of FILE (a path ending) whose
signature contains NAME: a table-like function (a parser field by field, a table of parts, a
program's option list) reads better whole. An exemption that matches nothing is an error too, so
the list cannot go stale. Exits 1 listing the long ones.

usage: check_function_length.py LIMIT [--allow FILE:NAME]... FILE_OR_FOLDER...
"""
import os
import re
import sys


def blank_comments_and_strings(text):
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while j < n and text[j] != q:
                j += 2 if text[j] == "\\" else 1
            out.append(q + " " * (j - i - 1) + q)
            i = j + 1
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def functions(path):
    """(first line, last line, name) of each function body at namespace scope."""
    text = blank_comments_and_strings(open(path, errors="replace").read())
    lines = text.split("\n")
    found, depth, scopes = [], 0, []  # scopes: per open brace, whether it is a function body
    start = None
    for number, line in enumerate(lines, 1):
        for pos, c in enumerate(line):
            if c == "{":
                head = " ".join(lines[max(0, number - 6):number - 1] + [line[:pos]])
                is_scope = re.search(r"\b(namespace|class|struct|enum|union|extern)\b[^;{}()]*$", head) is not None
                at_top = all(not s for s in scopes)
                is_function = at_top and not is_scope and re.search(r"\)[^;{}]*$", head) is not None
                if is_function:
                    # The signature starts after the previous statement or block.
                    first = number
                    while first > 1 and lines[first - 2].strip() and not re.search(r"[;{}]\s*$", lines[first - 2]) \
                            and not lines[first - 2].lstrip().startswith("#"):
                        first -= 1
                    start = (first, re.sub(r"\s+", " ", head.strip())[-70:])
                scopes.append(is_function)
            elif c == "}" and scopes:
                if scopes.pop() and start:
                    found.append((start[0], number, start[1]))
                    start = None
    return found


def main():
    limit = int(sys.argv[1])
    files, allowed, args = [], [], sys.argv[2:]
    while args:
        arg = args.pop(0)
        if arg == "--allow":
            path, _, name = args.pop(0).partition(":")
            allowed.append([path, name, False])
        elif os.path.isdir(arg):
            for root, dirs, names in os.walk(arg):
                dirs.sort()
                files += [os.path.join(root, f) for f in sorted(names) if f.endswith((".cpp", ".h"))]
        else:
            files.append(arg)
    long_ones = []
    for f in files:
        for first, last, name in functions(f):
            if last - first + 1 <= limit:
                continue
            exempt = [a for a in allowed if f.endswith(a[0]) and a[1] in name]
            for a in exempt:
                a[2] = True
            if not exempt:
                long_ones.append(f"{f}:{first}: {last - first + 1} lines: {name}")
    for l in long_ones:
        print("too long:", l)
    stale = [f"{a[0]}:{a[1]}" for a in allowed if not a[2]]
    for a in stale:
        print("exemption matches no long function:", a)
    print(f"function length: {len(files)} file(s), {len(long_ones)} function(s) over {limit} lines, "
          f"{len(allowed) - len(stale)} exempt")
    return 1 if long_ones or stale else 0


if __name__ == "__main__":
    sys.exit(main())
