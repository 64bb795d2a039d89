//! Faults and limits: the authorisation server going away and coming back, and the gateway's
//! rate limits.

use e2e::oauth::{OAuth, Pkce};
use e2e::{Client, MODERN, Proc};
use serde_json::json;

use crate::oauth::{REDIRECT, USER, bearer};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

async fn list(client: &Client, access: &str) -> u16 {
    let body = e2e::modern_request(1, "tools/list", json!({}));
    client
        .post(
            &body,
            &[("mcp-protocol-version", MODERN), ("mcp-method", "tools/list"), ("authorization", &bearer(access))],
        )
        .await
        .status
}

/// oauth-service down: issued tokens keep working (the gateway's cached keys); the token and
/// registration endpoints answer 503 with a retry hint; after it returns, nothing registered
/// before is lost.
#[tokio::test]
async fn the_authorisation_server_down_and_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().to_str().expect("utf-8");
    let registry = Proc::start("registry-service", &["--listen", "127.0.0.1:0"], "registry-service").await;
    let mcp =
        Proc::start("mcp-service", &["--listen", "127.0.0.1:0", "--registry", &registry.url()], "mcp-service").await;
    let (gw_port, oauth_port) = (free_port(), free_port());
    let public = format!("http://127.0.0.1:{gw_port}");
    let oauth_addr = format!("127.0.0.1:{oauth_port}");
    let env = [("OAUTH_DATA_DIR", data), ("OAUTH_BOOTSTRAP_USER", USER.0), ("OAUTH_BOOTSTRAP_PASSWORD", USER.1)];
    let oauth_args = ["--listen", oauth_addr.as_str(), "--issuer", public.as_str()];
    let start_oauth = || Proc::start_with_env("oauth-service", &oauth_args, &env, "oauth-service");
    let oauth_proc = start_oauth().await;
    let gw = Proc::start(
        "gateway",
        &[
            "--listen",
            &format!("127.0.0.1:{gw_port}"),
            "--mcp-service",
            &mcp.url(),
            "--oauth-service",
            &format!("http://{oauth_addr}"),
            "--auth",
            "oauth",
        ],
        "gateway",
    )
    .await;
    let client = Client::new(&format!("{public}/mcp"));
    let oauth = OAuth::new(&public);
    let client_id = oauth.register_public(REDIRECT).await;
    let pkce = Pkce::new();
    let code = oauth.sign_in(&client_id, REDIRECT, &pkce, USER).await["code"].clone();
    let tokens = oauth.exchange(&client_id, REDIRECT, &code, &pkce.verifier).await;
    let access = tokens.json["access_token"].as_str().expect("access").to_owned();
    let refresh = tokens.json["refresh_token"].as_str().expect("refresh").to_owned();
    assert_eq!(list(&client, &access).await, 200);

    // Down.
    assert!(oauth_proc.terminate().await.success());
    assert_eq!(list(&client, &access).await, 200, "an issued token keeps working");
    let r =
        oauth.token(&[("grant_type", "refresh_token"), ("refresh_token", &refresh), ("client_id", &client_id)]).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert_eq!(r.json["error"], "temporarily_unavailable");
    assert!(r.header("retry-after").parse::<u64>().is_ok());
    let r = oauth.register(&json!({ "redirect_uris": [REDIRECT] })).await;
    assert_eq!(r.status, 503);
    let bad = client.post(&e2e::modern_request(1, "tools/list", json!({})), &[("authorization", "Bearer a.b.c")]).await;
    assert_eq!(bad.status, 401, "an unknown token is still refused, not let through");

    // Back: the client, the grant and the keys are all still there.
    let _oauth_again = start_oauth().await;
    let r =
        oauth.token(&[("grant_type", "refresh_token"), ("refresh_token", &refresh), ("client_id", &client_id)]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let fresh = r.json["access_token"].as_str().expect("access").to_owned();
    assert_eq!(list(&client, &fresh).await, 200);
    drop(gw);
}

#[tokio::test]
async fn rate_limits_answer_429_with_retry_after() {
    let gw = Proc::start_with_env(
        "gateway",
        &["--standalone", "--listen", "127.0.0.1:0"],
        &[("GATEWAY_RATE_LIMIT_PER_IP", "2")],
        "gateway",
    )
    .await;
    let client = Client::new(&format!("{}/mcp", gw.url()));
    let mut statuses = Vec::new();
    for i in 0..8 {
        statuses.push(client.modern(i, "tools/list", json!({})).await);
    }
    let limited = statuses.iter().find(|r| r.status == 429).expect("some request is limited");
    assert!(limited.headers["retry-after"].to_str().expect("ascii").parse::<u64>().is_ok_and(|s| s >= 1));
    assert_eq!(limited.json["error"]["code"], -32600);
    assert_eq!(statuses[0].status, 200);
    // It recovers once the client slows down.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(client.modern(99, "tools/list", json!({})).await.status, 200);
    // Health checks are not limited.
    let health = e2e::http().get(format!("{}/healthz", gw.url())).send().await.expect("GET");
    assert_eq!(health.status().as_u16(), 200);
}

/// A client that sends its body too slowly is cut off with 408, and the server goes on serving;
/// a chunked body past the limit is refused with 413 without reading it whole.
#[tokio::test]
async fn slow_and_oversize_bodies_are_cut_off() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let gw = Proc::start_with_env(
        "gateway",
        &["--standalone", "--listen", "127.0.0.1:0"],
        &[("GATEWAY_BODY_TIMEOUT_SECS", "1"), ("GATEWAY_MAX_BODY_BYTES", "1000")],
        "gateway",
    )
    .await;
    let addr = gw.addr();
    let mut slow = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: 100\r\n\r\n{{\"jsonrpc\""
    );
    slow.write_all(head.as_bytes()).await.expect("write");
    let mut answer = vec![0u8; 4096];
    let started = std::time::Instant::now();
    let n = tokio::time::timeout(std::time::Duration::from_secs(10), slow.read(&mut answer))
        .await
        .expect("answered before the test's own deadline")
        .expect("read");
    let text = String::from_utf8_lossy(&answer[..n]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));

    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let text = e2e::chunked_exchange(addr, &head, 800, 3).await;
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");

    // Still serving.
    let ok = Client::new(&format!("{}/mcp", gw.url())).modern(1, "tools/list", json!({})).await;
    assert_eq!(ok.status, 200);
}
