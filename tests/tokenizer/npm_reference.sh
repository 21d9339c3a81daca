# Sourced: the npm reference (test-only) in $ref, at the versions of package-lock.json, installed
# when missing or stale (setup.sh installs it too). Needs $src and $ref; returns 1 if it cannot.
if ! cmp -s "$src/tests/tokenizer/package-lock.json" "$ref/package-lock.json" || [[ ! -d "$ref/node_modules" ]]; then
  mkdir -p "$ref"
  cp "$src/tests/tokenizer/package.json" "$src/tests/tokenizer/package-lock.json" "$ref/"
  (cd "$ref" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) ||
    { echo "FAIL: cannot install the npm reference in $ref (needs Node.js and npm)"; return 1; }
fi
cp "$src/tests/tokenizer/reference.mjs" "$ref/"
