//! How span fields are kept for JSON log lines.
//!
//! tracing-subscriber's `JsonFields` stores a span's fields as one JSON object and, on every
//! `Span::record`, parses that object, inserts the new fields and serialises it again. A request
//! span that learns its method, era, tool and outcome as it goes paid that four to six times per
//! request (about 7 % of mcp-service's CPU under load). [`AppendJsonFields`] writes the same
//! object but appends recorded fields to its text; a field recorded twice appears twice, and
//! the JSON formatter, which parses the object when it prints a line, keeps the last value.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::FormattedFields;
use tracing_subscriber::fmt::format::Writer;

/// Span fields as a JSON object, appended to on `record` (see the module documentation).
#[derive(Debug, Default, Clone, Copy)]
pub struct AppendJsonFields;

impl<'writer> FormatFields<'writer> for AppendJsonFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'writer>, fields: R) -> fmt::Result {
        writer.write_char('{')?;
        fields.record(&mut Members { text: &mut writer, empty: true });
        writer.write_char('}')
    }

    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        if fields.is_empty() {
            return Ok(());
        }
        // The members are written into the object in place, before its closing brace.
        let object = &mut current.fields;
        if object.ends_with('}') {
            object.pop();
        } else {
            object.clear();
            object.push('{');
        }
        let empty = object.len() == 1;
        fields.record(&mut Members { text: object, empty });
        object.push('}');
        Ok(())
    }
}

/// `"name":value` pairs separated by commas, appended to `text` (an object's members so far,
/// without its closing brace; `empty` while it has none).
struct Members<'a, W: fmt::Write> {
    text: &'a mut W,
    empty: bool,
}

impl<W: fmt::Write> Members<'_, W> {
    fn key(&mut self, field: &Field) {
        if !self.empty {
            let _ = self.text.write_char(',');
        }
        self.empty = false;
        push_json_string(self.text, field.name());
        let _ = self.text.write_char(':');
    }
}

impl<W: fmt::Write> Visit for Members<'_, W> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.key(field);
        push_json_string(self.text, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.key(field);
        let _ = write!(self.text, "{value}");
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.key(field);
        let _ = write!(self.text, "{value}");
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        self.key(field);
        let _ = write!(self.text, "{value}");
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        self.key(field);
        let _ = write!(self.text, "{value}");
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.key(field);
        if value.is_finite() {
            let _ = write!(self.text, "{value}");
        } else {
            let _ = self.text.write_str("null");
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field);
        let _ = self.text.write_str(if value { "true" } else { "false" });
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.key(field);
        push_json_string(self.text, &value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.key(field);
        push_json_string(self.text, &format!("{value:?}"));
    }
}

pub(crate) fn push_json_string(out: &mut impl fmt::Write, value: &str) {
    // Most values (names, methods, ids) need no escape: they are copied between quotes
    // without a string of their own.
    if !value.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        let _ = out.write_char('"');
        let _ = out.write_str(value);
        let _ = out.write_char('"');
        return;
    }
    // serde_json escapes exactly as JSON requires; writing to a String cannot fail.
    if let Ok(quoted) = serde_json::to_string(value) {
        let _ = out.write_str(&quoted);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use serde_json::Value;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// What a log layer wrote (its writer, cloned for each line).
    #[derive(Clone, Default)]
    pub(crate) struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Lines {
        pub(crate) fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("lines").clone()).expect("utf-8")
        }
    }

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lines").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn strings_are_quoted_as_serde_json_quotes_them() {
        for value in ["", "tools/call", "é ü 日本", "a\"b", "back\\slash", "line\nbreak", "\u{1}\t", "del\u{7f}"] {
            let mut out = String::from("x");
            push_json_string(&mut out, value);
            assert_eq!(out, format!("x{}", serde_json::to_string(value).expect("json")), "{value:?}");
        }
    }

    /// The one JSON log line `log` writes, with the services' JSON layer.
    fn one_json_line(log: impl FnOnce()) -> Value {
        let lines = Lines::default();
        let writer = lines.clone();
        let layer = tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .fmt_fields(AppendJsonFields)
            .with_writer(move || writer.clone());
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), log);
        serde_json::from_str(lines.text().trim()).expect("one JSON line")
    }

    #[test]
    fn recorded_fields_reach_the_log_line_as_json() {
        let line = one_json_line(|| {
            let span = tracing::info_span!(
                "req",
                request_id = "r-1",
                method = tracing::field::Empty,
                code = tracing::field::Empty,
                ok = tracing::field::Empty,
                took = tracing::field::Empty,
                note = tracing::field::Empty,
            );
            span.record("method", "tools/call");
            span.record("code", -32602);
            span.record("ok", false);
            span.record("took", 0.5);
            span.record("note", tracing::field::debug("a \"quoted\"\nline"));
            span.record("code", 7);
            span.in_scope(|| tracing::info!(extra = 1, "inside"));
        });
        let span = &line["span"];
        assert_eq!(span["request_id"], "r-1");
        assert_eq!(span["method"], "tools/call");
        assert_eq!(span["code"], 7, "the last value recorded wins");
        assert_eq!(span["ok"], false);
        assert_eq!(span["took"], 0.5);
        assert_eq!(span["note"], "\"a \\\"quoted\\\"\\nline\"");
        assert_eq!(span["name"], "req");
        assert_eq!(line["extra"], 1);
    }

    #[test]
    fn record_all_sets_fields_together_or_not_at_all() {
        let line = one_json_line(|| {
            let span = tracing::info_span!(
                "req",
                method = tracing::field::Empty,
                era = tracing::field::Empty,
                code = tracing::field::Empty,
                tool = tracing::field::Empty,
            );
            crate::telemetry::record_all(
                &span,
                [("method", Some(&"tools/call" as &dyn tracing::Value)), ("era", Some(&"modern")), ("code", None)],
            );
            // A name the span does not have: nothing of the set is recorded.
            crate::telemetry::record_all(&span, [("tool", Some(&"greet" as &dyn tracing::Value)), ("nope", Some(&1))]);
            span.in_scope(|| tracing::info!("inside"));
        });
        let span = &line["span"];
        assert_eq!(span["method"], "tools/call");
        assert_eq!(span["era"], "modern");
        assert!(span.get("code").is_none(), "a value of None is not recorded: {span}");
        assert!(span.get("tool").is_none(), "a set with an unknown name is not recorded: {span}");
    }
}
