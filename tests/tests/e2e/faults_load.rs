//! Faults under load: a bounded load generator (tokio tasks sending requests back to back, each
//! with a client deadline) runs while a component is killed, terminated, restarted or fed a
//! broken file; every request is counted with its outcome. Plus a bounded soak with sign-in on
//! (`SOAK_SECONDS`, default 20; `SOAK_SECONDS=600` is the long run).
//!
//! These tests share the `load` test group (`.config/nextest.toml`), so they never overlap each
//! other.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use e2e::oauth::{OAuth, Pkce};
use e2e::{MODERN, Postgres, Proc};
use serde_json::{Value, json};

use crate::oauth::{REDIRECT, USER};
use crate::replicas::start_nginx_with;

/// The load generator's deadline for each request: a request not answered by then hangs.
const REQUEST_DEADLINE: Duration = Duration::from_secs(8);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

fn pid(p: &Proc) -> u32 {
    p.child.id().expect("a running child")
}

/// Whether the process is still the one started (it has not exited).
fn alive(p: &mut Proc) -> bool {
    p.child.try_wait().expect("try_wait").is_none()
}

async fn until(what: &str, deadline: Duration, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not within {deadline:?}");
}

async fn status_of(url: String) -> u16 {
    match e2e::http().get(url).timeout(Duration::from_secs(5)).send().await {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

// ---------------------------------------------------------------------------------------------
// The load generator
// ---------------------------------------------------------------------------------------------

/// What the load sends.
#[derive(Clone)]
struct Mix {
    url: String,
    bearer: Option<String>,
    /// Requests a task sends in turn.
    kinds: Vec<Kind>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// Modern `tools/list`; the answer must list `expect_tool`.
    List,
    /// Modern `tools/call echo`; the answer must echo the message.
    Echo,
    /// Modern `tools/call count` (three steps of 150 ms): in flight for a while.
    Slow,
    /// Modern `tools/call one` of the definitions test (text `first`).
    One,
    /// A legacy session: initialize, initialized, tools/list, tools/call echo, DELETE.
    Legacy,
}

/// One request's fate.
#[derive(Clone, Debug)]
struct Outcome {
    kind: Kind,
    started: Instant,
    took: Duration,
    /// `None` when it succeeded; the failure's reason otherwise.
    failure: Option<String>,
}

struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Outcome>>>,
}

#[derive(Default)]
struct Report {
    outcomes: Vec<Outcome>,
}

impl Load {
    fn start(mix: &Mix, tasks: usize, expect_tool: &str) -> Load {
        e2e::http(); // installs the TLS provider the clients below need
        let stop = Arc::new(AtomicBool::new(false));
        let counter = Arc::new(AtomicU64::new(0));
        let tasks = (0..tasks)
            .map(|t| {
                let (mix, stop, counter) = (mix.clone(), stop.clone(), counter.clone());
                let expect_tool = expect_tool.to_owned();
                tokio::spawn(async move {
                    let http = reqwest::Client::builder().timeout(REQUEST_DEADLINE).build().expect("client");
                    let mut out = Vec::new();
                    let mut turn = t;
                    while !stop.load(Ordering::Relaxed) {
                        let kind = mix.kinds[turn % mix.kinds.len()];
                        turn += 1;
                        let n = counter.fetch_add(1, Ordering::Relaxed);
                        let started = Instant::now();
                        let failure = one(&http, &mix, kind, n, &expect_tool).await.err();
                        out.push(Outcome { kind, started, took: started.elapsed(), failure });
                    }
                    out
                })
            })
            .collect();
        Load { stop, tasks }
    }

    async fn stop(self) -> Report {
        self.stop.store(true, Ordering::Relaxed);
        let mut report = Report::default();
        for t in self.tasks {
            report.outcomes.extend(t.await.expect("load task"));
        }
        report.outcomes.sort_by_key(|o| o.started);
        report
    }
}

impl Report {
    fn sent(&self) -> usize {
        self.outcomes.len()
    }

    fn failed(&self) -> usize {
        self.outcomes.iter().filter(|o| o.failure.is_some()).count()
    }

    /// Failures by kind and reason.
    fn failures(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for o in &self.outcomes {
            if let Some(f) = &o.failure {
                *m.entry(format!("{:?}: {f}", o.kind)).or_default() += 1;
            }
        }
        m
    }

    /// Requests that started in `[from, to)`.
    fn started_between(&self, from: Instant, to: Instant) -> impl Iterator<Item = &Outcome> {
        self.outcomes.iter().filter(move |o| o.started >= from && o.started < to)
    }

    /// Requests sent before `t` and answered after it.
    fn in_flight_at(&self, t: Instant) -> impl Iterator<Item = &Outcome> {
        self.outcomes.iter().filter(move |o| o.started < t && o.started + o.took > t)
    }

    /// Requests answered before `t`.
    fn done_before(&self, t: Instant) -> impl Iterator<Item = &Outcome> {
        self.outcomes.iter().filter(move |o| o.started + o.took < t)
    }

    fn slowest(&self) -> Duration {
        self.outcomes.iter().map(|o| o.took).max().unwrap_or_default()
    }

    fn summary(&self) -> String {
        format!(
            "{} sent, {} failed, slowest {:?}, failures {:?}",
            self.sent(),
            self.failed(),
            self.slowest(),
            self.failures()
        )
    }
}

/// POST one JSON-RPC message; `Ok((status, headers, json))` or the transport failure.
async fn post(
    http: &reqwest::Client,
    mix: &Mix,
    body: &Value,
    headers: &[(&str, &str)],
) -> Result<(u16, reqwest::header::HeaderMap, Value), String> {
    let mut req = http
        .post(&mix.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(b) = &mix.bearer {
        req = req.header("authorization", format!("Bearer {b}"));
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.map_err(transport)?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.map_err(transport)?;
    let json = if headers.get("content-type").is_some_and(|c| c.as_bytes().starts_with(b"text/event-stream")) {
        e2e::sse_messages(&text).pop().unwrap_or(Value::Null)
    } else {
        serde_json::from_str(&text).unwrap_or(Value::Null)
    };
    Ok((status, headers, json))
}

fn transport(e: reqwest::Error) -> String {
    if e.is_timeout() {
        "hang: no answer within the deadline".into()
    } else if e.is_connect() {
        "transport: connect".into()
    } else {
        format!("transport: {e}")
    }
}

/// Why a reply is not the success expected: its HTTP status and JSON-RPC error, if any.
fn judge(status: u16, json: &Value, id: u64, check: impl FnOnce(&Value) -> bool) -> Result<(), String> {
    if let Some(err) = json.get("error") {
        let same_id = json.get("id").and_then(Value::as_u64) == Some(id);
        return Err(format!("{status} JSON-RPC {}{}", err["code"], if same_id { "" } else { " (id not echoed)" }));
    }
    if status != 200 {
        return Err(format!("{status} without a JSON-RPC error"));
    }
    match json.get("result") {
        Some(r) if check(r) => Ok(()),
        Some(r) => Err(format!("wrong result: {r}")),
        None => Err(format!("{status} without a result")),
    }
}

fn text_of(result: &Value) -> &str {
    result.pointer("/content/0/text").and_then(Value::as_str).unwrap_or_default()
}

async fn one(http: &reqwest::Client, mix: &Mix, kind: Kind, n: u64, expect_tool: &str) -> Result<(), String> {
    // A client version unique to the request, so no answer comes from the gateway's result
    // cache: every request reaches mcp-service.
    let modern = |method: &str, params: Value| {
        let mut body = e2e::modern_request(n as i64, method, params);
        body["params"]["_meta"]["io.modelcontextprotocol/clientInfo"]["version"] = json!(format!("1.0.{n}"));
        body
    };
    let modern_headers = |method: &'static str, name: Option<&'static str>| {
        let mut h = vec![("mcp-protocol-version", MODERN), ("mcp-method", method)];
        if let Some(name) = name {
            h.push(("mcp-name", name));
        }
        h
    };
    match kind {
        Kind::List => {
            let (s, _, j) =
                post(http, mix, &modern("tools/list", json!({})), &modern_headers("tools/list", None)).await?;
            judge(s, &j, n, |r| r["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == expect_tool)))
        }
        Kind::Echo => {
            let msg = format!("load {n}");
            let body = modern("tools/call", json!({"name": "echo", "arguments": {"message": msg}}));
            let (s, _, j) = post(http, mix, &body, &modern_headers("tools/call", Some("echo"))).await?;
            judge(s, &j, n, |r| text_of(r).contains(&msg) && r["isError"] != true)
        }
        Kind::Slow => {
            let body = modern("tools/call", json!({"name": "count", "arguments": {"to": 3, "interval_ms": 150}}));
            let (s, _, j) = post(http, mix, &body, &modern_headers("tools/call", Some("count"))).await?;
            judge(s, &j, n, |r| text_of(r) == "counted to 3")
        }
        Kind::One => {
            let body = modern("tools/call", json!({"name": "one", "arguments": {}}));
            let (s, _, j) = post(http, mix, &body, &modern_headers("tools/call", Some("one"))).await?;
            judge(s, &j, n, |r| text_of(r) == "first")
        }
        Kind::Legacy => legacy_session(http, mix, n).await,
    }
}

/// A whole legacy session, ended with DELETE.
async fn legacy_session(http: &reqwest::Client, mix: &Mix, n: u64) -> Result<(), String> {
    const V: &str = "2025-06-18";
    let init = json!({"jsonrpc": "2.0", "id": n, "method": "initialize", "params": {
        "protocolVersion": V, "capabilities": {}, "clientInfo": {"name": "load", "version": "1"}}});
    let (s, h, j) = post(http, mix, &init, &[]).await?;
    judge(s, &j, n, |r| r["protocolVersion"] == V).map_err(|e| format!("initialize: {e}"))?;
    let sid = h.get("mcp-session-id").and_then(|v| v.to_str().ok()).ok_or("initialize: no session id")?.to_owned();
    let hs = [("mcp-protocol-version", V), ("mcp-session-id", sid.as_str())];
    let (s, _, _) = post(http, mix, &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), &hs).await?;
    if s != 202 {
        return Err(format!("initialized: {s}"));
    }
    let (s, _, j) =
        post(http, mix, &json!({"jsonrpc": "2.0", "id": n, "method": "tools/list", "params": {}}), &hs).await?;
    judge(s, &j, n, |r| r["tools"].as_array().is_some_and(|t| !t.is_empty())).map_err(|e| format!("list: {e}"))?;
    let msg = format!("legacy {n}");
    let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": msg}}});
    let (s, _, j) = post(http, mix, &call, &hs).await?;
    judge(s, &j, n, |r| text_of(r).contains(&msg)).map_err(|e| format!("call: {e}"))?;
    let mut del = http.delete(&mix.url).header("mcp-protocol-version", V).header("mcp-session-id", &sid);
    if let Some(b) = &mix.bearer {
        del = del.header("authorization", format!("Bearer {b}"));
    }
    let s = del.send().await.map_err(transport)?.status().as_u16();
    if !(200..300).contains(&s) {
        return Err(format!("delete: {s}"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 1. registry-service killed under load
// ---------------------------------------------------------------------------------------------

/// registry-service SIGKILLed while 8 tasks send lists and calls: lists keep being answered from
/// mcp-service's catalog snapshot, calls get a prompt JSON-RPC error, gateway readiness stays
/// up (mcp-service serves); a registry started again on the same port is found again by the
/// running mcp-service, and service resumes without restarting anything else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn registry_killed_under_load_and_back() {
    let reg_addr = format!("127.0.0.1:{}", free_port());
    let reg_url = format!("http://{reg_addr}");
    let reg_args = ["--listen", reg_addr.as_str()];
    let start_registry = || Proc::start("registry-service", &reg_args, "registry-service");
    let mut registry = start_registry().await;
    let mut mcp = Proc::start("mcp-service", &["--listen", "127.0.0.1:0", "--registry", &reg_url], "mcp-service").await;
    let mut oauth = Proc::start("oauth-service", &["--listen", "127.0.0.1:0"], "oauth-service").await;
    let mut gw = Proc::start(
        "gateway",
        &["--listen", "127.0.0.1:0", "--mcp-service", &mcp.url(), "--oauth-service", &oauth.url()],
        "gateway",
    )
    .await;
    let mix = Mix { url: format!("{}/mcp", gw.url()), bearer: None, kinds: vec![Kind::List, Kind::Echo] };
    let load = Load::start(&mix, 8, "echo");
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let killed = Instant::now();
    registry.child.start_kill().expect("SIGKILL");
    registry.child.wait().await.expect("wait");
    let dead = Instant::now();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let ready_during = status_of(format!("{}/readyz", gw.url())).await;
    let restarted = Instant::now();
    registry = start_registry().await;
    // Back: a call through the same gateway and mcp-service succeeds again.
    let probe = e2e::Client::new(&mix.url);
    until("tools/call after the registry came back", Duration::from_secs(20), async || {
        probe
            .modern(1, "tools/call", json!({"name": "echo", "arguments": {"message": "back"}}))
            .await
            .json
            .get("result")
            .is_some()
    })
    .await;
    let recovered = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let report = load.stop().await;
    let summary = report.summary();
    eprintln!("registry killed: {summary}; back after {:?}", recovered - restarted);

    assert!(
        report
            .outcomes
            .iter()
            .all(|o| o.failure.as_deref().is_none_or(|f| !f.starts_with("hang") && !f.starts_with("transport"))),
        "every request answered before its deadline: {summary}"
    );
    assert_eq!(report.done_before(killed).filter(|o| o.failure.is_some()).count(), 0, "before the kill: {summary}");
    // While it is gone (after the kill settled): lists from the snapshot, calls refused cleanly.
    let outage: Vec<&Outcome> = report.started_between(dead + Duration::from_millis(100), restarted).collect();
    let lists = outage.iter().filter(|o| o.kind == Kind::List).count();
    let calls: Vec<&&Outcome> = outage.iter().filter(|o| o.kind == Kind::Echo).collect();
    assert!(lists > 0 && !calls.is_empty(), "load ran during the outage: {summary}");
    assert!(
        outage.iter().filter(|o| o.kind == Kind::List).all(|o| o.failure.is_none()),
        "lists served during the outage: {summary}"
    );
    // A call may also succeed if it was still under way when the registry started again.
    let odd: Vec<_> = calls
        .iter()
        .filter(|o| match o.failure.as_deref() {
            Some(f) => f != "200 JSON-RPC -32603",
            None => o.started + o.took < restarted,
        })
        .collect();
    assert!(odd.is_empty(), "calls get a JSON-RPC error with their id: {summary}; not so: {odd:?}");
    assert_eq!(ready_during, 200, "the gateway stays ready: mcp-service serves lists from its snapshot");
    assert_eq!(
        report.started_between(recovered, Instant::now()).filter(|o| o.failure.is_some()).count(),
        0,
        "after recovery: {summary}"
    );
    assert!(report.started_between(recovered, Instant::now()).count() > 0);
    assert!(alive(&mut mcp) && alive(&mut gw) && alive(&mut oauth), "nothing else restarted");
    let logs = mcp.log_text();
    assert!(logs.contains("registry unavailable"), "mcp-service says why calls fail");
    drop(registry);
}

// ---------------------------------------------------------------------------------------------
// 2. mcp-service killed behind two gateway replicas
// ---------------------------------------------------------------------------------------------

/// Two gateways, each with its mcp-service, behind nginx round-robin; one mcp-service is
/// SIGKILLed under load and started again on its port. Requests on the other replica keep
/// succeeding; those on the killed one fail cleanly (502 with a JSON-RPC error, the id echoed)
/// and promptly; its gateway reports unready, then ready again, and serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mcp_service_killed_behind_two_gateways() {
    let registry = Proc::start("registry-service", &["--listen", "127.0.0.1:0"], "registry-service").await;
    let secret = [e2e::SHARED_STATE_SECRET];
    let a_addr = format!("127.0.0.1:{}", free_port());
    let reg = registry.url();
    let a_args = ["--listen", a_addr.as_str(), "--registry", reg.as_str()];
    let start_a = || Proc::start_with_env("mcp-service", &a_args, &secret, "mcp-service");
    let mut mcp_a = start_a().await;
    let mcp_b =
        Proc::start_with_env("mcp-service", &["--listen", "127.0.0.1:0", "--registry", &reg], &secret, "mcp-service")
            .await;
    let oauth = Proc::start("oauth-service", &["--listen", "127.0.0.1:0"], "oauth-service").await;
    let gateway = async |mcp: String| {
        Proc::start(
            "gateway",
            &["--listen", "127.0.0.1:0", "--mcp-service", &mcp, "--oauth-service", &oauth.url()],
            "gateway",
        )
        .await
    };
    let mut gw_a = gateway(mcp_a.url()).await;
    let mut gw_b = gateway(mcp_b.url()).await;
    let lb = start_nginx_with(&[gw_a.addr().to_string(), gw_b.addr().to_string()], "").await;
    let mix = Mix {
        url: format!("http://127.0.0.1:{}/mcp", lb.port),
        bearer: None,
        kinds: vec![Kind::List, Kind::Echo, Kind::Slow],
    };
    let load = Load::start(&mix, 12, "echo");
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let killed = Instant::now();
    mcp_a.child.start_kill().expect("SIGKILL");
    mcp_a.child.wait().await.expect("wait");
    until("gateway A unready", Duration::from_secs(10), async || {
        status_of(format!("{}/readyz", gw_a.url())).await == 503
    })
    .await;
    assert_eq!(status_of(format!("{}/readyz", gw_b.url())).await, 200);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let restarted = Instant::now();
    let mcp_a_again = start_a().await;
    until("gateway A ready again", Duration::from_secs(20), async || {
        status_of(format!("{}/readyz", gw_a.url())).await == 200
    })
    .await;
    let probe = e2e::Client::new(&format!("{}/mcp", gw_a.url()));
    until("gateway A serves again", Duration::from_secs(20), async || {
        probe.modern(1, "tools/call", json!({"name": "echo", "arguments": {"message": "a"}})).await.status == 200
    })
    .await;
    let recovered = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let report = load.stop().await;
    let summary = report.summary();
    eprintln!("mcp-service killed: {summary}");

    let clean = |f: &str| f == "502 JSON-RPC -32603";
    assert!(
        report.outcomes.iter().all(|o| o.failure.as_deref().is_none_or(clean)),
        "every failure is a clean 502 JSON-RPC error: {summary}"
    );
    assert_eq!(report.done_before(killed).filter(|o| o.failure.is_some()).count(), 0, "{summary}");
    let outage: Vec<&Outcome> = report.started_between(killed, restarted).collect();
    let served = outage.iter().filter(|o| o.failure.is_none()).count();
    assert!(report.failed() > 0, "the kill was felt: {summary}");
    assert!(served * 3 >= outage.len(), "the other replica kept serving ({served} of {}): {summary}", outage.len());
    assert_eq!(
        report.started_between(recovered, Instant::now()).filter(|o| o.failure.is_some()).count(),
        0,
        "{summary}"
    );
    assert!(alive(&mut gw_a) && alive(&mut gw_b), "the gateways were not restarted");
    drop((lb, registry, mcp_a_again));
}

// ---------------------------------------------------------------------------------------------
// 3. SIGTERM under load with a second replica
// ---------------------------------------------------------------------------------------------

/// A rolling update: two gateways behind nginx (which passes a refused connection to the other
/// server); one gets SIGTERM under load. Not one request fails; the terminated gateway finishes
/// its in-flight requests (slow calls included) before its drain deadline and exits 0.
///
/// mcp-service replicas cannot be rolled the same way behind one gateway: a gateway has one
/// `mcp_service` address (a Service address in Kubernetes balances across replicas there).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_under_load_with_a_second_replica_fails_nothing() {
    let registry = Proc::start("registry-service", &["--listen", "127.0.0.1:0"], "registry-service").await;
    let mcp =
        Proc::start("mcp-service", &["--listen", "127.0.0.1:0", "--registry", &registry.url()], "mcp-service").await;
    let oauth = Proc::start("oauth-service", &["--listen", "127.0.0.1:0"], "oauth-service").await;
    let gateway = async || {
        Proc::start_with_env(
            "gateway",
            &["--listen", "127.0.0.1:0", "--mcp-service", &mcp.url(), "--oauth-service", &oauth.url()],
            &[("GATEWAY_SHUTDOWN_GRACE_SECS", "10")],
            "gateway",
        )
        .await
    };
    let gw_a = gateway().await;
    let mut gw_b = gateway().await;
    let lb =
        start_nginx_with(&[gw_a.addr().to_string(), gw_b.addr().to_string()], "proxy_next_upstream error timeout;")
            .await;
    let mix = Mix {
        url: format!("http://127.0.0.1:{}/mcp", lb.port),
        bearer: None,
        kinds: vec![Kind::List, Kind::Echo, Kind::Slow],
    };
    let load = Load::start(&mix, 12, "echo");
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let logs = gw_a.logs.clone();
    let termed = Instant::now();
    let exit = tokio::spawn(gw_a.terminate());
    let status = exit.await.expect("join");
    let drained = termed.elapsed();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let report = load.stop().await;
    let summary = report.summary();
    eprintln!("SIGTERM gateway: {summary}; exited {status} after {drained:?}");

    let text = logs.lock().expect("logs").join("\n");
    assert!(status.success(), "exit 0: {status}\n{text}");
    assert!(drained < Duration::from_secs(10), "drained before its deadline: {drained:?}");
    assert!(!text.contains("drain deadline passed"), "{text}");
    assert_eq!(report.failed(), 0, "zero failed requests: {summary}");
    assert!(report.in_flight_at(termed).any(|o| o.kind == Kind::Slow), "slow calls were in flight: {summary}");
    assert!(alive(&mut gw_b));
    drop((lb, mcp, registry));
}

/// The rolling update of mcp-service behind one gateway that spreads its calls over two
/// replicas (a comma-separated target; in Kubernetes a `dns:///` headless Service): SIGTERM to
/// one replica under load, slow calls in flight. It finishes what it holds; calls it no longer
/// takes (refused connections or streams after its shutdown notice) go to the other replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_to_an_engine_replica_behind_one_gateway_fails_nothing() {
    let registry = Proc::start("registry-service", &["--listen", "127.0.0.1:0"], "registry-service").await;
    let engine = async || {
        Proc::start_with_env(
            "mcp-service",
            &["--listen", "127.0.0.1:0", "--registry", &registry.url()],
            &[("MCP_SERVICE_SHUTDOWN_GRACE_SECS", "10"), e2e::SHARED_STATE_SECRET],
            "mcp-service",
        )
        .await
    };
    let mcp_a = engine().await;
    let mut mcp_b = engine().await;
    let oauth = Proc::start("oauth-service", &["--listen", "127.0.0.1:0"], "oauth-service").await;
    let target = format!("{},{}", mcp_a.url(), mcp_b.url());
    let gateway = Proc::start(
        "gateway",
        &["--listen", "127.0.0.1:0", "--mcp-service", &target, "--oauth-service", &oauth.url()],
        "gateway",
    )
    .await;
    let mix =
        Mix { url: format!("{}/mcp", gateway.url()), bearer: None, kinds: vec![Kind::Echo, Kind::Slow, Kind::List] };
    let load = Load::start(&mix, 12, "echo");
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let logs = mcp_a.logs.clone();
    let termed = Instant::now();
    let status = tokio::spawn(mcp_a.terminate()).await.expect("join");
    let drained = termed.elapsed();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let report = load.stop().await;
    let summary = report.summary();
    eprintln!("SIGTERM to one of two engines: {summary}; exited {status} after {drained:?}");

    let text = logs.lock().expect("logs").join("\n");
    assert!(status.success(), "exit 0: {status}\n{text}");
    assert!(drained < Duration::from_secs(10), "drained before its deadline: {drained:?}");
    assert_eq!(report.failed(), 0, "zero failed requests: {summary}");
    assert!(report.in_flight_at(termed).any(|o| o.kind == Kind::Slow), "slow calls were in flight: {summary}");
    assert!(report.done_before(termed + drained + Duration::from_millis(1500)).count() > 0);
    assert!(alive(&mut mcp_b));
    drop((gateway, oauth, registry));
}

/// SIGTERM reaches a registry-service with a connected mcp-service (which holds a catalog watch
/// open) and an mcp-service with a connected gateway mid-stream: each drains and exits 0 in time,
/// and the one left keeps answering lists from its snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_with_open_streams_drains_in_time() {
    let registry = Proc::start_with_env(
        "registry-service",
        &["--listen", "127.0.0.1:0"],
        &[("REGISTRY_SHUTDOWN_GRACE_SECS", "5")],
        "registry-service",
    )
    .await;
    let mcp = Proc::start_with_env(
        "mcp-service",
        &["--listen", "127.0.0.1:0", "--registry", &registry.url()],
        &[("MCP_SERVICE_SHUTDOWN_GRACE_SECS", "3")],
        "mcp-service",
    )
    .await;
    let oauth = Proc::start("oauth-service", &["--listen", "127.0.0.1:0"], "oauth-service").await;
    let gw = Proc::start(
        "gateway",
        &["--listen", "127.0.0.1:0", "--mcp-service", &mcp.url(), "--oauth-service", &oauth.url()],
        "gateway",
    )
    .await;
    let client = e2e::Client::new(&format!("{}/mcp", gw.url()));
    assert_eq!(client.modern(1, "tools/list", json!({})).await.status, 200);

    // The registry: its watcher (mcp-service) never hangs up by itself.
    let started = Instant::now();
    let logs = registry.logs.clone();
    let status = registry.terminate().await;
    let took = started.elapsed();
    let text = logs.lock().expect("logs").join("\n");
    assert!(status.success() && text.contains("stopped"), "{status}\n{text}");
    assert!(took < Duration::from_secs(5), "the watch stream ended with the drain: {took:?}");
    assert_eq!(client.modern(2, "tools/list", json!({})).await.status, 200, "lists from the snapshot");

    // mcp-service with a client listening on a stream through the gateway.
    let listen = e2e::modern_request(3, "subscriptions/listen", json!({"notifications": {"toolsListChanged": true}}));
    let mut stream =
        client.stream(&listen, &[("mcp-protocol-version", MODERN), ("mcp-method", "subscriptions/listen")]).await;
    stream.next().await;
    let init = json!({"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}});
    let r = client.post(&init, &[]).await;
    let sid = r.headers.get("mcp-session-id").expect("session").to_str().expect("ascii").to_owned();
    let _legacy = client.get_stream(&[("mcp-session-id", sid.as_str())]).await;
    let started = Instant::now();
    let logs = mcp.logs.clone();
    let status = mcp.terminate().await;
    let took = started.elapsed();
    let text = logs.lock().expect("logs").join("\n");
    assert!(status.success() && text.contains("stopped"), "{status}\n{text}");
    assert!(took < Duration::from_secs(5), "open streams do not hold the exit past the deadline: {took:?}");
    drop((gw, oauth));
}

// ---------------------------------------------------------------------------------------------
// 4. A broken definitions file under load
// ---------------------------------------------------------------------------------------------

const V1: &str = "server: { name: live }\ntools:\n  - { name: one, text: first }\n  - { name: echo, text: echoes }\n";
const V2: &str = "server: { name: live }\ntools:\n  - { name: one, text: first }\n  - { name: echo, text: echoes }\n  - { name: two, text: second }\n";

/// The operator's file replaced by a broken one (in place, then atomically by rename) while 8
/// tasks list and call: not one request fails, the old catalog stays, and a good edit after
/// that still reloads.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn broken_definitions_under_load_keep_the_old_catalog() {
    let dir = tempfile::tempdir().expect("tempdir");
    let defs = dir.path().join("defs.yaml");
    std::fs::write(&defs, V1).expect("write");
    let registry = Proc::start(
        "registry-service",
        &["--listen", "127.0.0.1:0", "--definitions", defs.to_str().expect("utf-8")],
        "registry-service",
    )
    .await;
    let mcp =
        Proc::start("mcp-service", &["--listen", "127.0.0.1:0", "--registry", &registry.url()], "mcp-service").await;
    let oauth = Proc::start("oauth-service", &["--listen", "127.0.0.1:0"], "oauth-service").await;
    let gw = Proc::start(
        "gateway",
        &["--listen", "127.0.0.1:0", "--mcp-service", &mcp.url(), "--oauth-service", &oauth.url()],
        "gateway",
    )
    .await;
    let mix = Mix { url: format!("{}/mcp", gw.url()), bearer: None, kinds: vec![Kind::List, Kind::One] };
    let load = Load::start(&mix, 8, "one");
    tokio::time::sleep(Duration::from_millis(1000)).await;

    // Written in place by a slow writer: empty for a while after the truncation, then cut off
    // mid-way, then complete but wrong.
    std::fs::write(&defs, "").expect("truncate");
    tokio::time::sleep(Duration::from_millis(700)).await;
    std::fs::write(&defs, "server: { name: live }\ntools:\n  - { name: one, te").expect("write");
    tokio::time::sleep(Duration::from_millis(700)).await;
    std::fs::write(&defs, "server: { name: live }\ntools:\n  - { name: one, txt: oops }\n").expect("write");
    tokio::time::sleep(Duration::from_millis(700)).await;
    // Atomically, by rename: an empty catalog is not valid either.
    let tmp = dir.path().join("defs.yaml.tmp");
    std::fs::write(&tmp, "server: { name: live }\ntools: [ { name: one } ]\n").expect("write");
    std::fs::rename(&tmp, &defs).expect("rename");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let broken = registry.log_text().matches("previous catalog stays").count();
    let probe = e2e::Client::new(&mix.url);
    let names = |r: &e2e::Reply| -> Vec<String> {
        r.result()["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(names(&probe.modern(1, "tools/list", json!({})).await), ["one", "echo"], "the old catalog stays");

    // A good edit still reloads, under the same load.
    std::fs::write(&defs, V2).expect("write");
    until("the good edit is served", Duration::from_secs(10), async || {
        names(&probe.modern(2, "tools/list", json!({})).await).len() == 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = load.stop().await;
    let summary = report.summary();
    eprintln!("broken definitions: {summary}; {broken} broken versions refused");
    assert!(broken >= 3, "the broken versions were seen and refused: {}", registry.log_text());
    assert!(registry.log_text().contains("definitions file is empty"), "the empty moment was seen");
    assert_eq!(report.failed(), 0, "zero failed requests: {summary}");
    assert!(report.sent() > 50, "{summary}");
}

// ---------------------------------------------------------------------------------------------
// 5. PostgreSQL restarted during a registration and refresh storm
// ---------------------------------------------------------------------------------------------

/// A grant the storm keeps refreshing: the token last returned, and every one rotated before.
struct Chain {
    client_id: String,
    current: String,
    rotated: Vec<String>,
}

#[derive(Default)]
struct Storm {
    registered: Vec<String>,
    ok: usize,
    /// Failures by reason: 5xx answers must be JSON errors; anything else is a bug.
    failures: BTreeMap<String, usize>,
    /// Failures that are not a prompt 5xx JSON error.
    bad: Vec<String>,
    /// When the first and last 5xx were seen.
    failed_at: Vec<Instant>,
    ok_after: Vec<Instant>,
    slowest: Duration,
}

fn classify(storm: &mut Storm, what: &str, a: &e2e::oauth::Answer) {
    storm.failed_at.push(Instant::now());
    let reason = format!("{what} {} {}", a.status, a.json["error"].as_str().unwrap_or("(not a JSON error)"));
    if a.status < 500 || a.json["error"].as_str().is_none() {
        storm.bad.push(format!("{reason}: {}", a.text));
    }
    *storm.failures.entry(reason).or_default() += 1;
}

/// oauth-service on PostgreSQL while tasks register clients and refresh tokens back to back;
/// PostgreSQL is stopped (`-m fast`) and started again on the same port. During the outage the
/// answers are 503 JSON errors, promptly; afterwards oauth-service (not restarted) serves
/// again, every acknowledged registration and grant is there, the refresh token last returned
/// works and the rotated ones are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restarted_during_a_registration_and_refresh_storm() {
    let pg = Postgres::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let issuer = "http://127.0.0.1:9";
    let env = [
        ("OAUTH_DATABASE", pg.url.as_str()),
        ("OAUTH_DATA_DIR", dir.path().to_str().expect("utf-8")),
        ("OAUTH_BOOTSTRAP_USER", USER.0),
        ("OAUTH_BOOTSTRAP_PASSWORD", USER.1),
        ("OAUTH_REGISTRATION_PER_MINUTE", "100000"),
    ];
    let mut oauth_proc =
        Proc::start_with_env("oauth-service", &["--listen", "127.0.0.1:0", "--issuer", issuer], &env, "oauth-service")
            .await;
    let base = oauth_proc.url();
    let new_client = || {
        let mut o = OAuth::new(&base);
        o.resource = format!("{issuer}/mcp");
        o
    };
    let oauth = new_client();
    let mut chains = Vec::new();
    for _ in 0..4 {
        let client_id = oauth.register_public(REDIRECT).await;
        let pkce = Pkce::new();
        let code = oauth.sign_in(&client_id, REDIRECT, &pkce, USER).await["code"].clone();
        let t = oauth.exchange(&client_id, REDIRECT, &code, &pkce.verifier).await;
        assert_eq!(t.status, 200, "{}", t.text);
        chains.push(Chain {
            client_id,
            current: t.json["refresh_token"].as_str().expect("refresh").into(),
            rotated: vec![],
        });
    }

    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    // Four tasks register, four refresh one grant each.
    for _ in 0..4 {
        let (stop, oauth) = (stop.clone(), new_client());
        tasks.push(tokio::spawn(async move {
            let mut storm = Storm::default();
            let metadata =
                json!({ "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none", "client_name": "storm" });
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let a = oauth.register(&metadata).await;
                storm.slowest = storm.slowest.max(t.elapsed());
                if a.status == 201 {
                    storm.registered.push(a.json["client_id"].as_str().expect("client_id").to_owned());
                    storm.ok += 1;
                    storm.ok_after.push(Instant::now());
                } else {
                    classify(&mut storm, "register", &a);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            (storm, None)
        }));
    }
    for mut chain in chains {
        let (stop, oauth) = (stop.clone(), new_client());
        tasks.push(tokio::spawn(async move {
            let mut storm = Storm::default();
            while !stop.load(Ordering::Relaxed) {
                let form = [
                    ("grant_type", "refresh_token"),
                    ("refresh_token", chain.current.as_str()),
                    ("client_id", chain.client_id.as_str()),
                ];
                let t = Instant::now();
                let a = oauth.token(&form).await;
                storm.slowest = storm.slowest.max(t.elapsed());
                if a.status == 200 {
                    let next = a.json["refresh_token"].as_str().expect("refresh").to_owned();
                    chain.rotated.push(std::mem::replace(&mut chain.current, next));
                    storm.ok += 1;
                    storm.ok_after.push(Instant::now());
                } else {
                    // A client retries with the token it holds.
                    classify(&mut storm, "refresh", &a);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            (storm, Some(chain))
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let stopped = Instant::now();
    tokio::task::block_in_place(|| pg.stop());
    // Down for longer than oauth-service waits for a connection (3 s), so requests fail.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let ready_during = status_of(format!("{base}/readyz")).await;
    tokio::task::block_in_place(|| pg.start_again());
    let back = Instant::now();
    tokio::time::sleep(Duration::from_millis(3000)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Storm::default();
    let mut chains = Vec::new();
    for t in tasks {
        let (s, chain) = t.await.expect("storm task");
        all.registered.extend(s.registered);
        all.ok += s.ok;
        for (k, v) in s.failures {
            *all.failures.entry(k).or_default() += v;
        }
        all.bad.extend(s.bad);
        all.failed_at.extend(s.failed_at);
        all.ok_after.extend(s.ok_after);
        all.slowest = all.slowest.max(s.slowest);
        chains.extend(chain);
    }
    let rotations: usize = chains.iter().map(|c| c.rotated.len()).sum();
    eprintln!(
        "postgres restart: {} registered, {rotations} rotations, {} ok; failures {:?}; readyz during outage {ready_during}; pg down {:?}; slowest answer {:?}",
        all.registered.len(),
        all.ok,
        all.failures,
        back - stopped,
        all.slowest
    );
    assert!(all.slowest < Duration::from_secs(10), "no request hangs: {:?}", all.slowest);
    assert!(all.bad.is_empty(), "only 5xx JSON errors during the outage: {:?}", all.bad);
    assert!(!all.failures.is_empty(), "the outage was felt");
    assert!(all.failed_at.iter().all(|t| *t >= stopped), "nothing failed before the outage");
    assert!(all.ok_after.iter().any(|t| *t > back), "oauth-service recovered by itself");
    assert!(alive(&mut oauth_proc), "oauth-service was not restarted");

    // Every acknowledged registration is there: each client can start a sign-in.
    use futures_util::StreamExt as _;
    let unknown: Vec<String> = futures_util::stream::iter(all.registered.iter())
        .map(|client_id| {
            let oauth = &oauth;
            async move {
                let challenge = Pkce::new().challenge;
                let page = oauth
                    .authorize(&[
                        ("response_type", "code"),
                        ("client_id", client_id),
                        ("redirect_uri", REDIRECT),
                        ("code_challenge", &challenge),
                        ("code_challenge_method", "S256"),
                        ("resource", &oauth.resource),
                    ])
                    .await;
                (page.status != 200).then(|| format!("{client_id}: {} {}", page.status, page.text))
            }
        })
        .buffer_unordered(16)
        .filter_map(async |x| x)
        .collect()
        .await;
    assert!(unknown.is_empty(), "every acknowledged registration is there: {unknown:?}");
    // Every grant: the token last returned works; past the reuse grace, a rotated one is refused.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for chain in &chains {
        let form = [
            ("grant_type", "refresh_token"),
            ("refresh_token", chain.current.as_str()),
            ("client_id", chain.client_id.as_str()),
        ];
        let a = oauth.token(&form).await;
        assert_eq!(a.status, 200, "the refresh token last returned works: {}", a.text);
        let old = chain.rotated.last().expect("the grant was rotated during the storm");
        let form =
            [("grant_type", "refresh_token"), ("refresh_token", old.as_str()), ("client_id", chain.client_id.as_str())];
        let a = oauth.token(&form).await;
        assert_eq!(
            (a.status, a.json["error"].as_str()),
            (400, Some("invalid_grant")),
            "a rotated token is refused: {}",
            a.text
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 6. A bounded soak with sign-in on
// ---------------------------------------------------------------------------------------------

/// Resident memory (KiB), open file descriptors and threads of a process.
#[derive(Debug, Clone, Copy)]
struct Usage {
    rss_kib: u64,
    fds: usize,
    threads: u64,
}

fn usage(pid: u32) -> Usage {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).expect("/proc fd").count();
    Usage { rss_kib: field("VmRSS:"), fds, threads: field("Threads:") }
}

/// Mixed traffic of both eras through all four services with sign-in on (JWTs) for
/// `SOAK_SECONDS` (default 20; `SOAK_SECONDS=600` is the long run): no request fails, and each
/// service's memory, file descriptors and threads at the end are where they were after the
/// warm-up (RSS within 10 % + 2 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn soak_with_sign_in_both_eras() {
    let seconds: u64 = std::env::var("SOAK_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let dir = tempfile::tempdir().expect("tempdir");
    let registry = Proc::start("registry-service", &["--listen", "127.0.0.1:0"], "registry-service").await;
    let mcp =
        Proc::start("mcp-service", &["--listen", "127.0.0.1:0", "--registry", &registry.url()], "mcp-service").await;
    let port = free_port();
    let public = format!("http://127.0.0.1:{port}");
    let oauth_proc = Proc::start_with_env(
        "oauth-service",
        &["--listen", "127.0.0.1:0", "--issuer", &public],
        &[
            ("OAUTH_DATA_DIR", dir.path().to_str().expect("utf-8")),
            ("OAUTH_BOOTSTRAP_USER", USER.0),
            ("OAUTH_BOOTSTRAP_PASSWORD", USER.1),
        ],
        "oauth-service",
    )
    .await;
    // Every modern request here has a client version of its own, so every list is a new entry
    // in the gateway's result cache: it fills to its budget, empties and fills again. A small
    // budget keeps that cycle well inside the memory allowance below.
    let gw = Proc::start_with_env(
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
        &[("GATEWAY_RESULT_CACHE_BYTES", "1048576")],
        "gateway",
    )
    .await;
    let oauth = OAuth::new(&public);
    let (_, tokens) = crate::oauth::sign_in(&oauth).await;
    let access = tokens["access_token"].as_str().expect("access").to_owned();
    let mix = Mix {
        url: format!("{public}/mcp"),
        bearer: Some(access),
        kinds: vec![Kind::List, Kind::Echo, Kind::Legacy, Kind::Echo, Kind::Slow],
    };
    // Unauthenticated requests are refused, so the load really runs with sign-in on.
    assert_eq!(e2e::Client::new(&mix.url).modern(1, "tools/list", json!({})).await.status, 401);
    let procs = [&registry, &mcp, &oauth_proc, &gw];
    let settle = async || {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        procs.map(|p| usage(pid(p)))
    };

    let warm = Load::start(&mix, 8, "echo").stop_after(Duration::from_secs(5)).await;
    assert_eq!(warm.failed(), 0, "warm-up: {}", warm.summary());
    let before = settle().await;
    let report = Load::start(&mix, 8, "echo").stop_after(Duration::from_secs(seconds)).await;
    let after = settle().await;
    let summary = report.summary();
    eprintln!("soak {seconds} s: {summary}");
    for (p, (b, a)) in procs.iter().zip(before.iter().zip(after.iter())) {
        eprintln!(
            "  {}: RSS {} → {} KiB, fds {} → {}, threads {} → {}",
            p.name, b.rss_kib, a.rss_kib, b.fds, a.fds, b.threads, a.threads
        );
    }
    assert_eq!(report.failed(), 0, "error rate 0: {summary}");
    assert!(report.outcomes.iter().filter(|o| o.kind == Kind::Legacy).count() > 0, "{summary}");
    for (p, (b, a)) in procs.iter().zip(before.iter().zip(after.iter())) {
        assert!(a.rss_kib <= b.rss_kib + b.rss_kib / 10 + 2048, "{}: RSS {} → {} KiB", p.name, b.rss_kib, a.rss_kib);
        assert!(a.fds <= b.fds + 4, "{}: fds {} → {}", p.name, b.fds, a.fds);
        assert!(a.threads <= b.threads + 2, "{}: threads {} → {}", p.name, b.threads, a.threads);
    }
}

impl Load {
    async fn stop_after(self, d: Duration) -> Report {
        tokio::time::sleep(d).await;
        self.stop().await
    }
}
