#!/usr/bin/env bash
# Check the deployment: the Dockerfile (rules below), the definitions file shipped in the base,
# and every Kubernetes object of every overlay (rendered with kustomize) against the
# Kubernetes and Gateway API schemas with cross-object checks.
#
#   deploy/check.sh            # after `cargo build --workspace --bins`
#
# The manifest validator is the team's offline one (validate.sh: kubectl kustomize,
# kubernetes-validate and Gateway API schemas from PyPI/npm, pinned there). Point K8S_VALIDATE
# at it, or keep the shared tools checkout beside this repository (../shared/tools/k8s).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
bin_dir="$(cd "${MCP_BIN_DIR:-$root/target/debug}" && pwd)"
failed=0
say() { printf '%s\n' "$*"; }

# 1. Dockerfile rules: multi-stage, pinned bases (no `latest`), a non-root user, no shell at
#    run time (exec-form ENTRYPOINT), the four services selectable.
df="$root/Dockerfile"
check() { if eval "$2"; then say "ok   dockerfile: $1"; else say "FAIL dockerfile: $1"; failed=1; fi; }
check "multi-stage build" '[ "$(grep -c "^FROM " "$df")" -ge 2 ]'
check "no latest or untagged base image" '! grep -E "^FROM " "$df" | grep -Eq ":latest|^FROM [^:]+( |$)"'
check "runs as a non-root user" 'grep -Eq "^USER (65532|nonroot)" "$df"'
check "runtime image without a shell (distroless)" 'grep -E "^FROM " "$df" | tail -n1 | grep -q distroless'
check "exec-form entrypoint" 'grep -Eq "^ENTRYPOINT \[" "$df"'
check ".dockerignore keeps target/ out" 'grep -qx "target/" "$root/.dockerignore"'
for svc in gateway mcp-service registry-service oauth-service; do
  check "package $svc builds a binary $svc" 'grep -q "^name = \"$svc\"" "$root/$svc/Cargo.toml"'
done

# 2. The definitions file in the base is valid.
if "$bin_dir/registry-service" --validate-only --definitions "$here/base/definitions.yaml"; then
  say "ok   definitions: deploy/base/definitions.yaml"
else
  say "FAIL definitions: deploy/base/definitions.yaml"; failed=1
fi

# 3. Kubernetes objects.
validator="${K8S_VALIDATE:-$root/../shared/tools/k8s/validate.sh}"
if [ -x "$validator" ]; then
  # Secrets the operator creates (prod) and the TLS certificate of the example Ingress.
  export K8S_ALLOW_MISSING="Secret/mcp-platform,Secret/oauth-service,Secret/oauth-signing-keys,Secret/mcp-example-com-tls"
  export K8S_POLICY="${K8S_POLICY:-off}"
  "$validator" "$here" || failed=1
elif command -v kubectl >/dev/null 2>&1; then
  say "note: no manifest validator (set K8S_VALIDATE); rendering the overlays with kubectl only"
  for k in "$here"/base "$here"/overlays/*; do
    if kubectl kustomize "$k" >/dev/null; then say "ok   kustomize ${k#"$here"/}"; else say "FAIL kustomize ${k#"$here"/}"; failed=1; fi
  done
else
  say "SKIP kubernetes manifests: no validator (K8S_VALIDATE) and no kubectl on this machine"
fi
exit "$failed"
