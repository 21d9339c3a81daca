# Sourced: an npm reference (test-only) in $ref, at the versions of its package-lock.json, installed
# when missing or stale (setup.sh installs it too): $pkg's (default tests/tokenizer). Needs $src and
# $ref; returns 1 if it cannot. Optional dependencies are left out (node-llama-cpp's builds for
# other platforms and GPUs, which its lock file does not list, so `npm ci` would refuse it).
pkg=${pkg:-$src/tests/tokenizer}
if ! cmp -s "$pkg/package-lock.json" "$ref/.installed-lock.json" || [[ ! -d "$ref/node_modules" ]]; then
  mkdir -p "$ref"
  rm -rf "$ref/node_modules" "$ref/.installed-lock.json"
  cp "$pkg/package.json" "$pkg/package-lock.json" "$ref/"
  (cd "$ref" && npm install --ignore-scripts --omit=optional --no-audit --no-fund --loglevel=error) ||
    { echo "FAIL: cannot install the npm reference in $ref (needs Node.js and npm)"; return 1; }
  cp "$pkg/package-lock.json" "$ref/.installed-lock.json"
fi
for script in "$pkg"/*.mjs; do cp "$script" "$ref/"; done
