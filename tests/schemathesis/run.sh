#!/usr/bin/env bash
# The HTTP contract, machine-checked: schemathesis (pinned) generates requests from
# docs/openapi.yaml against the running standalone server, once with sign-in off and once with
# it on, and fails on any response the document does not allow and on any 5xx.
#
#   tests/schemathesis/run.sh            # after `cargo build --workspace --bins`
#   ST_MAX_TIME=300 tests/schemathesis/run.sh   # a longer run
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin_dir="$(cd "${MCP_BIN_DIR:-$root/target/debug}" && pwd)"
max_time="${ST_MAX_TIME:-40}"

venv="$here/.venv"
if [ ! -x "$venv/bin/schemathesis" ] || [ "$here/requirements.txt" -nt "$venv/installed" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt"
  touch "$venv/installed"
fi

mkdir -p "$here/out"
cd "$here/out"   # schemathesis keeps its cache in the working directory
data="$(mktemp -d)"
. "$root/scripts/standalone.sh"
trap 'stop_standalone; rm -rf "$data"' EXIT
status=0
for mode in off oauth; do
  start_standalone "$here/out/server-$mode.log" --auth "$mode" --data-dir "$data"
  echo "schemathesis: auth $mode, server at http://$addr, $max_time s"
  "$venv/bin/schemathesis" run "$root/docs/openapi.yaml" --url "http://$addr" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance \
    --max-time "$max_time" --workers 2 --seed 1 >"$here/out/report-$mode.txt" 2>&1 || status=1
  sed -n '/SUMMARY/,$p' "$here/out/report-$mode.txt"
  if grep -q '"level":"ERROR"' "$here/out/server-$mode.log"; then
    echo "schemathesis: the server logged errors (auth $mode):"; grep '"level":"ERROR"' "$here/out/server-$mode.log" | head -5
    status=1
  fi
  stop_standalone
done
exit "$status"
