"""Our server driven by the official Python MCP SDK (PyPI `mcp`, pinned in requirements.txt),
over Streamable HTTP and stdio, in both eras, serving examples/catalog.yaml.

How the SDK picks the era (mcp/client/client.py, `Client(mode=...)`):
  mode="legacy"      the initialize handshake. The SDK always offers 2025-11-25
                     (`LATEST_HANDSHAKE_VERSION`, mcp/client/session.py) and has no option to
                     offer an older revision, so 2024-11-05, 2025-03-26 and 2025-06-18 cannot
                     be driven through it (the TypeScript leg covers them).
  mode="auto"        probes `server/discover` and adopts 2026-07-28 when the server offers it.
  mode="2026-07-28"  adopts 2026-07-28 directly: no handshake, no probe.
Every message the SDK sends is recorded (an httpx event hook; a `tee` in front of
`mcp-service --stdio`) to check the era on the wire, not only what the SDK reports.

    python test_clients.py HTTP_URL MCP_SERVICE_BINARY CATALOG_YAML OUT_DIR
Prints one line per scenario; exits 1 if any check failed.
"""

import asyncio
import json
import pathlib
import re
import sys

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

URL, MCP_SERVICE, CATALOG, OUT = sys.argv[1], sys.argv[2], sys.argv[3], pathlib.Path(sys.argv[4])
HANDBOOK = (pathlib.Path(CATALOG).parent / "docs/handbook.md").read_text()
INSTRUCTIONS = "Tools to greet people, format addresses, list the top customers (SQL)"
TOOLS = {"echo", "add", "count", "greet", "format_address", "top_customers", "current_weather"}
TOP_TWO = [
    {"name": "Ada Lovelace", "city": "London", "total": 4200},
    {"name": "Grace Hopper", "city": "New York", "total": 3100},
]
VERSION_KEY = "io.modelcontextprotocol/protocolVersion"


class Checks:
    def __init__(self):
        self.count, self.failed = 0, []

    def __call__(self, ok, what, got=None):
        self.count += 1
        if not ok:
            self.failed.append(f"{what}: got {got!r}"[:800])


def text_of(result):
    return "".join(getattr(c, "text", "") for c in result.content)


def check_wire(check, sent, mode, version):
    """The era as it went over the wire: the handshake, or the per-request `_meta` version."""
    requests = [m for m in sent if "method" in m and "id" in m]
    methods = [m["method"] for m in requests]
    stamped = [m.get("params", {}).get("_meta", {}).get(VERSION_KEY) for m in requests]
    if mode == "legacy":
        first = requests[0] if requests else {}
        check(first.get("method") == "initialize" and first["params"]["protocolVersion"] == version,
              "wire: the first request is initialize offering " + version, first)
        check("server/discover" not in methods and not any(stamped), "wire: no modern envelope", methods)
    else:
        check("initialize" not in methods, "wire: no initialize", methods)
        check(("server/discover" in methods) == (mode == "auto"),
              "wire: server/discover sent" if mode == "auto" else "wire: no discover probe when pinned", methods)
        check(len(requests) > 8 and all(v == version for v in stamped),
              f"wire: every request carries _meta {VERSION_KEY}={version}", list(zip(methods, stamped)))


async def walk(client, check, mode, version):
    """Every scenario: connect, tools, progress, resources, prompts, errors."""
    check(client.protocol_version == version, "connect: negotiated version", client.protocol_version)
    if mode in ("legacy", "auto"):  # a pin adopts a synthesized discover result: no server info
        check(client.server_info is not None and client.server_info.name == "example-catalog",
              "connect: server name", client.server_info)
        check((client.instructions or "").startswith(INSTRUCTIONS), "connect: instructions", client.instructions)

    tools = {t.name: t for t in (await client.list_tools()).tools}
    check(set(tools) == TOOLS, "tools/list: the catalog's tools", sorted(tools))
    check(tools.get("greet") and tools["greet"].input_schema.get("required") == ["name"],
          "tools/list: greet requires name", tools.get("greet"))

    greeted = await client.call_tool("greet", {"name": "Ada", "language": "fr"})
    check(text_of(greeted) == "Bonjour, Ada!" and not greeted.is_error, "tools/call greet", greeted)
    top = await client.call_tool("top_customers", {"limit": 2})
    check(text_of(top) == "city | name | total\nLondon | Ada Lovelace | 4200\nNew York | Grace Hopper | 3100",
          "tools/call top_customers: text", text_of(top))
    check(top.structured_content == {"rows": TOP_TWO}, "tools/call top_customers: structured content",
          top.structured_content)

    progress = []

    async def on_progress(value, total, message):
        progress.append((value, total, message))

    counted = await client.call_tool("count", {"to": 3, "interval_ms": 10}, progress_callback=on_progress)
    check(text_of(counted) == "counted to 3", "tools/call count", counted)
    check([(v, t) for v, t, _ in progress] == [(1, 3), (2, 3), (3, 3)] and progress[0][2] == "step 1 of 3",
          "progress: the callback saw steps 1, 2, 3 of 3", progress)

    resources = {str(r.uri): r for r in (await client.list_resources()).resources}
    check(set(resources) == {"about://server", "docs://handbook", "docs://motto"}, "resources/list", sorted(resources))
    templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
    check(templates == {"docs://files/{+path}", "crm://customers/{id}"}, "resources/templates/list", templates)
    handbook = (await client.read_resource("docs://handbook")).contents
    check(len(handbook) == 1 and handbook[0].text == HANDBOOK and handbook[0].mime_type == "text/markdown",
          "resources/read docs://handbook: the file's text", handbook)
    customer = (await client.read_resource("crm://customers/2")).contents
    check(len(customer) == 1 and json.loads(customer[0].text) == {"id": 2, **TOP_TWO[1]},
          "resources/read crm://customers/2 (template, SQL)", customer)

    prompts = {p.name: p for p in (await client.list_prompts()).prompts}
    check(set(prompts) == {"summarize", "release_notes"}, "prompts/list", sorted(prompts))
    check([a.name for a in prompts["release_notes"].arguments or []] == ["version", "audience"],
          "prompts/list: release_notes arguments", prompts.get("release_notes"))
    notes = (await client.get_prompt("release_notes", {"version": "2.0", "audience": "developers"})).messages
    check(len(notes) == 2 and notes[0].content.type == "resource" and str(notes[0].content.resource.uri) == "docs://handbook"
          and notes[0].content.resource.text == HANDBOOK, "prompts/get: the handbook embedded", notes[:1])
    check(len(notes) == 2 and notes[1].content.text
          == "Write release notes for version 2.0 for developers, following the handbook above.",
          "prompts/get: the rendered text", notes[1:])

    try:
        unknown = await client.call_tool("no_such_tool", {})
        check(False, "unknown tool: the SDK raises the server's error", unknown)
    except MCPError as e:
        check(e.error.code == -32602 and "no_such_tool" in e.error.message,
              "unknown tool: the SDK raises the server's error", (e.error.code, e.error.message))
    bad = await client.call_tool("greet", {"language": "de"})
    check(bad.is_error and '"name" is a required property' in text_of(bad),
          "bad arguments: a tool error the model can read", bad)


async def scenario(label, transport, mode, version):
    check, sent = Checks(), []
    tap = OUT / f"python-{re.sub(r'[^a-z0-9-]+', '-', label)}.stdin.jsonl"
    tap.unlink(missing_ok=True)
    if transport == "http":

        async def record(request):
            if request.method == "POST":
                sent.append(json.loads(await request.aread()))

        http = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=60), event_hooks={"request": [record]})
        server = streamable_http_client(URL, http_client=http)
    else:  # mcp-service --stdio, behind a tee that records what the SDK writes to its stdin
        server = StdioServerParameters(
            command="sh", args=["-c", 'tee -a "$0" | exec "$@"', str(tap), MCP_SERVICE, "--stdio", "--definitions", CATALOG])
    try:
        async with Client(server, mode=mode, read_timeout_seconds=20) as client:
            await asyncio.wait_for(walk(client, check, mode, version), timeout=60)
    except Exception as e:  # noqa: BLE001 - the scenario fails, the next one runs
        while len(getattr(e, "exceptions", ())) == 1:  # the SDK's task groups wrap the error
            e = e.exceptions[0]
        check(False, "ran to the end", e)
    finally:
        if transport == "http":
            await http.aclose()
    if transport == "stdio" and tap.exists():
        sent = [json.loads(line) for line in tap.read_text().splitlines() if line.strip()]
    check_wire(check, sent, mode, version)
    status = "PASS" if not check.failed else "FAIL"
    print(f"{status} python {label}: {check.count - len(check.failed)}/{check.count} checks", flush=True)
    for failure in check.failed:
        print(f"       - {failure}", flush=True)
    return not check.failed


async def main():
    runs = [
        ("http legacy 2025-11-25", "http", "legacy", "2025-11-25"),
        ("http modern 2026-07-28 (discover)", "http", "auto", "2026-07-28"),
        ("http modern 2026-07-28 (pinned)", "http", "2026-07-28", "2026-07-28"),
        ("stdio legacy 2025-11-25", "stdio", "legacy", "2025-11-25"),
        ("stdio modern 2026-07-28 (discover)", "stdio", "auto", "2026-07-28"),
        ("stdio modern 2026-07-28 (pinned)", "stdio", "2026-07-28", "2026-07-28"),
    ]
    results = [await scenario(*run) for run in runs]
    sys.exit(0 if all(results) else 1)


asyncio.run(main())
