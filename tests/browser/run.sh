#!/usr/bin/env bash
# The sign-in page of oauth-service in headless Chromium, against the standalone gateway with
# sign-in on (--auth oauth, a bootstrap user). Installs what it needs: Debian's chromium (apt)
# when missing, playwright-core pinned in package.json (npm ci). Builds the binaries when the
# gateway is missing. Writes the server log and screenshots to tests/browser/out/.
#
#   tests/browser/run.sh                             # after `cargo build --workspace --bins`
#   MCP_BIN_DIR=target/release tests/browser/run.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

if [ -z "${MCP_BIN_DIR:-}" ] && [ ! -x "$root/target/debug/gateway" ]; then
  echo "browser: building the binaries"
  (cd "$root" && cargo build --workspace --bins)
fi
bin_dir="$(cd "${MCP_BIN_DIR:-$root/target/debug}" && pwd)"
[ -x "$bin_dir/gateway" ] || { echo "browser: no gateway binary in $bin_dir" >&2; exit 1; }

if ! command -v chromium >/dev/null 2>&1; then
  echo "browser: installing Debian's chromium"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null
  elif command -v sudo >/dev/null 2>&1; then
    sudo apt-get update -qq && sudo apt-get install -y -qq chromium >/dev/null
  else
    echo "browser: chromium is missing and cannot be installed (not root, and no sudo)" >&2
    exit 1
  fi
fi
chromium="$(command -v chromium)"

cd "$here"
pinned="$(node -p 'require("./package.json").dependencies["playwright-core"]')"
installed="$(node -p 'require("./node_modules/playwright-core/package.json").version' 2>/dev/null || true)"
if [ "$installed" != "$pinned" ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi

out="$here/out"
rm -rf "$out"
mkdir -p "$out"
log="$out/server.log"
data="$(mktemp -d)"
. "$root/scripts/standalone.sh"
trap 'stop_standalone; rm -rf "$data"' EXIT
OAUTH_BOOTSTRAP_USER=alice OAUTH_BOOTSTRAP_PASSWORD='correct horse battery staple' \
  start_standalone "$log" --auth oauth --data-dir "$data"
echo "browser: server at http://$addr, $("$chromium" --version 2>/dev/null || echo chromium), playwright-core $pinned"

status=0
MCP_BASE="http://$addr" CHROMIUM="$chromium" OUT_DIR="$out" timeout --kill-after=5 90 node sign_in.mjs || status=$?
if [ "$status" != 0 ]; then
  echo "browser: failed (exit $status); the server's last log lines ($log):"
  tail -n 20 "$log"
fi
exit "$status"
