// The TypeScript SDK reference for `bench`: the official server SDK, mounted on node:http
// through `@modelcontextprotocol/node`: `createMcpHandler` for the 2026-07-28 revision, and for
// 2025-era requests (told apart by the SDK's own `isLegacyRequest`) the SDK's stateless idiom,
// a server and transport per request, with JSON responses (`enableJsonResponse`; the handler's
// built-in fallback answers them as SSE). It serves the benchmark's five
// text tools (each echoes its `message`) and its 1 MiB resource (read from the file on every
// read). Started by `bench` with the resource path; prints the benchmark's `listening` line on
// stderr once it accepts connections.

import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';

import { NodeStreamableHTTPServerTransport, toNodeHandler, toWebRequest } from '@modelcontextprotocol/node';
import { createMcpHandler, fromJsonSchema, isLegacyRequest, McpServer } from '@modelcontextprotocol/server';

const TOOLS = 5;
const resource = process.argv[process.argv.indexOf('--resource') + 1];
const inputSchema = {
    type: 'object',
    properties: { message: { type: 'string' } },
    required: ['message'],
};

function factory() {
    const server = new McpServer({ name: 'bench', version: '1.0.0' });
    for (let i = 0; i < TOOLS; i++) {
        server.registerTool(
            `tool_${i}`,
            {
                description: `Echoes its message back (tool ${i} of the benchmark catalog)`,
                inputSchema: fromJsonSchema(inputSchema),
            },
            async ({ message }) => ({ content: [{ type: 'text', text: message }] }),
        );
    }
    server.registerResource('big', 'bench://big', { mimeType: 'text/plain' }, async (uri) => ({
        contents: [{ uri: uri.href, mimeType: 'text/plain', text: await readFile(resource, 'utf8') }],
    }));
    return server;
}

const modern = toNodeHandler(createMcpHandler(factory, { legacy: 'reject' }));

async function legacy(req, res, body) {
    const server = factory();
    const transport = new NodeStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => {
        transport.close();
        server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
}

async function serve(req, res) {
    if (req.method !== 'POST' || !(req.url === '/mcp' || req.url?.startsWith('/mcp?'))) {
        res.writeHead(404).end();
        return;
    }
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    let body;
    try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
        res.writeHead(400, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}');
        return;
    }
    if (await isLegacyRequest(await toWebRequest(req, body), body)) {
        await legacy(req, res, body);
    } else {
        await modern(req, res, body);
    }
}

const http = createServer((req, res) => {
    serve(req, res).catch((error) => {
        process.stderr.write(`${JSON.stringify({ level: 'WARN', message: String(error) })}\n`);
        if (!res.headersSent) res.writeHead(500).end();
    });
});
http.keepAliveTimeout = 60_000;
http.listen(0, '127.0.0.1', () => {
    const { address, port } = http.address();
    const line = { level: 'INFO', message: 'listening', service: 'typescript-sdk', addr: `${address}:${port}` };
    process.stderr.write(`${JSON.stringify(line)}\n`);
});
