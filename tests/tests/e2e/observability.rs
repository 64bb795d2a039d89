//! Operability across the separate deployment: one client request is one trace (gateway →
//! mcp-service → registry-service → upstream HTTP), carried by W3C `traceparent` and exported
//! over OTLP to a collector the test runs; Prometheus metrics on every service; the
//! service-to-service token.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use e2e::{Client, MODERN, Proc};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use serde_json::json;

/// Spans received, as (service name, span name, trace id hex, parent span id hex, span id hex, attributes).
#[derive(Default, Clone)]
struct Collector(Arc<Mutex<Vec<Received>>>);

#[derive(Debug, Clone)]
struct Received {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.0.lock().expect("spans");
        for rs in &request.get_ref().resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
                .map(|a| format!("{:?}", a.value))
                .unwrap_or_default();
            for ss in &rs.scope_spans {
                for s in &ss.spans {
                    spans.push(Received {
                        service: service.clone(),
                        name: s.name.clone(),
                        trace_id: hex(&s.trace_id),
                        span_id: hex(&s.span_id),
                        parent: hex(&s.parent_span_id),
                        attributes: format!("{:?}", s.attributes),
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

async fn collector() -> (String, Collector) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let c = Collector::default();
    let server = TraceServiceServer::new(c.clone());
    tokio::spawn(async move {
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let _ = tonic::transport::Server::builder().add_service(server).serve_with_incoming(incoming).await;
    });
    (format!("http://{addr}"), c)
}

/// An upstream that records the `traceparent` it was sent.
async fn upstream(seen: Arc<Mutex<Vec<String>>>) -> std::net::SocketAddr {
    let app = axum::Router::new().route(
        "/weather",
        axum::routing::get(move |headers: HeaderMap| {
            let seen = seen.clone();
            async move {
                let tp = headers.get("traceparent").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                seen.lock().expect("seen").push(tp);
                "sunny"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

async fn metrics(port: u16) -> String {
    e2e::metrics(&format!("http://127.0.0.1:{port}")).await
}

/// A service on a single-threaded runtime (`mcp_proto::runtime::serve`).
const ONE_THREAD: (&str, &str) = ("TOKIO_WORKER_THREADS", "1");

#[tokio::test]
async fn one_request_is_one_trace_and_every_service_has_metrics() {
    let (otlp, spans) = collector().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let up = upstream(seen.clone()).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let defs = dir.path().join("defs.yaml");
    std::fs::write(
        &defs,
        format!(
            "server: {{ name: traced }}\nallow_private_networks: true\ntools:\n  - name: weather\n    http: {{ url: \"http://{up}/weather\" }}\n"
        ),
    )
    .expect("write");
    let token = "service-token-0123456789";
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("REGISTRY_SERVICE_TOKEN", token),
        ("MCP_SERVICE_SERVICE_TOKEN", token),
        ("GATEWAY_SERVICE_TOKEN", token),
    ];
    let (reg_metrics, mcp_metrics) = (free_port(), free_port());
    let registry = Proc::start_with_env(
        "registry-service",
        &["--listen", "127.0.0.1:0", "--definitions", defs.to_str().expect("utf-8")],
        // registry-service and mcp-service on one thread each (as with one CPU), the gateway on
        // several: traces leave from both kinds of runtime.
        &[otel.as_slice(), &[("REGISTRY_METRICS_LISTEN", &format!("127.0.0.1:{reg_metrics}")), ONE_THREAD]].concat(),
        "registry-service",
    )
    .await;
    let mcp = Proc::start_with_env(
        "mcp-service",
        &["--listen", "127.0.0.1:0", "--registry", &registry.url()],
        &[otel.as_slice(), &[("MCP_SERVICE_METRICS_LISTEN", &format!("127.0.0.1:{mcp_metrics}")), ONE_THREAD]].concat(),
        "mcp-service",
    )
    .await;
    let oauth = Proc::start("oauth-service", &["--listen", "127.0.0.1:0"], "oauth-service").await;
    let gw = Proc::start_with_env(
        "gateway",
        &["--listen", "127.0.0.1:0", "--mcp-service", &mcp.url(), "--oauth-service", &oauth.url()],
        &otel,
        "gateway",
    )
    .await;
    let client = Client::new(&format!("{}/mcp", gw.url()));

    // The client's trace context is continued, not replaced.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traceparent = format!("00-{trace_id}-00f067aa0ba902b7-01");
    let body = e2e::modern_request(1, "tools/call", json!({ "name": "weather", "arguments": {} }));
    let called = client
        .post(
            &body,
            &[
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "tools/call"),
                ("mcp-name", "weather"),
                ("traceparent", &traceparent),
                ("authorization", "Bearer not-for-upstream"),
            ],
        )
        .await;
    assert_eq!(called.status, 200, "{}", called.text);
    assert!(called.text.contains("sunny"), "{}", called.text);

    // The upstream got the same trace, and never the client's credentials.
    let upstream_tp = seen.lock().expect("seen").first().cloned().unwrap_or_default();
    assert!(upstream_tp.starts_with(&format!("00-{trace_id}-")), "upstream traceparent: {upstream_tp:?}");

    // Every hop exported a span of that trace.
    for _ in 0..100 {
        let got = spans.0.lock().expect("spans").clone();
        let services: Vec<String> = got.iter().filter(|s| s.trace_id == trace_id).map(|s| s.service.clone()).collect();
        let names: Vec<String> = got.iter().filter(|s| s.trace_id == trace_id).map(|s| s.name.clone()).collect();
        if ["gateway", "mcp-service", "registry-service"].iter().all(|svc| services.iter().any(|s| s.contains(svc)))
            && names.iter().any(|n| n == "upstream HTTP")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let got = spans.0.lock().expect("spans").clone();
    let ours: Vec<&Received> = got.iter().filter(|s| s.trace_id == trace_id).collect();
    for svc in ["gateway", "mcp-service", "registry-service"] {
        assert!(ours.iter().any(|s| s.service.contains(svc)), "no {svc} span in the trace: {ours:#?}");
    }
    assert!(ours.iter().any(|s| s.name == "upstream HTTP"), "no upstream span: {ours:#?}");
    let handle = ours.iter().find(|s| s.name == "mcp-service handle").expect("the engine's span");
    for attr in ["tools/call", "modern", "weather", "ok"] {
        assert!(handle.attributes.contains(attr), "{attr} missing from {}", handle.attributes);
    }
    assert!(!format!("{ours:?}").contains("not-for-upstream"), "no credentials in spans");

    // Parent links: client → gateway → mcp-service → registry-service → upstream.
    let parent_of = |name: &str| -> &Received {
        let span = ours.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no span {name}: {ours:#?}"));
        ours.iter().find(|p| p.span_id == span.parent).unwrap_or_else(|| panic!("{name} has no parent in the trace"))
    };
    let edge = ours.iter().find(|s| s.name == "POST /mcp").expect("the gateway's request span");
    assert_eq!(edge.parent, "00f067aa0ba902b7", "the gateway continues the client's span");
    assert!(parent_of("mcp-service handle").service.contains("gateway"));
    assert!(parent_of("registry call_tool").service.contains("mcp-service"));
    assert!(parent_of("upstream HTTP").service.contains("registry-service"));

    // Metrics on every service.
    let gw_port = gw.addr().port();
    let text = metrics(gw_port).await;
    assert!(
        text.contains(
            "gateway_http_requests_total{route=\"/mcp\",method=\"tools/call\",era=\"modern\",status=\"200\"} 1"
        ),
        "{text}"
    );
    assert!(text.contains("gateway_http_request_duration_seconds_bucket"), "{text}");
    let text = metrics(mcp_metrics).await;
    assert!(text.contains("mcp_requests_total{method=\"tools/call\",era=\"modern\",outcome=\"ok\"} 1"), "{text}");
    let text = metrics(reg_metrics).await;
    assert!(text.contains("registry_tool_calls_total{tool=\"weather\",outcome=\"ok\"} 1"), "{text}");
    assert!(text.contains("registry_upstream_duration_seconds_bucket{backend=\"http\",outcome=\"ok\""), "{text}");
    let refused = e2e::http()
        .post(format!("{}/oauth/token", oauth.url()))
        .form(&[("grant_type", "authorization_code"), ("client_id", "nobody")])
        .send()
        .await
        .expect("POST");
    assert_eq!(refused.status().as_u16(), 401);
    let text = metrics(oauth.addr().port()).await;
    assert!(text.contains("oauth_errors_total{error=\"invalid_client\"} 1"), "{text}");
}

/// mcp-service and registry-service accept only callers with the shared token.
#[tokio::test]
async fn the_grpc_services_accept_only_their_callers() {
    let token = "another-service-token-42";
    let registry = Proc::start_with_env(
        "registry-service",
        &["--listen", "127.0.0.1:0"],
        &[("REGISTRY_SERVICE_TOKEN", token)],
        "registry-service",
    )
    .await;
    let oauth = Proc::start("oauth-service", &["--listen", "127.0.0.1:0"], "oauth-service").await;
    // An mcp-service without the token cannot use the registry.
    let stranger =
        Proc::start("mcp-service", &["--listen", "127.0.0.1:0", "--registry", &registry.url()], "mcp-service").await;
    let gw = Proc::start(
        "gateway",
        &["--listen", "127.0.0.1:0", "--mcp-service", &stranger.url(), "--oauth-service", &oauth.url()],
        "gateway",
    )
    .await;
    let client = Client::new(&format!("{}/mcp", gw.url()));
    let r = client.modern(1, "tools/call", json!({ "name": "echo", "arguments": { "message": "hi" } })).await;
    assert!(r.error_code().is_some() || r.status >= 500, "refused without the token: {}", r.text);
    assert!(!r.text.contains("\"hi\""), "{}", r.text);

    // With the token on both sides, the call goes through; a gateway without it is refused.
    let mcp = Proc::start_with_env(
        "mcp-service",
        &["--listen", "127.0.0.1:0", "--registry", &registry.url()],
        &[("MCP_SERVICE_SERVICE_TOKEN", token)],
        "mcp-service",
    )
    .await;
    let trusted = Proc::start_with_env(
        "gateway",
        &["--listen", "127.0.0.1:0", "--mcp-service", &mcp.url(), "--oauth-service", &oauth.url()],
        &[("GATEWAY_SERVICE_TOKEN", token)],
        "gateway",
    )
    .await;
    let ok = Client::new(&format!("{}/mcp", trusted.url()))
        .modern(1, "tools/call", json!({ "name": "echo", "arguments": { "message": "through" } }))
        .await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert!(ok.text.contains("through"), "{}", ok.text);
    let untrusted = Proc::start(
        "gateway",
        &["--listen", "127.0.0.1:0", "--mcp-service", &mcp.url(), "--oauth-service", &oauth.url()],
        "gateway",
    )
    .await;
    let refused = Client::new(&format!("{}/mcp", untrusted.url())).modern(1, "tools/list", json!({})).await;
    assert_eq!(refused.status, 502, "{}", refused.text);
}

/// JSON log lines carry the trace id and the request id of the request they belong to, and
/// never its credentials.
#[tokio::test]
async fn log_lines_carry_trace_and_request_ids() {
    let gw = Proc::start("gateway", &["--standalone", "--listen", "127.0.0.1:0"], "gateway").await;
    let client = Client::new(&format!("{}/mcp", gw.url()));
    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let r = client
        .post(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "no/such/method", "params": {}}),
            &[
                ("mcp-protocol-version", MODERN),
                ("traceparent", &format!("00-{trace_id}-b7ad6b7169203331-01")),
                ("x-request-id", "req-e2e-42"),
                ("authorization", "Bearer secret-bearer-value"),
            ],
        )
        .await;
    assert!(r.status >= 400, "{}", r.text);
    let line = gw.log_line(|l| l.contains("request refused or failed")).await.expect("an access log line");
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(v["span"]["trace_id"], trace_id, "{line}");
    assert_eq!(v["span"]["request_id"], "req-e2e-42", "{line}");
    // What the request learnt as it went: its era and method, and its answer's status.
    assert_eq!(v["span"]["name"], "gateway.request", "{line}");
    assert_eq!(v["span"]["mcp.era"], "modern", "{line}");
    assert_eq!(v["span"]["http.response.status_code"], r.status, "{line}");
    assert!(!gw.log_text().contains("secret-bearer-value"));

    // Without an id of the client's, the access line carries the one the answer names.
    let r = client
        .post(
            &json!({"jsonrpc": "2.0", "id": 2, "method": "no/such/method", "params": {}}),
            &[("mcp-protocol-version", MODERN)],
        )
        .await;
    let made = r.headers["x-request-id"].to_str().expect("text").to_owned();
    let line = gw
        .log_line(|l| l.contains("request refused or failed") && l.contains(&made))
        .await
        .expect("an access log line with the made id");
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(v["span"]["request_id"], made.as_str(), "{line}");
}

/// `gateway_http_in_flight_requests` counts a request from its arrival to its answer, and a
/// request whose client went away before the answer leaves it too.
#[tokio::test]
async fn a_request_abandoned_by_its_client_leaves_the_requests_in_flight() {
    use tokio::io::AsyncWriteExt as _;
    // An upstream that takes connections and never answers: the tool's call waits.
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = upstream.local_addr().expect("addr");
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = upstream.accept().await {
            open.push(stream);
        }
    });
    let defs = format!(
        "server: {{ name: waits }}\nallow_private_networks: true\ntools:\n  - name: waits\n    http: {{ url: \"http://{addr}/never\", timeout_ms: 60000 }}\n"
    );
    let served = e2e::Served::definitions(&defs, &[]).await;
    let base = served.gateway.url();
    let in_flight = || async {
        let text = e2e::metrics(&base).await;
        let line = text.lines().find(|l| l.starts_with("gateway_http_in_flight_requests ")).map(str::to_owned);
        line.and_then(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok())).expect("the gauge")
    };
    // The gauge once it reads `want`, or what it read last after about 2 s.
    let settled = |want: f64| {
        let in_flight = &in_flight;
        async move {
            let mut seen = in_flight().await;
            for _ in 0..100 {
                if seen == want {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                seen = in_flight().await;
            }
            seen
        }
    };
    // The scrape itself is in flight while it is answered.
    assert_eq!(in_flight().await, 1.0);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "waits", "arguments": {},
        "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json\r\nMcp-Protocol-Version: {MODERN}\r\nMcp-Method: tools/call\r\nMcp-Name: waits\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut waiting = tokio::net::TcpStream::connect(served.gateway.addr()).await.expect("connect");
    waiting.write_all(head.as_bytes()).await.expect("write");
    assert_eq!(settled(2.0).await, 2.0, "the call waiting for its tool is in flight");
    drop(waiting);
    assert_eq!(settled(1.0).await, 1.0, "the abandoned call is no longer in flight");
    held.abort();
}

/// A line mcp-service logs while it serves a request (here a text tool whose template fails
/// as it renders) carries that request: its id, its tool, the request's name.
#[tokio::test]
async fn mcp_service_lines_carry_their_request() {
    let definitions = "server: { name: logs }\ntools:\n  - name: broken\n    input_schema: { type: object, properties: { message: { type: string } } }\n    text: \"{{ message | int }}\"\n";
    let served = e2e::Served::definitions(definitions, &[]).await;
    let body =
        e2e::modern_request(3, "tools/call", json!({ "name": "broken", "arguments": { "message": "not a number" } }));
    let r = served
        .client
        .post(
            &body,
            &[
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "tools/call"),
                ("mcp-name", "broken"),
                ("x-request-id", "req-tool-7"),
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["result"]["isError"], true, "{}", r.text);
    let line = served.gateway.log_line(|l| l.contains("tool failed")).await.expect("the tool's warning");
    assert_eq!(line.matches("\"span\"").count(), 1, "{line}");
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(v["level"], "WARN", "{line}");
    assert_eq!(v["span"]["name"], "mcp.handle", "{line}");
    assert_eq!(v["span"]["request_id"], "req-tool-7", "{line}");
    assert_eq!(v["span"]["mcp.tool"], "broken", "{line}");

    // Without an id of the client's, the one the gateway made and answered with is the one
    // mcp-service's lines carry (the gateway's own: `log_lines_carry_trace_and_request_ids`).
    let headers = [("mcp-protocol-version", MODERN), ("mcp-method", "tools/call"), ("mcp-name", "broken")];
    let r = served.client.post(&body, &headers).await;
    assert_eq!(r.json["result"]["isError"], true, "{}", r.text);
    let made = r.headers["x-request-id"].to_str().expect("text").to_owned();
    assert_eq!(made.len(), 36, "a UUID: {made}");
    let line = served
        .gateway
        .log_line(|l| l.contains("tool failed") && l.contains(&made))
        .await
        .expect("the tool's warning with the made id");
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(v["span"]["name"], "mcp.handle", "{line}");
    assert_eq!(v["span"]["request_id"], made.as_str(), "{line}");
}
