"""Our server driven by the official Python MCP SDK (PyPI `mcp`), over Streamable HTTP and
stdio, in both eras: the initialize handshake (mode="legacy"), discovery (mode="auto", which
probes `server/discover`), and a pinned 2026-07-28 (no probe).

    python test_clients.py HTTP_URL MCP_SERVICE_BINARY
"""

import asyncio
import sys

from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

URL, MCP_SERVICE = sys.argv[1], sys.argv[2]
failures = 0


def check(ok, what, context=""):
    global failures
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + ("" if ok else f"\n     {context}"))
    failures += 0 if ok else 1


def text_of(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def scenario(label, server, mode, expect_version):
    progress = []

    async def on_progress(value, total, message):
        progress.append(value)

    async with Client(server, mode=mode, read_timeout_seconds=20) as client:
        check(client.protocol_version == expect_version, f"{label}: protocol {expect_version}", client.protocol_version)
        if mode != "2026-07-28":  # a pinned version skips discovery: no server info to compare
            check(client.server_info is not None and client.server_info.name == "mcp-platform",
                  f"{label}: server info", client.server_info)
        tools = await client.list_tools()
        names = {t.name for t in tools.tools}
        check({"echo", "add", "count"} <= names, f"{label}: tools/list", names)
        echoed = await client.call_tool("echo", {"message": f"hello from {label}"})
        check(text_of(echoed) == f"hello from {label}" and not echoed.is_error, f"{label}: tools/call echo", echoed)
        added = await client.call_tool("add", {"a": 2, "b": 40})
        check("42" in text_of(added), f"{label}: tools/call add", added)
        counted = await client.call_tool("count", {"to": 3, "interval_ms": 10}, progress_callback=on_progress)
        check("counted to 3" in text_of(counted), f"{label}: tools/call count", counted)
        check(len(progress) >= 1, f"{label}: progress notifications reach the callback", progress)
        resources = await client.list_resources()
        uris = [str(r.uri) for r in resources.resources]
        check("about://server" in uris, f"{label}: resources/list", uris)
        read = await client.read_resource("about://server")
        body = "".join(getattr(c, "text", "") for c in read.contents)
        check(len(body) > 0, f"{label}: resources/read", read)
        prompts = await client.list_prompts()
        check(any(p.name == "summarize" for p in prompts.prompts), f"{label}: prompts/list", prompts)
        prompt = await client.get_prompt("summarize", {"topic": "MCP"})
        check(any("MCP" in getattr(m.content, "text", "") for m in prompt.messages), f"{label}: prompts/get", prompt)
        # A tool that does not exist: the SDK surfaces the server's error.
        try:
            missing = await client.call_tool("no-such-tool", {})
            check(missing.is_error, f"{label}: unknown tool is an error", missing)
        except MCPError as e:
            check(True, f"{label}: unknown tool is an error ({e.error.code})")
        # Arguments that do not fit the schema: a tool error the model can correct.
        bad = await client.call_tool("add", {"a": "two"})
        check(bad.is_error, f"{label}: invalid arguments are a tool error", bad)


async def main():
    stdio = StdioServerParameters(command=MCP_SERVICE, args=["--stdio"])
    runs = [
        ("python http legacy", URL, "legacy", "2025-11-25"),
        ("python http discover", URL, "auto", "2026-07-28"),
        ("python http pinned 2026-07-28", URL, "2026-07-28", "2026-07-28"),
        ("python stdio legacy", stdio, "legacy", "2025-11-25"),
        ("python stdio discover", stdio, "auto", "2026-07-28"),
    ]
    for label, server, mode, version in runs:
        try:
            await asyncio.wait_for(scenario(label, server, mode, version), timeout=60)
        except Exception as e:  # noqa: BLE001 - report and go on with the next scenario
            check(False, f"{label}: ran to the end", repr(e))
    print(f"python sdk: {'all passed' if failures == 0 else f'{failures} failed'}")
    sys.exit(1 if failures else 0)


asyncio.run(main())
