#!/usr/bin/env bash
# The sign-in page in headless Chromium against the standalone server with sign-in on.
# Installs what it needs: Debian's chromium (apt) when missing, playwright-core (npm ci).
#
#   tests/browser/run.sh       # after `cargo build --workspace --bins`
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin_dir="$(cd "${MCP_BIN_DIR:-$root/target/debug}" && pwd)"

chromium="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$chromium" ]; then
  echo "browser: installing chromium"
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null
  elif command -v sudo >/dev/null 2>&1; then sudo apt-get update -qq && sudo apt-get install -y -qq chromium >/dev/null
  else echo "browser: chromium is missing and cannot be installed (not root, no sudo)" >&2; exit 1; fi
  chromium="$(command -v chromium)"
fi
cd "$here"
if [ ! -d node_modules/playwright-core ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi

mkdir -p out
data="$(mktemp -d)"
log="out/server.log"
LOG_FORMAT=json OAUTH_BOOTSTRAP_USER=alice OAUTH_BOOTSTRAP_PASSWORD='correct horse battery staple' \
  "$bin_dir/gateway" --standalone --listen 127.0.0.1:0 --auth oauth --data-dir "$data" 2>"$log" &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; rm -rf "$data"' EXIT
addr=""
for _ in $(seq 1 300); do
  addr="$(grep '"message":"listening"' "$log" | grep '"service":"gateway"' | sed -E 's/.*"addr":"([^"]+)".*/\1/' | head -n1 || true)"
  [ -n "$addr" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$log"; echo "browser: the server did not start" >&2; exit 1; }
  sleep 0.1
done
[ -n "$addr" ] || { echo "browser: the server did not report its address" >&2; exit 1; }
MCP_BASE="http://$addr" CHROMIUM="$chromium" timeout 120 node sign_in.mjs
