"""The Python SDK reference: the official `mcp` package's server (MCPServer), Streamable HTTP
in stateless mode with JSON responses, serving the benchmark's five text tools (each echoes its
`message`) and its 1 MiB resource (read from the file on every read). Started by `bench` with
the resource path; prints the benchmark's `listening` line on stderr once it accepts."""

import asyncio
import json
import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

TOOLS = 5


def build(resource: str) -> MCPServer:
    server = MCPServer("bench", version="1.0.0", log_level="WARNING")

    def echo_tool(i: int) -> None:
        def echo(message: str) -> str:
            return message

        server.tool(name=f"tool_{i}", description=f"Echoes its message (tool {i})")(echo)

    for i in range(TOOLS):
        echo_tool(i)

    @server.resource("bench://big", name="big", mime_type="text/plain")
    def big() -> str:
        with open(resource, encoding="utf-8") as f:
            return f.read()

    return server


async def main() -> None:
    resource = sys.argv[sys.argv.index("--resource") + 1]
    app = build(resource).streamable_http_app(json_response=True, stateless_http=True)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: answers are not held back waiting for acknowledgements.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    host, port = sock.getsockname()
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    line = {"level": "INFO", "message": "listening", "service": "python-sdk", "addr": f"{host}:{port}"}
    loop = asyncio.get_running_loop()
    loop.call_later(0.5, lambda: print(json.dumps(line), file=sys.stderr, flush=True))
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    asyncio.run(main())
