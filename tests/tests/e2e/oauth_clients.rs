//! The authorisation server's clients and grants beyond dynamic registration: static clients
//! from configuration (registration off), Client ID Metadata Documents served by the test,
//! client credentials, revocation and introspection, the admin commands, key rotation,
//! remembered consent, concurrent refreshes, the registration rate limit, and PostgreSQL with
//! two replicas behaving as one server.

use std::time::Duration;

use base64::Engine as _;
use e2e::oauth::{OAuth, Pkce};
use e2e::{Client, MODERN, Postgres, Proc, bin};
use serde_json::{Value, json};
use sha2::Digest as _;

use crate::oauth::{REDIRECT, USER, bearer, secured, sign_in};

fn sha256(secret: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(secret.as_bytes()))
}

fn basic(id: &str, secret: &str) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{id}:{secret}")))
}

/// A free port for a gateway whose public URL must be known before it starts.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// Serve client metadata documents on port 0: `/good` names itself, `/liar` names another URL.
async fn document_server() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let (good, liar) = (format!("{base}/good"), format!("{base}/liar"));
    let app = axum::Router::new()
        .route(
            "/good",
            axum::routing::get(move || {
                let id = good.clone();
                async move {
                    axum::Json(
                        json!({ "client_id": id, "client_name": "Document Client", "redirect_uris": [REDIRECT] }),
                    )
                }
            }),
        )
        .route(
            "/liar",
            axum::routing::get(move || {
                let _ = &liar;
                async move {
                    axum::Json(
                        json!({ "client_id": "https://someone-else.example/client", "redirect_uris": [REDIRECT] }),
                    )
                }
            }),
        );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (base, task)
}

/// registry, mcp-service, oauth-service (with `config`) and a gateway with sign-in on, whose
/// public URL is known in advance.
struct Deployment {
    procs: Vec<Proc>,
    base: String,
}

async fn deployment(config_toml: &str, dir: &tempfile::TempDir, env: &[(&str, &str)]) -> Deployment {
    let registry = Proc::start("registry-service", &["--listen", "127.0.0.1:0"], "registry-service").await;
    let mcp =
        Proc::start("mcp-service", &["--listen", "127.0.0.1:0", "--registry", &registry.url()], "mcp-service").await;
    let port = free_port();
    let public = format!("http://127.0.0.1:{port}");
    let config = dir.path().join("oauth.toml");
    std::fs::write(&config, config_toml).expect("write config");
    let data = dir.path().to_str().expect("utf-8");
    let mut all_env = vec![("OAUTH_DATA_DIR", data)];
    all_env.extend_from_slice(env);
    let oauth = Proc::start_with_env(
        "oauth-service",
        &["--listen", "127.0.0.1:0", "--issuer", &public, "--config", config.to_str().expect("utf-8")],
        &all_env,
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
            &oauth.url(),
            "--auth",
            "oauth",
        ],
        "gateway",
    )
    .await;
    Deployment { procs: vec![registry, mcp, oauth, gw], base: public }
}

async fn tools_list(base: &str, access: &str) -> u16 {
    let client = Client::new(&format!("{base}/mcp"));
    let body = e2e::modern_request(1, "tools/list", json!({}));
    client
        .post(
            &body,
            &[("mcp-protocol-version", MODERN), ("mcp-method", "tools/list"), ("authorization", &bearer(access))],
        )
        .await
        .status
}

#[tokio::test]
async fn static_clients_documents_credentials_revocation_introspection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = "machine-secret-0123456789";
    let config = format!(
        r#"
registration = false
client_metadata_allow_private = true
bootstrap_user = "{}"
bootstrap_password = "{}"

[[clients]]
client_id = "static-app"
name = "Static App"
redirect_uris = ["{REDIRECT}"]
application_type = "native"

[[clients]]
client_id = "nightly-job"
secret_sha256 = "{}"
"#,
        USER.0,
        USER.1,
        sha256(secret)
    );
    let d = deployment(&config, &dir, &[]).await;
    let oauth = OAuth::new(&d.base);

    // Registration is off, and the metadata says so; static clients still work.
    let meta = oauth.get("/.well-known/oauth-authorization-server").await;
    assert!(meta.json.get("registration_endpoint").is_none(), "{}", meta.text);
    assert_eq!(meta.json["client_id_metadata_document_supported"], true);
    assert_eq!(meta.json["revocation_endpoint"], format!("{}/oauth/revoke", d.base));
    let r = oauth.register(&json!({ "redirect_uris": [REDIRECT] })).await;
    assert_eq!(r.status, 403);
    let pkce = Pkce::new();
    let code = oauth.sign_in("static-app", REDIRECT, &pkce, USER).await["code"].clone();
    let tokens = oauth.exchange("static-app", REDIRECT, &code, &pkce.verifier).await;
    assert_eq!(tokens.status, 200, "{}", tokens.text);
    let access = tokens.json["access_token"].as_str().expect("access").to_owned();
    let refresh = tokens.json["refresh_token"].as_str().expect("refresh").to_owned();
    assert_eq!(tools_list(&d.base, &access).await, 200);

    // A Client ID Metadata Document, fetched from the test's own server.
    let (docs, _server) = document_server().await;
    let good = format!("{docs}/good");
    let pkce2 = Pkce::new();
    let params = [
        ("response_type", "code"),
        ("client_id", good.as_str()),
        ("redirect_uri", REDIRECT),
        ("code_challenge", pkce2.challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("resource", &format!("{}/mcp", d.base)),
    ];
    let page = oauth.authorize(&params).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("Document Client"), "the page names the document's client");
    let done = oauth.submit(&page, &[("username", USER.0), ("password", USER.1), ("decision", "allow")]).await;
    let code = done.location_params()["code"].clone();
    let doc_tokens = oauth.exchange(&good, REDIRECT, &code, &pkce2.verifier).await;
    assert_eq!(doc_tokens.status, 200, "{}", doc_tokens.text);
    // A document whose client_id is not its URL, and one that does not exist: refused, shown.
    for bad in [format!("{docs}/liar"), format!("{docs}/missing")] {
        let mut p = params.to_vec();
        p[1] = ("client_id", bad.as_str());
        let r = oauth.authorize(&p).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text);
        assert!(r.header("location").is_empty());
    }
    // A redirect URI the document does not list.
    let mut p = params.to_vec();
    p[2] = ("redirect_uri", "http://127.0.0.1/elsewhere");
    assert_eq!(oauth.authorize(&p).await.status, 400);

    // Client credentials: a confidential client for itself, no refresh token.
    let cc = oauth
        .http
        .post(format!("{}/oauth/token", d.base))
        .header("authorization", basic("nightly-job", secret))
        .form(&[("grant_type", "client_credentials"), ("scope", "mcp")])
        .send()
        .await
        .expect("POST");
    assert_eq!(cc.status().as_u16(), 200);
    let cc: Value = cc.json().await.expect("JSON");
    assert!(cc.get("refresh_token").is_none());
    let machine = cc["access_token"].as_str().expect("access").to_owned();
    assert_eq!(tools_list(&d.base, &machine).await, 200);
    let wrong = oauth
        .http
        .post(format!("{}/oauth/token", d.base))
        .header("authorization", basic("nightly-job", "not-the-secret"))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .expect("POST");
    assert_eq!(wrong.status().as_u16(), 401);
    let public_cc = oauth.token(&[("grant_type", "client_credentials"), ("client_id", "static-app")]).await;
    assert_eq!(public_cc.json["error"], "unauthorized_client", "{}", public_cc.text);

    // Introspection, for a confidential caller.
    let introspect = |token: String| {
        let oauth = &oauth;
        let base = d.base.clone();
        async move {
            let r = oauth
                .http
                .post(format!("{base}/oauth/introspect"))
                .header("authorization", basic("nightly-job", secret))
                .form(&[("token", token.as_str())])
                .send()
                .await
                .expect("POST");
            assert_eq!(r.status().as_u16(), 200);
            r.json::<Value>().await.expect("JSON")
        }
    };
    let a = introspect(access.clone()).await;
    assert_eq!(
        (a["active"].as_bool(), a["sub"].as_str(), a["client_id"].as_str()),
        (Some(true), Some(USER.0), Some("static-app"))
    );
    assert_eq!(introspect(refresh.clone()).await["active"], true);
    assert_eq!(introspect("garbage".into()).await["active"], false);
    let by_public = oauth
        .http
        .post(format!("{}/oauth/introspect", d.base))
        .form(&[("token", access.as_str()), ("client_id", "static-app")])
        .send()
        .await
        .expect("POST");
    assert_eq!(by_public.status().as_u16(), 401, "a public client may not introspect");

    // Revocation: another client cannot revoke; the owner can, and the whole grant goes.
    let r = oauth
        .http
        .post(format!("{}/oauth/revoke", d.base))
        .form(&[("token", refresh.as_str()), ("client_id", good.as_str())])
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(introspect(refresh.clone()).await["active"], true, "not revoked by a stranger");
    let r = oauth
        .http
        .post(format!("{}/oauth/revoke", d.base))
        .form(&[("token", refresh.as_str()), ("client_id", "static-app")])
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(introspect(refresh.clone()).await["active"], false);
    assert_eq!(introspect(access.clone()).await["active"], false, "the grant's access token is inactive too");
    let again =
        oauth.token(&[("grant_type", "refresh_token"), ("refresh_token", &refresh), ("client_id", "static-app")]).await;
    assert_eq!(again.json["error"], "invalid_grant");
    // An access token revoked on its own.
    let doc_access = doc_tokens.json["access_token"].as_str().expect("access").to_owned();
    let r = oauth
        .http
        .post(format!("{}/oauth/revoke", d.base))
        .form(&[("token", doc_access.as_str()), ("token_type_hint", "access_token"), ("client_id", good.as_str())])
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(introspect(doc_access).await["active"], false);
    drop(d.procs);
}

fn admin(dir: &std::path::Path, args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use std::io::Write as _;
    let mut cmd = std::process::Command::new(bin("oauth-service"));
    cmd.args(args)
        .arg("--data-dir")
        .arg(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    if let Some(input) = stdin {
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write");
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("wait");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[tokio::test]
async fn admin_commands_keys_rotation_and_remembered_consent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stack = secured(&dir, &[]).await;
    let oauth = OAuth::new(&stack.base);
    let d = dir.path();

    // Users.
    let (ok, out) = admin(d, &["user", "add", "bob", "--password-stdin"], Some("bob's long password\n"));
    assert!(ok, "{out}");
    let (_, list) = admin(d, &["user", "list"], None);
    assert_eq!(list.lines().collect::<Vec<_>>(), vec!["alice", "bob"]);
    let (ok, out) = admin(d, &["user", "add", "carol", "--password-stdin"], Some("short\n"));
    assert!(!ok && out.contains("at least 8"), "{out}");

    // A client added by the operator signs bob in.
    let (ok, out) = admin(
        d,
        &["client", "add", "--name", "Desk App", "--redirect-uri", REDIRECT, "--application-type", "native"],
        None,
    );
    assert!(ok, "{out}");
    let client_id = out.lines().find_map(|l| l.strip_prefix("client_id: ")).expect("client id").to_owned();
    let (ok, out) = admin(d, &["client", "add", "--name", "Robot", "--confidential"], None);
    assert!(ok && out.contains("client_secret: "), "{out}");
    let (_, clients) = admin(d, &["client", "list"], None);
    assert!(clients.contains("Desk App") && clients.contains("Robot") && clients.contains("confidential"), "{clients}");

    let pkce = Pkce::new();
    let code = oauth.sign_in(&client_id, REDIRECT, &pkce, ("bob", "bob's long password")).await["code"].clone();
    let tokens = oauth.exchange(&client_id, REDIRECT, &code, &pkce.verifier).await;
    let old_access = tokens.json["access_token"].as_str().expect("access").to_owned();
    assert_eq!(tools_list(&stack.base, &old_access).await, 200);

    // Key rotation: the running service signs with the new key within seconds; the old key
    // stays published, so the token it signed keeps working.
    let jwks = || async { oauth.get("/oauth/jwks").await.json["keys"].as_array().map_or(0, Vec::len) };
    assert_eq!(jwks().await, 1);
    let (ok, out) = admin(d, &["keys", "rotate"], None);
    assert!(ok && out.contains("now signing with key"), "{out}");
    let mut published = 0;
    for _ in 0..100 {
        published = jwks().await;
        if published == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(published, 2, "the new key is published beside the old one");
    let (_, fresh) = sign_in(&oauth).await;
    let fresh = fresh["access_token"].as_str().expect("access").to_owned();
    let kid = |t: &str| -> String {
        let head = t.split('.').next().expect("header");
        let json: Value =
            serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(head).expect("b64"))
                .expect("json");
        json["kid"].as_str().expect("kid").to_owned()
    };
    assert_ne!(kid(&fresh), kid(&old_access));
    assert_eq!(tools_list(&stack.base, &fresh).await, 200, "the gateway learns the new key");
    assert_eq!(tools_list(&stack.base, &old_access).await, 200, "the old key still verifies");

    // Remembered consent: a browser with the session cookie is sent straight back.
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .cookie_store(true)
        .build()
        .expect("client");
    let pkce = Pkce::new();
    let resource = format!("{}/mcp", stack.base);
    let query = |scope: &'static str| {
        vec![
            ("response_type", "code".to_owned()),
            ("client_id", client_id.clone()),
            ("redirect_uri", REDIRECT.to_owned()),
            ("code_challenge", pkce.challenge.clone()),
            ("code_challenge_method", "S256".to_owned()),
            ("scope", scope.to_owned()),
            ("resource", resource.clone()),
        ]
    };
    let authorize = |scope: &'static str| {
        let browser = browser.clone();
        let url = format!("{}/oauth/authorize", stack.base);
        let q = query(scope);
        async move { browser.get(url).query(&q).send().await.expect("GET") }
    };
    let page = authorize("mcp").await;
    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().await.expect("html");
    let mut form = e2e::oauth::hidden_fields(&html);
    form.extend([
        ("username".into(), "bob".into()),
        ("password".into(), "bob's long password".into()),
        ("decision".into(), "allow".into()),
    ]);
    let signed = browser.post(format!("{}/oauth/authorize", stack.base)).form(&form).send().await.expect("POST");
    assert_eq!(signed.status().as_u16(), 303);
    let cookie = signed.headers().get("set-cookie").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax") && cookie.contains("Path=/oauth"),
        "{cookie}"
    );
    let again = authorize("mcp").await;
    assert_eq!(again.status().as_u16(), 303, "same client, same scopes: no page");
    assert!(again.headers()["location"].to_str().expect("ascii").contains("code="));
    // More scopes: the consent page, without the password fields.
    let more = authorize("mcp admin").await;
    assert_eq!(more.status().as_u16(), 200);
    let html = more.text().await.expect("html");
    assert!(html.contains("Signed in as <strong>bob</strong>") && !html.contains("type=\"password\""), "{html}");
    // Revoked consent: asked again.
    let (ok, out) = admin(d, &["consent", "revoke", "bob", &client_id], None);
    assert!(ok, "{out}");
    assert_eq!(authorize("mcp").await.status().as_u16(), 200);

    // Removing a user ends their grants and their sign-in.
    let refresh = tokens.json["refresh_token"].as_str().expect("refresh").to_owned();
    let (ok, out) = admin(d, &["user", "remove", "bob"], None);
    assert!(ok, "{out}");
    let r =
        oauth.token(&[("grant_type", "refresh_token"), ("refresh_token", &refresh), ("client_id", &client_id)]).await;
    assert_eq!(r.json["error"], "invalid_grant");
    let (ok, _) = admin(d, &["client", "remove", &client_id], None);
    assert!(ok);
    let (ok, out) = admin(d, &["client", "remove", &client_id], None);
    assert!(!ok && out.contains("no client"), "{out}");
}

#[tokio::test]
async fn concurrent_refreshes_within_the_grace_both_succeed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stack = secured(&dir, &[]).await;
    let oauth = OAuth::new(&stack.base);
    let (client_id, tokens) = sign_in(&oauth).await;
    let refresh = tokens["refresh_token"].as_str().expect("refresh").to_owned();
    let form =
        [("grant_type", "refresh_token"), ("refresh_token", refresh.as_str()), ("client_id", client_id.as_str())];
    let (a, b) = tokio::join!(oauth.token(&form), oauth.token(&form));
    assert_eq!((a.status, b.status), (200, 200), "{} / {}", a.text, b.text);
    for t in [a, b] {
        let next = t.json["refresh_token"].as_str().expect("refresh").to_owned();
        let r =
            oauth.token(&[("grant_type", "refresh_token"), ("refresh_token", &next), ("client_id", &client_id)]).await;
        assert_eq!(r.status, 200, "the grant is intact: {}", r.text);
    }
}

#[tokio::test]
async fn registration_is_rate_limited_per_client_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stack = secured(&dir, &[("OAUTH_REGISTRATION_PER_MINUTE", "3")]).await;
    let oauth = OAuth::new(&stack.base);
    let metadata = json!({ "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none" });
    for _ in 0..3 {
        assert_eq!(oauth.register(&metadata).await.status, 201);
    }
    let limited = oauth.register(&metadata).await;
    assert_eq!(limited.status, 429, "{}", limited.text);
    assert!(limited.header("retry-after").parse::<u64>().is_ok_and(|s| s >= 1));
}

/// Two oauth-service replicas on one PostgreSQL: a code issued by one is redeemed at the other,
/// exactly once; a client registered at one is known to the other.
#[tokio::test]
async fn two_replicas_on_postgres_behave_as_one_server() {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().to_str().expect("utf-8");
    let issuer = "http://127.0.0.1:9";
    let env = [
        ("OAUTH_DATABASE", pg.url.as_str()),
        ("OAUTH_DATA_DIR", data),
        ("OAUTH_BOOTSTRAP_USER", USER.0),
        ("OAUTH_BOOTSTRAP_PASSWORD", USER.1),
    ];
    let args = ["--listen", "127.0.0.1:0", "--issuer", issuer];
    let (a, b) = tokio::join!(
        Proc::start_with_env("oauth-service", &args, &env, "oauth-service"),
        Proc::start_with_env("oauth-service", &args, &env, "oauth-service")
    );
    let (mut oa, mut ob) = (OAuth::new(&a.url()), OAuth::new(&b.url()));
    oa.resource = format!("{issuer}/mcp");
    ob.resource = oa.resource.clone();
    let client_id = oa.register_public(REDIRECT).await;
    let pkce = Pkce::new();
    let page = ob
        .authorize(&[
            ("response_type", "code"),
            ("client_id", &client_id),
            ("redirect_uri", REDIRECT),
            ("code_challenge", &pkce.challenge),
            ("code_challenge_method", "S256"),
            ("resource", &format!("{issuer}/mcp")),
        ])
        .await;
    assert_eq!(page.status, 200, "replica B knows the client: {}", page.text);
    let done = ob.submit(&page, &[("username", USER.0), ("password", USER.1), ("decision", "allow")]).await;
    let code = done.location_params()["code"].clone();
    let form = [
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", REDIRECT),
        ("code_verifier", pkce.verifier.as_str()),
        ("client_id", client_id.as_str()),
    ];
    let (ra, rb) = tokio::join!(oa.token(&form), ob.token(&form));
    let statuses = [ra.status, rb.status];
    assert!(statuses.contains(&200) && statuses.contains(&400), "exactly one redemption: {} / {}", ra.text, rb.text);
    // The replay revoked the grant, on both replicas: the winner's refresh token is dead.
    let winner = if ra.status == 200 { ra } else { rb };
    let refresh = winner.json["refresh_token"].as_str().expect("refresh").to_owned();
    let r = oa.token(&[("grant_type", "refresh_token"), ("refresh_token", &refresh), ("client_id", &client_id)]).await;
    assert_eq!(r.json["error"], "invalid_grant", "{}", r.text);

    // A clean grant: issued at B, redeemed at A, refreshed at B.
    let pkce = Pkce::new();
    let code = ob.sign_in(&client_id, REDIRECT, &pkce, USER).await["code"].clone();
    let tokens = oa.exchange(&client_id, REDIRECT, &code, &pkce.verifier).await;
    assert_eq!(tokens.status, 200, "{}", tokens.text);
    let refresh = tokens.json["refresh_token"].as_str().expect("refresh").to_owned();
    let r = ob.token(&[("grant_type", "refresh_token"), ("refresh_token", &refresh), ("client_id", &client_id)]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Both publish the same key, from the shared data directory.
    assert_eq!(oa.get("/oauth/jwks").await.json, ob.get("/oauth/jwks").await.json);
}

/// An issuer with a path publishes its metadata at the path-suffixed locations clients try
/// (RFC 8414 §3.1 and OpenID Connect discovery), each with the issuer byte for byte.
#[tokio::test]
async fn an_issuer_with_a_path_is_discoverable() {
    let issuer = "https://auth.example.com/tenant1";
    let p = Proc::start("oauth-service", &["--listen", "127.0.0.1:0", "--issuer", issuer], "oauth-service").await;
    for path in [
        "/.well-known/oauth-authorization-server/tenant1",
        "/.well-known/openid-configuration/tenant1",
        "/tenant1/.well-known/openid-configuration",
        "/.well-known/oauth-authorization-server",
    ] {
        let r = e2e::http().get(format!("{}{path}", p.url())).send().await.expect("GET");
        assert_eq!(r.status().as_u16(), 200, "{path}");
        let doc: Value = r.json().await.expect("JSON");
        assert_eq!(doc["issuer"], issuer, "{path}");
        assert_eq!(doc["token_endpoint"], format!("{issuer}/oauth/token"));
    }
}
