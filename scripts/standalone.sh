# Sourced by the test scripts: start `gateway --standalone` on port 0 and wait for its address.
#
#   . scripts/standalone.sh
#   start_standalone LOG [gateway args...]     # sets server_pid and addr; env assignments pass through
#   stop_standalone
start_standalone() {
  local log="$1"
  shift
  LOG_FORMAT=json "$bin_dir/gateway" --standalone --listen 127.0.0.1:0 "$@" 2>"$log" &
  server_pid=$!
  addr=""
  for _ in $(seq 1 300); do
    addr="$(grep '"message":"listening"' "$log" | grep '"service":"gateway"' | sed -E 's/.*"addr":"([^"]+)".*/\1/' | head -n1 || true)"
    [ -n "$addr" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || { cat "$log"; echo "the server did not start" >&2; return 1; }
    sleep 0.1
  done
  echo "the server did not report its address" >&2
  return 1
}

stop_standalone() {
  [ -n "${server_pid:-}" ] || return 0
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
}
