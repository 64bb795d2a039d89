//! Logs, traces and metrics, the same way in every binary.
//!
//! - **Logs** to stderr (stdout is the protocol on stdio): `LOG_FORMAT=json` for JSON lines,
//!   `LOG_LEVEL` or `RUST_LOG` for the filter (default `info`).
//! - **Traces** through `tracing-opentelemetry` to an OTLP/gRPC collector configured by the
//!   standard variables (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//!   `OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_HEADERS`…); off when no endpoint is set or
//!   `OTEL_SDK_DISABLED=true`. W3C `traceparent` travels in HTTP headers and gRPC metadata:
//!   [`extract_http`], [`extract_grpc`], [`inject_grpc`], [`inject_http`].
//! - **Metrics** in the Prometheus text format through the `metrics` facade: [`render_metrics`].

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

static METRICS: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Whether spans go to a collector (set by [`init`]).
static TRACES_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether spans go to a collector: the gateway and mcp-service make a request's span only
/// then ([`crate::request_log`]).
pub fn traces_on() -> bool {
    TRACES_ON.load(std::sync::atomic::Ordering::Relaxed)
}

/// A binary's own work for the upkeep thread, done every [`UPKEEP_EVERY`]: see [`every_second`].
static EVERY_SECOND: OnceLock<fn()> = OnceLock::new();

/// Latency buckets, in seconds: 100 µs to 10 s.
const LATENCY_BUCKETS: [f64; 14] =
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 10.0];

/// Keeps the trace exporter alive; flushes pending spans when dropped.
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Flush pending spans and stop the exporter while the runtime goes on running: the
    /// exporter's connection is one of the runtime's tasks, which a single-threaded runtime
    /// blocked in the flush would never run. A service calls this at the end of its `main`.
    pub async fn finish(mut self) {
        if let Some(provider) = self.tracer.take() {
            let _ = tokio::task::spawn_blocking(move || flush(provider)).await;
        }
    }
}

/// Flush pending spans and stop the exporter, blocking until done.
fn flush(provider: SdkTracerProvider) {
    if let Err(e) = provider.shutdown() {
        eprintln!("telemetry: flushing traces failed: {e}");
    }
}

impl Drop for Telemetry {
    /// Without [`Telemetry::finish`] (an early return): flush here, blocking, except on a
    /// single-threaded runtime, where blocking would stop the exporter's connection; there the
    /// flush goes to a thread of its own and spans still pending may be lost when the process ends.
    fn drop(&mut self) {
        let Some(provider) = self.tracer.take() else { return };
        let one_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread);
        if one_thread {
            std::thread::spawn(move || flush(provider));
        } else {
            flush(provider);
        }
    }
}

/// Whether an OTLP trace endpoint is configured.
fn tracing_wanted() -> bool {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// Set up logging, tracing (when configured) and the metrics recorder for `service`, and have
/// the upkeep thread hand back the service's start-up code once it is serving
/// ([`crate::resident`]).
pub fn init(service: &'static str) -> Telemetry {
    crate::resident::release_after_start();
    let filter =
        std::env::var("RUST_LOG").or_else(|_| std::env::var("LOG_LEVEL")).unwrap_or_else(|_| "info".to_owned());
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = if json {
        // Each line carries the fields of the request or span it happened in: trace_id,
        // request_id, the MCP method and era.
        let lines = tracing_subscriber::fmt::format().json().flatten_event(true).with_current_span(true);
        fmt.event_format(crate::request_log::RequestFormat::json(lines.with_span_list(false)))
            .fmt_fields(crate::log_fields::AppendJsonFields)
            .with_filter(filter)
            .boxed()
    } else {
        let lines = crate::request_log::RequestFormat::text(tracing_subscriber::fmt::format().with_ansi(false));
        fmt.with_ansi(false).event_format(lines).with_filter(filter).boxed()
    };

    let mut problem = None;
    let tracer = if tracing_wanted() {
        match opentelemetry_otlp::SpanExporter::builder().with_tonic().build() {
            Ok(exporter) => {
                let name = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| service.to_owned());
                let resource = opentelemetry_sdk::Resource::builder().with_service_name(name).build();
                Some(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build())
            }
            Err(e) => {
                problem = Some(e.to_string());
                None
            }
        }
    } else {
        None
    };
    opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    TRACES_ON.store(tracer.is_some(), std::sync::atomic::Ordering::Relaxed);
    let otel = tracer.as_ref().map(|provider| {
        // Only our spans go to the collector, not every dependency's.
        let targets = EnvFilter::new(
            "gateway=info,mcp_service=info,registry_service=info,oauth_service=info,mcp_proto=info,otel=info",
        );
        tracing_opentelemetry::layer().with_tracer(provider.tracer(service)).with_filter(targets)
    });
    let _ = tracing_subscriber::registry().with(fmt).with(otel).try_init();
    if let Some(e) = problem {
        tracing::warn!(error = %e, "traces are off: the OTLP exporter could not be set up");
    }
    init_metrics();
    Telemetry { tracer }
}

/// Log the runtime a service serves on (its kind, worker threads and scheduling policy, with a
/// warning when `SCHED_BATCH` was refused): called as it starts serving, not by the one-shot
/// admin commands, whose output stays their own.
pub fn log_runtime() {
    if let Some(why) = crate::scheduling::refused() {
        tracing::warn!(error = why, "the scheduling policy stays normal: SCHED_BATCH was refused");
    }
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let flavor = match runtime.runtime_flavor() {
            tokio::runtime::RuntimeFlavor::CurrentThread => "current_thread",
            tokio::runtime::RuntimeFlavor::MultiThread => "multi_thread",
            _ => "other",
        };
        tracing::info!(
            runtime = flavor,
            workers = runtime.metrics().num_workers(),
            scheduling = crate::scheduling::current_name(),
            "runtime"
        );
    }
}

/// Whether the Prometheus recorder is installed: metric handles made before it are no-ops, and
/// are not worth keeping.
pub fn metrics_installed() -> bool {
    METRICS.get().is_some_and(Option::is_some)
}

/// Install the Prometheus recorder once per process.
pub fn init_metrics() {
    METRICS.get_or_init(|| {
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &LATENCY_BUCKETS)
            .and_then(|b| b.install_recorder());
        match builder {
            Ok(handle) => {
                keep_up(handle.clone());
                Some(handle)
            }
            Err(e) => {
                tracing::warn!(error = %e, "metrics are off");
                None
            }
        }
    });
}

/// Record `values` on `span` in one go (with JSON logs each `record` re-writes the span's
/// formatted fields, so a request's fields are set together); nothing is recorded unless the
/// span has every named field.
pub fn record_all<const N: usize>(span: &tracing::Span, values: [(&str, Option<&dyn tracing::Value>); N]) {
    let Some(fields) = span.metadata().map(tracing::Metadata::fields) else { return };
    // Found in place, not collected into a vector of their own on every request.
    let named: [Option<tracing::field::Field>; N] = std::array::from_fn(|i| fields.field(values[i].0));
    if named.iter().any(Option::is_none) {
        return;
    }
    let set: [(&tracing::field::Field, Option<&dyn tracing::Value>); N] =
        std::array::from_fn(|i| (named[i].as_ref().expect("every field was found above"), values[i].1));
    span.record_all(&fields.value_set(&set));
}

/// Metric handles by label set, each registered with the recorder once.
///
/// The `metrics` macros build a key (a vector of labels, owned strings among them) and look
/// it up in the recorder's registry on every call; a service records a few metrics on every
/// request over a small, bounded set of labels, so it keeps the handles instead, once the
/// recorder is installed ([`init`]; a handle made before records nothing and is not kept).
pub struct Handles<K, V> {
    /// Hashed with foldhash, not std's SipHash (about 500 instructions per request for a
    /// request's labels): the keys are label sets this process makes, at most
    /// [`MAX_HANDLES`] of them.
    map: std::sync::RwLock<std::collections::HashMap<K, V, foldhash::fast::RandomState>>,
}

/// At most this many label sets are kept per [`Handles`]; past it, handles are made each time
/// (as the macros do), so that an unexpected spread of labels cannot grow memory.
const MAX_HANDLES: usize = 4096;

impl<K: std::hash::Hash + Eq, V: Clone> Default for Handles<K, V> {
    fn default() -> Self {
        Self { map: std::sync::RwLock::default() }
    }
}

impl<K: std::hash::Hash + Eq, V: Clone> Handles<K, V> {
    /// The handles of `key`, made by `make` the first time.
    pub fn get(&self, key: K, make: impl FnOnce(&K) -> V) -> V {
        if let Some(v) = self.map.read().ok().and_then(|m| m.get(&key).cloned()) {
            return v;
        }
        let v = make(&key);
        // Handles made before the recorder is installed are no-ops: those are not kept.
        if metrics_installed()
            && let Ok(mut m) = self.map.write()
            && m.len() < MAX_HANDLES
        {
            m.entry(key).or_insert_with(|| v.clone());
        }
        v
    }
}

/// How often recorded histogram samples are folded into their buckets.
const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Fold histogram samples into their buckets every [`UPKEEP_EVERY`], on a thread of its own
/// (not tied to any runtime's life, and not queued behind busy workers). The recorder keeps
/// every sample until then: without upkeep, a process nobody scrapes grows by about 8 bytes per
/// request and histogram (1 MiB a second at 60 000 requests a second, seen in the benchmark).
fn keep_up(handle: PrometheusHandle) {
    let started = std::thread::Builder::new().name("metrics-upkeep".into()).spawn(move || {
        for tick in 1.. {
            std::thread::sleep(UPKEEP_EVERY);
            handle.run_upkeep();
            crate::resident::on_upkeep_tick(tick);
            if let Some(work) = EVERY_SECOND.get() {
                work();
            }
        }
    });
    if let Err(e) = started {
        tracing::warn!(error = %e, "metrics upkeep could not start: histograms grow until scraped");
    }
}

/// Have the upkeep thread also run `work` every second, for work that must not wait for the
/// process to be busy: the binaries with mimalloc ask it to return freed memory, which it
/// otherwise does only when some thread next allocates (an idle service kept what a burst of
/// large reads had allocated). Once per process; `false` if work was already set.
pub fn every_second(work: fn()) -> bool {
    EVERY_SECOND.set(work).is_ok()
}

/// The metrics of this process in the Prometheus text format.
pub fn render_metrics() -> String {
    match METRICS.get() {
        Some(Some(handle)) => {
            handle.run_upkeep();
            handle.render()
        }
        _ => String::new(),
    }
}

/// Serve `/metrics` on its own address (the gRPC services' admin port) until `shutdown`.
pub async fn serve_metrics(
    addr: std::net::SocketAddr,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(|| async {
            ([(http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], render_metrics())
        }),
    );
    tracing::info!(addr = %bound, "metrics listening");
    tokio::spawn(async move {
        let _ = axum::serve(crate::socket::no_delay(listener), app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
    });
    Ok(bound)
}

struct HeaderCarrier<'a>(&'a http::HeaderMap);

impl Extractor for HeaderCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct HeaderInjector<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (http::HeaderName::try_from(key), http::HeaderValue::from_str(&value)) {
            self.0.insert(k, v);
        }
    }
}

struct MetadataCarrier<'a>(&'a tonic::metadata::MetadataMap);

impl Extractor for MetadataCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                tonic::metadata::KeyRef::Ascii(k) => Some(k.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

struct MetadataInjector<'a>(&'a mut tonic::metadata::MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::MetadataKey::<tonic::metadata::Ascii>::from_bytes(key.as_bytes()),
            tonic::metadata::MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(k, v);
        }
    }
}

/// Make `span` a child of the trace named by the request's `traceparent`, if any (when traces
/// are exported), and return the trace id for its log lines: the span's when it has one, else
/// the one the `traceparent` names.
pub fn extract_http(span: &tracing::Span, headers: &http::HeaderMap) -> Option<String> {
    continue_trace(span, &HeaderCarrier(headers), traceparent(headers))
}

/// As [`extract_http`], from the caller's gRPC metadata.
pub fn extract_grpc(span: &tracing::Span, metadata: &tonic::metadata::MetadataMap) -> Option<String> {
    continue_trace(span, &MetadataCarrier(metadata), traceparent(metadata.as_ref()))
}

/// The W3C trace context's headers, by names made once: a lookup by text parses the name on
/// every request.
pub const TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
pub const TRACESTATE: http::HeaderName = http::HeaderName::from_static("tracestate");

/// The W3C `traceparent` of a request's HTTP headers or gRPC metadata (the same map).
fn traceparent(headers: &http::HeaderMap) -> Option<&str> {
    headers.get(&TRACEPARENT).and_then(|v| v.to_str().ok())
}

fn continue_trace(span: &tracing::Span, carrier: &dyn Extractor, traceparent: Option<&str>) -> Option<String> {
    use opentelemetry::trace::TraceContextExt as _;
    if !span.is_disabled() {
        if traceparent.is_some() {
            let cx = opentelemetry::global::get_text_map_propagator(|p| p.extract(carrier));
            let _ = span.set_parent(cx);
        }
        let cx = span.context();
        let trace = cx.span();
        let sc = trace.span_context();
        if sc.is_valid() {
            return Some(sc.trace_id().to_string());
        }
    }
    // W3C: 32 hex digits, not all zero.
    let id = traceparent?.split('-').nth(1)?;
    let valid = id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) && id.bytes().any(|b| b != b'0');
    valid.then(|| id.to_ascii_lowercase())
}

/// Carry the current span's trace to the next gRPC hop (nothing without traces: there is none).
pub fn inject_grpc(metadata: &mut tonic::metadata::MetadataMap) {
    if !traces_on() {
        return;
    }
    let cx = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut MetadataInjector(metadata)));
}

/// Carry the current span's trace to an upstream HTTP call (as [`inject_grpc`]).
pub fn inject_http(headers: &mut http::HeaderMap) {
    if !traces_on() {
        return;
    }
    let cx = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut HeaderInjector(headers)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_render_in_prometheus_text() {
        init_metrics();
        metrics::counter!("test_requests_total", "method" => "tools/list").increment(2);
        metrics::histogram!("test_latency_seconds").record(0.003);
        let text = render_metrics();
        assert!(text.contains("test_requests_total{method=\"tools/list\"} 2"), "{text}");
        assert!(text.contains("test_latency_seconds_bucket{le=\"0.005\"} 1"), "{text}");
    }

    #[test]
    fn kept_handles_record_like_the_macros() {
        init_metrics();
        let handles: Handles<(&'static str, u16), metrics::Counter> = Handles::default();
        let make = |(method, status): &(&'static str, u16)| metrics::counter!("test_kept_total", "method" => *method, "status" => status.to_string());
        for _ in 0..3 {
            handles.get(("tools/list", 200), make).increment(1);
        }
        handles.get(("tools/call", 400), make).increment(1);
        assert_eq!(handles.map.read().expect("lock").len(), 2, "one handle per label set");
        let text = render_metrics();
        assert!(text.contains("test_kept_total{method=\"tools/list\",status=\"200\"} 3"), "{text}");
        assert!(text.contains("test_kept_total{method=\"tools/call\",status=\"400\"} 1"), "{text}");
    }

    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn count_run() {
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    #[test]
    fn upkeep_runs_the_binarys_work_every_second() {
        init_metrics();
        assert!(every_second(count_run));
        assert!(!every_second(count_run), "the work is set once per process");
        // Bounded wait: two runs take about two seconds.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while RUNS.load(std::sync::atomic::Ordering::Relaxed) < 2 {
            assert!(std::time::Instant::now() < deadline, "the upkeep thread did not run the work twice");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}
