#!/usr/bin/env python3
"""The libraries' dependencies run one way: no include cycle between them, and every header a
library includes from another belongs to a library it links (static linking would otherwise hide
a dependency the build graph does not know). The folders depend one way too: no include cycle
between the top-level folders (runtime/ and checkpoint/hf/ by their subfolders), the rank program
(rank/) included. MPI stays behind runtime/dist/: no source outside it includes <mpi.h>. The
rank program (rank/) is wiring only: a job in, libraries called; its code stays within a line
budget (lines that are neither blank nor comments), so that what a library could own moves there
instead. Reads the CMakeLists.txt files and the #include lines of the sources; exits 1 listing
every violation with the include or the count that causes it.

usage: check_layering.py SOURCE_DIR [--rank-lines N]   (N: rank/'s budget, 800 by default)
"""
import os
import re
import sys

SKIP = {"build", ".deps", ".git", "tests", "bench", "tools", "scripts", "cmake", "docs", "configs", "node_modules"}


def cmake_files(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if os.path.relpath(os.path.join(d, x), root).split(os.sep)[0] not in SKIP]
        if "CMakeLists.txt" in files:
            yield d, os.path.join(d, "CMakeLists.txt")


def calls(text, name):
    """The argument lists of every `name(...)` call, comments removed, as word lists."""
    text = re.sub(r"#[^\n]*", "", text)
    for m in re.finditer(r"\b%s\s*\(([^)]*)\)" % name, text):
        yield m.group(1).split()


def libraries(root):
    libs, links = {}, {}  # lib -> set of files (relative to root); lib -> linked st_* libs
    for d, path in cmake_files(root):
        text = open(path).read()
        for args in calls(text, "add_library"):
            name, sources = args[0], [a for a in args[1:] if a.endswith((".cpp", ".cu", ".h"))]
            if not name.startswith("st_"):
                continue
            libs.setdefault(name, set()).update(os.path.relpath(os.path.join(d, s), root) for s in sources)
        for args in calls(text, "target_link_libraries"):
            if args and args[0].startswith("st_"):
                links.setdefault(args[0], set()).update(a for a in args[1:] if a.startswith("st_"))
    return libs, links


def owner_of_headers(root, libs):
    """Each header belongs to the library of its .cpp twin, else to the library with the most
    sources in its directory."""
    owner = {}
    by_dir = {}
    for lib, files in libs.items():
        for f in files:
            owner[os.path.splitext(f)[0] + ".h"] = lib
            by_dir.setdefault(os.path.dirname(f), {}).setdefault(lib, 0)
            by_dir[os.path.dirname(f)][lib] += 1
    for d, counts in by_dir.items():
        main = max(counts, key=counts.get)
        for f in os.listdir(os.path.join(root, d)):
            rel = os.path.join(d, f)
            if f.endswith(".h") and rel not in owner:
                owner[rel] = main
    return owner


def folder_of(path):
    """The folder a file belongs to for the folder check: runtime/<sub>, checkpoint/hf, or the top level."""
    parts = path.split("/")
    if len(parts) > 2 and (parts[0] == "runtime" or parts[:2] == ["checkpoint", "hf"]):
        return "/".join(parts[:2])
    return parts[0]


def source_files(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if os.path.relpath(os.path.join(d, x), root).split(os.sep)[0] not in SKIP]
        for f in files:
            if f.endswith((".cpp", ".h", ".cu")):
                yield os.path.relpath(os.path.join(d, f), root)


def find_cycles(graph, edges):
    """Each cycle of `graph` once, with the evidence of its edges."""
    def cycle_from(start):
        stack, on_path = [(start, iter(sorted(graph.get(start, ()))))], [start]
        while stack:
            node, children = stack[-1]
            nxt = next(children, None)
            if nxt is None:
                stack.pop()
                on_path.pop()
            elif nxt == start:
                return on_path + [start]
            elif nxt not in on_path:
                stack.append((nxt, iter(sorted(graph.get(nxt, ())))))
                on_path.append(nxt)
        return None

    out, reported = [], set()
    for node in sorted(graph):
        cyc = cycle_from(node)
        if cyc and frozenset(cyc) not in reported:
            reported.add(frozenset(cyc))
            steps = "; ".join(edges[(x, y)] for x, y in zip(cyc, cyc[1:]))
            out.append(f"{' -> '.join(cyc)} ({steps})")
    return out


def folder_cycles(root):
    edges = {}  # (from folder, to folder) -> first evidence
    for f in sorted(source_files(root)):
        for n, line in enumerate(open(os.path.join(root, f), errors="replace"), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if m and "/" in m.group(1) and os.path.exists(os.path.join(root, m.group(1))):
                a, b = folder_of(f), folder_of(m.group(1))
                if a != b:
                    edges.setdefault((a, b), f"{f}:{n} includes {m.group(1)}")
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    return [f"folder cycle {c}" for c in find_cycles(graph, edges)], len(edges)


def mpi_outside_dist(root):
    out = []
    for f in sorted(source_files(root)):
        if f.startswith("runtime/dist/"):
            continue
        for n, line in enumerate(open(os.path.join(root, f), errors="replace"), 1):
            if re.match(r"\s*#\s*include\s+<mpi\.h>", line):
                out.append(f"{f}:{n} includes <mpi.h> outside runtime/dist/")
    return out


def code_lines(path):
    """Lines that are neither blank nor comments."""
    return sum(1 for line in open(path, errors="replace") if line.strip() and not line.strip().startswith("//"))


def rank_over_budget(root, budget):
    rank = os.path.join(root, "rank")
    if not os.path.isdir(rank):
        return []
    counts = {f: code_lines(os.path.join(rank, f)) for f in sorted(os.listdir(rank)) if f.endswith((".cpp", ".h"))}
    total = sum(counts.values())
    if total <= budget:
        return []
    top = ", ".join(f"{f} {n}" for f, n in sorted(counts.items(), key=lambda x: -x[1])[:3])
    return [f"rank/ holds {total} lines of code, over its budget of {budget} for wiring ({top}): move what a "
            f"library could own into it"]


def closure(links, lib, seen=None):
    seen = set() if seen is None else seen
    for dep in links.get(lib, ()):
        if dep not in seen:
            seen.add(dep)
            closure(links, dep, seen)
    return seen


def main():
    args = sys.argv[1:]
    budget = 800
    if "--rank-lines" in args:
        at = args.index("--rank-lines")
        budget = int(args[at + 1])
        del args[at:at + 2]
    root = os.path.abspath(args[0] if args else ".")
    libs, links = libraries(root)
    owner = owner_of_headers(root, libs)
    files_of = {lib: set(files) | {h for h, o in owner.items() if o == lib} for lib, files in libs.items()}
    edges = {}  # (from lib, to lib) -> first evidence
    for lib, files in files_of.items():
        for f in sorted(files):
            path = os.path.join(root, f)
            if not os.path.exists(path):
                continue
            for n, line in enumerate(open(path, errors="replace"), 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if m and owner.get(m.group(1), lib) != lib:
                    edges.setdefault((lib, owner[m.group(1)]), f"{f}:{n} includes {m.group(1)}")
    problems = []
    for (a, b), why in sorted(edges.items()):
        if b not in closure(links, a):
            problems.append(f"{a} uses {b} without linking it ({why})")
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    problems += [f"dependency cycle {c}" for c in find_cycles(graph, edges)]
    folder_problems, folder_edges = folder_cycles(root)
    problems += folder_problems
    problems += mpi_outside_dist(root)
    problems += rank_over_budget(root, budget)
    for p in problems:
        print("layering:", p)
    print(f"layering: {len(libs)} libraries, {len(edges)} dependencies between them; {folder_edges} between "
          f"folders; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
