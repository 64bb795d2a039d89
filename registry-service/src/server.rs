//! The `registry.v1.Registry` gRPC service over a live catalog.

use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::Stream;
use mcp_proto::registry::{self as pb, registry_server::Registry};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::catalog::{Catalog, Exchange, Outcome, ToolContext, ToolError, permits, text_result};

type EventStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The live catalog: replaced atomically, and watched by every connected mcp-service.
#[derive(Clone)]
pub struct CatalogHandle {
    current: Arc<watch::Sender<Arc<Catalog>>>,
    updated: broadcast::Sender<String>,
}

// === impl CatalogHandle ===

impl CatalogHandle {
    pub fn new(catalog: Arc<Catalog>) -> Self {
        let (tx, _) = watch::channel(catalog);
        let (updated, _) = broadcast::channel(256);
        Self { current: Arc::new(tx), updated }
    }

    pub fn current(&self) -> Arc<Catalog> {
        self.current.borrow().clone()
    }

    /// Replace the catalog with `change` applied to a copy of it, under a new version.
    pub fn modify(&self, change: impl FnOnce(&mut Catalog)) {
        self.current.send_modify(|c| {
            let mut next = Catalog::clone(c);
            change(&mut next);
            next.version = c.version + 1;
            *c = Arc::new(next);
        });
    }

    /// Replace the whole catalog, under a new version.
    pub fn replace(&self, mut catalog: Catalog) {
        self.current.send_modify(|c| {
            catalog.version = c.version + 1;
            *c = Arc::new(catalog);
        });
    }

    /// Announce that a resource's contents changed.
    pub fn resource_updated(&self, uri: &str) {
        let _ = self.updated.send(uri.to_owned());
    }
}

/// Serves the live catalog.
pub struct RegistryService {
    catalog: CatalogHandle,
    /// Cancelled when the service drains: open `Watch` streams end, so the graceful shutdown
    /// does not wait for watchers that never hang up.
    draining: tokio_util::sync::CancellationToken,
}

impl RegistryService {
    pub fn new(catalog: CatalogHandle) -> Self {
        Self { catalog, draining: tokio_util::sync::CancellationToken::new() }
    }

    /// End every `Watch` stream when `draining` is cancelled.
    pub fn with_draining(mut self, draining: tokio_util::sync::CancellationToken) -> Self {
        self.draining = draining;
        self
    }
}

/// Unknown and forbidden items look the same to a caller.
fn not_found(kind: &str, name: &str) -> Status {
    Status::not_found(format!("unknown {kind}: {name}"))
}

fn exchange(responses: &[u8], state: &[u8], capabilities: &[u8]) -> Result<Exchange, Status> {
    Exchange::from_wire(responses, state, capabilities).map_err(Status::invalid_argument)
}

/// Whether a serialised tool result is a tool execution error.
fn json_is_error(json: &[u8]) -> bool {
    serde_json::from_slice::<Value>(json).is_ok_and(|v| v.get("isError") == Some(&Value::Bool(true)))
}

fn json_bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

fn input_required(requests: &Value, state: &Value) -> pb::InputRequired {
    pb::InputRequired { input_requests_json: json_bytes(requests), state_json: json_bytes(state) }
}

#[tonic::async_trait]
impl Registry for RegistryService {
    async fn snapshot(&self, _req: Request<pb::SnapshotRequest>) -> Result<Response<pb::Catalog>, Status> {
        Ok(Response::new(self.catalog.current().to_proto()))
    }

    type WatchStream = EventStream<pb::CatalogChanged>;

    async fn watch(&self, _req: Request<pb::WatchRequest>) -> Result<Response<Self::WatchStream>, Status> {
        let mut versions = self.catalog.current.subscribe();
        let mut updates = self.catalog.updated.subscribe();
        let (tx, rx) = mpsc::channel(16);
        let draining = self.draining.clone();
        tokio::spawn(async move {
            let mut version = versions.borrow_and_update().version;
            if tx.send(Ok(pb::CatalogChanged { version, updated_uris: vec![] })).await.is_err() {
                return;
            }
            loop {
                let change = tokio::select! {
                    _ = tx.closed() => return,
                    _ = draining.cancelled() => return,
                    changed = versions.changed() => match changed {
                        Ok(()) => {
                            version = versions.borrow_and_update().version;
                            pb::CatalogChanged { version, updated_uris: vec![] }
                        }
                        Err(_) => return,
                    },
                    uri = updates.recv() => match uri {
                        Ok(uri) => pb::CatalogChanged { version, updated_uris: vec![uri] },
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                };
                if tx.send(Ok(change)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    type CallToolStream = EventStream<pb::ToolEvent>;

    async fn call_tool(&self, req: Request<pb::CallToolRequest>) -> Result<Response<Self::CallToolStream>, Status> {
        let span = server_span("registry call_tool", &req);
        tracing::Instrument::instrument(self.call_tool_traced(req.into_inner()), span).await
    }

    async fn read_resource(
        &self,
        req: Request<pb::ReadResourceRequest>,
    ) -> Result<Response<pb::ReadResourceResult>, Status> {
        let span = server_span("registry read_resource", &req);
        tracing::Instrument::instrument(self.read_resource_traced(req.into_inner()), span).await
    }

    async fn get_prompt(&self, req: Request<pb::GetPromptRequest>) -> Result<Response<pb::GetPromptResult>, Status> {
        let span = server_span("registry get_prompt", &req);
        tracing::Instrument::instrument(self.get_prompt_traced(req.into_inner()), span).await
    }
    async fn complete(&self, req: Request<pb::CompleteRequest>) -> Result<Response<pb::CompleteResult>, Status> {
        const MAX_VALUES: usize = 100;
        let req = req.into_inner();
        let catalog = self.catalog.current();
        let candidates: &[String] = match req.ref_type.as_str() {
            "ref/prompt" => {
                let prompt = catalog
                    .prompt(&req.ref_name)
                    .filter(|p| permits(req.caller.as_ref(), &p.scopes))
                    .ok_or_else(|| not_found("prompt", &req.ref_name))?;
                prompt.completions.get(&req.argument_name).map(Vec::as_slice).unwrap_or(&[])
            }
            "ref/resource" => {
                let template = catalog
                    .templates
                    .iter()
                    .find(|t| t.uri_template == req.ref_name)
                    .filter(|t| permits(req.caller.as_ref(), &t.scopes))
                    .ok_or_else(|| not_found("resource template", &req.ref_name))?;
                template.completions.get(&req.argument_name).map(Vec::as_slice).unwrap_or(&[])
            }
            other => return Err(Status::invalid_argument(format!("unknown reference type: {other}"))),
        };
        let prefix = req.argument_value.to_lowercase();
        let matching: Vec<String> =
            candidates.iter().filter(|c| c.to_lowercase().starts_with(&prefix)).cloned().collect();
        let total = matching.len();
        let values: Vec<String> = matching.into_iter().take(MAX_VALUES).collect();
        Ok(Response::new(pb::CompleteResult {
            has_more: total > values.len(),
            total: u32::try_from(total).ok(),
            values,
        }))
    }
}

/// The span of one gRPC call, continuing the caller's trace.
fn server_span<T>(name: &'static str, req: &Request<T>) -> tracing::Span {
    let span =
        tracing::info_span!("registry.call", otel.name = name, otel.kind = "server", trace_id = tracing::field::Empty);
    if let Some(id) = mcp_proto::telemetry::extract_grpc(&span, req.metadata()) {
        span.record("trace_id", id);
    }
    span
}

impl RegistryService {
    async fn call_tool_traced(&self, req: pb::CallToolRequest) -> Result<Response<EventStream<pb::ToolEvent>>, Status> {
        let span = tracing::Span::current();
        let catalog = self.catalog.current();
        let tool = catalog
            .tool(&req.name)
            .filter(|t| permits(req.caller.as_ref(), &t.scopes))
            .ok_or_else(|| not_found("tool", &req.name))?;
        let args: Value = if req.arguments_json.is_empty() {
            Value::Object(Default::default())
        } else {
            serde_json::from_slice(&req.arguments_json)
                .map_err(|e| Status::invalid_argument(format!("arguments are not JSON: {e}")))?
        };
        let exchange = exchange(&req.input_responses_json, &req.state_json, &req.client_capabilities_json)?;
        let handler = tool.handler.clone();
        let (tx, rx) = mpsc::channel(16);
        let ctx = ToolContext::new(tx.clone(), req.wants_progress, &req.log_level, exchange, self.catalog.clone());
        let name = req.name.clone();
        let work = async move {
            use pb::tool_event::Event;
            let started = std::time::Instant::now();
            let event = match handler(args, ctx).await {
                // A result too large to carry to mcp-service is the tool's error, with why.
                Ok(Outcome::Complete(v)) => match crate::definitions::contents_json(&name, &v) {
                    Ok(json) => Event::ResultJson(json),
                    Err(reason) => {
                        tracing::warn!(error = %reason, "the tool's result is too large to send");
                        Event::ResultJson(json_bytes(&text_result(
                            format!("The tool's result is too large: {reason}"),
                            true,
                        )))
                    }
                },
                Ok(Outcome::InputRequired { requests, state }) => {
                    Event::InputRequired(input_required(&requests, &state))
                }
                Ok(Outcome::MissingCapabilities(caps)) => Event::MissingCapabilitiesJson(json_bytes(&caps)),
                // The model can correct its arguments: a tool execution error, not a protocol error.
                Err(ToolError::InvalidArguments(msg)) => {
                    Event::ResultJson(json_bytes(&text_result(format!("Invalid arguments: {msg}"), true)))
                }
                Err(ToolError::Internal(msg)) => {
                    tracing::warn!(error = %msg, "tool failed");
                    Event::ResultJson(json_bytes(&text_result("The tool failed to run.", true)))
                }
            };
            let outcome = match &event {
                Event::ResultJson(json) if json_is_error(json) => "tool_error",
                Event::ResultJson(_) => "ok",
                Event::InputRequired(_) => "input_required",
                _ => "error",
            };
            metrics::counter!("registry_tool_calls_total", "tool" => name.clone(), "outcome" => outcome).increment(1);
            metrics::histogram!("registry_tool_duration_seconds", "tool" => name)
                .record(started.elapsed().as_secs_f64());
            let _ = tx.send(Ok(pb::ToolEvent { event: Some(event) })).await;
        };
        tokio::spawn(tracing::Instrument::instrument(work, span));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn read_resource_traced(
        &self,
        req: pb::ReadResourceRequest,
    ) -> Result<Response<pb::ReadResourceResult>, Status> {
        let catalog = self.catalog.current();
        if let Some(resource) = catalog.resource(&req.uri).filter(|r| permits(req.caller.as_ref(), &r.scopes)) {
            let contents = resource.contents_json().map_err(Status::internal)?;
            // The caller holds these very contents: they are not sent again.
            let unchanged = !contents.tag.is_empty() && contents.tag == req.if_tag;
            return Ok(Response::new(pb::ReadResourceResult {
                contents_json: if unchanged { Bytes::new() } else { contents.json },
                input_required: None,
                tag: contents.tag,
                unchanged,
            }));
        }
        let (template, vars) = catalog
            .template_for(&req.uri)
            .filter(|(t, _)| permits(req.caller.as_ref(), &t.scopes))
            .ok_or_else(|| not_found("resource", &req.uri))?;
        let exchange = exchange(&req.input_responses_json, &req.state_json, &req.client_capabilities_json)?;
        let reader = template.reader.clone();
        match reader(req.uri.clone(), vars, exchange).await.map_err(Status::invalid_argument)? {
            Outcome::Complete(contents) => {
                let json = crate::definitions::contents_json(&req.uri, &contents).map_err(Status::internal)?;
                Ok(Response::new(pb::ReadResourceResult { contents_json: json.into(), ..Default::default() }))
            }
            Outcome::InputRequired { requests, state } => Ok(Response::new(pb::ReadResourceResult {
                input_required: Some(input_required(&requests, &state)),
                ..Default::default()
            })),
            Outcome::MissingCapabilities(_) => Err(Status::failed_precondition("missing client capabilities")),
        }
    }

    async fn get_prompt_traced(&self, req: pb::GetPromptRequest) -> Result<Response<pb::GetPromptResult>, Status> {
        let catalog = self.catalog.current();
        let prompt = catalog
            .prompt(&req.name)
            .filter(|p| permits(req.caller.as_ref(), &p.scopes))
            .ok_or_else(|| not_found("prompt", &req.name))?;
        let exchange = exchange(&req.input_responses_json, &req.state_json, &req.client_capabilities_json)?;
        match (prompt.render)(&req.arguments, &exchange).map_err(Status::invalid_argument)? {
            Outcome::Complete(v) => {
                let json = crate::definitions::contents_json(&req.name, &v).map_err(Status::internal)?;
                Ok(Response::new(pb::GetPromptResult { json, input_required: None }))
            }
            Outcome::InputRequired { requests, state } => Ok(Response::new(pb::GetPromptResult {
                json: Vec::new(),
                input_required: Some(input_required(&requests, &state)),
            })),
            Outcome::MissingCapabilities(_) => Err(Status::failed_precondition("missing client capabilities")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Content, Resource, tag_of};

    fn registry() -> RegistryService {
        let resource = Resource {
            uri: "doc://secret".into(),
            def: serde_json::json!({"uri": "doc://secret", "name": "secret"}),
            scopes: vec!["admin".into()],
            mime_type: Some("text/plain".into()),
            content: Content::Text("for administrators".into()),
        };
        let catalog = Catalog {
            version: 1,
            server_info: serde_json::json!({"name": "t", "version": "1"}),
            instructions: String::new(),
            tools: vec![],
            resources: vec![resource],
            templates: vec![],
            prompts: vec![],
            live: false,
        };
        RegistryService::new(CatalogHandle::new(Arc::new(catalog)))
    }

    async fn read(registry: &RegistryService, scopes: &[&str], if_tag: &str) -> Result<pb::ReadResourceResult, Status> {
        let caller = pb::Caller { subject: "s".into(), scopes: scopes.iter().map(|s| (*s).to_owned()).collect() };
        let request = pb::ReadResourceRequest {
            uri: "doc://secret".into(),
            caller: Some(caller),
            if_tag: if_tag.into(),
            ..Default::default()
        };
        registry.read_resource(Request::new(request)).await.map(Response::into_inner)
    }

    #[tokio::test]
    async fn a_tag_is_compared_only_for_a_caller_who_may_read() {
        let registry = registry();
        let full = read(&registry, &["admin"], "").await.expect("read");
        assert!(!full.unchanged);
        assert_eq!(full.tag, tag_of(&full.contents_json));
        // The right tag: unchanged, nothing sent again.
        let again = read(&registry, &["admin"], &full.tag).await.expect("read");
        assert!(again.unchanged && again.contents_json.is_empty());
        assert_eq!(again.tag, full.tag);
        // Another tag: the contents.
        let other = read(&registry, &["admin"], "another").await.expect("read");
        assert!(!other.unchanged);
        assert_eq!(other.contents_json, full.contents_json);
        // Without the scope, knowing the tag confirms nothing: the resource is not there.
        let refused = read(&registry, &["mcp"], &full.tag).await.expect_err("refused");
        assert_eq!(refused.code(), tonic::Code::NotFound);
    }
}
