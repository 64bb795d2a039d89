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
    let secret = [e2e::SHARED_STATE_SECRET];
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

/// `mcp_requests_total` of tools/call answered by one mcp-service (its metrics port).
async fn calls_served(metrics_port: u16) -> f64 {
    let text = e2e::metrics(&format!("http://127.0.0.1:{metrics_port}")).await;
    text.lines()
        .filter(|l| l.starts_with("mcp_requests_total{method=\"tools/call\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One gateway spreads its calls over two mcp-service replicas (a comma-separated target),
/// call by call, not connection by connection; a replica that dies is set aside after at most
/// one failed call and taken back when it returns. The replicas find the registry through a
/// `dns:///` target (the name resolves to more addresses than listen: those are set aside too).
#[tokio::test]
async fn one_gateway_spreads_calls_over_engine_replicas() {
    let registry = Proc::start("registry-service", &["--listen", "127.0.0.1:0"], "registry-service").await;
    let registry_target = format!("dns:///localhost:{}", registry.addr().port());
    let (port_a, port_b) = (free_port(), free_port());
    let (metrics_a, metrics_b) = (free_port(), free_port());
    let engine = |port: u16, metrics: u16| {
        let registry_target = registry_target.clone();
        async move {
            let listen = format!("127.0.0.1:{port}");
            let metrics = format!("127.0.0.1:{metrics}");
            Proc::start_with_env(
                "mcp-service",
                &["--listen", &listen, "--registry", &registry_target],
                &[e2e::SHARED_STATE_SECRET, ("MCP_SERVICE_METRICS_LISTEN", &metrics)],
                "mcp-service",
            )
            .await
        }
    };
    let mcp_a = engine(port_a, metrics_a).await;
    let _mcp_b = engine(port_b, metrics_b).await;
    let oauth = Proc::start("oauth-service", &["--listen", "127.0.0.1:0"], "oauth-service").await;
    let target = format!("http://127.0.0.1:{port_a},http://127.0.0.1:{port_b}");
    let gateway = Proc::start(
        "gateway",
        &["--listen", "127.0.0.1:0", "--mcp-service", &target, "--oauth-service", &oauth.url()],
        "gateway",
    )
    .await;
    let client = Client::new(&format!("{}/mcp", gateway.url()));
    let call = |id: i64| client.modern(id, "tools/call", json!({"name": "echo", "arguments": {"message": "spread"}}));

    // Both replicas are probed before the first call: the turn includes both from the start.
    let mut id = 0;
    let mut answered = |r: &e2e::Reply| {
        id += 1;
        r.status == 200 && r.text.contains("spread")
    };
    for i in 0..20 {
        let r = call(i).await;
        assert!(answered(&r), "{} {}", r.status, r.text);
    }
    let (a, b) = (calls_served(metrics_a).await, calls_served(metrics_b).await);
    assert_eq!(a + b, 20.0);
    // Each on the pipe of the gateway's connection to the replica, none on a stream of its own.
    let on_pipes = |text: String| {
        text.lines().find_map(|l| l.strip_prefix("mcp_pipe_calls_total ")?.parse::<f64>().ok()).unwrap_or(0.0)
    };
    let piped_a = on_pipes(e2e::metrics(&format!("http://127.0.0.1:{metrics_a}")).await);
    let piped_b = on_pipes(e2e::metrics(&format!("http://127.0.0.1:{metrics_b}")).await);
    assert_eq!((piped_a, piped_b), (a, b), "every call on a pipe");
    assert!(a >= 8.0 && b >= 8.0, "one connection's worth of calls each, not all on one: {a} and {b}");
    let gauges = e2e::metrics(&gateway.url()).await;
    assert!(gauges.contains("grpc_upstream_replicas{upstream=\"mcp-service\"} 2"), "{gauges}");
    assert!(gauges.contains("grpc_upstream_replicas_up{upstream=\"mcp-service\"} 2"), "{gauges}");

    // Replica A dies: at most one call fails (cleanly), the rest go to B.
    drop(mcp_a);
    let mut failed = 0;
    for i in 100..120 {
        let r = call(i).await;
        if !answered(&r) {
            failed += 1;
            assert_eq!(r.status, 502, "{}", r.text);
            assert!(r.json.get("error").is_some(), "a JSON-RPC error: {}", r.text);
        }
    }
    assert!(failed <= 1, "{failed} calls failed after a replica died");
    assert_eq!(calls_served(metrics_b).await - b, f64::from(20 - failed));
    let gauges = e2e::metrics(&gateway.url()).await;
    assert!(gauges.contains("grpc_upstream_replicas_up{upstream=\"mcp-service\"} 1"), "{gauges}");

    // It comes back on the same address: the probe takes it back without a restart of the others.
    let mcp_a = engine(port_a, metrics_a).await;
    let mut back = false;
    for i in 200..260 {
        let r = call(i).await;
        assert!(answered(&r), "{} {}", r.status, r.text);
        if calls_served(metrics_a).await > 0.0 {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back, "the returned replica got no call");
    drop(mcp_a);
}

/// Wrong targets stop the start with exit 64 and say what is wrong.
#[tokio::test]
async fn malformed_replica_targets_stop_the_start() {
    for (bin, flag, target, says) in [
        ("gateway", "--mcp-service", "dns:///mcp-service", "port is missing"),
        ("gateway", "--mcp-service", "http://127.0.0.1:1,http://127.0.0.1:1", "listed twice"),
        ("mcp-service", "--registry", "http://127.0.0.1:1,ftp://x:2", "scheme"),
    ] {
        let mut args = vec![flag, target, "--listen", "127.0.0.1:0"];
        if bin == "gateway" {
            args.extend(["--oauth-service", "http://127.0.0.1:1"]);
        }
        let out = tokio::process::Command::new(e2e::bin(bin)).args(&args).output().await.expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{bin} {target}: {stderr}");
        assert!(stderr.contains(says), "{bin} {target}: {stderr}");
    }
}

/// A legacy session's interactive parts live in one mcp-service replica: with two gateways
/// spreading calls over the same two replicas, each session's requests still reach one of them
/// whichever gateway they pass (the session id is the affinity key, and every gateway maps it
/// alike), so a tool's question and the client's answer (a separate POST, through the other
/// gateway) meet, for every one of several sessions; and DELETE ends the session for good.
#[tokio::test]
async fn legacy_sessions_keep_to_one_engine_replica() {
    let defs = e2e::example("conformance.yaml");
    let registry =
        Proc::start("registry-service", &["--listen", "127.0.0.1:0", "--definitions", &defs], "registry-service").await;
    let engine = async || {
        Proc::start_with_env(
            "mcp-service",
            &["--listen", "127.0.0.1:0", "--registry", &registry.url()],
            &[e2e::SHARED_STATE_SECRET],
            "mcp-service",
        )
        .await
    };
    let (mcp_a, mcp_b) = (engine().await, engine().await);
    let oauth = Proc::start("oauth-service", &["--listen", "127.0.0.1:0"], "oauth-service").await;
    let target = format!("{},{}", mcp_a.url(), mcp_b.url());
    let gateway = Proc::start(
        "gateway",
        &["--listen", "127.0.0.1:0", "--mcp-service", &target, "--oauth-service", &oauth.url()],
        "gateway",
    )
    .await;
    let other = Proc::start(
        "gateway",
        &["--listen", "127.0.0.1:0", "--mcp-service", &target, "--oauth-service", &oauth.url()],
        "gateway",
    )
    .await;
    let c = Client::new(&format!("{}/mcp", gateway.url()));
    let c2 = Client::new(&format!("{}/mcp", other.url()));
    for n in 0..6 {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "lb", "version": "1"}}});
        let r = c.post(&init, &[]).await;
        let sid = r.headers.get("mcp-session-id").and_then(|v| v.to_str().ok()).expect("a session id").to_owned();
        let h = [("mcp-session-id", sid.as_str()), ("mcp-protocol-version", "2025-11-25")];
        // A different number of requests before the call each time: no regular pattern of
        // turns can bring question and answer together by chance.
        for id in 0..n {
            let r = c2.post(&json!({"jsonrpc": "2.0", "id": 100 + id, "method": "ping"}), &h).await;
            assert_eq!(r.status, 200, "{}", r.text);
        }
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "test_elicitation", "arguments": {"message": format!("Who are you, {n}?")}}});
        let mut stream = c.stream(&call, &h).await;
        let ask = stream.next().await;
        assert_eq!(ask["method"], "elicitation/create", "session {n}: {ask}");
        let answer = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept",
            "content": {"username": format!("user{n}"), "email": "u@example.com"}}});
        let r = c2.post(&answer, &h).await;
        assert_eq!(r.status, 202, "session {n}: the answer reached the replica holding the call: {}", r.text);
        let reply = stream.next().await;
        let text = reply["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned();
        assert!(text.contains(&format!("user{n}")), "session {n}: {reply}");
        let http = e2e::http();
        let r = http.delete(&c.url).header("mcp-session-id", &sid).send().await.expect("DELETE");
        assert_eq!(r.status(), 204);
        for client in [&c, &c2] {
            let r = client.post(&json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}), &h).await;
            assert_eq!(r.status, 404, "session {n}: ended on every replica it reaches: {}", r.text);
        }
    }
}
