#!/usr/bin/env bash
# Our server driven by the official MCP client SDKs — Python (PyPI `mcp`) and TypeScript
# (npm `@modelcontextprotocol/client`), pinned — over Streamable HTTP (the standalone
# server) and stdio (`mcp-service --stdio`), in both eras. Installs the SDKs by itself.
#
#   tests/clients/run.sh       # after `cargo build --workspace --bins`
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin_dir="$(cd "${MCP_BIN_DIR:-$root/target/debug}" && pwd)"

venv="$here/python/.venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import mcp' 2>/dev/null \
   || [ "$here/python/requirements.txt" -nt "$venv/installed" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/python/requirements.txt"
  touch "$venv/installed"
fi
(cd "$here/node" && if [ ! -d node_modules/@modelcontextprotocol/client ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error; fi)

mkdir -p "$here/out"
log="$here/out/server.log"
. "$root/scripts/standalone.sh"
trap 'stop_standalone' EXIT
start_standalone "$log"

status=0
timeout 300 "$venv/bin/python" "$here/python/test_clients.py" "http://$addr/mcp" "$bin_dir/mcp-service" \
  2>"$here/out/python.stderr" || status=1
(cd "$here/node" && timeout 300 node clients.mjs "http://$addr/mcp" "$bin_dir/mcp-service") || status=1
exit "$status"
