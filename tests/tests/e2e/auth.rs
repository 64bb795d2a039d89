//! The gateway as protected resource beyond the basic flow: per-tool scopes (hidden from
//! lists, 403 `insufficient_scope` on call for step-up), static API tokens, and the refusal to
//! serve unauthenticated beyond loopback.

use base64::Engine as _;
use e2e::oauth::{OAuth, Pkce};
use e2e::{Client, MODERN, Proc, bin};
use serde_json::json;
use sha2::Digest as _;

use crate::oauth::{REDIRECT, USER, bearer, secured_with};

const DEFINITIONS: &str = r#"
server: { name: scoped, version: "1.0.0" }
tools:
  - name: hello
    description: Everyone signed in may say hello
    text: "hello"
  - name: purge
    description: Only administrators
    scopes: [admin]
    text: "purged"
"#;

async fn call(client: &Client, auth: &str, era: &str, tool: &str) -> e2e::Reply {
    if era == MODERN {
        let body = e2e::modern_request(1, "tools/call", json!({ "name": tool, "arguments": {} }));
        client
            .post(
                &body,
                &[
                    ("mcp-protocol-version", MODERN),
                    ("mcp-method", "tools/call"),
                    ("mcp-name", tool),
                    ("authorization", auth),
                ],
            )
            .await
    } else {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": {}}});
        client.post(&body, &[("mcp-protocol-version", era), ("authorization", auth)]).await
    }
}

fn tool_names(reply: &e2e::Reply) -> Vec<String> {
    reply.result()["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn tool_scopes_hide_tools_and_ask_for_step_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let defs = dir.path().join("defs.yaml");
    std::fs::write(&defs, DEFINITIONS).expect("write");
    let stack = secured_with(&dir, &["--definitions", defs.to_str().expect("utf-8")], &[]).await;
    let client = stack.client();
    let oauth = OAuth::new(&stack.base);
    let client_id = oauth.register_public(REDIRECT).await;

    // A token with `mcp` only.
    let pkce = Pkce::new();
    let code = oauth.sign_in(&client_id, REDIRECT, &pkce, USER).await["code"].clone();
    let tokens = oauth.exchange(&client_id, REDIRECT, &code, &pkce.verifier).await;
    let auth = bearer(tokens.json["access_token"].as_str().expect("token"));
    let body = e2e::modern_request(1, "tools/list", json!({}));
    let listed = client
        .post(&body, &[("mcp-protocol-version", MODERN), ("mcp-method", "tools/list"), ("authorization", &auth)])
        .await;
    assert_eq!(tool_names(&listed), vec!["hello"], "a tool the token cannot use is not listed");
    assert_eq!(listed.result()["cacheScope"], "private", "a list that depends on the caller is private");
    let legacy_list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let legacy = client.post(&legacy_list, &[("mcp-protocol-version", "2025-06-18"), ("authorization", &auth)]).await;
    assert_eq!(tool_names(&legacy), vec!["hello"], "legacy lists hide it too");

    for era in [MODERN, "2025-06-18"] {
        let ok = call(&client, &auth, era, "hello").await;
        assert_eq!(ok.status, 200, "{era}: {}", ok.text);
        let denied = call(&client, &auth, era, "purge").await;
        assert_eq!(denied.status, 403, "{era}: {}", denied.text);
        let www = denied.headers["www-authenticate"].to_str().expect("ascii");
        assert!(www.contains("error=\"insufficient_scope\""), "{www}");
        assert!(www.contains("scope=\"admin\""), "{www}");
        assert!(www.contains("resource_metadata=\""), "{www}");
        assert_eq!(denied.json["error"]["data"]["requiredScopes"], json!(["admin"]));
        // Unknown tools stay what they are.
        let unknown = call(&client, &auth, era, "no-such-tool").await;
        assert_eq!(unknown.status, 200);
        assert!(unknown.error_code().is_some() || unknown.result()["isError"] == true, "{}", unknown.text);
    }

    // Step up: a new authorisation with the scope asked for.
    let pkce = Pkce::new();
    let code = oauth.sign_in_scoped(&client_id, REDIRECT, &pkce, USER, "mcp admin").await["code"].clone();
    let tokens = oauth.exchange(&client_id, REDIRECT, &code, &pkce.verifier).await;
    assert_eq!(tokens.json["scope"], "admin mcp");
    let admin = bearer(tokens.json["access_token"].as_str().expect("token"));
    let purged = call(&client, &admin, MODERN, "purge").await;
    assert_eq!(purged.status, 200, "{}", purged.text);
    assert!(purged.text.contains("purged"));
    let listed = client
        .post(&body, &[("mcp-protocol-version", MODERN), ("mcp-method", "tools/list"), ("authorization", &admin)])
        .await;
    assert_eq!(tool_names(&listed), vec!["hello", "purge"]);
    let legacy = client.post(&legacy_list, &[("mcp-protocol-version", "2025-06-18"), ("authorization", &admin)]).await;
    assert_eq!(tool_names(&legacy), vec!["hello", "purge"]);
}

fn sha256(token: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(token.as_bytes()))
}

#[tokio::test]
async fn static_api_tokens_for_machine_clients() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("gateway.toml");
    let token = "mcp-api-token-for-the-nightly-job";
    std::fs::write(
        &config,
        format!(
            "auth = \"token\"\n[[api_tokens]]\nname = \"nightly\"\nsha256 = \"{}\"\nscopes = [\"mcp\"]\n",
            sha256(token)
        ),
    )
    .expect("write");
    let gw = Proc::start(
        "gateway",
        &["--standalone", "--listen", "127.0.0.1:0", "--config", config.to_str().expect("utf-8")],
        "gateway",
    )
    .await;
    let client = Client::new(&format!("{}/mcp", gw.url()));
    let body = e2e::modern_request(1, "tools/list", json!({}));
    let headers = |auth: &'static str| {
        vec![("mcp-protocol-version", MODERN), ("mcp-method", "tools/list"), ("authorization", auth)]
    };

    let none = client.post(&body, &[("mcp-protocol-version", MODERN), ("mcp-method", "tools/list")]).await;
    assert_eq!(none.status, 401);
    assert_eq!(none.headers["www-authenticate"], "Bearer realm=\"mcp\"");
    let wrong = client.post(&body, &headers("Bearer mcp-api-token-for-the-nightly-jo")).await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.headers["www-authenticate"].to_str().expect("ascii").contains("invalid_token"));
    let right = client.post(&body, &headers("Bearer mcp-api-token-for-the-nightly-job")).await;
    assert_eq!(right.status, 200, "{}", right.text);
    assert!(!right.result()["tools"].as_array().expect("tools").is_empty());
    // No OAuth here: no protected resource metadata.
    let prm = e2e::http().get(format!("{}/.well-known/oauth-protected-resource", gw.url())).send().await.expect("GET");
    assert_eq!(prm.status().as_u16(), 404);
    // The token never appears in the logs.
    assert!(!gw.log_text().contains(token));
}

#[tokio::test]
async fn no_unauthenticated_service_beyond_loopback_unless_told() {
    let run = |env: Vec<(&'static str, &'static str)>| async move {
        let mut cmd = tokio::process::Command::new(bin("gateway"));
        cmd.args(["--standalone", "--listen", "0.0.0.0:0"]).kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
        cmd
    };
    let out = tokio::time::timeout(std::time::Duration::from_secs(20), run(vec![]).await.output())
        .await
        .expect("exits promptly")
        .expect("runs");
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("without authentication"), "{stderr}");

    // Told explicitly (something in front authenticates): it serves.
    let gw = Proc::start_with_env(
        "gateway",
        &["--standalone", "--listen", "0.0.0.0:0"],
        &[("GATEWAY_ALLOW_UNAUTHENTICATED", "true")],
        "gateway",
    )
    .await;
    let port = gw.addr().port();
    let health = e2e::http().get(format!("http://127.0.0.1:{port}/healthz")).send().await.expect("GET");
    assert_eq!(health.status().as_u16(), 200);
}
