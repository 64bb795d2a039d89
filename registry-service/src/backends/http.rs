//! Backend `http`: a tool that calls an upstream HTTP API.
//!
//! Method, URL, query, headers and body are templates over the arguments (query values are
//! URL-encoded by construction); `${VAR}` brings secrets from the environment. Every call has a
//! timeout and a response size limit. The SSRF guard refuses private, loopback, link-local and
//! other non-public addresses — for literal IPs, for every address a name resolves to (checked
//! when connecting, so redirects and DNS answers are covered), and for redirect targets — unless
//! the file sets `allow_private_networks`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use mcp_proto::outbound::{client, error_chain, literal_refused};
use serde_json::{Value, json};

use super::templates::{self, Templates, expand_env};
use super::{ToolContext, json_result};
use crate::catalog::{Outcome, ToolError, ToolHandler, text_result};
use crate::definitions::model::HttpDef;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_MAX_RESPONSE: usize = 1024 * 1024;
const METHODS: [&str; 6] = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"];

/// The compiled parts of one `http` tool.
struct Upstream {
    method: reqwest::Method,
    templates: Templates,
    headers: Vec<String>,
    query: Vec<String>,
    has_body: bool,
    max_response: usize,
    allow_private: bool,
    client: reqwest::Client,
    output_schema: Option<Value>,
}

/// Check an `http` section and build its handler.
pub fn tool(def: &HttpDef, cx: &ToolContext<'_>) -> Result<ToolHandler, Vec<String>> {
    let mut problems = Vec::new();
    let method = def.method.to_ascii_uppercase();
    if !METHODS.contains(&method.as_str()) {
        problems.push(format!("http.method `{}` must be one of {}", def.method, METHODS.join(", ")));
    }
    let mut templates = Templates::default();
    let mut add = |name: &str, source: &str, what: &str, problems: &mut Vec<String>| match expand_env(source) {
        Err(e) => problems.push(format!("{what}: {e}")),
        Ok(source) => {
            if let Err(e) = templates.add(name, &source, cx.properties) {
                problems.push(format!("{what}: {e}"));
            }
        }
    };
    add(templates::URL, &def.url, "http.url", &mut problems);
    for (k, v) in &def.headers {
        if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err() {
            problems.push(format!("http.headers: `{k}` is not a header name"));
        }
        add(&format!("header:{k}"), v, &format!("http.headers.{k}"), &mut problems);
    }
    for (k, v) in &def.query {
        add(&format!("query:{k}"), v, &format!("http.query.{k}"), &mut problems);
    }
    if let Some(body) = &def.body {
        add("body", body, "http.body", &mut problems);
    }
    if def.timeout_ms == Some(0) {
        problems.push("http.timeout_ms must be greater than 0".into());
    }
    // The answer goes on to mcp-service in one message, as JSON (escaping can grow text).
    let most = crate::definitions::MAX_RAW_BYTES as usize;
    if def.max_response_bytes.is_some_and(|max| max == 0 || max > most) {
        problems.push(format!(
            "http.max_response_bytes must be between 1 and {most} ({} MiB: the answer travels between the services in one message of at most {} MiB)",
            most / (1024 * 1024),
            mcp_proto::MAX_MESSAGE_BYTES / (1024 * 1024)
        ));
    }
    let timeout = def.timeout_ms.map_or(DEFAULT_TIMEOUT, Duration::from_millis);
    let client = client(cx.allow_private, timeout).map_err(|e| vec![e])?;
    if !problems.is_empty() {
        return Err(problems);
    }
    let upstream = Arc::new(Upstream {
        method: reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| vec![e.to_string()])?,
        templates,
        headers: def.headers.keys().cloned().collect(),
        query: def.query.keys().cloned().collect(),
        has_body: def.body.is_some(),
        max_response: def.max_response_bytes.unwrap_or(DEFAULT_MAX_RESPONSE),
        allow_private: cx.allow_private,
        client,
        output_schema: cx.output_schema.cloned(),
    });
    Ok(Arc::new(move |args, _ctx| {
        let upstream = upstream.clone();
        Box::pin(async move { upstream.call(&args).await })
    }))
}

/// A tool execution error the model sees (`isError: true`).
fn failed(message: String) -> Result<Outcome, ToolError> {
    Ok(Outcome::Complete(text_result(message, true)))
}

impl Upstream {
    /// One upstream call, as a client span of the tool's trace (W3C `traceparent` sent along).
    async fn call(&self, args: &Value) -> Result<Outcome, ToolError> {
        let span = tracing::info_span!(
            "upstream.http",
            otel.name = "upstream HTTP",
            otel.kind = "client",
            http.request.method = %self.method,
            server.address = tracing::field::Empty,
            http.response.status_code = tracing::field::Empty,
        );
        let started = std::time::Instant::now();
        let outcome = tracing::Instrument::instrument(self.call_traced(args), span).await;
        let result = match &outcome {
            Ok(Outcome::Complete(v)) if v.get("isError") == Some(&Value::Bool(true)) => "error",
            Ok(_) => "ok",
            Err(_) => "error",
        };
        metrics::histogram!("registry_upstream_duration_seconds", "backend" => "http", "outcome" => result)
            .record(started.elapsed().as_secs_f64());
        outcome
    }

    async fn call_traced(&self, args: &Value) -> Result<Outcome, ToolError> {
        let render = |name: &str| self.templates.render(name, args).map_err(ToolError::Internal);
        let url = render(templates::URL)?;
        let mut url = match reqwest::Url::parse(url.trim()) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => u,
            _ => return failed(format!("The tool's URL `{url}` is not an http(s) URL.")),
        };
        if !self.query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for k in &self.query {
                pairs.append_pair(k, &render(&format!("query:{k}"))?);
            }
        }
        if !self.allow_private
            && let Some(refused) = literal_refused(&url)
        {
            return failed(format!("Refused to call {}: {refused}.", url.host_str().unwrap_or_default()));
        }
        tracing::Span::current().record("server.address", url.host_str().unwrap_or_default());
        let mut trace_headers = reqwest::header::HeaderMap::new();
        mcp_proto::telemetry::inject_http(&mut trace_headers);
        let mut request = self.client.request(self.method.clone(), url.clone()).headers(trace_headers);
        for k in &self.headers {
            request = request.header(k, render(&format!("header:{k}"))?);
        }
        if self.has_body {
            let body = render("body")?;
            request = match serde_json::from_str::<Value>(&body) {
                Ok(json) => request.json(&json),
                Err(_) => request.header("content-type", "text/plain; charset=utf-8").body(body),
            };
        }
        let host = url.host_str().unwrap_or_default().to_owned();
        let response = match request.send().await {
            Ok(r) => {
                tracing::Span::current().record("http.response.status_code", r.status().as_u16());
                r
            }
            Err(e) if e.is_timeout() => return failed(format!("The upstream {host} did not answer in time.")),
            Err(e) => {
                tracing::warn!(%host, error = %error_chain(&e), "upstream call failed");
                return failed(format!("The upstream {host} could not be reached: {}", error_chain(&e)));
            }
        };
        let status = response.status();
        let is_json = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.contains("json"));
        let body = match self.read_limited(response).await {
            Ok(b) => b,
            Err(message) => return failed(message),
        };
        let text = String::from_utf8_lossy(&body).into_owned();
        if !status.is_success() {
            let snippet: String = text.chars().take(500).collect();
            return failed(format!("The upstream {host} answered {status}: {snippet}"));
        }
        if is_json && let Ok(value) = serde_json::from_slice::<Value>(&body) {
            return Ok(Outcome::Complete(json_result(&value, self.output_schema.as_ref())));
        }
        Ok(Outcome::Complete(json!({ "content": [{ "type": "text", "text": text }], "isError": false })))
    }

    /// The response body, refused once it passes the size limit.
    async fn read_limited(&self, response: reqwest::Response) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        let mut chunks = response.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| format!("The upstream's answer broke off: {}", error_chain(&e)))?;
            if body.len() + chunk.len() > self.max_response {
                return Err(format!("The upstream's answer is larger than {} bytes.", self.max_response));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}
