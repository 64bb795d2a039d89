//! The `registry.v1.Registry` gRPC service over a catalog.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::Stream;
use mcp_proto::registry::{self as pb, registry_server::Registry};
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::catalog::{Catalog, ToolContext, ToolError, permits, text_result};

type EventStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Serves one catalog at a time; a new catalog replaces the old one atomically.
pub struct RegistryService {
    current: watch::Receiver<Arc<Catalog>>,
    // Keeps the channel open while the service lives.
    _publisher: Arc<watch::Sender<Arc<Catalog>>>,
}

// === impl RegistryService ===

impl RegistryService {
    pub fn new(catalog: Arc<Catalog>) -> Self {
        let (tx, rx) = watch::channel(catalog);
        Self {
            current: rx,
            _publisher: Arc::new(tx),
        }
    }

    fn catalog(&self) -> Arc<Catalog> {
        self.current.borrow().clone()
    }
}

/// Unknown and forbidden items look the same to a caller.
fn not_found(kind: &str, name: &str) -> Status {
    Status::not_found(format!("unknown {kind}: {name}"))
}

#[tonic::async_trait]
impl Registry for RegistryService {
    async fn snapshot(
        &self,
        _req: Request<pb::SnapshotRequest>,
    ) -> Result<Response<pb::Catalog>, Status> {
        Ok(Response::new(self.catalog().to_proto()))
    }

    type WatchStream = EventStream<pb::CatalogChanged>;

    async fn watch(
        &self,
        _req: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let mut rx = self.current.clone();
        let stream = async_stream_from(move |tx| async move {
            loop {
                let version = rx.borrow_and_update().version;
                if tx.send(Ok(pb::CatalogChanged { version })).await.is_err() {
                    return;
                }
                if rx.changed().await.is_err() {
                    // The catalog can no longer change; keep the stream open until the caller leaves.
                    tx.closed().await;
                    return;
                }
            }
        });
        Ok(Response::new(stream))
    }

    type CallToolStream = EventStream<pb::ToolEvent>;

    #[tracing::instrument(skip_all, fields(tool = %req.get_ref().name))]
    async fn call_tool(
        &self,
        req: Request<pb::CallToolRequest>,
    ) -> Result<Response<Self::CallToolStream>, Status> {
        let req = req.into_inner();
        let catalog = self.catalog();
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
        let handler = tool.handler.clone();
        let (tx, rx) = mpsc::channel(16);
        let ctx = ToolContext::new(tx.clone(), req.wants_progress, &req.log_level);
        tokio::spawn(async move {
            let outcome = handler(args, ctx).await;
            let result = match outcome {
                Ok(v) => v,
                // The model can correct its arguments: a tool execution error, not a protocol error.
                Err(ToolError::InvalidArguments(msg)) => {
                    text_result(format!("Invalid arguments: {msg}"), true)
                }
                Err(ToolError::Internal(msg)) => {
                    tracing::warn!(error = %msg, "tool failed");
                    text_result("The tool failed to run.", true)
                }
            };
            let event =
                pb::tool_event::Event::ResultJson(serde_json::to_vec(&result).unwrap_or_default());
            let _ = tx.send(Ok(pb::ToolEvent { event: Some(event) })).await;
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn read_resource(
        &self,
        req: Request<pb::ReadResourceRequest>,
    ) -> Result<Response<pb::ReadResourceResult>, Status> {
        let req = req.into_inner();
        let catalog = self.catalog();
        let resource = catalog
            .resource(&req.uri)
            .filter(|r| permits(req.caller.as_ref(), &r.scopes))
            .ok_or_else(|| not_found("resource", &req.uri))?;
        let contents = serde_json::to_vec(&resource.contents())
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(pb::ReadResourceResult {
            contents_json: contents,
        }))
    }

    async fn get_prompt(
        &self,
        req: Request<pb::GetPromptRequest>,
    ) -> Result<Response<pb::GetPromptResult>, Status> {
        let req = req.into_inner();
        let catalog = self.catalog();
        let prompt = catalog
            .prompt(&req.name)
            .filter(|p| permits(req.caller.as_ref(), &p.scopes))
            .ok_or_else(|| not_found("prompt", &req.name))?;
        let rendered = (prompt.render)(&req.arguments).map_err(Status::invalid_argument)?;
        let json = serde_json::to_vec(&rendered).map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(pb::GetPromptResult { json }))
    }

    async fn complete(
        &self,
        req: Request<pb::CompleteRequest>,
    ) -> Result<Response<pb::CompleteResult>, Status> {
        const MAX_VALUES: usize = 100;
        let req = req.into_inner();
        let catalog = self.catalog();
        let candidates: &[String] = match req.ref_type.as_str() {
            "ref/prompt" => {
                let prompt = catalog
                    .prompt(&req.ref_name)
                    .filter(|p| permits(req.caller.as_ref(), &p.scopes))
                    .ok_or_else(|| not_found("prompt", &req.ref_name))?;
                prompt
                    .completions
                    .get(&req.argument_name)
                    .map(Vec::as_slice)
                    .unwrap_or(&[])
            }
            "ref/resource" => &[],
            other => {
                return Err(Status::invalid_argument(format!(
                    "unknown reference type: {other}"
                )));
            }
        };
        let prefix = req.argument_value.to_lowercase();
        let matching: Vec<String> = candidates
            .iter()
            .filter(|c| c.to_lowercase().starts_with(&prefix))
            .cloned()
            .collect();
        let total = matching.len();
        let values: Vec<String> = matching.into_iter().take(MAX_VALUES).collect();
        Ok(Response::new(pb::CompleteResult {
            has_more: total > values.len(),
            total: u32::try_from(total).ok(),
            values,
        }))
    }
}

/// A stream fed by a spawned task through a channel.
fn async_stream_from<T, F, Fut>(f: F) -> EventStream<T>
where
    T: Send + 'static,
    F: FnOnce(mpsc::Sender<Result<T, Status>>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(f(tx));
    Box::pin(ReceiverStream::new(rx))
}
