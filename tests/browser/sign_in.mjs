// The sign-in and consent page of oauth-service, through the gateway, in headless Chromium:
// discovery from a 401, registration, the real page (title, heading, labels, anti-framing
// headers, a wrong password), the redirect with code, state and iss, a token that opens /mcp,
// remembered consent, a denial, and a page that cannot be framed. One line per check; stops
// at the first failed check with the page's HTML or the response as context.
//
//   MCP_BASE=http://127.0.0.1:PORT CHROMIUM=/usr/bin/chromium node sign_in.mjs
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync } from "node:fs";
import { createServer } from "node:http";
import { chromium } from "playwright-core";

const base = process.env.MCP_BASE;
const executablePath = process.env.CHROMIUM;
if (!base || !executablePath) {
  console.error("usage: MCP_BASE=http://127.0.0.1:PORT CHROMIUM=/path/to/chromium node sign_in.mjs");
  process.exit(2);
}
const out = process.env.OUT_DIR ?? new URL("./out/", import.meta.url).pathname;
mkdirSync(out, { recursive: true });
const user = "alice";
const password = "correct horse battery staple";
const clientName = "Browser Test App";
const TIMEOUT = 15_000;
const MODERN = "2026-07-28";

class CheckFailed extends Error {}
let checks = 0;
/** One line per check; a failure prints its context and stops the run. */
function check(ok, what, context = "") {
  if (!ok) {
    console.log(`FAIL ${what}`);
    if (context !== "") console.log(String(typeof context === "string" ? context : JSON.stringify(context, null, 2)).slice(0, 4000));
    throw new CheckFailed(what);
  }
  checks += 1;
  console.log(`ok   ${what}`);
}

/** fetch with a deadline; the body read as text, and as JSON when it is JSON. */
async function http(url, init = {}) {
  const res = await fetch(url, { redirect: "manual", ...init, signal: AbortSignal.timeout(TIMEOUT) });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  const context = `${init.method ?? "GET"} ${url} -> ${res.status}\n${[...res.headers].map(([k, v]) => `${k}: ${v}`).join("\n")}\n\n${text}`;
  return { status: res.status, headers: res.headers, text, json, context };
}

function pkce() {
  const verifier = randomBytes(32).toString("base64url");
  return { verifier, challenge: createHash("sha256").update(verifier).digest("base64url") };
}

const modernToolsList = (id) => JSON.stringify({ jsonrpc: "2.0", id, method: "tools/list", params: { _meta: {
  "io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {} } } });
const modernHeaders = { "content-type": "application/json", accept: "application/json, text/event-stream",
  "mcp-protocol-version": MODERN, "mcp-method": "tools/list" };

// The client's own loopback server: the redirect target (records each query), and pages that
// try to frame another URL.
const callbacks = [];
const waiters = [];
const app = createServer((req, res) => {
  const url = new URL(req.url, `http://${req.headers.host}`);
  if (url.pathname === "/callback") {
    callbacks.push(url);
    for (const w of waiters.splice(0)) w(url);
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end("<!doctype html><title>callback</title><p id=\"callback\">back at the client</p>");
  } else if (url.pathname === "/plain") {
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end("<!doctype html><title>plain</title><form><p id=\"plain\">a frameable page</p></form>");
  } else if (url.pathname === "/frame") {
    // The frame under test, and a control frame that proves frames render at all.
    const src = url.searchParams.get("src").replaceAll("&", "&amp;").replaceAll("\"", "&quot;");
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end(`<!doctype html><title>framer</title><iframe name="target" src="${src}"></iframe><iframe name="control" src="/plain"></iframe>`);
  } else {
    res.writeHead(404);
    res.end();
  }
});
await new Promise((resolve, reject) => { app.once("error", reject); app.listen(0, "127.0.0.1", resolve); });
const cbOrigin = `http://127.0.0.1:${app.address().port}`;
const redirectUri = `${cbOrigin}/callback`;
/** The next callback query; armed before the action that causes it. */
const nextCallback = () => {
  let timer;
  const p = new Promise((resolve, reject) => {
    waiters.push(resolve);
    timer = setTimeout(() => reject(new Error(`no callback at ${redirectUri} within ${TIMEOUT} ms`)), TIMEOUT);
  });
  p.catch(() => {});
  return p.finally(() => clearTimeout(timer));
};

let browser = null;
let page = null;
let failed = false;
try {
  // 1. Discovery from a 401.
  const denied = await http(`${base}/mcp`, { method: "POST", headers: modernHeaders, body: modernToolsList(1) });
  const challenge = denied.headers.get("www-authenticate") ?? "";
  const prmUrl = /resource_metadata="([^"]+)"/.exec(challenge)?.[1];
  check(denied.status === 401 && challenge.startsWith("Bearer ") && prmUrl, "POST /mcp without a token: 401, WWW-Authenticate names resource_metadata", denied.context);
  const prm = await http(prmUrl);
  check(prm.status === 200 && prm.json?.resource === `${base}/mcp` && prm.json?.authorization_servers?.includes(base),
    "protected resource metadata: resource is the MCP URL, the issuer is its authorisation server", prm.context);
  const asmRes = await http(`${base}/.well-known/oauth-authorization-server`);
  const asm = asmRes.json ?? {};
  check(asmRes.status === 200 && asm.issuer === base && asm.code_challenge_methods_supported?.includes("S256")
    && asm.authorization_endpoint && asm.token_endpoint && asm.registration_endpoint,
    "authorisation server metadata: issuer, S256, endpoints", asmRes.context);

  // 2. A public native client whose redirect is this script's loopback server.
  const reg = await http(asm.registration_endpoint, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ client_name: clientName, redirect_uris: [redirectUri], token_endpoint_auth_method: "none",
      grant_types: ["authorization_code", "refresh_token"], application_type: "native" }),
  });
  const client = reg.json ?? {};
  check(reg.status === 201 && client.client_id && !client.client_secret && client.redirect_uris?.includes(redirectUri),
    `dynamic registration of a public client redirecting to ${redirectUri}`, reg.context);

  const authorizeUrl = (p, state, scope) => {
    const u = new URL(asm.authorization_endpoint);
    for (const [k, v] of Object.entries({ response_type: "code", client_id: client.client_id, redirect_uri: redirectUri,
      code_challenge: p.challenge, code_challenge_method: "S256", state, scope, resource: prm.json.resource })) {
      u.searchParams.set(k, v);
    }
    return u.toString();
  };

  browser = await chromium.launch({
    executablePath,
    headless: true,
    timeout: TIMEOUT,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
  const context = await browser.newContext();
  context.setDefaultTimeout(TIMEOUT);
  context.setDefaultNavigationTimeout(TIMEOUT);
  page = await context.newPage();

  // 3. The real page.
  const p1 = pkce();
  const shown = await page.goto(authorizeUrl(p1, "state-one", "mcp"));
  // The page's HTML as failure context, without its style sheet.
  const html = async () => (await page.content()).replace(/<style>[\s\S]*?<\/style>/g, "<style>…</style>");
  check(shown.status() === 200 && shown.url().startsWith(asm.authorization_endpoint), "the authorisation URL shows the sign-in page", `${shown.status()} ${shown.url()}\n${await html()}`);
  const headers = shown.headers();
  check(headers["x-frame-options"]?.toUpperCase() === "DENY", "header x-frame-options: DENY", headers);
  check(/(^|;)\s*frame-ancestors 'none'\s*(;|$)/.test(headers["content-security-policy"] ?? ""), "CSP has frame-ancestors 'none'", headers);
  const title = await page.title();
  check(title.includes(clientName), `the title names the client ("${title}")`, await html());
  const heading = await page.getByRole("heading", { level: 1 }).textContent();
  check(heading.includes(clientName), `the heading names the client ("${heading.trim()}")`, await html());
  const labelled = async (name) => {
    const input = page.getByLabel(name, { exact: true });
    if ((await input.count()) !== 1) return null;
    return input.evaluate((el) => ({ tag: el.tagName, type: el.type, labels: [...(el.labels ?? [])].map((l) => l.tagName) }));
  };
  const username = await labelled("Username");
  check(username?.tag === "INPUT" && username.type === "text" && username.labels.includes("LABEL"), "the username input has its <label> (getByLabel('Username'))", await html());
  const pw = await labelled("Password");
  check(pw?.tag === "INPUT" && pw.type === "password" && pw.labels.includes("LABEL"), "the password input has its <label> (getByLabel('Password'))", await html());
  await page.screenshot({ path: `${out}/sign-in.png`, fullPage: true });

  // A wrong password: the page again, with the alert, and no redirect to the client.
  await page.getByLabel("Username", { exact: true }).fill(user);
  await page.getByLabel("Password", { exact: true }).fill("not the password");
  await Promise.all([page.waitForNavigation(), page.getByRole("button", { name: "Sign in and allow" }).click()]);
  const alert = page.getByRole("alert");
  const alertText = (await alert.count()) === 1 ? (await alert.textContent()).trim() : "";
  check(alertText === "Wrong username or password." && callbacks.length === 0 && (await page.getByLabel("Password", { exact: true }).count()) === 1,
    "a wrong password: the page shows the alert \"Wrong username or password.\" and does not redirect", `${page.url()}\n${await html()}`);
  await page.screenshot({ path: `${out}/wrong-password.png`, fullPage: true });

  // 4. The right password: the browser lands on the callback with code, state and iss.
  await page.getByLabel("Username", { exact: true }).fill(user);
  await page.getByLabel("Password", { exact: true }).fill(password);
  const landed = nextCallback();
  await page.getByRole("button", { name: "Sign in and allow" }).click();
  const cb = await landed;
  await page.waitForURL((u) => u.href.startsWith(redirectUri));
  check(cb.searchParams.getAll("code").length === 1 && cb.searchParams.get("code") && !cb.searchParams.has("error"),
    "signed in and allowed: the browser lands on the callback with a code", cb.href);
  check(cb.searchParams.get("state") === "state-one", "the callback's state is the one sent", cb.href);
  check(cb.searchParams.get("iss") === asm.issuer, "the callback's iss is the issuer", cb.href);

  const tokenRes = await http(asm.token_endpoint, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "authorization_code", code: cb.searchParams.get("code"), redirect_uri: redirectUri,
      code_verifier: p1.verifier, client_id: client.client_id, resource: prm.json.resource }),
  });
  const access = tokenRes.json?.access_token;
  check(tokenRes.status === 200 && access && tokenRes.json.token_type === "Bearer", "the code and verifier buy a Bearer access token", tokenRes.context);
  const listed = await http(`${base}/mcp`, { method: "POST", headers: { ...modernHeaders, authorization: `Bearer ${access}` }, body: modernToolsList(1) });
  let tools = listed.json?.result?.tools;
  if (!tools && listed.headers.get("content-type")?.startsWith("text/event-stream")) {
    const data = listed.text.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim());
    for (const d of data) { try { tools ??= JSON.parse(d).result?.tools; } catch { /* not JSON */ } }
  }
  check(listed.status === 200 && Array.isArray(tools) && tools.length > 0, `the token opens /mcp: tools/list (${MODERN}) lists ${tools?.length ?? 0} tools`, listed.context);

  // 5. Remembered consent: same client and scope, straight back with a new code, no page.
  const again = nextCallback();
  const back = await page.goto(authorizeUrl(pkce(), "state-two", "mcp"));
  const first = back.request().redirectedFrom();
  const firstStatus = first ? (await first.response())?.status() : null;
  check(back.url().startsWith(redirectUri) && first?.url().startsWith(asm.authorization_endpoint) && firstStatus >= 300 && firstStatus < 400,
    "remembered consent: the authorisation URL redirects at once, no page shown", `${firstStatus} ${first?.url()} -> ${back.url()}\n${await html()}`);
  const cb2 = await again;
  check(cb2.searchParams.get("code") && cb2.searchParams.get("code") !== cb.searchParams.get("code")
    && cb2.searchParams.get("state") === "state-two" && cb2.searchParams.get("iss") === asm.issuer,
    "remembered consent: a new code, with state and iss", cb2.href);

  // More scope than was allowed: the consent page for the signed-in user; Deny.
  const consent = await page.goto(authorizeUrl(pkce(), "state-three", "mcp extra"));
  const consentText = await page.locator("body").innerText();
  check(consent.status() === 200 && consentText.includes(`Signed in as ${user}`), `a new scope: the consent page says "Signed in as ${user}"`, await html());
  check((await page.locator("input[type=password]").count()) === 0 && (await page.getByLabel("Password").count()) === 0
    && (await page.getByRole("button", { name: "Allow", exact: true }).count()) === 1,
  "the consent page has no password field, and an Allow button", await html());
  await page.screenshot({ path: `${out}/consent.png`, fullPage: true });
  const deniedCb = nextCallback();
  await page.getByRole("button", { name: "Deny" }).click();
  const cb3 = await deniedCb;
  check(cb3.searchParams.get("error") === "access_denied" && !cb3.searchParams.has("code")
    && cb3.searchParams.get("state") === "state-three" && cb3.searchParams.get("iss") === asm.issuer,
  "Deny: the callback has error=access_denied, state and iss, no code", cb3.href);

  // 6. Framing: another origin's page frames the authorisation URL; Chromium refuses to render
  // it (X-Frame-Options / frame-ancestors), while a frameable control page renders. Both the
  // consent page of the signed-in user and the sign-in page of a fresh browser are tried.
  const fresh = await browser.newContext();
  fresh.setDefaultTimeout(TIMEOUT);
  for (const [ctx, what] of [[context, "the consent page (signed in)"], [fresh, "the sign-in page (signed out)"]]) {
    const framer = await ctx.newPage();
    const before = callbacks.length;
    const target = authorizeUrl(pkce(), "state-framed", "mcp extra");
    const framerUrl = `${cbOrigin}/frame?src=${encodeURIComponent(target)}`;
    await framer.goto(framerUrl, { waitUntil: "load" });
    const control = framer.frame({ name: "control" });
    await control.locator("#plain").waitFor();
    const framed = framer.frame({ name: "target" });
    // The blocked frame ends on Chromium's error page; wait until it has settled somewhere.
    await framed.waitForLoadState("load");
    const forms = await framed.locator("form, input, button").count().catch(() => 0);
    const frameText = await framed.locator("body").innerText().catch(() => "");
    check(forms === 0 && !frameText.includes(clientName) && callbacks.length === before,
      `${what} does not render inside a frame (frame at ${framed.url().slice(0, 40)})`,
      `frame url: ${framed.url()}\n${await framed.content().catch(() => "")}`);
    await framer.screenshot({ path: `${out}/framed-${ctx === context ? "consent" : "sign-in"}.png` });
    await framer.close();
  }
  await fresh.close();
  console.log(`browser: ${checks} checks passed`);
} catch (e) {
  failed = true;
  if (!(e instanceof CheckFailed)) {
    console.log(`FAIL ${e.message.split("\n")[0]}`);
    console.log(String(e.stack ?? e).slice(0, 2000));
    if (page) {
      console.log(`page: ${page.url()}`);
      console.log((await page.content().catch(() => "")).replace(/<style>[\s\S]*?<\/style>/g, "<style>…</style>").slice(0, 4000));
    }
  }
  if (page) await page.screenshot({ path: `${out}/failure.png`, fullPage: true }).catch(() => {});
} finally {
  await browser?.close().catch(() => {});
  app.close();
  app.closeAllConnections?.();
}
process.exit(failed ? 1 : 0);
