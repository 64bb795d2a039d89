#!/usr/bin/env bash
# Our server driven by the official MCP client SDKs — Python (PyPI `mcp`, pinned in
# python/requirements.txt) and TypeScript (npm `@modelcontextprotocol/client`, pinned in
# node/package.json and package-lock.json) — over Streamable HTTP (`gateway --standalone`) and
# stdio (`mcp-service --stdio`), in both eras (the initialize handshake and 2026-07-28),
# serving examples/catalog.yaml. Installs the SDKs by itself (a venv under python/.venv,
# `npm ci` under node/). One line per scenario; exits 1 if any scenario fails.
#
#   tests/clients/run.sh                     # after `cargo build --workspace --bins`
#   MCP_BIN_DIR=target/release tests/clients/run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin_dir="$(cd "${MCP_BIN_DIR:-$root/target/debug}" && pwd)"
catalog="$root/examples/catalog.yaml"
out="$here/out"
for bin in gateway mcp-service; do
  [ -x "$bin_dir/$bin" ] || { echo "clients: $bin_dir/$bin is missing (cargo build --workspace --bins)" >&2; exit 1; }
done

# The SDKs, reinstalled only when their pins change.
venv="$here/python/.venv"
if ! cmp -s "$here/python/requirements.txt" "$venv/requirements.installed"; then
  echo "clients: installing the Python SDK into $venv"
  rm -rf "$venv"
  timeout 120 python3 -m venv "$venv"
  timeout 300 "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/python/requirements.txt"
  cp "$here/python/requirements.txt" "$venv/requirements.installed"
fi
if [ ! -d "$here/node/node_modules/@modelcontextprotocol/client" ] \
   || [ "$here/node/package-lock.json" -nt "$here/node/node_modules/.package-lock.json" ]; then
  echo "clients: installing the TypeScript SDK (npm ci)"
  (cd "$here/node" && timeout 300 npm ci --no-audit --no-fund --loglevel=error)
fi

rm -rf "$out"
mkdir -p "$out"
. "$root/scripts/standalone.sh"
trap 'stop_standalone' EXIT
trap 'exit 130' INT TERM
start_standalone "$out/server.log" --definitions "$catalog"
url="http://$addr/mcp"
echo "clients: server at $url; stdio servers: $bin_dir/mcp-service --stdio --definitions $catalog"

# Each program prints PASS/FAIL lines, one per scenario, and exits 1 on any failure. Their
# stderr (the SDKs' and the stdio servers' logs) goes to out/.
status=0
timeout 120 "$venv/bin/python" "$here/python/test_clients.py" "$url" "$bin_dir/mcp-service" "$catalog" "$out" \
  2>"$out/python.stderr" | tee "$out/python.txt" || status=1
(cd "$here/node" && timeout 120 node clients.mjs "$url" "$bin_dir/mcp-service" "$catalog" "$out") \
  2>"$out/typescript.stderr" | tee "$out/typescript.txt" || status=1

passed="$(cat "$out/python.txt" "$out/typescript.txt" | grep -c '^PASS' || true)"
failed="$(cat "$out/python.txt" "$out/typescript.txt" | grep -c '^FAIL' || true)"
echo "clients: $passed scenarios passed, $failed failed (logs in $out)"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ] || status=1
exit "$status"
