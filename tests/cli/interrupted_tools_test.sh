#!/usr/bin/env bash
# Conversions leave nothing behind and overwrite nothing:
#  - import-hf of a 0.1B model interrupted (INT, then TERM) once its temporary folder exists: the
#    tool ends by that signal, says what it removed, and neither the temporary folder nor the
#    output exists;
#  - a temporary folder of the same output left by a process of this host that is gone (a killed
#    run's) is removed by the next run, which says so; one of a live process is left alone;
#  - an output that is a link to an empty folder is refused before anything is read;
#  - export-gguf refuses an existing file and leaves it as it was, and names a model given as a
#    folder with a trailing slash by that folder.
# usage: interrupted_tools_test.sh SHARDTUNE_CKPT SHARDTUNE_MAKE_MODEL SOURCE_DIR
set -u
ckpt=$1 make_model=$2 src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
host=$(hostname)

"$make_model" "$tmp/big" --layers 8 --hidden 512 --intermediate 2048 --vocab 32000 --dtype fp32 >/dev/null ||
  { echo "FAIL: shardtune-make-model"; exit 1; }

for sig in INT TERM; do
  out=$tmp/ck-$sig
  # With INT and TERM at their default actions, as in a terminal (a shell's background job ignores INT).
  /usr/bin/python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
    "$ckpt" import-hf "$tmp/big" "$out" >/dev/null 2>"$tmp/err-$sig" &
  pid=$!
  for _ in $(seq 1 400); do  # up to 20 s for the temporary folder to appear
    compgen -G "$out.tmp-*" >/dev/null && break
    sleep 0.05
  done
  compgen -G "$out.tmp-*" >/dev/null || fail "$sig: no temporary folder appeared"
  kill -"$sig" "$pid"
  wait "$pid"
  rc=$?
  want=$((128 + $(kill -l "$sig")))
  [ $rc -eq $want ] || fail "$sig: import-hf exited $rc, not $want"
  left=$(compgen -G "$out*")
  [ -z "$left" ] || fail "$sig: left behind: $left"
  grep -q "interrupted: removed the unfinished output $out.tmp-" "$tmp/err-$sig" ||
    fail "$sig: the removal is not said: $(cat "$tmp/err-$sig")"
done

# A killed run's temporary folder (a pid of this host that no process has), and a live one's.
dead=999999
while kill -0 "$dead" 2>/dev/null; do dead=$((dead - 1)); done
mkdir -p "$tmp/ck.tmp-$host-$dead-0" "$tmp/ck.tmp-$host-$$-0"
echo partial >"$tmp/ck.tmp-$host-$dead-0/model.h5"
"$ckpt" import-hf "$src/configs/data/tiny-llama" "$tmp/ck" >/dev/null 2>"$tmp/err" || fail "import-hf failed: $(cat "$tmp/err")"
[ ! -e "$tmp/ck.tmp-$host-$dead-0" ] || fail "the killed run's temporary folder was kept"
[ -d "$tmp/ck.tmp-$host-$$-0" ] || fail "a live process's temporary folder was removed"
grep -q "removed $tmp/ck.tmp-$host-$dead-0: the unfinished output of a run that was interrupted" "$tmp/err" ||
  fail "the removal of the stale folder is not said: $(cat "$tmp/err")"
[ -f "$tmp/ck/manifest.json" ] || fail "no checkpoint written"

# A link to an empty folder, refused at once.
mkdir "$tmp/empty"
ln -s "$tmp/empty" "$tmp/link"
"$ckpt" import-hf "$src/configs/data/tiny-llama" "$tmp/link" >/dev/null 2>"$tmp/err" && fail "a link as the output was taken"
grep -q "$tmp/link is a link (to $tmp/empty)" "$tmp/err" || fail "the link is not named: $(cat "$tmp/err")"
[ -z "$(ls -A "$tmp/empty")" ] || fail "something was written through the link"

# export-gguf over an existing file.
echo "keep me" >"$tmp/model.gguf"
"$ckpt" export-gguf "$tmp/ck" "$tmp/model.gguf" --tokenizer "$src/configs/data/tiny-tokenizer/tokenizer.json" \
  >/dev/null 2>"$tmp/err" && fail "export-gguf wrote over an existing file"
grep -q "$tmp/model.gguf exists: choose a new path" "$tmp/err" || fail "the existing file is not named: $(cat "$tmp/err")"
[ "$(cat "$tmp/model.gguf")" = "keep me" ] || fail "the existing file was changed"

# A source folder given with a trailing slash still names the model.
"$ckpt" export-gguf "$src/configs/data/tiny-llama/" "$tmp/named.gguf" >/dev/null 2>"$tmp/err" ||
  fail "export-gguf of a folder with a trailing slash: $(cat "$tmp/err")"
/usr/bin/python3 - "$tmp/named.gguf" <<'PY' || fail "the GGUF's general.name is not the folder's name"
import struct, sys
f = open(sys.argv[1], "rb")
assert f.read(4) == b"GGUF"
version, tensors, kvs = struct.unpack("<IQQ", f.read(20))
def string():
    (n,) = struct.unpack("<Q", f.read(8))
    return f.read(n).decode()
sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
for _ in range(kvs):
    key, (kind,) = string(), struct.unpack("<I", f.read(4))
    value = string() if kind == 8 else f.read(sizes[kind])
    if key == "general.name":
        print("general.name:", value)
        sys.exit(0 if value == "tiny-llama" else 1)
sys.exit(1)
PY

((failures == 0)) && echo "PASS"
exit $((failures > 0))
