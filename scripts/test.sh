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

# nginx (the load balancer of the replica tests), from the Debian packages.
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  step "installing nginx-light"
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq nginx-light >/dev/null
  elif command -v sudo >/dev/null 2>&1; then sudo apt-get update -qq && sudo apt-get install -y -qq nginx-light >/dev/null
  else echo "nginx is missing and cannot be installed (not root, no sudo)" >&2; fi
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

step "tests"
cargo nextest run --workspace --locked --no-fail-fast || status=1

step "fuzzing (every target, ${FUZZ_SECONDS:-20} s each, committed corpus replayed first)"
scripts/fuzz.sh || status=1
exit "$status"
