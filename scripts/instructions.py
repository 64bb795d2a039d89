#!/usr/bin/env python3
"""Instructions per request on the edge, counted with callgrind: steady where timings are not.

    scripts/instructions.py [--bin-dir target/release] [--requests 1000] [KIND ...]

KIND is legacy-list, modern-list, modern-call or legacy-call (all four by default). Each runs
`gateway --standalone` under `valgrind --tool=callgrind` with a 5-tool catalog, waits 5 s for
its start-up work to end, sends 200
requests of the kind on one keep-alive connection to warm up, zeroes the counters, sends
--requests more, dumps the counters and prints the user-space instructions per request (the
kernel's work is not counted). Needs valgrind (`apt-get install valgrind`). Compare two builds
with --bin-dir; the file of each run is left in the scratch directory it prints, for
`callgrind_annotate --inclusive=yes FILE`.
"""
import argparse
import glob
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
CALL = {"name": "tool_1", "arguments": {"message": "hello"}}
KINDS = {
    "legacy-list": ("tools/list", {}, {"mcp-protocol-version": "2025-06-18"}),
    "modern-list": ("tools/list", {"_meta": META}, {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list"}),
    "modern-call": (
        "tools/call",
        dict(CALL, _meta=META),
        {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "tool_1"},
    ),
    "legacy-call": ("tools/call", CALL, {"mcp-protocol-version": "2025-06-18"}),
}


def catalog(path):
    tools = "".join(
        f'  - name: tool_{i}\n    description: "Echoes its message back (tool {i})"\n'
        '    input_schema: {"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}\n'
        '    text: "{{ message }}"\n'
        for i in range(5)
    )
    with open(path, "w") as f:
        f.write('server: { name: instructions, version: "1.0.0" }\ntools:\n' + tools)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(conn, body, headers):
    conn.request("POST", "/mcp", body=json.dumps(body), headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200 or b'"error"' in data:
        sys.exit(f"unexpected answer {resp.status}: {data[:200]!r}")
    return resp


def measure(bin_dir, kind, requests, scratch):
    port = free_port()
    definitions = os.path.join(scratch, "catalog.yaml")
    catalog(definitions)
    out = os.path.join(scratch, f"callgrind.{kind}.%p")
    log = open(os.path.join(scratch, f"{kind}.log"), "w")
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", os.path.join(bin_dir, "gateway"),
         "--standalone", "--definitions", definitions, "--listen", f"127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    sys.exit(f"the gateway did not start: see {log.name}")
                time.sleep(0.5)
        # Let the start-up work end first: each service hands back its start-up code two
        # seconds after it starts (`mcp_proto::resident`), which would count in the window.
        time.sleep(5)
        conn = http.client.HTTPConnection("127.0.0.1", port)
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "instructions", "version": "1"}}
        session = post(conn, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}, HEADERS)
        method, params, extra = KINDS[kind]
        headers = dict(HEADERS, **extra)
        if kind.startswith("legacy"):
            headers["mcp-session-id"] = session.getheader("mcp-session-id")
        for i in range(200):
            post(conn, {"jsonrpc": "2.0", "id": i + 1, "method": method, "params": params}, headers)
        subprocess.run(["callgrind_control", "-z", str(server.pid)], check=True, capture_output=True)
        for i in range(requests):
            post(conn, {"jsonrpc": "2.0", "id": i + 1000, "method": method, "params": params}, headers)
        subprocess.run(["callgrind_control", "-d", str(server.pid)], check=True, capture_output=True)
    finally:
        server.terminate()
        server.wait()
    dump = sorted(glob.glob(os.path.join(scratch, f"callgrind.{kind}.*.1")))[-1]
    totals = subprocess.run(["callgrind_annotate", dump], capture_output=True, text=True).stdout
    line = next(l for l in totals.splitlines() if "PROGRAM TOTALS" in l)
    return int(line.split()[0].replace(",", "")) // requests, dump


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", default="target/release")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("kinds", nargs="*", metavar="KIND", help=", ".join(KINDS))
    args = parser.parse_args()
    unknown = [k for k in args.kinds if k not in KINDS]
    if unknown:
        parser.error(f"unknown kinds: {', '.join(unknown)}")
    scratch = tempfile.mkdtemp(prefix="instructions-")
    print(f"scratch: {scratch}")
    for kind in args.kinds or list(KINDS):
        per_request, dump = measure(args.bin_dir, kind, args.requests, scratch)
        print(f"{kind:12} {per_request:8} instructions per request ({os.path.basename(dump)})")


if __name__ == "__main__":
    main()
