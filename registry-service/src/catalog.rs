//! The catalog model: what is offered, who may see it, and how each item is produced.
//!
//! Items keep their MCP definition as JSON (camelCase, as clients see it) next to what the
//! registry needs to execute them, so the snapshot sent to mcp-service needs no translation.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use mcp_proto::registry as pb;
use serde_json::Value;
use tokio::sync::mpsc;

/// Produces a `CallToolResult` from the call's arguments.
pub type ToolHandler =
    Arc<dyn Fn(Value, ToolContext) -> BoxFuture<'static, Result<Value, ToolError>> + Send + Sync>;

/// Renders a prompt's messages from its arguments.
pub type PromptRenderer =
    Arc<dyn Fn(&HashMap<String, String>) -> Result<Value, String> + Send + Sync>;

/// A failure that is not the tool's own result: the tool could not be run at all.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    #[error("{0}")]
    Internal(String),
}

pub struct Tool {
    pub name: String,
    pub def: Value,
    pub scopes: Vec<String>,
    pub handler: ToolHandler,
}

/// The bytes of a resource.
#[derive(Debug, Clone)]
pub enum Content {
    Text(String),
    Blob(Vec<u8>),
}

pub struct Resource {
    pub uri: String,
    pub def: Value,
    pub scopes: Vec<String>,
    pub mime_type: Option<String>,
    pub content: Content,
}

pub struct ResourceTemplate {
    pub uri_template: String,
    pub def: Value,
    pub scopes: Vec<String>,
}

pub struct Prompt {
    pub name: String,
    pub def: Value,
    pub scopes: Vec<String>,
    pub render: PromptRenderer,
    /// Completion values per argument name.
    pub completions: HashMap<String, Vec<String>>,
}

/// Everything the server offers at one version.
pub struct Catalog {
    pub version: u64,
    pub server_info: Value,
    pub instructions: String,
    pub tools: Vec<Tool>,
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
    pub prompts: Vec<Prompt>,
}

/// Whether a caller holding `held` may use an item that requires `required`.
/// A missing caller means authentication is off, and everything is visible.
pub fn permits(caller: Option<&pb::Caller>, required: &[String]) -> bool {
    match caller {
        None => true,
        Some(c) => required.iter().all(|s| c.scopes.iter().any(|h| h == s)),
    }
}

// === impl Catalog ===

impl Catalog {
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    pub fn resource(&self, uri: &str) -> Option<&Resource> {
        self.resources.iter().find(|r| r.uri == uri)
    }

    pub fn prompt(&self, name: &str) -> Option<&Prompt> {
        self.prompts.iter().find(|p| p.name == name)
    }

    /// The wire form served by `Snapshot`.
    pub fn to_proto(&self) -> pb::Catalog {
        let json = |v: &Value| serde_json::to_vec(v).unwrap_or_default();
        pb::Catalog {
            version: self.version,
            server_info_json: json(&self.server_info),
            instructions: self.instructions.clone(),
            tools: self
                .tools
                .iter()
                .map(|t| pb::Tool {
                    name: t.name.clone(),
                    json: json(&t.def),
                    scopes: t.scopes.clone(),
                })
                .collect(),
            resources: self
                .resources
                .iter()
                .map(|r| pb::Resource {
                    uri: r.uri.clone(),
                    json: json(&r.def),
                    scopes: r.scopes.clone(),
                })
                .collect(),
            resource_templates: self
                .templates
                .iter()
                .map(|t| pb::ResourceTemplate {
                    uri_template: t.uri_template.clone(),
                    json: json(&t.def),
                    scopes: t.scopes.clone(),
                })
                .collect(),
            prompts: self
                .prompts
                .iter()
                .map(|p| pb::Prompt {
                    name: p.name.clone(),
                    json: json(&p.def),
                    scopes: p.scopes.clone(),
                })
                .collect(),
        }
    }
}

// === impl Resource ===

impl Resource {
    /// The `contents` array of a `ReadResourceResult`.
    pub fn contents(&self) -> Value {
        use base64::Engine as _;
        let mut item = serde_json::Map::new();
        item.insert("uri".into(), Value::String(self.uri.clone()));
        if let Some(m) = &self.mime_type {
            item.insert("mimeType".into(), Value::String(m.clone()));
        }
        match &self.content {
            Content::Text(t) => item.insert("text".into(), Value::String(t.clone())),
            Content::Blob(b) => item.insert(
                "blob".into(),
                Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
            ),
        };
        Value::Array(vec![Value::Object(item)])
    }
}

/// What a running tool may report before its result.
pub struct ToolContext {
    events: mpsc::Sender<Result<pb::ToolEvent, tonic::Status>>,
    wants_progress: bool,
    /// Minimum log rank the client asked for; `None` means no log events.
    log_rank: Option<usize>,
}

// === impl ToolContext ===

impl ToolContext {
    pub fn new(
        events: mpsc::Sender<Result<pb::ToolEvent, tonic::Status>>,
        wants_progress: bool,
        log_level: &str,
    ) -> Self {
        Self {
            events,
            wants_progress,
            log_rank: mcp_proto::vocab::log_level_rank(log_level),
        }
    }

    /// Report progress, if the client asked for it.
    pub async fn progress(&self, progress: f64, total: Option<f64>, message: &str) {
        if !self.wants_progress {
            return;
        }
        let event = pb::tool_event::Event::Progress(pb::Progress {
            progress,
            total,
            message: message.to_owned(),
        });
        let _ = self
            .events
            .send(Ok(pb::ToolEvent { event: Some(event) }))
            .await;
    }

    /// Emit a log message, if the client asked for this level or a lower one.
    pub async fn log(&self, level: &str, data: Value) {
        let Some(min) = self.log_rank else { return };
        if mcp_proto::vocab::log_level_rank(level).is_none_or(|r| r < min) {
            return;
        }
        let event = pb::tool_event::Event::Log(pb::LogMessage {
            level: level.to_owned(),
            logger: String::new(),
            data_json: serde_json::to_vec(&data).unwrap_or_default(),
        });
        let _ = self
            .events
            .send(Ok(pb::ToolEvent { event: Some(event) }))
            .await;
    }

    /// Whether the caller has gone away (the call was cancelled).
    pub fn is_cancelled(&self) -> bool {
        self.events.is_closed()
    }
}

/// A text-only `CallToolResult`.
pub fn text_result(text: impl Into<String>, is_error: bool) -> Value {
    serde_json::json!({ "content": [{ "type": "text", "text": text.into() }], "isError": is_error })
}
