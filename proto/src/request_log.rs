//! The request being served: its fields for the log lines written while it is, and its span
//! when traces go to a collector.
//!
//! A tracing span per request was kept by tracing's registry, had its fields formatted by the
//! log layer when it was made and again on each record, and was entered and left on every
//! poll, for the few lines logged while a request is served. Turned off (its target filtered
//! out), lists answered at the edge took a tenth less CPU and calls through the microservices a
//! sixth less; keeping the fields here instead bought most of that (docs/performance.md, What
//! each optimisation bought). The gateway and mcp-service keep a request's fields in a
//! task-local [`RequestLog`], cheap to fill, and [`RequestFormat`] writes them into a line only
//! when one is logged, as the span's fields were (the `span` member of a JSON line,
//! `name{…}: ` after the level of a text one). The span itself is made only when traces are
//! exported ([`crate::telemetry::traces_on`]); then what is recorded goes to both, and a line
//! logged in the span is written from it, as before. Without traces, span filters in
//! `RUST_LOG` (`[gateway.request]=debug`) have no request span to match.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt::{self, Write as _};

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

tokio::task_local! {
    static REQUEST: RefCell<RequestLog>;
}

/// A field's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Field {
    Static(&'static str),
    Owned(String),
    I64(i64),
    U64(u64),
    Bool(bool),
}

impl From<&'static str> for Field {
    fn from(s: &'static str) -> Self {
        Field::Static(s)
    }
}

impl From<Cow<'static, str>> for Field {
    fn from(s: Cow<'static, str>) -> Self {
        match s {
            Cow::Borrowed(s) => Field::Static(s),
            Cow::Owned(s) => Field::Owned(s),
        }
    }
}

impl From<String> for Field {
    fn from(s: String) -> Self {
        Field::Owned(s)
    }
}

impl From<i64> for Field {
    fn from(v: i64) -> Self {
        Field::I64(v)
    }
}

impl From<i32> for Field {
    fn from(v: i32) -> Self {
        Field::I64(v.into())
    }
}

impl From<u64> for Field {
    fn from(v: u64) -> Self {
        Field::U64(v)
    }
}

impl From<u16> for Field {
    fn from(v: u16) -> Self {
        Field::U64(v.into())
    }
}

impl From<bool> for Field {
    fn from(v: bool) -> Self {
        Field::Bool(v)
    }
}

impl Field {
    /// A string field's text.
    fn text(&self) -> Option<&str> {
        match self {
            Field::Static(s) => Some(s),
            Field::Owned(s) => Some(s),
            _ => None,
        }
    }

    /// A number or boolean as JSON and the text format write it alike (a string: nothing).
    fn write_plain(&self, out: &mut String) {
        let _ = match self {
            Field::I64(v) => write!(out, "{v}"),
            Field::U64(v) => write!(out, "{v}"),
            Field::Bool(v) => write!(out, "{v}"),
            Field::Static(_) | Field::Owned(_) => Ok(()),
        };
    }

    fn as_value(&self) -> &dyn tracing::Value {
        match self {
            Field::Static(s) => s,
            Field::Owned(s) => s,
            Field::I64(v) => v,
            Field::U64(v) => v,
            Field::Bool(v) => v,
        }
    }
}

/// One request's name and fields (in the order first set), and its span (disabled unless
/// traces are exported).
#[derive(Debug)]
pub struct RequestLog {
    name: &'static str,
    fields: Vec<(&'static str, Field)>,
    span: tracing::Span,
}

impl RequestLog {
    /// A request named `name` (what its span is named), with `span` (`Span::none()` when
    /// traces are not exported).
    pub fn new(name: &'static str, span: tracing::Span) -> Self {
        Self { name, fields: Vec::with_capacity(10), span }
    }

    /// Set field `name` here only: for a field the span was made with.
    pub fn set(&mut self, name: &'static str, value: Field) {
        match self.fields.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => *v = value,
            None => self.fields.push((name, value)),
        }
    }

    /// Set fields; a value of `None` sets nothing. The span gets them too, when it has every
    /// one of the names (as [`crate::telemetry::record_all`]).
    pub fn record<const N: usize>(&mut self, values: [(&'static str, Option<Field>); N]) {
        if !self.span.is_disabled() {
            let on_span: [(&str, Option<&dyn tracing::Value>); N] =
                std::array::from_fn(|i| (values[i].0, values[i].1.as_ref().map(Field::as_value)));
            crate::telemetry::record_all(&self.span, on_span);
        }
        for (name, value) in values {
            if let Some(value) = value {
                self.set(name, value);
            }
        }
    }

    /// `f` in the request's span, when there is one.
    pub fn in_span<T>(&self, f: impl FnOnce() -> T) -> T {
        self.span.in_scope(f)
    }

    /// `work` with this as the request being served while it runs (and in its span, when
    /// there is one).
    pub fn scope<F: Future>(self, work: F) -> impl Future<Output = F::Output> {
        use tracing::Instrument as _;
        let span = self.span.clone();
        REQUEST.scope(RefCell::new(self), work.instrument(span))
    }

    /// The fields as the members of a JSON object, its `name` last (as a span's are written).
    fn write_json(&self, out: &mut String) {
        out.push('{');
        for (name, value) in &self.fields {
            crate::log_fields::push_json_string(out, name);
            out.push(':');
            match value.text() {
                Some(text) => crate::log_fields::push_json_string(out, text),
                None => value.write_plain(out),
            }
            out.push(',');
        }
        out.push_str("\"name\":");
        crate::log_fields::push_json_string(out, self.name);
        out.push('}');
    }

    /// `name{field=value …}` as the text format writes a span (strings quoted as `Debug`
    /// quotes them).
    fn write_text(&self, out: &mut String) {
        out.push_str(self.name);
        if !self.fields.is_empty() {
            out.push('{');
            for (i, (name, value)) in self.fields.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                let _ = write!(out, "{name}=");
                match value.text() {
                    Some(text) => {
                        let _ = write!(out, "{text:?}");
                    }
                    None => value.write_plain(out),
                }
            }
            out.push('}');
        }
    }
}

/// Set fields on the request being served (nothing outside one): see [`RequestLog::record`].
pub fn record<const N: usize>(values: [(&'static str, Option<Field>); N]) {
    let _ = REQUEST.try_with(|log| {
        if let Ok(mut log) = log.try_borrow_mut() {
            log.record(values);
        }
    });
}

/// Field `name` of the request being served, when it was set from a `&'static str`: a value a
/// later step of the request reads back as it was set (the labels of its metrics).
pub fn static_text(name: &'static str) -> Option<&'static str> {
    REQUEST
        .try_with(|log| {
            let log = log.try_borrow().ok()?;
            match log.fields.iter().find(|(n, _)| *n == name)? {
                (_, Field::Static(text)) => Some(*text),
                _ => None,
            }
        })
        .ok()
        .flatten()
}

/// Log lines with the fields of the request they are written in: an event formatter around
/// tracing-subscriber's own (`json` for its JSON lines, else its text ones), for which the
/// request is the span it was: a JSON line in another span shows that span (the innermost, as
/// before), a text line shows the request first in its scope. A line logged outside any
/// request is the inner formatter's alone. The inner formatter writes without colours.
pub struct RequestFormat<F> {
    inner: F,
    json: bool,
}

impl<F> RequestFormat<F> {
    /// Around tracing-subscriber's JSON format (flattened, with the current span).
    pub fn json(inner: F) -> Self {
        Self { inner, json: true }
    }

    /// Around tracing-subscriber's full text format, without colours.
    pub fn text(inner: F) -> Self {
        Self { inner, json: false }
    }
}

impl<S, N, F> FormatEvent<S, N> for RequestFormat<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        // Whether the inner formatter writes a span of its own: JSON the event's parent or else
        // the current span (a root event's too), text the whole scope from the root.
        let spans = if self.json {
            event.parent().and_then(|id| ctx.span(id)).or_else(|| ctx.lookup_current()).is_some()
        } else {
            ctx.event_scope().is_some()
        };
        let line = REQUEST.try_with(|log| {
            let log = log.try_borrow().ok()?;
            // A span the inner formatter writes stands for the request in a JSON line, as the
            // innermost span did; a text line puts the request before the scope, as its root
            // did, unless the request's span is in that scope (traces exported).
            let splice = !spans || (!self.json && log.span.is_disabled());
            if !splice {
                return None;
            }
            let mut line = String::new();
            self.inner.format_event(ctx, Writer::new(&mut line), event).ok()?;
            let mut fields = String::new();
            if self.json {
                // `{…}\n`: the span member goes before the closing brace.
                let end = line.rfind('}')?;
                fields.push_str(",\"span\":");
                log.write_json(&mut fields);
                line.insert_str(end, &fields);
            } else {
                // `<time> <level> <scope>: <target>: …`: the request goes first in the scope.
                let level = format!("{:>5} ", event.metadata().level());
                let at = line.find(&level)? + level.len();
                log.write_text(&mut fields);
                fields.push_str(if spans { ":" } else { ": " });
                line.insert_str(at, &fields);
            }
            Some(line)
        });
        match line {
            Ok(Some(line)) => writer.write_str(&line),
            _ => self.inner.format_event(ctx, writer, event),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;
    use tracing_subscriber::fmt::format;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;
    use crate::log_fields::tests::Lines;

    /// The lines `log` writes through the services' layer (JSON or text), on a runtime of one
    /// thread.
    fn logged(json: bool, log: impl Future<Output = ()>) -> String {
        let lines = Lines::default();
        let writer = lines.clone();
        let layer = tracing_subscriber::fmt::layer().with_ansi(false).with_writer(move || writer.clone());
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        if json {
            let layer = layer
                .event_format(RequestFormat::json(
                    format().json().flatten_event(true).with_current_span(true).with_span_list(false),
                ))
                .fmt_fields(crate::log_fields::AppendJsonFields);
            tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || runtime.block_on(log));
        } else {
            let layer = layer.event_format(RequestFormat::text(format().with_ansi(false)));
            tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || runtime.block_on(log));
        }
        lines.text()
    }

    /// A line at `level` (its name), in a request whose fields are a span's (`in_span`) or a
    /// request log's, inside a span of its own when `nested`.
    async fn a_request(in_span: bool, level: &str, nested: bool) {
        let line = || {
            let inner = if nested { tracing::info_span!("inner", step = 1) } else { tracing::Span::none() };
            inner.in_scope(|| match level {
                "ERROR" => tracing::error!(elapsed_ms = 0.5, "request refused or failed"),
                "WARN" => tracing::warn!(elapsed_ms = 0.5, "request refused or failed"),
                "DEBUG" => tracing::debug!(elapsed_ms = 0.5, "request refused or failed"),
                "TRACE" => tracing::trace!(elapsed_ms = 0.5, "request refused or failed"),
                _ => tracing::info!(elapsed_ms = 0.5, "request refused or failed"),
            });
        };
        let request_id = "r-1".to_owned();
        if in_span {
            let span = tracing::info_span!(
                "gateway.request",
                otel.name = "POST /mcp",
                request_id = request_id.as_str(),
                trace_id = tracing::field::Empty,
                http.response.status_code = tracing::field::Empty,
                ok = tracing::field::Empty,
                note = tracing::field::Empty,
            );
            crate::telemetry::record_all(
                &span,
                [
                    ("trace_id", Some(&"0af7651916cd43dd8448eb211c80319c" as &dyn tracing::Value)),
                    ("http.response.status_code", Some(&404u16)),
                    ("ok", Some(&false)),
                    ("note", Some(&"a \"quoted\"\nline")),
                ],
            );
            span.in_scope(line);
        } else {
            let mut log = RequestLog::new("gateway.request", tracing::Span::none());
            log.set("otel.name", "POST /mcp".into());
            log.set("request_id", request_id.into());
            log.scope(async {
                record([
                    ("trace_id", Some("0af7651916cd43dd8448eb211c80319c".into())),
                    ("http.response.status_code", Some(404u16.into())),
                    ("ok", Some(false.into())),
                    ("nothing", None),
                    ("note", Some("a \"quoted\"\nline".into())),
                ]);
                tokio::task::yield_now().await;
                line();
            })
            .await;
        }
    }

    fn without_time(line: &str) -> &str {
        line.split_once(' ').map_or(line, |(_, rest)| rest)
    }

    const LEVELS: [&str; 5] = ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"];

    #[test]
    fn a_json_line_carries_the_request_fields_as_a_span_would() {
        for (level, nested) in LEVELS.iter().flat_map(|l| [(*l, false), (*l, true)]) {
            let from_span = logged(true, a_request(true, level, nested));
            let from_log = logged(true, a_request(false, level, nested));
            assert_eq!(from_log.matches("\"span\"").count(), 1, "{from_log}");
            let parse = |line: &str| -> Value {
                let mut v: Value = serde_json::from_str(line.trim()).expect("json");
                v.as_object_mut().expect("object").remove("timestamp");
                v
            };
            let (a, b) = (parse(&from_span), parse(&from_log));
            assert_eq!(a, b, "{level}, nested: {nested}");
            assert_eq!(b["level"], level);
            assert_eq!(b["elapsed_ms"], 0.5);
            if nested {
                // The innermost span, as a span's line showed.
                assert_eq!(b["span"], serde_json::json!({"name": "inner", "step": 1}));
                continue;
            }
            assert_eq!(b["span"]["request_id"], "r-1");
            assert_eq!(b["span"]["trace_id"], "0af7651916cd43dd8448eb211c80319c");
            assert_eq!(b["span"]["http.response.status_code"], 404);
            assert_eq!(b["span"]["note"], "a \"quoted\"\nline");
            assert!(b["span"].get("nothing").is_none(), "{b}");
        }
    }

    #[test]
    fn a_text_line_carries_the_request_fields_as_a_span_would() {
        for (level, nested) in LEVELS.iter().flat_map(|l| [(*l, false), (*l, true)]) {
            let from_span = logged(false, a_request(true, level, nested));
            let from_log = logged(false, a_request(false, level, nested));
            assert_eq!(without_time(&from_span), without_time(&from_log), "{level}, nested: {nested}");
            let request = r#"gateway.request{otel.name="POST /mcp" request_id="r-1""#;
            assert!(from_log.contains(request), "{from_log}");
            assert_eq!(from_log.contains("}:inner{step=1}: "), nested, "{from_log}");
        }
    }

    #[test]
    fn with_traces_the_span_is_the_request_in_its_lines() {
        for json in [true, false] {
            let text = logged(json, async {
                let span = tracing::info_span!("gateway.request", request_id = "r-4", mcp.era = tracing::field::Empty);
                let mut log = RequestLog::new("gateway.request", span);
                log.set("request_id", "r-4".into());
                log.scope(async {
                    record([("mcp.era", Some("modern".into()))]);
                    tracing::info!("in the span");
                    // A root event: the JSON format writes the current span all the same.
                    tracing::info!(parent: None, "a root event");
                })
                .await;
            });
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), 2, "{text}");
            for line in &lines {
                if json {
                    assert_eq!(line.matches("\"span\"").count(), 1, "{line}");
                    let v: Value = serde_json::from_str(line).expect("json");
                    assert_eq!(v["span"]["mcp.era"], "modern", "recorded on the span too: {line}");
                    assert_eq!(v["span"]["request_id"], "r-4");
                } else {
                    assert_eq!(line.matches("gateway.request{").count(), 1, "{line}");
                    assert!(line.contains(r#"request_id="r-4""#), "{line}");
                }
            }
        }
    }

    #[test]
    fn lines_outside_a_request_are_the_inner_formats() {
        let text = logged(true, async {
            tracing::info!("before");
            let log = RequestLog::new("mcp.handle", tracing::Span::none());
            log.scope(async { record([("request_id", Some("r-2".into()))]) }).await;
            record([("request_id", Some("r-3".into()))]);
            tracing::info!("after");
        });
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("json")).collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines.iter().all(|l| l.get("span").is_none()), "{text}");
    }

    #[test]
    fn a_field_set_again_keeps_its_place_and_takes_the_new_value() {
        let mut log = RequestLog::new("r", tracing::Span::none());
        log.record([("a", Some(1i64.into())), ("b", Some("x".into()))]);
        log.record([("a", Some(2i64.into())), ("a", None)]);
        assert_eq!(log.fields, vec![("a", Field::I64(2)), ("b", Field::from("x"))]);
        let mut json = String::new();
        log.write_json(&mut json);
        assert_eq!(json, r#"{"a":2,"b":"x","name":"r"}"#);
    }

    #[test]
    fn a_static_field_is_read_back_in_its_request_only() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        assert_eq!(static_text("m"), None, "outside a request");
        let read = runtime.block_on(RequestLog::new("r", tracing::Span::none()).scope(async {
            record([
                ("m", Some("tools/list".into())),
                ("o", Some(String::from("owned").into())),
                ("n", Some(1i64.into())),
            ]);
            record([("m", Some("tools/call".into()))]);
            [static_text("m"), static_text("o"), static_text("n"), static_text("unset")]
        }));
        assert_eq!(read, [Some("tools/call"), None, None, None]);
    }
}
