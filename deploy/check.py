#!/usr/bin/env python3
"""The project's own checks of rendered Kubernetes manifests (deploy/check.sh runs this).

The schema validator says whether each object is valid Kubernetes; this says whether the set
fits the binaries it deploys, read from the source tree so that drift shows:

- every GATEWAY_*, MCP_SERVICE_*, REGISTRY_*, OAUTH_* variable a container gets (env and
  envFrom ConfigMaps) is a key of that service's `Config` struct (<crate>/src/config.rs):
  unknown keys stop a service at start; `PREFIX_KEY_FILE` is the key read from a file, which
  must lie in a mounted volume, and never beside `PREFIX_KEY`;
- gateway: a per-address rate limit behind an Ingress or HTTPRoute needs
  GATEWAY_TRUSTED_PROXIES, valid networks, none trusting every address;
- listen ports match the container ports; service URLs name a Service of the set whose
  port reaches the target's listen port; Service Links are off (their variables would carry
  the services' prefixes);
- probes: HTTP /healthz (liveness) and /readyz (readiness) for the HTTP services, native gRPC
  probes for the gRPC ones, readiness on the service name declared in proto/proto/**;
- security context (non-root, read-only root, no privilege escalation, ALL capabilities
  dropped, seccomp RuntimeDefault), requests and limits, preStop as the kubelet's sleep
  (the image has no shell) and a termination grace period above preStop + drain deadline;
- PUBLIC_URL and ISSUER_URL well formed; Ingress and HTTPRoute hosts equal PUBLIC_URL's and
  route /mcp, /.well-known/ and /oauth/ to the gateway Service;
- the definitions ConfigMap, laid out as registry-service's volume mounts it, passes
  `registry-service --validate-only`;
- with NetworkPolicies: a default deny, DNS egress for every pod, and every connection the
  configuration makes (service URLs) allowed on both ends; with HPAs: every Deployment has an
  HPA (two replicas at least) and a PDB; oauth-service on SQLite runs one replica.

And of the Dockerfile (`--dockerfile`): multi-stage; every base image tagged or pinned by
digest, never `latest`; the runtime stage distroless (or scratch), without RUN (no shell
there), with a non-root USER and an exec-form ENTRYPOINT; the SERVICE build argument
checked against the four services and used to select the package; .dockerignore keeps
target/ and .git/ out.

Usage: check.py --registry-bin PATH SET_NAME=FILE...
       check.py --dockerfile PATH
Prints ok/FAIL lines, then "#counts PASSED FAILED".
"""
import argparse
import ipaddress
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = {"gateway": "GATEWAY_", "mcp-service": "MCP_SERVICE_", "registry-service": "REGISTRY_", "oauth-service": "OAUTH_"}
HTTP_SERVICES = {"gateway", "oauth-service"}
GRPC_PROTO = {"mcp-service": "proto/proto/mcp/v1/mcp.proto", "registry-service": "proto/proto/registry/v1/registry.proto"}
# The service URL each component is configured with, and the component it names.
UPSTREAMS = [("gateway", "GATEWAY_MCP_SERVICE", "mcp-service"), ("gateway", "GATEWAY_OAUTH_SERVICE", "oauth-service"),
             ("mcp-service", "MCP_SERVICE_REGISTRY", "registry-service")]
# The drain deadline each service has after SIGTERM (setting, default seconds).
DRAIN = {"gateway": ("GATEWAY_SHUTDOWN_GRACE_SECS", 10)}
PUBLIC_PATHS = ["/mcp", "/.well-known/", "/oauth/"]
NAME = "app.kubernetes.io/name"

PASSED = FAILED = 0


def report(set_name, what, errors):
    global PASSED, FAILED
    if errors:
        FAILED += 1
        print("FAIL [%s] %s" % (set_name, what))
        for e in errors:
            print("    - " + e)
    else:
        PASSED += 1
        print("ok   [%s] %s" % (set_name, what))


def config_keys(service):
    """Field names of `pub struct Config` in the crate's config.rs."""
    src = open(os.path.join(ROOT, service, "src", "config.rs"), encoding="utf-8").read()
    m = re.search(r"pub struct Config\s*\{(.*?)\n\}", src, re.S)
    if not m:
        raise SystemExit("check.py: no `pub struct Config` in %s/src/config.rs" % service)
    return set(re.findall(r"^\s*pub\s+(\w+)\s*:", m.group(1), re.M))


def grpc_service_name(proto):
    src = open(os.path.join(ROOT, proto), encoding="utf-8").read()
    pkg = re.search(r"^package\s+([\w.]+)\s*;", src, re.M)
    svc = re.search(r"^service\s+(\w+)", src, re.M)
    if not pkg or not svc:
        raise SystemExit("check.py: no package or service in %s" % proto)
    return "%s.%s" % (pkg.group(1), svc.group(1))


def port_of(addr):
    m = re.search(r":(\d+)$", str(addr))
    return int(m.group(1)) if m else None


def selects(selector, labels):
    """A label selector (matchLabels only; matchExpressions never match here) against labels."""
    if selector is None:
        return False
    if selector.get("matchExpressions"):
        return False
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


class Set:
    def __init__(self, name, path):
        self.name = name
        self.objs = [d for d in yaml.safe_load_all(open(path, encoding="utf-8")) if isinstance(d, dict)]

    def of(self, kind):
        return [o for o in self.objs if o.get("kind") == kind]

    def get(self, kind, name):
        return next((o for o in self.of(kind) if o["metadata"]["name"] == name), None)

    def deployment(self, component):
        return next((d for d in self.of("Deployment") if d["spec"]["template"]["metadata"].get("labels", {}).get(NAME) == component), None)


def container(dep):
    return dep["spec"]["template"]["spec"]["containers"][0]


def env_of(s, c):
    """name -> value (None for a Secret or something unresolvable), envFrom first."""
    env = {}
    for ef in c.get("envFrom", []):
        if "configMapRef" in ef:
            cm = s.get("ConfigMap", ef["configMapRef"]["name"])
            for k, v in ((cm or {}).get("data") or {}).items():
                env[k] = v
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: str(env.get(m.group(1), m.group(0))), str(e["value"]))
        elif "configMapKeyRef" in e.get("valueFrom", {}):
            r = e["valueFrom"]["configMapKeyRef"]
            cm = s.get("ConfigMap", r["name"])
            env[e["name"]] = ((cm or {}).get("data") or {}).get(r["key"])
        else:
            env[e["name"]] = None
    return env


def container_port(c, ref):
    for p in c.get("ports", []):
        if ref in (p.get("name"), p.get("containerPort")):
            return p["containerPort"]
    return None


def check_deployments(s):
    for comp, prefix in PREFIX.items():
        dep = s.deployment(comp)
        if dep is None:
            report(s.name, "%s: Deployment" % comp, ["no Deployment with %s=%s" % (NAME, comp)])
            continue
        pod = dep["spec"]["template"]["spec"]
        c = container(dep)
        env = env_of(s, c)
        listen = port_of(env.get(prefix + "LISTEN"))

        # Settings the binary knows.
        keys = config_keys(comp)
        # `PREFIX_KEY_FILE` is the setting `key` read from a file (proto/src/runtime.rs).
        setting = lambda n: re.sub(r"_file$", "", n[len(prefix):].lower()).split("__")[0]
        errs = ["%s: `%s` is not a setting of %s (%s/src/config.rs)" % (n, setting(n), comp, comp)
                for n in sorted(env) if n.startswith(prefix) and setting(n) not in keys]
        mounts = [m["mountPath"].rstrip("/") + "/" for m in c.get("volumeMounts", [])]
        for n in sorted(env):
            if not (n.startswith(prefix) and n.endswith("_FILE")):
                continue
            if n[:-len("_FILE")] in env:
                errs.append("%s and %s are both set (the service refuses to start)" % (n[:-len("_FILE")], n))
            if env[n] is None or not any(str(env[n]).startswith(m) for m in mounts):
                errs.append("%s=%s is not a file in a mounted volume" % (n, env[n]))
        if listen is None:
            errs.append("%sLISTEN is not set to host:port" % prefix)
        elif listen not in [p["containerPort"] for p in c.get("ports", [])]:
            errs.append("%sLISTEN port %s is not a container port" % (prefix, listen))
        metrics = env.get(prefix + "METRICS_LISTEN")
        if metrics and port_of(metrics) not in [p["containerPort"] for p in c.get("ports", [])]:
            errs.append("%sMETRICS_LISTEN port is not a container port" % prefix)
        if pod.get("enableServiceLinks") is not False:
            errs.append("enableServiceLinks must be false (service link variables carry the services' prefixes)")
        report(s.name, "%s: settings exist in the binary, ports agree" % comp, errs)
        if comp == "gateway":
            # Behind an entry point the peer is the proxy: a per-address limit needs the
            # proxies trusted for X-Forwarded-For, as valid networks.
            errs = []
            proxies = env.get("GATEWAY_TRUSTED_PROXIES")
            try:
                nets = [ipaddress.ip_network(str(p).strip(), strict=True) for p in yaml.safe_load(proxies or "[]")]
            except (ValueError, TypeError, yaml.YAMLError) as e:
                nets = []
                errs.append("GATEWAY_TRUSTED_PROXIES=%s: not a list of CIDRs (%s)" % (proxies, e))
            entry = s.of("Ingress") or s.of("HTTPRoute")
            if entry and int(env.get("GATEWAY_RATE_LIMIT_PER_IP") or 0) > 0 and not nets:
                errs.append("GATEWAY_RATE_LIMIT_PER_IP behind an entry point without GATEWAY_TRUSTED_PROXIES counts the proxy, not clients")
            if any(n.prefixlen == 0 for n in nets):
                errs.append("GATEWAY_TRUSTED_PROXIES trusts every address: any client could choose its own")
            report(s.name, "gateway: per-address limits behind an entry point trust its proxies", errs)

        # Probes.
        errs = []
        live, ready = c.get("livenessProbe") or {}, c.get("readinessProbe") or {}
        if comp in HTTP_SERVICES:
            for probe, path, what in ((live, "/healthz", "liveness"), (ready, "/readyz", "readiness")):
                g = probe.get("httpGet")
                if not g or g.get("path") != path:
                    errs.append("%s probe must be httpGet %s" % (what, path))
                elif container_port(c, g.get("port")) != listen:
                    errs.append("%s probe port %s is not the listen port %s" % (what, g.get("port"), listen))
        else:
            name = grpc_service_name(GRPC_PROTO[comp])
            if (ready.get("grpc") or {}).get("service") != name:
                errs.append("readiness probe must be grpc with service %s (grpc.health.v1 name of %s)" % (name, GRPC_PROTO[comp]))
            if "grpc" not in live:
                errs.append("liveness probe must be a grpc probe")
            for probe, what in ((live, "liveness"), (ready, "readiness")):
                if "grpc" in probe and probe["grpc"].get("port") != listen:
                    errs.append("%s probe port %s is not the listen port %s" % (what, probe["grpc"].get("port"), listen))
        report(s.name, "%s: probes" % comp, errs)

        # Draining.
        errs = []
        pre = (c.get("lifecycle") or {}).get("preStop") or {}
        if "exec" in pre:
            errs.append("preStop exec needs a shell, which the image does not have: use lifecycle.preStop.sleep")
        sleep = (pre.get("sleep") or {}).get("seconds")
        if sleep is None:
            errs.append("no preStop sleep (lets the load balancer stop sending before SIGTERM)")
        setting, default = DRAIN.get(comp, (None, 0))
        drain = int(env.get(setting) or default) if setting else 0
        grace = pod.get("terminationGracePeriodSeconds", 30)
        if grace <= (sleep or 0) + drain:
            errs.append("terminationGracePeriodSeconds %s is not above preStop %s s + drain %s s" % (grace, sleep, drain))
        report(s.name, "%s: preStop sleep, grace period above the drain deadline" % comp, errs)

        # Security context and resources.
        errs = []
        psc, sc = pod.get("securityContext") or {}, c.get("securityContext") or {}
        if not (psc.get("runAsNonRoot") or sc.get("runAsNonRoot")):
            errs.append("runAsNonRoot is not true")
        if (psc.get("seccompProfile") or sc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            errs.append("seccompProfile is not RuntimeDefault")
        if sc.get("readOnlyRootFilesystem") is not True:
            errs.append("readOnlyRootFilesystem is not true")
        if sc.get("allowPrivilegeEscalation") is not False:
            errs.append("allowPrivilegeEscalation is not false")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            errs.append("capabilities do not drop ALL")
        if pod.get("automountServiceAccountToken") is not False:
            errs.append("automountServiceAccountToken is not false (no component talks to the API server)")
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if r not in (res.get(part) or {}):
                    errs.append("no %s.%s" % (part, r))
        report(s.name, "%s: security context, requests and limits" % comp, errs)

    # Service URLs reach the component's listen port through a Service of the set; a
    # dns:///name:port target names a headless Service (its DNS answer is the pods, reached on
    # their own port: the target's port must be the listen port); a comma-separated list has
    # every URL checked.
    errs = []
    for src, var, dst in UPSTREAMS:
        sdep, ddep = s.deployment(src), s.deployment(dst)
        if not sdep or not ddep:
            continue
        value = env_of(s, container(sdep)).get(var) or ""
        dlisten = port_of(env_of(s, container(ddep)).get(PREFIX[dst] + "LISTEN"))
        for url in [v.strip() for v in value.split(",")]:
            headless = url.startswith("dns:")
            if headless:
                name, _, port = url[len("dns:"):].lstrip("/").rpartition(":")
                host, port = name, int(port) if port.isdigit() else None
            else:
                u = urllib.parse.urlsplit(url)
                host, port = u.hostname or "", u.port
            svc = s.get("Service", host.split(".")[0])
            if svc is None:
                errs.append("%s %s=%s: no Service %r in the set" % (src, var, url, host))
                continue
            sname = svc["metadata"]["name"]
            if not selects({"matchLabels": svc["spec"].get("selector") or {}}, ddep["spec"]["template"]["metadata"]["labels"]):
                errs.append("Service %s does not select the %s pods" % (sname, dst))
            if headless != (svc["spec"].get("clusterIP") == "None"):
                errs.append("%s %s=%s: Service %s %s headless" % (src, var, url, sname, "is not" if headless else "is"))
            if headless and svc["spec"].get("publishNotReadyAddresses"):
                errs.append("Service %s publishes pods that are not ready" % sname)
            sp = next((p for p in svc["spec"]["ports"] if p["port"] == port), None)
            if sp is None:
                errs.append("%s %s=%s: Service %s has no port %s" % (src, var, url, sname, port))
            elif container_port(container(ddep), sp.get("targetPort", sp["port"])) != dlisten:
                errs.append("Service %s port %s does not reach %s's listen port %s" % (sname, port, dst, dlisten))
            elif headless and port != dlisten:
                errs.append("%s %s=%s: through a headless Service the port must be the listen port %s" % (src, var, url, dlisten))
    report(s.name, "service URLs name Services that reach the listen ports", errs)


def check_public_url(s):
    cm = next((c for c in s.of("ConfigMap") if "PUBLIC_URL" in (c.get("data") or {})), None)
    if cm is None:
        report(s.name, "PUBLIC_URL and ISSUER_URL", ["no ConfigMap with PUBLIC_URL"])
        return None
    errs = []
    for key in ("PUBLIC_URL", "ISSUER_URL"):
        v = cm["data"].get(key)
        u = urllib.parse.urlsplit(v or "")
        if not v or u.scheme not in ("http", "https") or not u.hostname:
            errs.append("%s=%r is not an absolute http(s) URL" % (key, v))
            continue
        if v.endswith("/"):
            errs.append("%s=%r ends with a slash (the token audience is PUBLIC_URL/mcp)" % (key, v))
        if u.query or u.fragment:
            errs.append("%s=%r has a query or fragment" % (key, v))
        loopback = u.hostname == "localhost" or (re.fullmatch(r"[\d.:]+", u.hostname) and ipaddress.ip_address(u.hostname).is_loopback)
        if u.scheme != "https" and not loopback:
            errs.append("%s=%r: https is required beyond a loopback address" % (key, v))
    report(s.name, "PUBLIC_URL and ISSUER_URL (%s)" % cm["data"].get("PUBLIC_URL"), errs)
    return urllib.parse.urlsplit(cm["data"].get("PUBLIC_URL") or "").hostname


def check_routes(s, host):
    gw_svc = s.get("Service", "gateway")
    for ing in s.of("Ingress"):
        errs = []
        for rule in ing["spec"].get("rules", []):
            if rule.get("host") != host:
                errs.append("host %r is not PUBLIC_URL's host %r" % (rule.get("host"), host))
            routed = {p["path"]: p["backend"].get("service", {}) for p in (rule.get("http") or {}).get("paths", [])}
            for path in PUBLIC_PATHS:
                b = routed.get(path)
                if not b or b.get("name") != "gateway":
                    errs.append("%s is not routed to the gateway Service" % path)
                elif gw_svc and b.get("port", {}).get("name") not in [p.get("name") for p in gw_svc["spec"]["ports"]] \
                        and b.get("port", {}).get("number") not in [p["port"] for p in gw_svc["spec"]["ports"]]:
                    errs.append("%s: port %s is not a port of the gateway Service" % (path, b.get("port")))
        report(s.name, "Ingress %s routes %s to the gateway" % (ing["metadata"]["name"], ", ".join(PUBLIC_PATHS)), errs)
    for rt in s.of("HTTPRoute"):
        errs = []
        if host not in rt["spec"].get("hostnames", []):
            errs.append("hostnames %s do not include PUBLIC_URL's host %r" % (rt["spec"].get("hostnames"), host))
        for path in PUBLIC_PATHS:
            rule = next((r for r in rt["spec"].get("rules", []) for m in r.get("matches", [])
                         if (m.get("path") or {}).get("value") == path), None)
            ports = [p["port"] for p in gw_svc["spec"]["ports"]] if gw_svc else []
            if not rule or not any(b.get("name") == "gateway" and b.get("port") in ports for b in rule.get("backendRefs", [])):
                errs.append("%s is not routed to a port of the gateway Service" % path)
        report(s.name, "HTTPRoute %s routes %s to the gateway" % (rt["metadata"]["name"], ", ".join(PUBLIC_PATHS)), errs)


def check_definitions(s, registry_bin):
    dep = s.deployment("registry-service")
    if dep is None:
        return
    c, pod = container(dep), dep["spec"]["template"]["spec"]
    path = env_of(s, c).get("REGISTRY_DEFINITIONS")
    errs = []
    mount = next((m for m in c.get("volumeMounts", []) if path and path.startswith(m["mountPath"].rstrip("/") + "/")), None)
    if mount is None:
        report(s.name, "definitions file", ["REGISTRY_DEFINITIONS=%r is not inside a mounted volume" % path])
        return
    if mount.get("subPath"):
        errs.append("the definitions volume is mounted with subPath: ConfigMap updates would not reach it")
    vol = next((v for v in pod.get("volumes", []) if v["name"] == mount["name"]), {})
    if "configMap" not in vol:
        report(s.name, "definitions file", errs + ["volume %s is not a ConfigMap" % mount["name"]])
        return
    cm = s.get("ConfigMap", vol["configMap"]["name"])
    if cm is None:
        report(s.name, "definitions file", errs + ["ConfigMap %s is not in the set" % vol["configMap"]["name"]])
        return
    if re.search(r"-[a-z0-9]{10}$", cm["metadata"]["name"]):
        errs.append("ConfigMap %s has a content hash in its name: edits would roll the pods instead of reloading "
                    "(options.disableNameSuffixHash: true)" % cm["metadata"]["name"])
    data = dict(cm.get("data") or {})
    items = vol["configMap"].get("items") or [{"key": k, "path": k} for k in data]
    with tempfile.TemporaryDirectory() as d:
        for it in items:
            if it["key"] not in data:
                errs.append("item key %s is not in ConfigMap %s" % (it["key"], cm["metadata"]["name"]))
                continue
            f = os.path.join(d, it["path"])
            os.makedirs(os.path.dirname(f), exist_ok=True)
            with open(f, "w", encoding="utf-8") as fh:
                fh.write(data[it["key"]])
        rel = os.path.relpath(path, mount["mountPath"])
        if not errs:
            r = subprocess.run([registry_bin, "--validate-only", "--definitions", os.path.join(d, rel)],
                               capture_output=True, text=True, env={**os.environ, "LOG_FORMAT": "text"})
            if r.returncode != 0:
                errs.append("registry-service --validate-only refuses it:")
                errs += ["  " + line.replace(d + "/", "") for line in (r.stdout + r.stderr).strip().splitlines()[-15:]]
    report(s.name, "definitions file %s as mounted passes registry-service --validate-only" % path, errs)


def allowed(s, src_labels, dst_labels, port, direction):
    """Whether some NetworkPolicy selecting the pod (src for egress, dst for ingress) lets
    the connection through (same namespace, matchLabels only)."""
    own, peer_labels, key, peers = (src_labels, dst_labels, "egress", "to") if direction == "Egress" else \
        (dst_labels, src_labels, "ingress", "from")
    for np in s.of("NetworkPolicy"):
        spec = np["spec"]
        if direction not in spec.get("policyTypes", []) or not selects(spec.get("podSelector") or {}, own):
            continue
        for rule in spec.get(key) or []:
            ports = rule.get("ports")
            if ports and not any(p.get("port") == port and p.get("protocol", "TCP") == "TCP" for p in ports):
                continue
            to = rule.get(peers)
            if not to or any("namespaceSelector" not in p and "ipBlock" not in p and selects(p.get("podSelector") or {}, peer_labels)
                             for p in to):
                return True
    return False


def check_network_policies(s):
    nps = s.of("NetworkPolicy")
    if not nps:
        return
    errs = []
    if not any(np["spec"].get("podSelector") in ({}, None) and set(np["spec"].get("policyTypes", [])) == {"Ingress", "Egress"}
               and not np["spec"].get("ingress") and not np["spec"].get("egress") for np in nps):
        errs.append("no default-deny policy (podSelector {}, policyTypes Ingress and Egress, no rules)")
    for comp in PREFIX:
        dep = s.deployment(comp)
        labels = dep["spec"]["template"]["metadata"]["labels"] if dep else {}
        dns = any(selects(np["spec"].get("podSelector") or {}, labels) and "Egress" in np["spec"].get("policyTypes", [])
                  and any(any(p.get("port") == 53 and p.get("protocol") == "UDP" for p in r.get("ports") or [])
                          for r in np["spec"].get("egress") or []) for np in nps)
        if dep and not dns:
            errs.append("%s pods have no DNS egress (UDP 53)" % comp)
    for src, var, dst in UPSTREAMS:
        sdep, ddep = s.deployment(src), s.deployment(dst)
        if not sdep or not ddep:
            continue
        port = port_of(env_of(s, container(ddep)).get(PREFIX[dst] + "LISTEN"))
        sl, dl = sdep["spec"]["template"]["metadata"]["labels"], ddep["spec"]["template"]["metadata"]["labels"]
        if not allowed(s, sl, dl, port, "Egress"):
            errs.append("%s → %s:%s (%s) is not allowed out of %s" % (src, dst, port, var, src))
        if not allowed(s, sl, dl, port, "Ingress"):
            errs.append("%s → %s:%s (%s) is not allowed into %s" % (src, dst, port, var, dst))
    gw = s.deployment("gateway")
    if gw:
        port = port_of(env_of(s, container(gw)).get("GATEWAY_LISTEN"))
        if not any(selects(np["spec"].get("podSelector") or {}, gw["spec"]["template"]["metadata"]["labels"])
                   and "Ingress" in np["spec"].get("policyTypes", [])
                   and any(any(p.get("port") == port for p in r.get("ports") or []) for r in np["spec"].get("ingress") or [])
                   for np in nps):
            errs.append("nothing may reach the gateway on %s (the load balancer's policy comes with an entry component)" % port)
    report(s.name, "NetworkPolicies: default deny, DNS, every configured connection allowed both ways", errs)


def check_scaling(s):
    hpas = s.of("HorizontalPodAutoscaler")
    errs = []
    for comp in PREFIX:
        dep = s.deployment(comp)
        if not dep:
            continue
        name = dep["metadata"]["name"]
        hpa = next((h for h in hpas if h["spec"]["scaleTargetRef"].get("kind") == "Deployment"
                    and h["spec"]["scaleTargetRef"].get("name") == name), None)
        env = env_of(s, container(dep))
        if comp == "oauth-service" and "OAUTH_DATABASE" not in env and "OAUTH_DATABASE_FILE" not in env:
            if hpa or (dep["spec"].get("replicas") or 1) > 1:
                errs.append("oauth-service on SQLite (no OAUTH_DATABASE or OAUTH_DATABASE_FILE) must run one replica")
            vols = dep["spec"]["template"]["spec"].get("volumes", [])
            if any("persistentVolumeClaim" in v for v in vols) and (dep["spec"].get("strategy") or {}).get("type") != "Recreate":
                errs.append("oauth-service on a ReadWriteOnce claim needs strategy Recreate")
        if not hpas:
            continue
        if hpa is None:
            errs.append("%s has no HorizontalPodAutoscaler" % comp)
        elif hpa["spec"].get("minReplicas", 1) < 2:
            errs.append("%s: HPA minReplicas below 2" % comp)
        if dep["spec"].get("replicas") is not None:
            errs.append("%s: replicas is set beside an HPA (every apply would reset it)" % comp)
        labels = dep["spec"]["template"]["metadata"]["labels"]
        if not any(selects(p["spec"].get("selector"), labels) for p in s.of("PodDisruptionBudget")):
            errs.append("%s has no PodDisruptionBudget" % comp)
    report(s.name, "replicas: HPAs and PDBs where scaled, one oauth-service replica on SQLite", errs)


def check_dockerfile(path):
    name = "Dockerfile"
    text = re.sub(r"\\\n", " ", open(path, encoding="utf-8").read())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    instr = [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1] if " " in ln else "") for ln in lines]
    args, stages = {}, []
    for op, rest in instr:
        if op == "ARG" and not stages and "=" in rest:
            k, v = rest.split("=", 1)
            args[k.strip()] = v.strip().strip('"')
        if op == "FROM":
            parts = rest.split()
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), parts[0])
            alias = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append({"image": image, "alias": alias, "instr": []})
        elif stages:
            stages[-1]["instr"].append((op, rest))
    report(name, "multi-stage build (%d stages)" % len(stages), [] if len(stages) >= 2 else ["a single stage"])
    aliases = {st["alias"] for st in stages if st["alias"]}
    errs = []
    for st in stages:
        img = st["image"]
        if img in aliases or img == "scratch":
            continue
        if "$" in img:
            errs.append("%s: a variable without a default" % img)
        elif "@sha256:" not in img and ":" not in img.rsplit("/", 1)[-1]:
            errs.append("%s: no tag (means latest)" % img)
        elif img.rsplit("/", 1)[-1].split("@")[0].endswith(":latest"):
            errs.append("%s: latest" % img)
    report(name, "base images tagged or pinned, never latest", errs)
    final = stages[-1] if stages else {"image": "", "instr": []}
    errs = []
    if not (final["image"] == "scratch" or "distroless" in final["image"]):
        errs.append("runtime stage %s is not distroless or scratch" % final["image"])
    if any(op == "RUN" for op, _ in final["instr"]):
        errs.append("RUN in the runtime stage (it has no shell)")
    users = [rest for op, rest in final["instr"] if op == "USER"]
    if not users or users[-1].split(":")[0] in ("root", "0", ""):
        errs.append("no non-root USER in the runtime stage")
    entry = [rest for op, rest in final["instr"] if op in ("ENTRYPOINT", "CMD")]
    if not entry or not entry[0].startswith("["):
        errs.append("no exec-form ENTRYPOINT (a shell form needs /bin/sh)")
    report(name, "runtime stage: %s, no shell, non-root user, exec-form entrypoint" % final["image"], errs)
    errs = []
    runs = " ".join(rest for st in stages for op, rest in st["instr"] if op == "RUN")
    for svc in PREFIX:
        if svc not in runs:
            errs.append("the SERVICE check does not list %s" % svc)
        cargo = open(os.path.join(ROOT, svc, "Cargo.toml"), encoding="utf-8").read()
        if not re.search(r'^name\s*=\s*"%s"' % re.escape(svc), cargo, re.M):
            errs.append("%s/Cargo.toml is not package %s" % (svc, svc))
    if not re.search(r'-p\s+"?\$\{?SERVICE', runs):
        errs.append("the build does not select the package with -p ${SERVICE}")
    report(name, "SERVICE build argument selects one of the four packages", errs)
    ignore = os.path.join(os.path.dirname(path), ".dockerignore")
    entries = [ln.strip().rstrip("/") for ln in open(ignore, encoding="utf-8")] if os.path.exists(ignore) else []
    report(name, ".dockerignore keeps target/ and .git/ out",
           ["%s/ is not in .dockerignore" % e for e in ("target", ".git") if e not in entries])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--registry-bin")
    ap.add_argument("--dockerfile")
    ap.add_argument("sets", nargs="*", metavar="NAME=FILE")
    a = ap.parse_args()
    if a.dockerfile:
        check_dockerfile(a.dockerfile)
    if a.sets and not a.registry_bin:
        ap.error("--registry-bin is needed to check sets")
    for spec in a.sets:
        name, path = spec.split("=", 1)
        s = Set(name, path)
        check_deployments(s)
        host = check_public_url(s)
        check_routes(s, host)
        check_definitions(s, a.registry_bin)
        check_network_policies(s)
        check_scaling(s)
    print("#counts %d %d" % (PASSED, FAILED))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
