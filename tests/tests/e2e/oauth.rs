//! OAuth end to end: the gateway as protected resource and oauth-service as authorisation
//! server, through real HTTP — discovery from a 401, registration, sign-in with PKCE, tokens
//! used in both eras, refresh rotation, and the hostile requests each refused with its error.

use e2e::oauth::{OAuth, Pkce};
use e2e::{Client, Proc, Stack};
use serde_json::{Value, json};

pub(crate) const USER: (&str, &str) = ("alice", "correct horse battery staple");
pub(crate) const REDIRECT: &str = "http://127.0.0.1/callback";

/// The standalone server with sign-in on, a bootstrap user, and `extra_env`.
pub(crate) async fn secured(dir: &tempfile::TempDir, extra_env: &[(&str, &str)]) -> Stack {
    secured_with(dir, &[], extra_env).await
}

/// Like [`secured`], with extra arguments.
pub(crate) async fn secured_with(dir: &tempfile::TempDir, extra_args: &[&str], extra_env: &[(&str, &str)]) -> Stack {
    let data = dir.path().to_str().expect("utf-8 path");
    let mut env = vec![("OAUTH_BOOTSTRAP_USER", USER.0), ("OAUTH_BOOTSTRAP_PASSWORD", USER.1)];
    env.extend_from_slice(extra_env);
    let mut args = vec!["--standalone", "--listen", "127.0.0.1:0", "--auth", "oauth", "--data-dir", data];
    args.extend_from_slice(extra_args);
    let gw = Proc::start_with_env("gateway", &args, &env, "gateway").await;
    let base = gw.url();
    Stack { procs: vec![gw], base }
}

pub(crate) fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// A token for the bootstrap user through a freshly registered public client.
pub(crate) async fn sign_in(oauth: &OAuth) -> (String, Value) {
    let client_id = oauth.register_public(REDIRECT).await;
    let pkce = Pkce::new();
    let params = oauth.sign_in(&client_id, REDIRECT, &pkce, USER).await;
    let tokens = oauth.exchange(&client_id, REDIRECT, &params["code"], &pkce.verifier).await;
    assert_eq!(tokens.status, 200, "{}", tokens.text);
    (client_id, tokens.json)
}

#[tokio::test]
async fn from_a_401_to_tool_calls_in_both_eras() {
    full_flow(&[]).await;
}

#[tokio::test]
async fn from_a_401_to_tool_calls_on_postgres() {
    let pg = e2e::Postgres::start();
    full_flow(&[("OAUTH_DATABASE", pg.url.as_str())]).await;
}

async fn full_flow(env: &[(&str, &str)]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let stack = secured(&dir, env).await;
    let base = stack.base.clone();
    let client = stack.client();
    let oauth = OAuth::new(&base);

    // 1. No token: 401 with the challenge that names the resource metadata.
    let denied = client.modern(1, "tools/list", json!({})).await;
    assert_eq!(denied.status, 401, "{}", denied.text);
    let challenge = denied.headers["www-authenticate"].to_str().expect("ascii").to_owned();
    let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    assert!(challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")), "{challenge}");
    assert!(challenge.contains("scope=\"mcp\""), "{challenge}");
    assert!(!challenge.contains("error="), "no error code when no token was sent: {challenge}");

    // 2. Protected resource metadata: the resource is the MCP URL byte for byte.
    for url in [metadata_url.clone(), format!("{base}/.well-known/oauth-protected-resource")] {
        let prm = oauth.get(&url).await;
        assert_eq!(prm.status, 200, "{url}: {}", prm.text);
        assert_eq!(prm.json["resource"], format!("{base}/mcp"));
        assert_eq!(prm.json["authorization_servers"], json!([base]));
    }

    // 3. Authorisation server metadata on the same origin.
    let asm = oauth.get("/.well-known/oauth-authorization-server").await;
    assert_eq!(asm.status, 200);
    assert_eq!(asm.json["issuer"], base);
    assert_eq!(asm.json["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(asm.json["authorization_response_iss_parameter_supported"], true);
    assert_eq!(asm.json["token_endpoint"], format!("{base}/oauth/token"));

    // 4. Registration, sign-in with PKCE: the redirect carries code, state and iss.
    let client_id = oauth.register_public(REDIRECT).await;
    let pkce = Pkce::new();
    let params = oauth.sign_in(&client_id, REDIRECT, &pkce, USER).await;
    assert_eq!(params["state"], "st-123");
    assert_eq!(params["iss"], base);
    let code = params["code"].clone();

    // 5. Tokens.
    let tokens = oauth.exchange(&client_id, REDIRECT, &code, &pkce.verifier).await;
    assert_eq!(tokens.status, 200, "{}", tokens.text);
    assert_eq!(tokens.header("cache-control"), "no-store");
    assert_eq!(tokens.json["token_type"], "Bearer");
    let access = tokens.json["access_token"].as_str().expect("access token").to_owned();
    let refresh = tokens.json["refresh_token"].as_str().expect("refresh token").to_owned();

    // 6. The token opens /mcp, in both eras.
    let auth = bearer(&access);
    let body = e2e::modern_request(2, "tools/list", json!({}));
    let listed = client
        .post(&body, &[("mcp-protocol-version", e2e::MODERN), ("mcp-method", "tools/list"), ("authorization", &auth)])
        .await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    assert!(!listed.result()["tools"].as_array().expect("tools").is_empty());
    let body = e2e::modern_request(3, "tools/call", json!({ "name": "echo", "arguments": { "message": "signed in" } }));
    let called = client
        .post(
            &body,
            &[
                ("mcp-protocol-version", e2e::MODERN),
                ("mcp-method", "tools/call"),
                ("mcp-name", "echo"),
                ("authorization", &auth),
            ],
        )
        .await;
    assert_eq!(called.status, 200, "{}", called.text);
    assert!(called.text.contains("signed in"), "{}", called.text);

    let init = json!({"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}});
    let legacy = client.post(&init, &[("authorization", &auth)]).await;
    assert_eq!(legacy.status, 200, "{}", legacy.text);
    let session = legacy.headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let mut headers = vec![("mcp-protocol-version", "2025-06-18"), ("authorization", auth.as_str())];
    if !session.is_empty() {
        headers.push(("mcp-session-id", session.as_str()));
    }
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "legacy and signed in"}}});
    let called = client.post(&call, &headers).await;
    assert_eq!(called.status, 200, "{}", called.text);
    assert!(called.text.contains("legacy and signed in"), "{}", called.text);

    // The same legacy session without the token is refused: the token is checked on every request.
    let without: Vec<_> = headers.iter().filter(|(k, _)| *k != "authorization").copied().collect();
    assert_eq!(client.post(&call, &without).await.status, 401);

    // 7. Refresh rotates; the old refresh token is then refused.
    let rotated =
        oauth.token(&[("grant_type", "refresh_token"), ("refresh_token", &refresh), ("client_id", &client_id)]).await;
    assert_eq!(rotated.status, 200, "{}", rotated.text);
    let refresh2 = rotated.json["refresh_token"].as_str().expect("new refresh token").to_owned();
    assert_ne!(refresh2, refresh);
    let access2 = rotated.json["access_token"].as_str().expect("new access token").to_owned();
    let ping = e2e::modern_request(6, "tools/list", json!({}));
    let again = client
        .post(
            &ping,
            &[
                ("mcp-protocol-version", e2e::MODERN),
                ("mcp-method", "tools/list"),
                ("authorization", &bearer(&access2)),
            ],
        )
        .await;
    assert_eq!(again.status, 200, "{}", again.text);

    // 8. The code is single use, and its replay revokes the grant: the refresh token dies too.
    let replay = oauth.exchange(&client_id, REDIRECT, &code, &pkce.verifier).await;
    assert_eq!(replay.status, 400);
    assert_eq!(replay.json["error"], "invalid_grant");

    let revoked =
        oauth.token(&[("grant_type", "refresh_token"), ("refresh_token", &refresh2), ("client_id", &client_id)]).await;
    assert_eq!(revoked.json["error"], "invalid_grant", "{}", revoked.text);

    // 9. Tampered and foreign tokens: 401 invalid_token.
    let mut tampered = access.clone();
    let last = tampered.pop().expect("non-empty");
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    for bad in [tampered.as_str(), "not-a-jwt", "a.b.c"] {
        let r = client
            .post(
                &ping,
                &[("mcp-protocol-version", e2e::MODERN), ("mcp-method", "tools/list"), ("authorization", &bearer(bad))],
            )
            .await;
        assert_eq!(r.status, 401, "{bad}: {}", r.text);
        assert!(r.headers["www-authenticate"].to_str().expect("ascii").contains("error=\"invalid_token\""));
    }

    // 10. The gateway remembers a verified token by its signature: a token that carries the
    // signature of one it has let in (`access2`, used in step 7) but another header or other claims
    // is refused all the same, and the real one still opens /mcp.
    let list = [("mcp-protocol-version", e2e::MODERN), ("mcp-method", "tools/list")];
    for forged in reuse_signature(&access2) {
        let r = client.post(&ping, &[list[0], list[1], ("authorization", &bearer(&forged))]).await;
        assert_eq!(r.status, 401, "{forged}: {}", r.text);
        assert!(r.headers["www-authenticate"].to_str().expect("ascii").contains("error=\"invalid_token\""));
    }
    let r = client.post(&ping, &[list[0], list[1], ("authorization", &bearer(&access2))]).await;
    assert_eq!(r.status, 200, "{}", r.text);
}

/// Tokens with `token`'s signature over another header or other claims: the subject and
/// scopes changed, a claim added to the header, the claims' encoding given one more character.
fn reuse_signature(token: &str) -> Vec<String> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "a JWT: {token}");
    let decode = |part: &str| -> Value { serde_json::from_slice(&b64.decode(part).expect("base64url")).expect("json") };
    let encode = |value: &Value| b64.encode(value.to_string());
    let mut claims = decode(parts[1]);
    claims["sub"] = json!("someone-else");
    claims["scope"] = json!("mcp admin");
    let mut head = decode(parts[0]);
    head["x"] = json!(1);
    vec![
        format!("{}.{}.{}", parts[0], encode(&claims), parts[2]),
        format!("{}.{}.{}", encode(&head), parts[1], parts[2]),
        format!("{}.{}A.{}", parts[0], parts[1], parts[2]),
    ]
}

#[tokio::test]
async fn refresh_token_reuse_revokes_the_grant() {
    refresh_reuse(&[]).await;
}

#[tokio::test]
async fn refresh_token_reuse_on_postgres() {
    let pg = e2e::Postgres::start();
    refresh_reuse(&[("OAUTH_DATABASE", pg.url.as_str())]).await;
}

async fn refresh_reuse(env: &[(&str, &str)]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut env = env.to_vec();
    env.push(("OAUTH_REFRESH_REUSE_GRACE_SECS", "0"));
    let stack = secured(&dir, &env).await;
    let oauth = OAuth::new(&stack.base);
    let (client_id, tokens) = sign_in(&oauth).await;
    let first = tokens["refresh_token"].as_str().expect("refresh").to_owned();
    let refresh = |t: String| {
        let oauth = &oauth;
        let client_id = client_id.clone();
        async move {
            oauth.token(&[("grant_type", "refresh_token"), ("refresh_token", &t), ("client_id", &client_id)]).await
        }
    };
    let second = refresh(first.clone()).await;
    assert_eq!(second.status, 200, "{}", second.text);
    let second = second.json["refresh_token"].as_str().expect("refresh").to_owned();
    // The first token again, long after it was rotated: a stolen copy. The grant is revoked…
    let reuse = refresh(first).await;
    assert_eq!(reuse.status, 400);
    assert_eq!(reuse.json["error"], "invalid_grant");
    // …so the legitimate holder's current token stops working too.
    let after = refresh(second).await;
    assert_eq!(after.json["error"], "invalid_grant", "{}", after.text);
}

#[tokio::test]
async fn expired_tokens_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().to_str().expect("utf-8 path");
    let gw = Proc::start_with_env(
        "gateway",
        &["--standalone", "--listen", "127.0.0.1:0", "--auth", "oauth", "--data-dir", data],
        &[
            ("OAUTH_BOOTSTRAP_USER", USER.0),
            ("OAUTH_BOOTSTRAP_PASSWORD", USER.1),
            ("OAUTH_ACCESS_TOKEN_TTL_SECS", "2"),
            ("GATEWAY_CLOCK_SKEW_SECS", "0"),
        ],
        "gateway",
    )
    .await;
    let oauth = OAuth::new(&gw.url());
    let (_, tokens) = sign_in(&oauth).await;
    assert_eq!(tokens["expires_in"], 2);
    let client = Client::new(&format!("{}/mcp", gw.url()));
    let auth = bearer(tokens["access_token"].as_str().expect("token"));
    let body = e2e::modern_request(1, "tools/list", json!({}));
    // Accepted while fresh (the gateway then remembers it as verified)…
    let r = client
        .post(&body, &[("mcp-protocol-version", e2e::MODERN), ("mcp-method", "tools/list"), ("authorization", &auth)])
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // …and refused once expired all the same.
    tokio::time::sleep(std::time::Duration::from_millis(3100)).await;
    let r = client
        .post(&body, &[("mcp-protocol-version", e2e::MODERN), ("mcp-method", "tools/list"), ("authorization", &auth)])
        .await;
    assert_eq!(r.status, 401, "{}", r.text);
    assert!(r.headers["www-authenticate"].to_str().expect("ascii").contains("error=\"invalid_token\""));
}

/// The separate deployment: a token minted for another resource is refused by the gateway.
#[tokio::test]
async fn a_token_for_another_audience_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().to_str().expect("utf-8 path");
    let registry = Proc::start("registry-service", &["--listen", "127.0.0.1:0"], "registry-service").await;
    let mcp =
        Proc::start("mcp-service", &["--listen", "127.0.0.1:0", "--registry", &registry.url()], "mcp-service").await;
    // The gateway's public URL is only known once it listens; pick it first.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = probe.local_addr().expect("addr").port();
    drop(probe);
    let public = format!("http://127.0.0.1:{port}");
    let oauth_proc = Proc::start_with_env(
        "oauth-service",
        &["--listen", "127.0.0.1:0", "--issuer", &public],
        &[
            ("OAUTH_DATA_DIR", data),
            ("OAUTH_RESOURCE", "https://other.example/mcp"),
            ("OAUTH_BOOTSTRAP_USER", USER.0),
            ("OAUTH_BOOTSTRAP_PASSWORD", USER.1),
        ],
        "oauth-service",
    )
    .await;
    let gw = Proc::start(
        "gateway",
        &[
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--mcp-service",
            &mcp.url(),
            "--oauth-service",
            &oauth_proc.url(),
            "--auth",
            "oauth",
        ],
        "gateway",
    )
    .await;
    let oauth = OAuth::new(&gw.url());
    let client_id = oauth.register_public(REDIRECT).await;
    let pkce = Pkce::new();
    let page = oauth
        .authorize(&[
            ("response_type", "code"),
            ("client_id", &client_id),
            ("redirect_uri", REDIRECT),
            ("code_challenge", &pkce.challenge),
            ("code_challenge_method", "S256"),
            ("resource", "https://other.example/mcp"),
        ])
        .await;
    assert_eq!(page.status, 200, "{}", page.text);
    let done = oauth.submit(&page, &[("username", USER.0), ("password", USER.1), ("decision", "allow")]).await;
    let code = done.location_params()["code"].clone();
    let tokens = oauth
        .token(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", REDIRECT),
            ("code_verifier", &pkce.verifier),
            ("client_id", &client_id),
        ])
        .await;
    assert_eq!(tokens.status, 200, "{}", tokens.text);
    let client = Client::new(&format!("{}/mcp", gw.url()));
    let body = e2e::modern_request(1, "tools/list", json!({}));
    let auth = bearer(tokens.json["access_token"].as_str().expect("token"));
    let r = client
        .post(&body, &[("mcp-protocol-version", e2e::MODERN), ("mcp-method", "tools/list"), ("authorization", &auth)])
        .await;
    assert_eq!(r.status, 401, "{}", r.text);
    assert!(r.headers["www-authenticate"].to_str().expect("ascii").contains("error=\"invalid_token\""));
}

/// Every hostile or broken request gets its own exact answer.
#[tokio::test]
async fn hostile_requests_each_get_their_error() {
    hostile_requests(&[]).await;
}

#[tokio::test]
async fn hostile_requests_on_postgres() {
    let pg = e2e::Postgres::start();
    hostile_requests(&[("OAUTH_DATABASE", pg.url.as_str())]).await;
}

async fn hostile_requests(env: &[(&str, &str)]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let stack = secured(&dir, env).await;
    let base = stack.base.clone();
    let oauth = OAuth::new(&base);
    let resource = format!("{base}/mcp");
    let client_id = oauth.register_public(REDIRECT).await;
    let pkce = Pkce::new();
    let good: Vec<(&str, &str)> = vec![
        ("response_type", "code"),
        ("client_id", &client_id),
        ("redirect_uri", REDIRECT),
        ("code_challenge", &pkce.challenge),
        ("code_challenge_method", "S256"),
        ("state", "s1"),
        ("resource", &resource),
    ];
    let with = |key: &str, value: Option<&'static str>| -> Vec<(String, String)> {
        let mut p: Vec<(String, String)> =
            good.iter().filter(|(k, _)| *k != key).map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        if let Some(v) = value {
            p.push((key.to_owned(), v.to_owned()));
        }
        p
    };
    let authorize = |p: Vec<(String, String)>| {
        let oauth = &oauth;
        async move {
            let refs: Vec<(&str, &str)> = p.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            oauth.authorize(&refs).await
        }
    };

    // Errors redirected to the verified client, with state and iss.
    let redirected: [(&str, Option<&'static str>, &str); 6] = [
        ("code_challenge", None, "invalid_request"),
        ("code_challenge_method", Some("plain"), "invalid_request"),
        ("code_challenge_method", None, "invalid_request"),
        ("resource", Some("https://elsewhere.example/mcp"), "invalid_target"),
        ("resource", None, "invalid_target"),
        ("response_type", Some("token"), "unsupported_response_type"),
    ];
    for (key, value, error) in redirected {
        let r = authorize(with(key, value)).await;
        assert_eq!(r.status, 303, "{key}={value:?}: {}", r.text);
        let p = r.location_params();
        assert_eq!(p["error"], error, "{key}={value:?}");
        assert_eq!(p["state"], "s1");
        assert_eq!(p["iss"], base);
        assert!(r.header("location").starts_with(REDIRECT), "{}", r.header("location"));
    }

    // Errors about the client or its redirect URI: shown, never redirected.
    let shown: [(&str, Option<&'static str>); 5] = [
        ("redirect_uri", Some("https://evil.example/callback")),
        ("redirect_uri", Some("http://127.0.0.1/callback/../evil")),
        ("redirect_uri", Some("http://127.0.0.1.evil.example/callback")),
        ("client_id", Some("no-such-client")),
        ("client_id", None),
    ];
    for (key, value) in shown {
        let r = authorize(with(key, value)).await;
        assert_eq!(r.status, 400, "{key}={value:?}: {}", r.text);
        assert!(r.header("location").is_empty(), "{key}={value:?} must not redirect");
        assert!(r.header("content-type").starts_with("text/html"));
        assert_eq!(r.header("x-frame-options"), "DENY");
    }

    // The sign-in page: anti-framing, no caching; a missing or forged CSRF token is refused.
    let page = authorize(with("state", Some("s2"))).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.header("x-frame-options"), "DENY");
    assert!(page.header("content-security-policy").contains("frame-ancestors 'none'"));
    assert_eq!(page.header("cache-control"), "no-store");
    for csrf in ["", "1.forged", "99999999999.AAAA"] {
        let r = oauth
            .submit(&page, &[("csrf", csrf), ("username", USER.0), ("password", USER.1), ("decision", "allow")])
            .await;
        assert_eq!(r.status, 400, "csrf {csrf:?}: {}", r.text);
        assert!(r.header("location").is_empty());
    }
    // Wrong password: the page again, 401, nothing issued.
    let r = oauth.submit(&page, &[("username", USER.0), ("password", "wrong"), ("decision", "allow")]).await;
    assert_eq!(r.status, 401);
    assert!(r.text.contains("Wrong username or password"));
    let r = oauth.submit(&page, &[("username", "mallory"), ("password", USER.1), ("decision", "allow")]).await;
    assert_eq!(r.status, 401);
    // Deny: access_denied to the client.
    let r = oauth.submit(&page, &[("decision", "deny")]).await;
    assert_eq!(r.location_params()["error"], "access_denied");

    // Token endpoint: wrong verifier (and the code is then spent), redirect mismatch, unknown
    // client, wrong grant type.
    let params = oauth.sign_in(&client_id, REDIRECT, &pkce, USER).await;
    let wrong = Pkce::new();
    let r = oauth.exchange(&client_id, REDIRECT, &params["code"], &wrong.verifier).await;
    assert_eq!((r.status, r.json["error"].as_str()), (400, Some("invalid_grant")), "{}", r.text);
    assert_eq!(r.header("cache-control"), "no-store");
    let r = oauth.exchange(&client_id, REDIRECT, &params["code"], &pkce.verifier).await;
    assert_eq!(r.json["error"], "invalid_grant", "a code is spent by a failed attempt: {}", r.text);
    let params = oauth.sign_in(&client_id, REDIRECT, &pkce, USER).await;
    let r = oauth.exchange(&client_id, "http://127.0.0.1/other", &params["code"], &pkce.verifier).await;
    assert_eq!(r.json["error"], "invalid_grant", "{}", r.text);
    let r = oauth.exchange("no-such-client", REDIRECT, "x", &pkce.verifier).await;
    assert_eq!((r.status, r.json["error"].as_str()), (401, Some("invalid_client")), "{}", r.text);
    let r = oauth.token(&[("grant_type", "password"), ("client_id", &client_id)]).await;
    assert_eq!(r.json["error"], "unsupported_grant_type");
    let r = oauth.token(&[("client_id", &client_id)]).await;
    assert_eq!(r.json["error"], "invalid_request");

    // Registration with bad metadata.
    let bad: [(Value, &str); 5] = [
        (json!({ "redirect_uris": [] }), "invalid_redirect_uri"),
        (json!({ "redirect_uris": ["http://evil.example/cb"] }), "invalid_redirect_uri"),
        (json!({ "redirect_uris": ["https://app.example/cb#x"] }), "invalid_redirect_uri"),
        (json!({ "redirect_uris": [REDIRECT], "application_type": "robot" }), "invalid_client_metadata"),
        (json!({ "redirect_uris": [REDIRECT], "grant_types": ["implicit"] }), "invalid_client_metadata"),
    ];
    for (metadata, error) in bad {
        let r = oauth.register(&metadata).await;
        assert_eq!((r.status, r.json["error"].as_str()), (400, Some(error)), "{metadata}: {}", r.text);
    }
    let r = oauth
        .http
        .post(format!("{base}/oauth/register"))
        .body("{not json")
        .header("content-type", "application/json")
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 400);
}

/// The gateway relays OAuth requests with their bodies whole: one too large is refused with
/// 413 by the gateway itself (announced or chunked), and requests oauth-service refuses before
/// reading their bodies get its answer, never a 503, with every valid request between them
/// answered.
#[tokio::test]
async fn oauth_bodies_are_relayed_whole_or_refused_with_413() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stack = secured(&dir, &[("OAUTH_REGISTRATION_PER_MINUTE", "100000")]).await;
    let base = stack.base.clone();
    let addr = stack.gateway().addr();
    let head = e2e::raw_exchange(
        addr,
        "POST /oauth/register HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 3000000\r\n\r\n",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(head.contains("\"error\":\"invalid_request\""), "an OAuth error document: {head}");

    let head = "POST /oauth/token HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n";
    let text = e2e::chunked_exchange(addr, head, 64 * 1024, 20).await;
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");

    let http = e2e::http();
    let register = format!("{base}/oauth/register");
    let metadata = json!({ "redirect_uris": [REDIRECT] }).to_string();
    for round in 0..20 {
        // Not JSON's content type: refused before its body is read; then not JSON at all, read
        // whole (just under the gateway's limit); then a valid registration.
        let r = http.post(&register).header("content-type", "text/plain").body("x".repeat(200_000)).send().await;
        let r = r.expect("POST");
        assert_eq!(r.status().as_u16(), 400, "round {round}");
        let r =
            http.post(&register).header("content-type", "application/json").body("x".repeat(1_000_000)).send().await;
        let r = r.expect("POST");
        assert_eq!(r.status().as_u16(), 400, "round {round}");
        let r = http.post(&register).header("content-type", "application/json").body(metadata.clone()).send().await;
        let r = r.expect("POST");
        assert_eq!(r.status().as_u16(), 201, "round {round}");
    }
}

/// With `token_validation = introspect` the gateway asks the authorisation server about each
/// token: the whole flow ends with revoke → 401 at once.
#[tokio::test]
async fn revoke_then_401_with_introspection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stack = secured(&dir, &[("GATEWAY_TOKEN_VALIDATION", "introspect")]).await;
    let client = stack.client();
    let oauth = OAuth::new(&stack.base);
    let (client_id, tokens) = sign_in(&oauth).await;
    let refresh = tokens["refresh_token"].as_str().expect("refresh").to_owned();
    let rotated =
        oauth.token(&[("grant_type", "refresh_token"), ("refresh_token", &refresh), ("client_id", &client_id)]).await;
    assert_eq!(rotated.status, 200, "{}", rotated.text);
    let access = rotated.json["access_token"].as_str().expect("access").to_owned();
    let refresh = rotated.json["refresh_token"].as_str().expect("refresh").to_owned();
    let list = |access: String| {
        let client = client.clone();
        async move {
            let body = e2e::modern_request(1, "tools/list", json!({}));
            let auth = bearer(&access);
            client
                .post(
                    &body,
                    &[("mcp-protocol-version", e2e::MODERN), ("mcp-method", "tools/list"), ("authorization", &auth)],
                )
                .await
        }
    };
    assert_eq!(list(access.clone()).await.status, 200);
    let legacy = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "still in"}}});
    let called =
        client.post(&legacy, &[("mcp-protocol-version", "2025-06-18"), ("authorization", &bearer(&access))]).await;
    assert_eq!(called.status, 200, "{}", called.text);

    let revoked = oauth
        .http
        .post(format!("{}/oauth/revoke", stack.base))
        .form(&[("token", refresh.as_str()), ("client_id", client_id.as_str())])
        .send()
        .await
        .expect("POST");
    assert_eq!(revoked.status().as_u16(), 200);
    let after = list(access).await;
    assert_eq!(after.status, 401, "{}", after.text);
    assert!(after.headers["www-authenticate"].to_str().expect("ascii").contains("invalid_token"));
    // The gateway's own introspection secret never reaches the logs.
    assert!(!stack.gateway().log_text().to_lowercase().contains("client_secret"));
}

/// oauth-service reads every request's body whole, so a request it refuses before looking at
/// its body (a content type it does not take) leaves its keep-alive connection usable: the
/// next request on the same connection is answered. Above 1 MiB: 413 with an OAuth error.
#[tokio::test]
async fn oauth_service_keeps_a_connection_after_a_refused_body() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let data = tempfile::tempdir().expect("tempdir");
    let env = [("OAUTH_REGISTRATION_PER_MINUTE", "100000")];
    let data_dir = data.path().to_str().expect("utf-8 path");
    let oauth = Proc::start_with_env(
        "oauth-service",
        &["--listen", "127.0.0.1:0", "--data-dir", data_dir],
        &env,
        "oauth-service",
    )
    .await;
    let mut conn = tokio::net::TcpStream::connect(oauth.addr()).await.expect("connect");
    let refused = format!(
        "POST /oauth/register HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\nContent-Length: 200000\r\n\r\n{}",
        "x".repeat(200_000)
    );
    let metadata = json!({ "redirect_uris": [REDIRECT] }).to_string();
    let valid = format!(
        "POST /oauth/register HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{metadata}",
        metadata.len()
    );
    // Read one answer (head and Content-Length body) off the connection.
    async fn answer(conn: &mut tokio::net::TcpStream) -> String {
        let mut seen = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let text = String::from_utf8_lossy(&seen).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(str::to_owned))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if seen.len() >= end + 4 + length {
                    return text;
                }
            }
            let n = tokio::time::timeout(std::time::Duration::from_secs(10), conn.read(&mut buf))
                .await
                .expect("an answer in time")
                .expect("read");
            assert!(n > 0, "the connection closed after: {text}");
            seen.extend_from_slice(&buf[..n]);
        }
    }
    for round in 0..5 {
        conn.write_all(refused.as_bytes()).await.expect("write");
        let text = answer(&mut conn).await;
        assert!(text.starts_with("HTTP/1.1 400") || text.starts_with("HTTP/1.1 415"), "round {round}: {text}");
        conn.write_all(valid.as_bytes()).await.expect("write");
        let text = answer(&mut conn).await;
        assert!(text.starts_with("HTTP/1.1 201"), "round {round}: {text}");
    }
    let head = e2e::raw_exchange(
        oauth.addr(),
        "POST /oauth/token HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 2000000\r\n\r\n",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 413") && head.contains("invalid_request"), "{head}");
}
