// Our server driven by the official TypeScript MCP client SDK (@modelcontextprotocol/client),
// over Streamable HTTP and stdio, in both eras: the initialize handshake (versionNegotiation
// 'legacy', the SDK's default), discovery ('auto', which probes server/discover), and a
// pinned 2026-07-28.
//
//   node clients.mjs HTTP_URL MCP_SERVICE_BINARY
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const [url, mcpService] = process.argv.slice(2);
let failures = 0;
function check(ok, what, context) {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}${ok ? "" : `\n     ${JSON.stringify(context)?.slice(0, 600)}`}`);
  if (!ok) failures += 1;
}
const textOf = (r) => (r.content ?? []).map((c) => c.text ?? "").join("");

async function scenario(label, makeTransport, mode, expectVersion) {
  const client = new Client({ name: "sdk-e2e", version: "1.0.0" }, { versionNegotiation: { mode } });
  await client.connect(makeTransport());
  try {
    check(client.getNegotiatedProtocolVersion() === expectVersion, `${label}: protocol ${expectVersion}`, client.getNegotiatedProtocolVersion());
    const server = client.getServerVersion();
    check(server?.name === "mcp-platform", `${label}: server info`, server);
    const tools = await client.listTools();
    const names = tools.tools.map((t) => t.name);
    check(["echo", "add", "count"].every((n) => names.includes(n)), `${label}: tools/list`, names);
    const echoed = await client.callTool({ name: "echo", arguments: { message: `hello from ${label}` } });
    check(textOf(echoed) === `hello from ${label}` && !echoed.isError, `${label}: tools/call echo`, echoed);
    const added = await client.callTool({ name: "add", arguments: { a: 2, b: 40 } });
    check(textOf(added).includes("42"), `${label}: tools/call add`, added);
    const progress = [];
    const counted = await client.callTool({ name: "count", arguments: { to: 3, interval_ms: 10 } }, {
      onprogress: (p) => progress.push(p.progress),
    });
    check(textOf(counted).includes("counted to 3"), `${label}: tools/call count`, counted);
    check(progress.length >= 1, `${label}: progress notifications reach onprogress`, progress);
    const resources = await client.listResources();
    check(resources.resources.some((r) => r.uri === "about://server"), `${label}: resources/list`, resources);
    const read = await client.readResource({ uri: "about://server" });
    check(read.contents.some((c) => (c.text ?? "").length > 0), `${label}: resources/read`, read);
    const prompts = await client.listPrompts();
    check(prompts.prompts.some((p) => p.name === "summarize"), `${label}: prompts/list`, prompts);
    const prompt = await client.getPrompt({ name: "summarize", arguments: { topic: "MCP" } });
    check(prompt.messages.some((m) => (m.content?.text ?? "").includes("MCP")), `${label}: prompts/get`, prompt);
    try {
      const missing = await client.callTool({ name: "no-such-tool", arguments: {} });
      check(missing.isError === true, `${label}: unknown tool is an error`, missing);
    } catch (e) {
      check(typeof e.code === "number", `${label}: unknown tool is an error (${e.code})`, String(e));
    }
    const bad = await client.callTool({ name: "add", arguments: { a: "two" } });
    check(bad.isError === true, `${label}: invalid arguments are a tool error`, bad);
  } finally {
    await client.close();
  }
}

const http = () => new StreamableHTTPClientTransport(new URL(url));
const stdio = () => new StdioClientTransport({ command: mcpService, args: ["--stdio"], stderr: "ignore" });
const runs = [
  ["typescript http legacy", http, "legacy", "2025-11-25"],
  ["typescript http discover", http, "auto", "2026-07-28"],
  ["typescript http pinned 2026-07-28", http, { pin: "2026-07-28" }, "2026-07-28"],
  ["typescript stdio legacy", stdio, "legacy", "2025-11-25"],
  ["typescript stdio discover", stdio, "auto", "2026-07-28"],
];
for (const [label, transport, mode, version] of runs) {
  try {
    await Promise.race([
      scenario(label, transport, mode, version),
      new Promise((_, reject) => setTimeout(() => reject(new Error("timed out")), 60_000)),
    ]);
  } catch (e) {
    check(false, `${label}: ran to the end`, String(e?.stack ?? e));
  }
}
console.log(`typescript sdk: ${failures === 0 ? "all passed" : `${failures} failed`}`);
process.exit(failures === 0 ? 0 : 1);
