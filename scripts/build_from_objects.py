#!/usr/bin/env python3
"""Builds TARGETS in BUILD (configured against the GPU check's prefix) from the object files of
OBJECTS (this machine's own build of the same sources), for scripts/gpu-env-check.sh.

An object of OBJECTS is used only where its compile command equals BUILD's but for where the
headers come from (-I, -isystem and dependency-file options) and none of the headers it was
compiled from (ninja's record) is listed in the file ST_DIFFERING_FILES names (gpu-env-check.sh:
the files of the packages whose .deb is another version than this machine's copy); BUILD's command is then run as a preprocessor pass
(-E -fdirectives-only), which finds every header the object was compiled from in the prefix or
fails as the compile would. Objects compiled with the same options find a header of the same name
in the same place, so a pass is run for as few objects of each such group as together were compiled
from every header from outside the source tree that any object of the group was (a greedy cover):
each of those headers is found by a pass with its object's own options. Any other object is
compiled. The archives and programs are then made
by BUILD's own archive and link commands, so they link against the prefix's libraries.

usage: build_from_objects.py BUILD OBJECTS JOBS TARGET...
"""
import concurrent.futures
import os
import shlex
import shutil
import subprocess
import sys


def commands(build, targets):
    """BUILD's ninja commands for TARGETS, in build order, each once."""
    out = subprocess.run(["ninja", "-C", build, "-t", "commands", *targets], check=True,
                         capture_output=True, text=True).stdout
    return list(dict.fromkeys(line for line in out.splitlines() if line.strip()))


def output_of(argv):
    return argv[argv.index("-o") + 1] if "-o" in argv else None


def without_header_paths(argv):
    """The compile command less its header search paths, dependency-file and output options."""
    kept, skip = [], 0
    for i, a in enumerate(argv):
        if skip:
            skip -= 1
            continue
        if a in ("-isystem", "-I", "-iquote", "-MT", "-MF", "-o"):
            skip = 1
        elif a.startswith(("-I", "-isystem")) or a in ("-MD", "-MMD"):
            pass
        else:
            kept.append(a)
    return kept


def headers_of(build, outputs):
    """{object: set of the files it was compiled from}, from ninja's dependency log."""
    out = subprocess.run(["ninja", "-C", build, "-t", "deps", *outputs], check=True,
                         capture_output=True, text=True).stdout
    deps, current = {}, None
    for line in out.splitlines():
        if line and not line[0].isspace():
            current = line.split(":")[0]
            deps[current] = set()
        elif line.strip() and current:
            deps[current].add(os.path.realpath(os.path.join(build, line.strip())))
    return deps


SOURCE_TREE = os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep


def options_of(argv):
    """The compile command less its source, output and dependency-file names: the same for every
    object of a target, and so the same search for each header name."""
    kept, skip = [], 0
    for a in argv:
        if skip:
            skip -= 1
        elif a in ("-MT", "-MF", "-o", "-c"):
            skip = 1
        else:
            kept.append(a)
    return tuple(kept)


def cover(members):
    """Of [(command, headers)], the commands of a few members whose headers together are every
    member's: the member with the most headers not yet covered, until none is left."""
    left, chosen = set().union(*(h for _, h in members)), []
    while left:
        command, headers = max(members, key=lambda m: len(m[1] & left))
        chosen.append(command)
        left -= headers
    return chosen


def run(cmd, cwd):
    r = subprocess.run(cmd, cwd=cwd, shell=isinstance(cmd, str), capture_output=True, text=True)
    if r.returncode != 0:
        shown = cmd if isinstance(cmd, str) else shlex.join(cmd)
        raise RuntimeError(f"failed ({r.returncode}): {shown[:400]}\n{r.stdout[-4000:]}{r.stderr[-4000:]}")


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__.strip().splitlines()[-1])
    build, objects, jobs, targets = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    theirs = {}
    for line in commands(objects, targets):
        argv = shlex.split(line)
        if "-c" in argv:
            theirs[output_of(argv)] = without_header_paths(argv)
    compile_steps, other_steps = [], []
    for line in commands(build, targets):
        argv = shlex.split(line)
        (compile_steps if "-c" in argv else other_steps).append((line, argv))

    differing = set()
    if os.environ.get("ST_DIFFERING_FILES"):
        with open(os.environ["ST_DIFFERING_FILES"]) as f:
            differing = {os.path.realpath(line.strip()) for line in f if line.strip()}
    headers = headers_of(objects, list(theirs))
    groups, compile_ = {}, []  # options -> [(preprocessor command, headers from outside the tree)]
    for line, argv in compile_steps:
        obj = output_of(argv)
        if (theirs.get(obj) == without_header_paths(argv) and os.path.isfile(os.path.join(objects, obj))
                and obj in headers and not headers[obj] & differing):
            os.makedirs(os.path.join(build, os.path.dirname(obj)), exist_ok=True)
            shutil.copy2(os.path.join(objects, obj), os.path.join(build, obj))
            pp = [a if a != "-c" else "-E" for a in argv]
            pp[pp.index("-o") + 1] = os.devnull
            outside = {h for h in headers[obj] if not h.startswith(SOURCE_TREE)}
            groups.setdefault(options_of(argv), []).append((pp + ["-fdirectives-only"], outside))
        else:
            compile_.append(line)
    preprocess = [pp for members in groups.values() for pp in cover(members)]
    reused = sum(len(members) for members in groups.values())
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for f in [pool.submit(run, c, build) for c in preprocess + compile_]:
            f.result()
    for line, _ in other_steps:  # archives, then programs: ninja's order
        run(line, build)
    print(f"build_from_objects: {reused} objects reused, their headers all found by {len(preprocess)} preprocessor "
          f"passes; "
          f"{len(compile_)} compiled; {len(other_steps)} archive and link steps run for {' '.join(targets)}")


if __name__ == "__main__":
    try:
        main()
    except RuntimeError as e:
        sys.exit(f"build_from_objects: {e}")
