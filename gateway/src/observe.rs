//! One span and one set of metrics per HTTP request: the trace starts here (or continues the
//! client's W3C `traceparent`), and `/metrics` shows requests by route, MCP method, era and
//! status, their latency, and the requests in flight.

use std::sync::LazyLock;
use std::time::Instant;

use axum::extract::Request;
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

/// One request's span, clock and place among the requests in flight, from its arrival
/// ([`Observed::start`]) to its answer ([`Observed::finish`]). A request dropped before its
/// answer (the client went away) leaves the requests in flight all the same.
pub struct Observed {
    span: tracing::Span,
    started: Instant,
    route: &'static str,
    in_flight: Gauge,
}

impl Observed {
    /// The request's span (continuing the client's `traceparent`), with the fields known now.
    pub fn start(req: &Request) -> Self {
        let route = route(req.uri().path());
        let method = req.method();
        // Fields known now are set now: with JSON logs each later `record` re-reads and
        // re-writes the span's formatted fields.
        let request_id = req.headers().get("x-request-id").and_then(|v| v.to_str().ok());
        let name = span_name(method, route);
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
        let in_flight = IN_FLIGHT.get((), |()| metrics::gauge!("gateway_http_in_flight_requests"));
        in_flight.increment(1.0);
        Self { span, started: Instant::now(), route, in_flight }
    }

    /// `f` (the router's call, which starts the request's work) inside the request's span.
    pub fn in_span<T>(&self, f: impl FnOnce() -> T) -> T {
        self.span.in_scope(f)
    }

    /// `answer`, entering the request's span whenever it runs.
    pub fn instrument<F: std::future::Future>(&self, answer: F) -> tracing::instrument::Instrumented<F> {
        answer.instrument(self.span.clone())
    }

    /// The answer's status on the span, the access log line, the request's metrics.
    pub fn finish(self, resp: Response) -> Response {
        let status = resp.status().as_u16();
        self.span.record("http.response.status_code", status);
        let (mcp_method, era) = resp.extensions().get::<McpLabels>().map_or(("", ""), |l| (l.method, l.era));
        let elapsed = self.started.elapsed().as_secs_f64();
        let elapsed_ms = elapsed * 1000.0;
        // The access log: refusals and failures at info, the rest at debug (LOG_LEVEL=debug).
        if status >= 400 {
            tracing::info!(parent: &self.span, status, elapsed_ms, "request refused or failed");
        } else {
            tracing::debug!(parent: &self.span, status, elapsed_ms, "request");
        }
        let (count, duration) = REQUESTS.get((self.route, mcp_method, era, status), |&(route, method, era, status)| {
            (
                metrics::counter!(
                    "gateway_http_requests_total",
                    "route" => route, "method" => method, "era" => era, "status" => status.to_string()
                ),
                metrics::histogram!("gateway_http_request_duration_seconds", "route" => route, "method" => method, "era" => era),
            )
        });
        count.increment(1);
        duration.record(elapsed);
        resp
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        self.in_flight.decrement(1.0);
    }
}

type RequestKey = (&'static str, &'static str, &'static str, u16);
static REQUESTS: LazyLock<Handles<RequestKey, (Counter, Histogram)>> = LazyLock::new(Handles::default);
static IN_FLIGHT: LazyLock<Handles<(), Gauge>> = LazyLock::new(Handles::default);

/// `GET /metrics`: Prometheus text format.
pub async fn metrics() -> Response {
    ([(http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], mcp_proto::telemetry::render_metrics())
        .into_response()
}
