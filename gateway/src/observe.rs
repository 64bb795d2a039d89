//! One span and one set of metrics per HTTP request: the trace starts here (or continues the
//! client's W3C `traceparent`), and `/metrics` shows requests by route, MCP method, era and
//! status, their latency, and the requests in flight.

use std::sync::LazyLock;
use std::time::Instant;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use mcp_proto::telemetry::Handles;
use metrics::{Counter, Gauge, Histogram};
use tracing::Instrument as _;
use tracing::field::Empty;

/// What `/mcp` learned about a request, for the metrics (set on the response).
#[derive(Clone, Copy, Debug)]
pub struct McpLabels {
    pub method: &'static str,
    pub era: &'static str,
}

/// The route, as a bounded label.
fn route(path: &str) -> &'static str {
    match path {
        "/mcp" => "/mcp",
        "/healthz" | "/readyz" => "health",
        "/metrics" => "/metrics",
        p if p.starts_with("/oauth/") => "/oauth",
        p if p.starts_with("/.well-known/") => "/.well-known",
        _ => "other",
    }
}

/// The span's name, `{method} {route}`: written once for the requests the gateway serves, so
/// that they do not format one each.
fn span_name(method: &http::Method, route: &'static str) -> std::borrow::Cow<'static, str> {
    use http::Method as M;
    match (method, route) {
        (&M::POST, "/mcp") => "POST /mcp".into(),
        (&M::GET, "/mcp") => "GET /mcp".into(),
        (&M::DELETE, "/mcp") => "DELETE /mcp".into(),
        (&M::GET, "health") => "GET health".into(),
        (&M::GET, "/metrics") => "GET /metrics".into(),
        _ => format!("{method} {route}").into(),
    }
}

/// Record what `/mcp` learned about a request on its span.
pub fn record_mcp(span: &tracing::Span, labels: &McpLabels, caller: Option<&str>) {
    mcp_proto::telemetry::record_all(
        span,
        [
            ("mcp.method", Some(&labels.method)),
            ("mcp.era", Some(&labels.era)),
            ("enduser.id", caller.as_ref().map(|c| c as &dyn tracing::Value)),
        ],
    );
}

pub async fn observe(req: Request, next: Next) -> Response {
    let route = route(req.uri().path());
    let method = req.method().clone();
    // Fields known now are set now: with JSON logs each later `record` re-reads and re-writes
    // the span's formatted fields.
    let request_id = req.headers().get("x-request-id").and_then(|v| v.to_str().ok());
    let name = span_name(&method, route);
    let span = tracing::info_span!(
        "gateway.request",
        otel.name = name.as_ref(),
        otel.kind = "server",
        http.request.method = method.as_str(),
        http.route = route,
        http.response.status_code = Empty,
        request_id = request_id,
        trace_id = Empty,
        mcp.method = Empty,
        mcp.era = Empty,
        enduser.id = Empty,
    );
    mcp_proto::telemetry::extract_http(&span, req.headers());
    let started = Instant::now();
    let in_flight = IN_FLIGHT.get((), |()| metrics::gauge!("gateway_http_in_flight_requests"));
    in_flight.increment(1.0);
    let resp = next.run(req).instrument(span.clone()).await;
    in_flight.decrement(1.0);
    let status = resp.status().as_u16();
    span.record("http.response.status_code", status);
    let (mcp_method, era) = resp.extensions().get::<McpLabels>().map_or(("", ""), |l| (l.method, l.era));
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    // The access log: refusals and failures at info, the rest at debug (LOG_LEVEL=debug).
    if status >= 400 {
        tracing::info!(parent: &span, status, elapsed_ms, "request refused or failed");
    } else {
        tracing::debug!(parent: &span, status, elapsed_ms, "request");
    }
    let (count, duration) = REQUESTS.get((route, mcp_method, era, status), |&(route, method, era, status)| {
        (
            metrics::counter!(
                "gateway_http_requests_total",
                "route" => route, "method" => method, "era" => era, "status" => status.to_string()
            ),
            metrics::histogram!("gateway_http_request_duration_seconds", "route" => route, "method" => method, "era" => era),
        )
    });
    count.increment(1);
    duration.record(started.elapsed().as_secs_f64());
    resp
}

type RequestKey = (&'static str, &'static str, &'static str, u16);
static REQUESTS: LazyLock<Handles<RequestKey, (Counter, Histogram)>> = LazyLock::new(Handles::default);
static IN_FLIGHT: LazyLock<Handles<(), Gauge>> = LazyLock::new(Handles::default);

/// `GET /metrics`: Prometheus text format.
pub async fn metrics() -> Response {
    ([(http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], mcp_proto::telemetry::render_metrics())
        .into_response()
}
