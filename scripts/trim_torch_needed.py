#!/usr/bin/env python3
"""A copy of a shared library without the libraries it lists as needed but takes no symbol from.

Debian's libtorch_cpu.so names OpenCV, FFmpeg, ZeroMQ, LevelDB, LMDB and more as needed (DT_NEEDED)
without using one of their symbols; through them every process that loads LibTorch maps about 300
libraries (Qt, GStreamer, GDAL, Poppler, ...) and runs their initialisers. A rank or shardtune-ckpt
then spends most of its start there. This writes LIBRARY's copy into OUT_DIR, under its soname,
with those entries removed (patchelf), so that programs whose run path names OUT_DIR load the copy.

An entry is removed only when the library it names defines none of LIBRARY's undefined dynamic
symbols. The copy is kept only if `ldd -r` (every relocation resolved, functions too) reports no
undefined symbol that it does not report for LIBRARY itself; otherwise nothing is written.
Prints the copy's path, or nothing where there is nothing to remove or no patchelf.

usage: trim_torch_needed.py LIBRARY OUT_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile


def run(*args, env=None):
    return subprocess.run(args, capture_output=True, text=True, check=False, env=env).stdout


def needed(lib):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run("readelf", "-d", "-W", lib))


def soname(lib):
    m = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", run("readelf", "-d", "-W", lib))
    return m.group(1) if m else os.path.basename(lib)


def resolved(lib):
    """needed name -> path, as the dynamic loader finds them for `lib`."""
    return dict(re.findall(r"^\s*(\S+) => (/\S+)", run("ldd", lib), re.M))


def symbols(lib, which):
    out = run("nm", "-D", which, lib)
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def undefined_symbols_reported(lib, env=None):
    return {line.strip() for line in run("ldd", "-r", lib, env=env).splitlines() if "undefined symbol" in line}


def main():
    lib, out_dir = os.path.realpath(sys.argv[1]), sys.argv[2]
    if shutil.which("patchelf") is None:
        return 0
    wanted = symbols(lib, "--undefined-only")
    paths = resolved(lib)
    unused = [n for n in needed(lib) if n in paths and not (symbols(paths[n], "--defined-only") & wanted)]
    if not unused:
        return 0
    os.makedirs(out_dir, exist_ok=True)
    target = os.path.join(out_dir, soname(lib))
    # A copy made from this very file before is reused: a new configure costs nothing.
    stamp, source = target + ".source", f"{lib} {os.path.getsize(lib)} {os.stat(lib).st_mtime_ns} {' '.join(unused)}"
    if os.path.exists(target) and os.path.exists(stamp) and open(stamp).read() == source:
        print(target)
        return 0
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        copy = os.path.join(tmp, soname(lib))
        shutil.copyfile(lib, copy)
        args = [a for n in unused for a in ("--remove-needed", n)]
        if subprocess.run(["patchelf", *args, copy], check=False).returncode != 0:
            print(f"trim_torch_needed: {lib} kept whole: patchelf failed on its copy", file=sys.stderr)
            return 0
        env = dict(os.environ, LD_LIBRARY_PATH=tmp)
        extra = undefined_symbols_reported(copy, env) - undefined_symbols_reported(lib)
        if extra:
            print(f"trim_torch_needed: {lib} kept whole: without {', '.join(unused)} it leaves "
                  f"{sorted(extra)[0]}", file=sys.stderr)
            return 0
        os.replace(copy, target)
    with open(stamp, "w") as f:
        f.write(source)
    print(target)
    print(f"trim_torch_needed: {soname(lib)} without {len(unused)} needed libraries it takes no symbol from: "
          f"{' '.join(unused)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
