//! Replicas behind a load balancer: two gateways and two mcp-service replicas behind nginx
//! (round-robin, no stickiness). A legacy session and a modern sequence work with every
//! request landing on a different replica than the one before.

use std::time::Duration;

use e2e::{Client, Proc};
use serde_json::{Value, json};

fn nginx() -> Option<std::path::PathBuf> {
    ["/usr/sbin/nginx", "/usr/bin/nginx"].iter().map(std::path::PathBuf::from).find(|p| p.exists())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// nginx in the foreground, one process (no master and workers, so killing it leaves nothing
/// behind), balancing over `upstreams`; killed when dropped.
pub(crate) struct Nginx {
    child: std::process::Child,
    pub(crate) port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start_nginx(upstreams: &[String]) -> Nginx {
    start_nginx_with(upstreams, "").await
}

/// Like [`start_nginx`], with extra directives in the proxying `location` (e.g. retry policy).
pub(crate) async fn start_nginx_with(upstreams: &[String], location_extra: &str) -> Nginx {
    let bin = nginx().expect("nginx (Debian package nginx-light; the test command installs it)");
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let root = std::process::Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    let servers: String = upstreams.iter().map(|u| format!("    server {u};\n")).collect();
    let conf = format!(
        "{user}master_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\nevents {{ worker_connections 256; }}\n\
http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
  upstream gateways {{\n{servers}  }}\n  server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      proxy_pass http://gateways;\n      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n      proxy_set_header Host $host;\n      proxy_buffering off;\n      {location_extra}\n    }}\n  }}\n}}\n",
        user = if root { "user root;\n" } else { "" },
        d = dir.path().display(),
    );
    let conf_path = dir.path().join("nginx.conf");
    std::fs::write(&conf_path, conf).expect("write conf");
    let child = std::process::Command::new(bin)
        .args([
            "-p",
            dir.path().to_str().expect("utf-8"),
            "-c",
            conf_path.to_str().expect("utf-8"),
            "-g",
            "daemon off;",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start nginx");
    let error_log = dir.path().join("error.log");
    let nginx = Nginx { child, port, _dir: dir };
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return nginx;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("nginx did not start: {}", std::fs::read_to_string(error_log).unwrap_or_default());
}

/// How many `/mcp` requests a gateway has counted.
async fn served(gateway: &Proc) -> f64 {
    let text = e2e::metrics(&gateway.url()).await;
    text.lines()
        .filter(|l| l.starts_with("gateway_http_requests_total{route=\"/mcp\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn two_gateways_and_two_engines_behind_round_robin() {
    let registry = Proc::start("registry-service", &["--listen", "127.0.0.1:0"], "registry-service").await;
    let secret = [("MCP_SERVICE_STATE_SECRET", "replicas-share-this-secret-0123456789")];
    let args = ["--listen", "127.0.0.1:0", "--registry", &registry.url()];
    let mcp_a = Proc::start_with_env("mcp-service", &args, &secret, "mcp-service").await;
    let mcp_b = Proc::start_with_env("mcp-service", &args, &secret, "mcp-service").await;
    let oauth = Proc::start("oauth-service", &["--listen", "127.0.0.1:0"], "oauth-service").await;
    let gateway = |mcp: String| {
        let oauth = oauth.url();
        async move {
            Proc::start(
                "gateway",
                &["--listen", "127.0.0.1:0", "--mcp-service", &mcp, "--oauth-service", &oauth],
                "gateway",
            )
            .await
        }
    };
    let gw_a = gateway(mcp_a.url()).await;
    let gw_b = gateway(mcp_b.url()).await;
    let lb = start_nginx(&[gw_a.addr().to_string(), gw_b.addr().to_string()]).await;
    let client = Client::new(&format!("http://127.0.0.1:{}/mcp", lb.port));

    // Which replica served each request.
    let mut last: Option<bool> = None;
    let mut hops = 0;
    let mut check_alternates = |before: (f64, f64), after: (f64, f64)| {
        let on_a = after.0 > before.0;
        assert!(on_a != (after.1 > before.1), "exactly one gateway served the request");
        if let Some(prev) = last {
            assert_ne!(prev, on_a, "round-robin: a different replica than the previous request");
            hops += 1;
        }
        last = Some(on_a);
    };

    // A legacy session, across both replicas.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "lb", "version": "1"}}});
    let before = (served(&gw_a).await, served(&gw_b).await);
    let r = client.post(&init, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    check_alternates(before, (served(&gw_a).await, served(&gw_b).await));
    let session = r.headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).expect("a session id").to_owned();
    let legacy: Vec<Value> = vec![
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "a"}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "b"}}}),
        json!({"jsonrpc": "2.0", "id": 6, "method": "resources/list", "params": {}}),
    ];
    for msg in &legacy {
        let before = (served(&gw_a).await, served(&gw_b).await);
        let r = client.post(msg, &[("mcp-protocol-version", "2025-06-18"), ("mcp-session-id", &session)]).await;
        assert!(r.status == 200 || r.status == 202, "{msg}: {} {}", r.status, r.text);
        assert!(r.json.get("error").is_none(), "{msg}: {}", r.text);
        if let Some(text) = msg.pointer("/params/arguments/message") {
            assert!(r.text.contains(text.as_str().expect("text")), "{}", r.text);
        }
        check_alternates(before, (served(&gw_a).await, served(&gw_b).await));
    }

    // A modern sequence.
    for (id, method, params) in [
        (10, "server/discover", json!({})),
        (11, "tools/list", json!({})),
        (12, "tools/call", json!({"name": "echo", "arguments": {"message": "c"}})),
        (13, "prompts/list", json!({})),
        (14, "tools/call", json!({"name": "echo", "arguments": {"message": "d"}})),
    ] {
        let before = (served(&gw_a).await, served(&gw_b).await);
        let r = client.modern(id, method, params).await;
        assert_eq!(r.status, 200, "{method}: {}", r.text);
        assert!(r.json.get("result").is_some(), "{method}: {}", r.text);
        check_alternates(before, (served(&gw_a).await, served(&gw_b).await));
    }
    assert_eq!(hops, legacy.len() + 5, "every request after the first changed replica");
}
