//! # End-to-end harness
//!
//! Starts the real binaries (built by `cargo build --workspace --bins`) on port 0, reads each
//! one's `listening` log line to learn its address, and talks to them over real HTTP, gRPC and
//! stdio. Nothing here imitates a service.
//!
//! - [`Proc`]: one running binary; [`Stack`]: a whole deployment (standalone or one process
//!   per component).
//! - [`Client`]: an HTTP MCP client for both eras; [`Reply`]: what came back, SSE included.
//! - [`StdioClient`]: a client on a child's stdin/stdout.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

pub mod oauth;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

pub const MODERN: &str = "2026-07-28";

/// The environment that gives mcp-service replicas one state secret, so that each accepts the
/// session ids and request states the others seal.
pub const SHARED_STATE_SECRET: (&str, &str) = ("MCP_SERVICE_STATE_SECRET", "replicas-share-this-secret-0123456789");

/// An HTTP client for tests (with the TLS provider the workspace builds in).
pub fn http() -> reqwest::Client {
    static TLS: std::sync::Once = std::sync::Once::new();
    TLS.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder().timeout(REPLY_TIMEOUT).build().expect("HTTP client")
}

/// The Prometheus text a service serves at `base` + `/metrics` (checked to be 200).
pub async fn metrics(base: &str) -> String {
    let r = http().get(format!("{base}/metrics")).send().await.expect("GET /metrics");
    assert_eq!(r.status().as_u16(), 200, "GET {base}/metrics");
    r.text().await.expect("text")
}

/// The path of a file in `examples/`.
pub fn example(name: &str) -> String {
    format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// How long a binary may take to report that it listens.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long any single reply may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(20);

/// The path of a workspace binary, next to the test executable's directory.
pub fn bin(name: &str) -> PathBuf {
    if let Ok(dir) = std::env::var("MCP_BIN_DIR") {
        return PathBuf::from(dir).join(name);
    }
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/e2e-… → target/<profile>/<name>
    let dir = exe.parent().and_then(|d| d.parent()).expect("target directory");
    let path = dir.join(name);
    assert!(path.exists(), "{} is missing: run `cargo build --workspace --bins` first", path.display());
    path
}

/// One running binary. Killed when dropped.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub addr: Option<SocketAddr>,
    pub logs: Arc<Mutex<Vec<String>>>,
    log_reader: Option<tokio::task::JoinHandle<()>>,
}

/// Parse a JSON log line; `Some((service, addr))` for a `listening` line.
fn listening(line: &str) -> Option<(String, SocketAddr)> {
    let v: Value = serde_json::from_str(line).ok()?;
    if v.get("message")?.as_str()? != "listening" {
        return None;
    }
    let addr = v.get("addr")?.as_str()?.parse().ok()?;
    Some((v.get("service")?.as_str()?.to_owned(), addr))
}

fn command(name: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin(name));
    cmd.args(args)
        .env("LOG_FORMAT", "json")
        .env("LOG_LEVEL", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Keep reading a child's stderr into `logs` (echoed with TEST_LOG=1), reporting the address
/// of the first `listening` line from `service` on `found`.
fn drain_logs(
    name: String,
    stderr: tokio::process::ChildStderr,
    logs: Arc<Mutex<Vec<String>>>,
    service: Option<String>,
    found: tokio::sync::oneshot::Sender<SocketAddr>,
) -> tokio::task::JoinHandle<()> {
    let echo = std::env::var("TEST_LOG").is_ok();
    tokio::spawn(async move {
        let mut found = Some(found);
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if echo {
                eprintln!("[{name}] {line}");
            }
            if let (Some((svc, addr)), Some(want)) = (listening(&line), service.as_deref())
                && svc == want
                && let Some(tx) = found.take()
            {
                let _ = tx.send(addr);
            }
            logs.lock().expect("logs lock").push(line);
        }
    })
}

impl Proc {
    /// Start `name` with `args` and wait for `service`'s `listening` line.
    pub async fn start(name: &str, args: &[&str], service: &str) -> Proc {
        Self::start_with_env(name, args, &[], service).await
    }

    /// Like [`Proc::start`], with extra environment variables.
    pub async fn start_with_env(name: &str, args: &[&str], env: &[(&str, &str)], service: &str) -> Proc {
        let mut cmd = command(name, args);
        cmd.envs(env.iter().copied());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let stderr = child.stderr.take().expect("stderr piped");
        let log_reader = drain_logs(name.to_owned(), stderr, logs.clone(), Some(service.to_owned()), tx);
        let addr = match tokio::time::timeout(START_TIMEOUT, rx).await {
            Ok(Ok(addr)) => addr,
            _ => panic!("{name} did not report listening; logs:\n{}", logs.lock().expect("logs").join("\n")),
        };
        Proc { name: name.to_owned(), child, addr: Some(addr), logs, log_reader: Some(log_reader) }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr.expect("a listening process")
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// Send SIGTERM and wait for the exit status.
    pub async fn terminate(mut self) -> ExitStatus {
        let pid = self.child.id().expect("running child");
        let status = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().expect("kill");
        assert!(status.success(), "kill -TERM {pid}");
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not exit after SIGTERM", self.name))
            .expect("wait");
        // Read the last log lines too.
        if let Some(reader) = self.log_reader.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
        }
        status
    }

    pub fn log_text(&self) -> String {
        self.logs.lock().expect("logs").join("\n")
    }

    /// The first log line `wanted` holds for, waiting up to 2.5 s for it to be written.
    pub async fn log_line(&self, wanted: impl Fn(&str) -> bool) -> Option<String> {
        for _ in 0..50 {
            if let Some(line) = self.logs.lock().expect("logs").iter().find(|l| wanted(l)) {
                return Some(line.clone());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }
}

/// A whole deployment; `url` is the gateway's MCP endpoint.
pub struct Stack {
    pub procs: Vec<Proc>,
    pub base: String,
}

impl Stack {
    /// `gateway --standalone`: every component in one process.
    pub async fn standalone() -> Stack {
        Self::standalone_with(&[]).await
    }

    /// `gateway --standalone` with extra arguments.
    pub async fn standalone_with(extra: &[&str]) -> Stack {
        let mut args = vec!["--standalone", "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let gw = Proc::start("gateway", &args, "gateway").await;
        let base = gw.url();
        Stack { procs: vec![gw], base }
    }

    /// The standalone server with the conformance fixtures.
    pub async fn conformance() -> Stack {
        Self::standalone_with(&["--definitions", &example("conformance.yaml")]).await
    }

    /// One process per component, started in dependency order, with the binaries the separate
    /// deployment runs (`gateway-edge`, `mcp-service-remote`: nothing embedded).
    pub async fn microservices() -> Stack {
        Self::microservices_with(&[]).await
    }

    /// Like [`Stack::microservices`], with extra arguments for registry-service (its
    /// definitions).
    pub async fn microservices_with(registry_args: &[&str]) -> Stack {
        Self::microservices_in(registry_args, &[]).await
    }

    /// Like [`Stack::microservices`], each service on a single-threaded runtime (as on a
    /// machine, or in a container, with one CPU).
    pub async fn microservices_on_one_thread() -> Stack {
        Self::microservices_in(&[], &[("TOKIO_WORKER_THREADS", "1")]).await
    }

    /// The microservices with extra arguments for registry-service and `env` for every service.
    pub async fn microservices_in(registry_args: &[&str], env: &[(&str, &str)]) -> Stack {
        let mut args = vec!["--listen", "127.0.0.1:0"];
        args.extend_from_slice(registry_args);
        let registry = Proc::start_with_env("registry-service", &args, env, "registry-service").await;
        let mcp = Proc::start_with_env(
            "mcp-service-remote",
            &["--listen", "127.0.0.1:0", "--registry", &registry.url()],
            env,
            "mcp-service",
        )
        .await;
        let oauth = Proc::start_with_env(
            "oauth-service",
            &["--listen", "127.0.0.1:0", "--issuer", "http://127.0.0.1:8080"],
            env,
            "oauth-service",
        )
        .await;
        let gw = Proc::start_with_env(
            "gateway-edge",
            &["--listen", "127.0.0.1:0", "--mcp-service", &mcp.url(), "--oauth-service", &oauth.url()],
            env,
            "gateway",
        )
        .await;
        let base = gw.url();
        Stack { procs: vec![registry, mcp, oauth, gw], base }
    }

    pub fn client(&self) -> Client {
        Client::new(&format!("{}/mcp", self.base))
    }

    pub fn gateway(&self) -> &Proc {
        self.procs.last().expect("a gateway")
    }
}

/// What an HTTP request got back.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
    /// The JSON body, or for SSE the last message (the reply).
    pub json: Value,
    /// For SSE: every message in order, the reply last.
    pub events: Vec<Value>,
}

impl Reply {
    pub fn content_type(&self) -> &str {
        self.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default()
    }

    pub fn error_code(&self) -> Option<i64> {
        self.json.pointer("/error/code").and_then(Value::as_i64)
    }

    pub fn result(&self) -> &Value {
        self.json.get("result").unwrap_or_else(|| panic!("no result in {}: {}", self.status, self.text))
    }
}

/// Parse an SSE body into the JSON of its `data` fields.
pub fn sse_messages(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim_start).collect();
            (!data.is_empty()).then(|| serde_json::from_str(&data.join("\n")).expect("SSE data is JSON"))
        })
        .collect()
}

/// The modern `_meta` every 2026-07-28 request carries.
pub fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": { "name": "e2e", "version": "1.0.0" },
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

/// A 2026-07-28 request body with `_meta` merged into `params`.
pub fn modern_request(id: i64, method: &str, params: Value) -> Value {
    let mut params = if params.is_null() { json!({}) } else { params };
    params["_meta"] = modern_meta();
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

/// An HTTP MCP client.
#[derive(Clone)]
pub struct Client {
    pub http: reqwest::Client,
    pub url: String,
}

impl Client {
    pub fn new(url: &str) -> Self {
        Self { http: http(), url: url.to_owned() }
    }

    /// POST raw bytes with the given headers (plus JSON Content-Type and Accept unless given).
    pub async fn post_raw(&self, body: impl Into<reqwest::Body>, headers: &[(&str, &str)]) -> Reply {
        let mut req = self.http.post(&self.url).body(body);
        let has = |n: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
        if !has("content-type") {
            req = req.header("content-type", "application/json");
        }
        if !has("accept") {
            req = req.header("accept", "application/json, text/event-stream");
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.expect("HTTP request");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.expect("HTTP body");
        let is_sse = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        let (json, events) = if is_sse {
            let events = sse_messages(&text);
            (events.last().cloned().unwrap_or(Value::Null), events)
        } else {
            (serde_json::from_str(&text).unwrap_or(Value::Null), Vec::new())
        };
        Reply { status, headers, text, json, events }
    }

    pub async fn post(&self, body: &Value, headers: &[(&str, &str)]) -> Reply {
        self.post_raw(serde_json::to_vec(body).expect("JSON"), headers).await
    }

    /// A legacy request after the handshake at revision `version`.
    pub async fn legacy(&self, version: &str, id: i64, method: &str, params: Value) -> Reply {
        let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        self.post(&body, &[("mcp-protocol-version", version)]).await
    }

    /// A 2026-07-28 request with `_meta` and the matching routing headers.
    pub async fn modern(&self, id: i64, method: &str, params: Value) -> Reply {
        self.modern_with(id, method, params, &[]).await
    }

    /// The same with `extra` headers (`authorization`, say).
    pub async fn modern_with(&self, id: i64, method: &str, params: Value, extra: &[(&str, &str)]) -> Reply {
        let body = modern_request(id, method, params);
        let name =
            body["params"].get("name").or_else(|| body["params"].get("uri")).and_then(Value::as_str).map(str::to_owned);
        let mut headers = vec![("mcp-protocol-version", MODERN), ("mcp-method", method)];
        if let Some(name) = &name {
            headers.push(("mcp-name", name.as_str()));
        }
        headers.extend_from_slice(extra);
        self.post(&body, &headers).await
    }
}

/// A client speaking newline-delimited JSON-RPC to a child's stdin/stdout.
pub struct StdioClient {
    pub child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    pub logs: Arc<Mutex<Vec<String>>>,
}

impl StdioClient {
    /// Start `mcp-service --stdio` with extra arguments.
    pub async fn start(args: &[&str]) -> StdioClient {
        let mut all = vec!["--stdio"];
        all.extend_from_slice(args);
        let mut cmd = command("mcp-service", &all);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn mcp-service --stdio");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (tx, _rx) = tokio::sync::oneshot::channel();
        drain_logs("mcp-service(stdio)".into(), child.stderr.take().expect("stderr"), logs.clone(), None, tx);
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
        StdioClient { child, stdin, stdout, logs }
    }

    pub async fn send_line(&mut self, line: &str) {
        self.stdin.write_all(line.as_bytes()).await.expect("write stdin");
        self.stdin.write_all(b"\n").await.expect("write stdin");
        self.stdin.flush().await.expect("flush stdin");
    }

    /// Write one line of raw bytes (invalid UTF-8 included).
    pub async fn send_bytes(&mut self, line: &[u8]) {
        self.stdin.write_all(line).await.expect("write stdin");
        self.stdin.write_all(b"\n").await.expect("write stdin");
        self.stdin.flush().await.expect("flush stdin");
    }

    pub async fn send(&mut self, msg: &Value) {
        self.send_line(&msg.to_string()).await;
    }

    /// The next message on stdout; every line must be JSON.
    pub async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(REPLY_TIMEOUT, self.stdout.next_line())
            .await
            .expect("a reply in time")
            .expect("read stdout")
            .expect("stdout open");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"))
    }

    /// Send a request and collect messages until the reply with its id: (notifications, reply).
    pub async fn request(&mut self, msg: &Value) -> (Vec<Value>, Value) {
        self.send(msg).await;
        let id = msg["id"].clone();
        let mut notes = Vec::new();
        loop {
            let m = self.recv().await;
            if m.get("id") == Some(&id) && m.get("method").is_none() {
                return (notes, m);
            }
            notes.push(m);
        }
    }

    /// Close stdin and wait for the exit status.
    pub async fn close(mut self) -> ExitStatus {
        drop(self.stdin);
        // Anything left on stdout must still be protocol messages.
        while let Ok(Ok(Some(line))) = tokio::time::timeout(Duration::from_secs(10), self.stdout.next_line()).await {
            assert!(serde_json::from_str::<Value>(&line).is_ok(), "non-JSON on stdout: {line}");
        }
        tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await.expect("exit after EOF").expect("wait")
    }
}

/// Write raw bytes to a server and return what it answers before closing (or within 10 s).
pub async fn raw_exchange(addr: SocketAddr, request: &str) -> String {
    use tokio::io::AsyncReadExt as _;
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut buf = vec![0u8; 64 * 1024];
    let n = tokio::time::timeout(REPLY_TIMEOUT, stream.read(&mut buf)).await.expect("an answer in time").expect("read");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Send `head` (a request's head announcing a chunked body) and then `chunks` chunks of `size`
/// bytes, stopping when the server no longer reads them, and give the start of its answer.
pub async fn chunked_exchange(addr: SocketAddr, head: &str, size: usize, chunks: usize) -> String {
    use tokio::io::AsyncReadExt as _;
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(head.as_bytes()).await.expect("write");
    let chunk = format!("{size:x}\r\n{}\r\n", "x".repeat(size));
    for _ in 0..chunks {
        if stream.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(REPLY_TIMEOUT, stream.read(&mut buf)).await.expect("an answer in time").expect("read");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// An SSE response read message by message as it arrives (a POST reply stream, a GET stream
/// or a `subscriptions/listen` stream).
pub struct EventStream {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl EventStream {
    /// The next JSON message, or `None` if the stream ended or nothing came within `wait`.
    pub async fn next_within(&mut self, wait: Duration) -> Option<Value> {
        use futures_util::StreamExt as _;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let data: Vec<&str> =
                    event.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim_start).collect();
                if data.is_empty() {
                    continue; // a comment (keep-alive) or a priming event
                }
                return Some(serde_json::from_str(&data.join("\n")).expect("SSE data is JSON"));
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Ok(Some(Ok(chunk))) => self.buffer.push_str(&String::from_utf8_lossy(&chunk)),
                _ => return None,
            }
        }
    }

    /// The next JSON message; panics if none comes in time.
    pub async fn next(&mut self) -> Value {
        self.next_within(REPLY_TIMEOUT).await.expect("an SSE message in time")
    }
}

impl Client {
    /// POST and read the reply as an event stream (it must be `text/event-stream`).
    pub async fn stream(&self, body: &Value, headers: &[(&str, &str)]) -> EventStream {
        let mut req = http()
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(serde_json::to_vec(body).expect("JSON"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        EventStream::from(req.send().await.expect("HTTP request"))
    }

    /// GET the endpoint as an event stream (a legacy session's standalone stream).
    pub async fn get_stream(&self, headers: &[(&str, &str)]) -> EventStream {
        let mut req = http().get(&self.url).header("accept", "text/event-stream");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        EventStream::from(req.send().await.expect("HTTP request"))
    }
}

impl From<reqwest::Response> for EventStream {
    fn from(resp: reqwest::Response) -> Self {
        EventStream {
            status: resp.status().as_u16(),
            headers: resp.headers().clone(),
            body: Box::pin(resp.bytes_stream()),
            buffer: String::new(),
        }
    }
}

/// A throwaway PostgreSQL cluster on a loopback port, stopped when dropped. Runs the server as
/// the `postgres` user when the tests run as root (PostgreSQL refuses root).
pub struct Postgres {
    pub url: String,
    bin: PathBuf,
    data: PathBuf,
    as_root: bool,
    /// `pg_ctl -o` options (address, port, socket directory) and the server log.
    options: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

fn postgres_bin() -> PathBuf {
    if let Ok(dir) = std::env::var("PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.filter_map(Result::ok).map(|e| e.path().join("bin")).filter(|p| p.join("initdb").exists()).collect())
        .unwrap_or_default();
    versions.sort();
    versions.pop().expect("PostgreSQL server binaries (initdb, pg_ctl): install package `postgresql` or set PG_BIN")
}

fn run_pg(bin: &std::path::Path, as_root: bool, tool: &str, args: &[&str]) -> std::process::Output {
    let program = bin.join(tool);
    let mut cmd = if as_root {
        let mut c = std::process::Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&program);
        c
    } else {
        std::process::Command::new(&program)
    };
    cmd.args(args).output().unwrap_or_else(|e| panic!("{tool}: {e}"))
}

impl Postgres {
    pub fn start() -> Postgres {
        use std::os::unix::fs::PermissionsExt as _;
        let bin = postgres_bin();
        let as_root = std::process::Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let data = dir.path().join("data");
        let data_s = data.to_str().expect("utf-8 path").to_owned();
        let out = run_pg(
            &bin,
            as_root,
            "initdb",
            &["-D", &data_s, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"],
        );
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
        let options = format!("-h 127.0.0.1 -p {port} -k {} -F", dir.path().display());
        let log = dir.path().join("pg.log");
        let out = run_pg(
            &bin,
            as_root,
            "pg_ctl",
            &["start", "-w", "-t", "60", "-D", &data_s, "-l", log.to_str().expect("path"), "-o", &options],
        );
        assert!(
            out.status.success(),
            "pg_ctl start: {}{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        Postgres {
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            bin,
            data,
            as_root,
            options,
            log,
            _dir: dir,
        }
    }

    /// Stop the server (`pg_ctl stop -m fast`: open sessions are ended, the data is kept).
    pub fn stop(&self) {
        let data = self.data.to_str().expect("utf-8 path");
        let out = run_pg(&self.bin, self.as_root, "pg_ctl", &["stop", "-w", "-m", "fast", "-D", data]);
        assert!(out.status.success(), "pg_ctl stop: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Start a stopped server again, on the same port.
    pub fn start_again(&self) {
        let data = self.data.to_str().expect("utf-8 path");
        let log = self.log.to_str().expect("utf-8 path");
        let out = run_pg(
            &self.bin,
            self.as_root,
            "pg_ctl",
            &["start", "-w", "-t", "60", "-D", data, "-l", log, "-o", &self.options],
        );
        assert!(out.status.success(), "pg_ctl start: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.data.to_str().unwrap_or_default().to_owned();
        let _ = run_pg(&self.bin, self.as_root, "pg_ctl", &["stop", "-m", "immediate", "-D", &data]);
    }
}

/// A standalone server serving a definitions file written into a fresh directory; the
/// directory lives as long as the returned guard.
pub struct Served {
    pub gateway: Proc,
    pub client: Client,
    pub dir: tempfile::TempDir,
}

impl Served {
    /// Serve `definitions` (written as `defs.yaml`) with extra environment variables.
    pub async fn definitions(definitions: &str, env: &[(&str, &str)]) -> Served {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::in_dir(dir, definitions, env).await
    }

    /// Like [`Served::definitions`], in a directory the caller prepared (files the
    /// definitions refer to).
    pub async fn in_dir(dir: tempfile::TempDir, definitions: &str, env: &[(&str, &str)]) -> Served {
        let path = dir.path().join("defs.yaml");
        std::fs::write(&path, definitions).expect("write definitions");
        let args = ["--standalone", "--listen", "127.0.0.1:0", "--definitions", path.to_str().expect("utf-8 path")];
        let gateway = Proc::start_with_env("gateway", &args, env, "gateway").await;
        let client = Client::new(&format!("{}/mcp", gateway.url()));
        Served { gateway, client, dir }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("defs.yaml")
    }
}

/// `registry-service --validate-only` on `definitions` (written as `defs.yaml`): whether it
/// passed, and what it printed on stderr.
pub fn validate_definitions(definitions: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("defs.yaml");
    std::fs::write(&path, definitions).expect("write definitions");
    let out = std::process::Command::new(bin("registry-service"))
        .args(["--validate-only", "--definitions", path.to_str().expect("utf-8 path")])
        .output()
        .expect("run registry-service");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}
