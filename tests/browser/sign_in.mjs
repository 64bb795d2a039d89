// The sign-in and consent page of oauth-service, through the gateway, in headless Chromium:
// discovery from a 401, registration, the real page (labels, anti-framing, a wrong password),
// the redirect with code, state and iss, tokens that open /mcp, remembered consent, a denial,
// and a page that cannot be framed. Exits non-zero on the first failed check.
//
//   MCP_BASE=http://127.0.0.1:PORT CHROMIUM=/usr/bin/chromium node sign_in.mjs
import { createHash, randomBytes } from "node:crypto";
import { createServer } from "node:http";
import { chromium } from "playwright-core";

const base = process.env.MCP_BASE;
const user = process.env.MCP_USER ?? "alice";
const password = process.env.MCP_PASSWORD ?? "correct horse battery staple";
const TIMEOUT = 15_000;

let failures = 0;
function check(ok, what, context = "") {
  if (ok) {
    console.log(`ok   ${what}`);
  } else {
    console.log(`FAIL ${what}${context ? `\n${String(context).slice(0, 2000)}` : ""}`);
    failures += 1;
    throw new Error(what);
  }
}

const b64url = (buf) => buf.toString("base64url");
function pkce() {
  const verifier = b64url(randomBytes(32));
  return { verifier, challenge: b64url(createHash("sha256").update(verifier).digest()) };
}

// The client's own redirect target, and a page that tries to frame the sign-in page.
const callbacks = [];
let waiting = null;
const app = createServer((req, res) => {
  const url = new URL(req.url, "http://127.0.0.1");
  if (url.pathname === "/callback") {
    callbacks.push(url);
    if (waiting) waiting(url);
    res.writeHead(200, { "content-type": "text/html" });
    res.end("<!doctype html><title>callback</title><p>signed in</p>");
  } else if (url.pathname === "/frame") {
    res.writeHead(200, { "content-type": "text/html" });
    res.end(`<!doctype html><title>frame</title><iframe id="f" src="${url.searchParams.get("src")}"></iframe>`);
  } else {
    res.writeHead(404);
    res.end();
  }
});
await new Promise((r) => app.listen(0, "127.0.0.1", r));
const cbPort = app.address().port;
const redirectUri = `http://127.0.0.1:${cbPort}/callback`;
const nextCallback = () =>
  new Promise((resolve, reject) => {
    waiting = resolve;
    setTimeout(() => reject(new Error("no callback in time")), TIMEOUT);
  });

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
try {
  // 1. Discovery.
  const denied = await fetch(`${base}/mcp`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list", params: { _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } } }),
  });
  const challenge = denied.headers.get("www-authenticate") ?? "";
  check(denied.status === 401 && challenge.includes("resource_metadata="), "401 names the resource metadata", challenge);
  const prmUrl = /resource_metadata="([^"]+)"/.exec(challenge)[1];
  const prm = await (await fetch(prmUrl)).json();
  check(prm.resource === `${base}/mcp`, "resource metadata names this MCP endpoint", JSON.stringify(prm));
  const asm = await (await fetch(`${prm.authorization_servers[0]}/.well-known/oauth-authorization-server`)).json();
  check(asm.issuer === base && asm.code_challenge_methods_supported.includes("S256"), "authorisation server metadata", JSON.stringify(asm));

  // 2. Registration.
  const reg = await fetch(asm.registration_endpoint, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ client_name: "Browser Test App", redirect_uris: [`http://127.0.0.1/callback`], token_endpoint_auth_method: "none", application_type: "native" }),
  });
  const client = await reg.json();
  check(reg.status === 201 && client.client_id, "dynamic registration", JSON.stringify(client));

  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  const authorizeUrl = (p, state, scope) => {
    const u = new URL(asm.authorization_endpoint);
    for (const [k, v] of Object.entries({ response_type: "code", client_id: client.client_id, redirect_uri: redirectUri,
      code_challenge: p.challenge, code_challenge_method: "S256", state, scope, resource: prm.resource })) {
      u.searchParams.set(k, v);
    }
    return u.toString();
  };

  // 3. The real page.
  const p1 = pkce();
  const response = await page.goto(authorizeUrl(p1, "state-one", "mcp"));
  const headers = response.headers();
  check(response.status() === 200, "the sign-in page loads");
  check(headers["x-frame-options"] === "DENY" && (headers["content-security-policy"] ?? "").includes("frame-ancestors 'none'"), "anti-framing headers", JSON.stringify(headers));
  check((await page.title()).includes("Browser Test App"), "the title names the client", await page.title());
  check((await page.getByRole("heading").first().textContent()).includes("Browser Test App"), "the heading names the client");
  await page.getByLabel("Username").fill(user);
  await page.getByLabel("Password").fill("not the password");
  await page.getByRole("button", { name: "Sign in and allow" }).click();
  await page.getByRole("alert").waitFor();
  check((await page.getByRole("alert").textContent()).includes("Wrong username or password."), "a wrong password is refused on the page");

  // 4. Signing in lands on the client's redirect with code, state and iss.
  await page.getByLabel("Username").fill(user);
  await page.getByLabel("Password").fill(password);
  const landed = nextCallback();
  await page.getByRole("button", { name: "Sign in and allow" }).click();
  const cb = await landed;
  check(cb.searchParams.getAll("code").length === 1 && cb.searchParams.get("code"), "the redirect carries a code", cb);
  check(cb.searchParams.get("state") === "state-one", "state round-trips", cb);
  check(cb.searchParams.get("iss") === asm.issuer, "iss is the issuer (RFC 9207)", cb);

  // 5. The code buys a token that opens /mcp.
  const tokenRes = await fetch(asm.token_endpoint, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "authorization_code", code: cb.searchParams.get("code"), redirect_uri: redirectUri,
      code_verifier: p1.verifier, client_id: client.client_id, resource: prm.resource }),
  });
  const tokens = await tokenRes.json();
  check(tokenRes.status === 200 && tokens.access_token && tokenRes.headers.get("cache-control") === "no-store", "token response", JSON.stringify(tokens));
  const listed = await fetch(`${base}/mcp`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${tokens.access_token}`,
      "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/list" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list", params: { _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } } }),
  });
  const listedBody = await listed.json();
  check(listed.status === 200 && listedBody.result.tools.length > 0, "the token opens tools/list", JSON.stringify(listedBody));

  // 6. Remembered consent: the same client and scopes go straight back.
  const again = nextCallback();
  await page.goto(authorizeUrl(pkce(), "state-two", "mcp"));
  const cb2 = await again;
  check(cb2.searchParams.get("code") && cb2.searchParams.get("state") === "state-two", "remembered consent: no page, a new code", cb2);

  // 7. More scopes: the consent page without a password field; Deny.
  await page.goto(authorizeUrl(pkce(), "state-three", "mcp extra"));
  const html = await page.content();
  check(html.includes("Signed in as") && (await page.locator("input[type=password]").count()) === 0, "consent page for a signed-in user", html);
  const deniedCb = nextCallback();
  await page.getByRole("button", { name: "Deny" }).click();
  const cb3 = await deniedCb;
  check(cb3.searchParams.get("error") === "access_denied" && cb3.searchParams.get("state") === "state-three" && cb3.searchParams.get("iss") === asm.issuer, "deny: access_denied with state and iss", cb3);

  // 8. The page cannot be framed by another origin.
  const framer = await context.newPage();
  await framer.goto(`http://127.0.0.1:${cbPort}/frame?src=${encodeURIComponent(authorizeUrl(pkce(), "state-four", "mcp extra"))}`);
  await framer.waitForTimeout(1000);
  const frame = framer.frames().find((f) => f !== framer.mainFrame());
  const framedForm = frame ? await frame.locator("form").count().catch(() => 0) : 0;
  check(framedForm === 0, "the sign-in page does not render inside a frame");
} catch (e) {
  if (failures === 0) {
    console.log(`FAIL ${e.message}`);
    failures += 1;
  }
} finally {
  await browser.close();
  app.close();
}
console.log(failures === 0 ? "browser: all checks passed" : `browser: ${failures} check(s) failed`);
process.exit(failures === 0 ? 0 : 1);
