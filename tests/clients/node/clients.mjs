// Our server driven by the official TypeScript MCP client SDK (npm @modelcontextprotocol/client,
// pinned in package.json), over Streamable HTTP and stdio, in both eras, serving
// examples/catalog.yaml.
//
// How the SDK picks the era (ClientOptions, dist/client-*.d.mts):
//   versionNegotiation.mode 'legacy' (the default)  the initialize handshake, offering the first
//       pre-2026 entry of `supportedProtocolVersions` (default 2025-11-25); setting that option
//       to [v] drives each legacy revision: 2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25.
//   mode 'auto'              probes server/discover and adopts 2026-07-28 when offered (on stdio
//       the probe runs on a short-lived sibling process, then the session process starts).
//   mode { pin: '2026-07-28' }  modern only: server/discover must offer it, no fallback.
// Every message the SDK sends is recorded (a fetch wrapper; a `tee` in front of
// `mcp-service --stdio`) to check the era on the wire, not only what the SDK reports.
//
//   node clients.mjs HTTP_URL MCP_SERVICE_BINARY CATALOG_YAML OUT_DIR
// Prints one line per scenario; exits 1 if any check failed.
import { readFileSync, rmSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { isDeepStrictEqual as same } from "node:util";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const [url, mcpService, catalog, out] = process.argv.slice(2);
const HANDBOOK = readFileSync(join(dirname(catalog), "docs/handbook.md"), "utf8");
const INSTRUCTIONS = "Tools to greet people, format addresses, list the top customers (SQL)";
const TOOLS = ["add", "count", "current_weather", "echo", "format_address", "greet", "top_customers"];
const TOP_TWO = [
  { name: "Ada Lovelace", city: "London", total: 4200 },
  { name: "Grace Hopper", city: "New York", total: 3100 },
];
const VERSION_KEY = "io.modelcontextprotocol/protocolVersion";

const textOf = (r) => (r.content ?? []).map((c) => c.text ?? "").join("");
const sorted = (xs) => [...xs].sort();

function checker() {
  const check = (ok, what, got) => {
    check.count += 1;
    if (!ok) check.failed.push(`${what}: got ${JSON.stringify(got) ?? String(got)}`.slice(0, 800));
  };
  check.count = 0;
  check.failed = [];
  return check;
}

// The era as it went over the wire: the handshake, or the per-request `_meta` version.
function checkWire(check, sent, mode, version) {
  const requests = sent.filter((m) => m.method && m.id !== undefined);
  const methods = requests.map((m) => m.method);
  const stamped = requests.map((m) => m.params?._meta?.[VERSION_KEY]);
  if (mode === "legacy") {
    check(requests[0]?.method === "initialize" && requests[0].params.protocolVersion === version,
      `wire: the first request is initialize offering ${version}`, requests[0]);
    check(!methods.includes("server/discover") && stamped.every((v) => v === undefined), "wire: no modern envelope", methods);
  } else {
    check(!methods.includes("initialize"), "wire: no initialize", methods);
    check(methods[0] === "server/discover", "wire: server/discover first", methods);
    check(requests.length > 8 && stamped.every((v) => v === version),
      `wire: every request carries _meta ${VERSION_KEY}=${version}`, methods.map((m, i) => [m, stamped[i]]));
  }
}

// Every scenario: connect, tools, progress, resources, prompts, errors.
async function walk(client, check, transportKind, version) {
  check(client.getNegotiatedProtocolVersion() === version, "connect: negotiated version", client.getNegotiatedProtocolVersion());
  check(client.getServerVersion()?.name === "example-catalog", "connect: server name", client.getServerVersion());
  check((client.getInstructions() ?? "").startsWith(INSTRUCTIONS), "connect: instructions", client.getInstructions());

  const tools = Object.fromEntries((await client.listTools()).tools.map((t) => [t.name, t]));
  check(same(sorted(Object.keys(tools)), TOOLS), "tools/list: the catalog's tools", Object.keys(tools));
  check(same(tools.greet?.inputSchema.required, ["name"]), "tools/list: greet requires name", tools.greet);

  const greeted = await client.callTool({ name: "greet", arguments: { name: "Ada", language: "fr" } });
  check(textOf(greeted) === "Bonjour, Ada!" && !greeted.isError, "tools/call greet", greeted);
  const top = await client.callTool({ name: "top_customers", arguments: { limit: 2 } });
  check(textOf(top) === "city | name | total\nLondon | Ada Lovelace | 4200\nNew York | Grace Hopper | 3100",
    "tools/call top_customers: text", textOf(top));
  // structuredContent exists from 2025-06-18 on; older revisions carry the text only.
  const structured = version >= "2025-06-18" ? { rows: TOP_TWO } : undefined;
  check(same(top.structuredContent, structured), "tools/call top_customers: structured content", top.structuredContent);

  const progress = [];
  const counted = await client.callTool({ name: "count", arguments: { to: 3, interval_ms: 10 } }, {
    onprogress: (p) => progress.push(p),
  });
  check(textOf(counted) === "counted to 3", "tools/call count", counted);
  // The server writes the three notifications, then the result (the Python leg sees all three
  // on stdio too). This SDK runs notification handlers in a microtask but settles responses at
  // once, so over stdio, where the last notification and the result arrive in one read, the
  // result drops the progress handler first and the last notification is lost ("unknown
  // token"): on stdio, expect the steps in order, at least the first.
  const steps = progress.map((p) => [p.progress, p.total]);
  const expected = [[1, 3], [2, 3], [3, 3]];
  check(transportKind === "stdio" ? steps.length >= 1 && same(steps, expected.slice(0, steps.length)) : same(steps, expected),
    "progress: onprogress saw the steps of 3 in order", progress);
  // The progress message exists from 2025-03-26 on.
  check(version < "2025-03-26" ? progress[0]?.message === undefined : progress[0]?.message === "step 1 of 3",
    "progress: the message", progress[0]);

  const resources = (await client.listResources()).resources.map((r) => r.uri);
  check(same(sorted(resources), ["about://server", "docs://handbook", "docs://motto"]), "resources/list", resources);
  const templates = (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
  check(same(sorted(templates), ["crm://customers/{id}", "docs://files/{+path}"]), "resources/templates/list", templates);
  const handbook = (await client.readResource({ uri: "docs://handbook" })).contents;
  check(handbook.length === 1 && handbook[0].text === HANDBOOK && handbook[0].mimeType === "text/markdown",
    "resources/read docs://handbook: the file's text", handbook);
  const customer = (await client.readResource({ uri: "crm://customers/2" })).contents;
  check(customer.length === 1 && same(JSON.parse(customer[0].text), { city: "New York", id: 2, name: "Grace Hopper", total: 3100 }),
    "resources/read crm://customers/2 (template, SQL)", customer);

  const prompts = Object.fromEntries((await client.listPrompts()).prompts.map((p) => [p.name, p]));
  check(same(sorted(Object.keys(prompts)), ["release_notes", "summarize"]), "prompts/list", Object.keys(prompts));
  check(same(prompts.release_notes?.arguments?.map((a) => a.name), ["version", "audience"]),
    "prompts/list: release_notes arguments", prompts.release_notes);
  const notes = (await client.getPrompt({ name: "release_notes", arguments: { version: "2.0", audience: "developers" } })).messages;
  check(notes.length === 2 && notes[0].content.type === "resource" && notes[0].content.resource.uri === "docs://handbook"
    && notes[0].content.resource.text === HANDBOOK, "prompts/get: the handbook embedded", notes[0]);
  check(notes[1]?.content.text === "Write release notes for version 2.0 for developers, following the handbook above.",
    "prompts/get: the rendered text", notes[1]);

  try {
    const unknown = await client.callTool({ name: "no_such_tool", arguments: {} });
    check(false, "unknown tool: the SDK throws the server's error", unknown);
  } catch (e) {
    check(e.code === -32602 && String(e.message).includes("no_such_tool"), "unknown tool: the SDK throws the server's error",
      { code: e.code, message: e.message });
  }
  const bad = await client.callTool({ name: "greet", arguments: { language: "de" } });
  check(bad.isError === true && textOf(bad).includes('"name" is a required property'), "bad arguments: a tool error the model can read", bad);
}

async function scenario(label, transportKind, mode, version) {
  const check = checker();
  let sent = [];
  const tap = join(out, `typescript-${label.replace(/[^a-z0-9-]+/g, "-")}.stdin.jsonl`);
  rmSync(tap, { force: true });
  let transport;
  if (transportKind === "http") {
    const recordingFetch = (input, init) => {
      if (init?.method === "POST" && typeof init.body === "string") sent.push(JSON.parse(init.body));
      return fetch(input, init);
    };
    transport = new StreamableHTTPClientTransport(new URL(url), { fetch: recordingFetch });
  } else { // mcp-service --stdio, behind a tee that records what the SDK writes to its stdin
    transport = new StdioClientTransport({
      command: "sh",
      args: ["-c", 'tee -a "$0" | exec "$@"', tap, mcpService, "--stdio", "--definitions", catalog],
      stderr: "ignore",
    });
  }
  const options = mode === "legacy"
    ? { supportedProtocolVersions: [version] }
    : { versionNegotiation: { mode } };
  const client = new Client({ name: "sdk-e2e", version: "1.0.0" }, options);
  let timer;
  try {
    await Promise.race([
      (async () => {
        await client.connect(transport);
        await walk(client, check, transportKind, version);
      })(),
      new Promise((_, reject) => { timer = setTimeout(() => reject(new Error("timed out after 60 s")), 60_000); }),
    ]);
  } catch (e) {
    check(false, "ran to the end", String(e?.stack ?? e));
  } finally {
    clearTimeout(timer);
    await client.close().catch(() => {});
  }
  if (transportKind === "stdio" && existsSync(tap)) {
    sent = readFileSync(tap, "utf8").split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
  }
  checkWire(check, sent, mode, version);
  console.log(`${check.failed.length ? "FAIL" : "PASS"} typescript ${label}: ${check.count - check.failed.length}/${check.count} checks`);
  for (const f of check.failed) console.log(`       - ${f}`);
  return check.failed.length === 0;
}

const pin = { pin: "2026-07-28" };
const runs = [
  ["http legacy 2024-11-05", "http", "legacy", "2024-11-05"],
  ["http legacy 2025-03-26", "http", "legacy", "2025-03-26"],
  ["http legacy 2025-06-18", "http", "legacy", "2025-06-18"],
  ["http legacy 2025-11-25", "http", "legacy", "2025-11-25"],
  ["http modern 2026-07-28 (discover)", "http", "auto", "2026-07-28"],
  ["http modern 2026-07-28 (pinned)", "http", pin, "2026-07-28"],
  ["stdio legacy 2024-11-05", "stdio", "legacy", "2024-11-05"],
  ["stdio legacy 2025-11-25", "stdio", "legacy", "2025-11-25"],
  ["stdio modern 2026-07-28 (discover)", "stdio", "auto", "2026-07-28"],
  ["stdio modern 2026-07-28 (pinned)", "stdio", pin, "2026-07-28"],
];
let ok = true;
for (const run of runs) ok = (await scenario(...run)) && ok;
process.exit(ok ? 0 : 1);
