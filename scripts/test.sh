#!/usr/bin/env bash
# Run every test: lint, build the binaries, then unit, integration and end-to-end tests
# against the real binaries. Installs what it needs by itself.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

if ! cargo nextest --version >/dev/null 2>&1; then
  step "installing cargo-nextest"
  cargo install cargo-nextest --locked
fi

# Debian packages the tests need: nginx (the load balancer of the replica tests) and the
# PostgreSQL server binaries (throwaway clusters; nothing is left running).
apt_install() {
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq "$@" >/dev/null
  elif command -v sudo >/dev/null 2>&1; then sudo apt-get update -qq && sudo apt-get install -y -qq "$@" >/dev/null
  else echo "missing $* and cannot install (not root, no sudo)" >&2; fi
}
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  step "installing nginx-light"
  apt_install nginx-light
fi
if [ -z "${PG_BIN:-}" ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  step "installing the PostgreSQL server binaries"
  apt_install postgresql
fi

step "format"
cargo fmt --all -- --check

step "lint"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "build"
cargo build --workspace --bins --locked

step "deployment (Dockerfile, definitions, Kubernetes manifests)"
status=0
deploy/check.sh || status=1

step "conformance (official MCP suite, both eras)"
tests/conformance/run.sh || status=1

step "real MCP clients (Python and TypeScript SDKs, HTTP and stdio, both eras)"
tests/clients/run.sh || status=1

step "conformance (official suite, authorization server scenarios)"
tests/conformance/authorization.sh || status=1

step "HTTP contract (schemathesis against docs/openapi.yaml, sign-in off and on)"
tests/schemathesis/run.sh || status=1

step "sign-in page in headless Chromium"
tests/browser/run.sh || status=1

step "benchmark smoke (every server and scenario, answers checked, no timing assertions)"
cargo run -q -p bench --locked -- --smoke --bin-dir target/debug --out target/bench-smoke >/dev/null || status=1

step "tests (the soak under sign-in runs ${SOAK_SECONDS:-180} s)"
SOAK_SECONDS="${SOAK_SECONDS:-180}" cargo nextest run --workspace --locked --no-fail-fast || status=1

step "fuzzing (every target, ${FUZZ_SECONDS:-20} s each, committed corpus replayed first)"
scripts/fuzz.sh || status=1
exit "$status"
