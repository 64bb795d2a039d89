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

step "conformance (official suite, authorization server scenarios)"
tests/conformance/authorization.sh || status=1

step "tests"
cargo nextest run --workspace --locked --no-fail-fast || status=1
exit "$status"
