//! Running behind Kubernetes: secrets mounted as files (`*_FILE`), client addresses behind a
//! trusted ingress (`trusted_proxies`), and SQLite on a read-only root filesystem.

use e2e::{Client, Proc, bin};
use serde_json::json;

/// A file holding `content`, as a mounted Secret key does.
fn secret_file(dir: &tempfile::TempDir, name: &str, content: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, content).expect("write secret file");
    path.to_str().expect("utf-8 path").to_owned()
}

/// Not a real listener: the gateway only needs oauth-service for `/oauth/*`.
const NO_OAUTH: &str = "http://127.0.0.1:9";

#[tokio::test]
async fn secrets_are_read_from_files_named_by_file_variables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = "token-from-a-mounted-secret-7f3a";
    let token_file = secret_file(&dir, "service-token", &format!("{token}\n"));
    let state_file = secret_file(&dir, "state-secret", "state-secret-from-a-file\n");
    let wrong_file = secret_file(&dir, "wrong-token", "not-the-token\n");
    let mcp = Proc::start_with_env(
        "mcp-service",
        &["--listen", "127.0.0.1:0"],
        &[("MCP_SERVICE_SERVICE_TOKEN_FILE", &token_file), ("MCP_SERVICE_STATE_SECRET_FILE", &state_file)],
        "mcp-service",
    )
    .await;
    let gateway = |file: String| {
        let mcp = mcp.url();
        async move {
            Proc::start_with_env(
                "gateway",
                &["--listen", "127.0.0.1:0", "--mcp-service", &mcp, "--oauth-service", NO_OAUTH],
                &[("GATEWAY_SERVICE_TOKEN_FILE", &file)],
                "gateway",
            )
            .await
        }
    };
    // The same token from two files (the trailing newline is not part of it): calls work.
    let trusted = gateway(token_file.clone()).await;
    let ok = Client::new(&format!("{}/mcp", trusted.url()))
        .modern(1, "tools/call", json!({ "name": "echo", "arguments": { "message": "through" } }))
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert!(ok.text.contains("through"), "{}", ok.text);
    // Another token in the gateway's file: mcp-service refuses it.
    let wrong = gateway(wrong_file).await;
    let refused = Client::new(&format!("{}/mcp", wrong.url())).modern(1, "tools/list", json!({})).await;
    assert_eq!(refused.status, 502, "{}", refused.text);
    for p in [&mcp, &trusted, &wrong] {
        assert!(!p.log_text().contains(token), "{} logged the token", p.name);
    }

    // Both forms at once, or a file that cannot be read: refused at start, naming them.
    let run = |env: &[(&str, &str)]| {
        let out = std::process::Command::new(bin("gateway"))
            .args(["--listen", "127.0.0.1:0", "--mcp-service", "http://127.0.0.1:9", "--oauth-service", NO_OAUTH])
            .envs(env.iter().copied())
            .output()
            .expect("run gateway");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run(&[("GATEWAY_SERVICE_TOKEN", "plain"), ("GATEWAY_SERVICE_TOKEN_FILE", &token_file)]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("GATEWAY_SERVICE_TOKEN and GATEWAY_SERVICE_TOKEN_FILE"), "{err}");
    let missing = dir.path().join("absent-secret");
    let (code, err) = run(&[("GATEWAY_SERVICE_TOKEN_FILE", missing.to_str().expect("utf-8"))]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("GATEWAY_SERVICE_TOKEN_FILE") && err.contains(missing.to_str().expect("utf-8")), "{err}");
    assert!(!err.contains(token));
}

#[tokio::test]
async fn the_per_address_limit_counts_forwarded_clients_only_behind_trusted_proxies() {
    let start = |trusted: &'static str| async move {
        Proc::start_with_env(
            "gateway",
            &["--standalone", "--listen", "127.0.0.1:0"],
            &[("GATEWAY_RATE_LIMIT_PER_IP", "2"), ("GATEWAY_TRUSTED_PROXIES", trusted)],
            "gateway",
        )
        .await
    };
    let statuses = |gw: &Proc, forwarded: &'static str| {
        let url = format!("{}/mcp", gw.url());
        async move {
            let client = Client::new(&url);
            let mut out = Vec::new();
            for i in 0..8 {
                let body = e2e::modern_request(i, "tools/list", json!({}));
                let headers = [
                    ("mcp-protocol-version", e2e::MODERN),
                    ("mcp-method", "tools/list"),
                    ("x-forwarded-for", forwarded),
                ];
                out.push(client.post(&body, &headers).await.status);
            }
            out
        }
    };
    // The test client is 127.0.0.1, here the trusted ingress: each forwarded client has its own budget.
    let behind = start(r#"["127.0.0.0/8", "::1/128"]"#).await;
    let a = statuses(&behind, "198.51.100.1").await;
    assert!(a.contains(&429), "client A is limited: {a:?}");
    let b = statuses(&behind, "198.51.100.2").await;
    assert_eq!(b[0], 200, "client B is not limited by A's requests: {b:?}");
    // What a client puts left of the ingress's own entry does not change who it is.
    let spoofed = statuses(&behind, "203.0.113.50, 198.51.100.1").await;
    assert_eq!(spoofed[0], 429, "still client A: {spoofed:?}");

    // The peer is not a trusted proxy: X-Forwarded-For is ignored, every request is 127.0.0.1's.
    let direct = start(r#"["10.0.0.0/8"]"#).await;
    let a = statuses(&direct, "198.51.100.1").await;
    assert!(a.contains(&429), "{a:?}");
    let b = statuses(&direct, "198.51.100.2").await;
    assert_eq!(b[0], 429, "another claimed address gets no budget of its own: {b:?}");

    // A bad entry stops the start, naming it.
    let out = std::process::Command::new(bin("gateway"))
        .args(["--standalone", "--listen", "127.0.0.1:0"])
        .env("GATEWAY_TRUSTED_PROXIES", r#"["10.0.0.0/33"]"#)
        .output()
        .expect("run gateway");
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("10.0.0.0/33"));
}

/// A directory this process cannot write: made read-only, or (running as root, which ignores
/// permissions) a path below a regular file.
fn unwritable_dir(tmp: &tempfile::TempDir) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tmp.path().join("read-only");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).expect("chmod");
    if std::fs::write(dir.join("probe"), "").is_err() {
        return dir;
    }
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "").expect("write");
    file.join("data")
}

#[tokio::test]
async fn sqlite_paths_are_in_the_data_directory_which_must_be_writable() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // A relative database path is in the data directory, not the working directory.
    let data = tmp.path().join("data");
    let oauth = Proc::start_with_env(
        "oauth-service",
        &["--listen", "127.0.0.1:0", "--data-dir", data.to_str().expect("utf-8")],
        &[("OAUTH_DATABASE", "sqlite://relative.db")],
        "oauth-service",
    )
    .await;
    assert!(data.join("relative.db").is_file(), "the database is in the data directory");
    drop(oauth);

    // An unwritable data directory stops the start with a message naming it.
    let ro = unwritable_dir(&tmp);
    let out = std::process::Command::new(bin("oauth-service"))
        .args(["--listen", "127.0.0.1:0", "--data-dir", ro.to_str().expect("utf-8")])
        .env("OAUTH_DATABASE", "sqlite://oauth.db")
        .output()
        .expect("run oauth-service");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(ro.to_str().expect("utf-8")) && err.contains("not writable"), "{err}");
}

/// registry-service: relative SQLite files of the definitions are in `data_dir` (the
/// definitions' own directory is a read-only ConfigMap in Kubernetes), which must be writable.
#[tokio::test]
async fn registry_sqlite_files_are_in_its_data_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let defs_dir = tmp.path().join("definitions");
    let data = tmp.path().join("data");
    std::fs::create_dir(&defs_dir).expect("mkdir");
    let defs = defs_dir.join("definitions.yaml");
    std::fs::write(
        &defs,
        r#"
server: { name: sql-tools }
databases:
  notes: { url: "sqlite://notes.db?mode=rwc" }
tools:
  - name: setup
    sql: { database: notes, writes: true, query: "CREATE TABLE notes (body TEXT)" }
"#,
    )
    .expect("write definitions");
    let defs = defs.to_str().expect("utf-8");
    let registry = Proc::start_with_env(
        "registry-service",
        &["--listen", "127.0.0.1:0", "--definitions", defs],
        &[("REGISTRY_DATA_DIR", data.to_str().expect("utf-8"))],
        "registry-service",
    )
    .await;
    let mcp =
        Proc::start("mcp-service", &["--listen", "127.0.0.1:0", "--registry", &registry.url()], "mcp-service").await;
    let gw = Proc::start(
        "gateway",
        &["--listen", "127.0.0.1:0", "--mcp-service", &mcp.url(), "--oauth-service", NO_OAUTH],
        "gateway",
    )
    .await;
    let r = Client::new(&format!("{}/mcp", gw.url())).modern(1, "tools/call", json!({ "name": "setup" })).await;
    assert_eq!(r.result()["isError"], false, "{}", r.text);
    assert!(data.join("notes.db").is_file(), "the database is in the data directory");
    assert!(!defs_dir.join("notes.db").exists(), "not next to the definitions");

    // An unwritable data directory stops the start, naming it.
    let ro = unwritable_dir(&tmp);
    let out = std::process::Command::new(bin("registry-service"))
        .args(["--listen", "127.0.0.1:0", "--definitions", defs])
        .env("REGISTRY_DATA_DIR", &ro)
        .output()
        .expect("run registry-service");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(ro.to_str().expect("utf-8")) && err.contains("not writable"), "{err}");
}

/// The address the gateway passes to oauth-service on `/oauth/*` is the forwarded client's
/// behind a trusted proxy: oauth-service's per-address token limit counts each client.
#[tokio::test]
async fn oauth_service_sees_the_forwarded_client_behind_trusted_proxies() {
    let gw = Proc::start_with_env(
        "gateway",
        &["--standalone", "--listen", "127.0.0.1:0"],
        &[("OAUTH_TOKEN_PER_MINUTE", "2"), ("GATEWAY_TRUSTED_PROXIES", r#"["127.0.0.0/8", "::1/128"]"#)],
        "gateway",
    )
    .await;
    let token = |forwarded: &'static str| {
        let url = format!("{}/oauth/token", gw.url());
        async move {
            e2e::http()
                .post(url)
                .header("x-forwarded-for", forwarded)
                .form(&[("grant_type", "client_credentials"), ("client_id", "nobody"), ("client_secret", "x")])
                .send()
                .await
                .expect("POST /oauth/token")
                .status()
                .as_u16()
        }
    };
    let mut a = Vec::new();
    for _ in 0..3 {
        a.push(token("198.51.100.1").await);
    }
    assert_eq!(a[2], 429, "client A is limited: {a:?}");
    let b = token("198.51.100.2").await;
    assert_ne!(b, 429, "client B has its own budget");
}
