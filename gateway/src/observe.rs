//! One request log and one set of metrics per HTTP request: its fields go into the log lines
//! written while it is served ([`mcp_proto::request_log`]), its trace starts here when traces
//! are exported (or continues the client's W3C `traceparent`), and `/metrics` shows requests
//! by route, MCP method, era and status, their latency, and the requests in flight.

use std::sync::LazyLock;
use std::time::Instant;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use mcp_proto::request_log::{Field, RequestLog};
use mcp_proto::telemetry::Handles;
use metrics::{Counter, Gauge, Histogram};
use tracing::field::Empty;

/// What `/mcp` learned about a request, for its log and metrics ([`record_mcp`]).
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

/// The request log's fields [`record_mcp`] sets and [`Observed::finish`] reads back.
const MCP_METHOD: &str = "mcp.method";
const MCP_ERA: &str = "mcp.era";

/// Record what `/mcp` learned about the request being served ([`mcp_proto::request_log`]);
/// [`Observed::finish`] reads the method and era back from there for the request's metrics (a
/// response extension would cost the answer a map of its own).
pub fn record_mcp(labels: &McpLabels, caller: Option<&str>) {
    mcp_proto::request_log::record([
        (MCP_METHOD, Some(labels.method.into())),
        (MCP_ERA, Some(labels.era.into())),
        ("enduser.id", caller.map(|c| c.to_owned().into())),
    ]);
}

/// A request's HTTP method as a log field (the usual ones not copied).
fn http_method(method: &http::Method) -> Field {
    use http::Method as M;
    match *method {
        M::GET => "GET".into(),
        M::POST => "POST".into(),
        M::DELETE => "DELETE".into(),
        M::OPTIONS => "OPTIONS".into(),
        _ => method.as_str().to_owned().into(),
    }
}

/// One request's clock and place among the requests in flight, from its arrival
/// ([`Observed::start`]) to its answer ([`Observed::finish`]). A request dropped before its
/// answer (the client went away) leaves the requests in flight all the same.
pub struct Observed {
    started: Instant,
    route: &'static str,
    in_flight: Gauge,
}

impl Observed {
    /// The request's fields known now, and its span when traces are exported (continuing the
    /// client's `traceparent`): the request's [`RequestLog`] to serve it in.
    pub fn start(req: &Request) -> (Self, RequestLog) {
        let route = route(req.uri().path());
        let method = req.method();
        let request_id = crate::front::request_id(req.headers(), req.extensions().get()).and_then(|v| v.to_str().ok());
        let name = span_name(method, route);
        let span = if mcp_proto::telemetry::traces_on() {
            tracing::info_span!(
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
            )
        } else {
            tracing::Span::none()
        };
        let trace_id = mcp_proto::telemetry::extract_http(&span, req.headers());
        let mut log = RequestLog::new("gateway.request", span);
        // The span was made with these.
        log.set("otel.name", name.into());
        log.set("otel.kind", "server".into());
        log.set("http.request.method", http_method(method));
        log.set("http.route", route.into());
        if let Some(id) = request_id {
            log.set("request_id", id.to_owned().into());
        }
        log.record([("trace_id", trace_id.map(Field::from))]);
        let in_flight = IN_FLIGHT.get((), |()| metrics::gauge!("gateway_http_in_flight_requests"));
        in_flight.increment(1.0);
        (Self { started: Instant::now(), route, in_flight }, log)
    }

    /// The answer's status on the request, the access log line, the request's metrics: in the
    /// request's [`RequestLog::scope`].
    pub fn finish(self, resp: Response) -> Response {
        let status = resp.status().as_u16();
        mcp_proto::request_log::record([("http.response.status_code", Some(status.into()))]);
        let label = |name| mcp_proto::request_log::static_text(name).unwrap_or("");
        let (mcp_method, era) = (label(MCP_METHOD), label(MCP_ERA));
        let elapsed = self.started.elapsed().as_secs_f64();
        let elapsed_ms = elapsed * 1000.0;
        // The access log: refusals and failures at info, the rest at debug (LOG_LEVEL=debug).
        if status >= 400 {
            tracing::info!(status, elapsed_ms, "request refused or failed");
        } else {
            tracing::debug!(status, elapsed_ms, "request");
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
