//! JSON-RPC dispatch for both eras: parse, classify, validate in the order the 2026-07-28
//! specification requires, route by method, and wrap every reply the same way.
//!
//! Validation order for a modern request: envelope (-32700/-32600) → required `_meta`
//! (-32602) → protocol version (-32022) → `logLevel` (-32602) → method known (-32601) →
//! handler. (Header checks sit between `_meta` and version on HTTP; the gateway does them.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_proto::envelope::{self, Body, Envelope, EnvelopeError, Kind};
use mcp_proto::mcp::{Disposition, Principal, Transport};
use mcp_proto::registry::registry_client::RegistryClient;
use mcp_proto::vocab::{self, Era, meta};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tonic::transport::Channel;

use crate::catalog::{CatalogCache, CatalogView};
use crate::error::Error;
use crate::methods;

/// One message out: an interim notification, or the final reply.
#[derive(Debug)]
pub struct Frame {
    pub json: Vec<u8>,
    pub disposition: Disposition,
}

pub type Sink = mpsc::Sender<Frame>;

/// Legacy state of a stdio connection (process-scoped, set by `initialize`).
#[derive(Debug, Default)]
pub struct Session {
    pub negotiated: Mutex<Option<&'static str>>,
    pub log_level: Mutex<Option<String>>,
    pub client_capabilities: Mutex<Value>,
}

/// What the transport knows about a message besides its bytes.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// The era decided by the edge; `None` lets the body decide (stdio).
    pub era: Option<Era>,
    /// `MCP-Protocol-Version` (HTTP only).
    pub header_version: Option<String>,
    pub transport: Transport,
    /// `None` when authentication is off.
    pub principal: Option<Principal>,
    pub session: Option<Arc<Session>>,
}

impl Context {
    /// The legacy revision in force for a request after the handshake.
    fn legacy_revision(&self) -> &'static str {
        if let Some(s) = &self.session {
            return s
                .negotiated
                .lock()
                .ok()
                .and_then(|g| *g)
                .unwrap_or(vocab::LATEST_LEGACY);
        }
        match self.header_version.as_deref() {
            Some(v) => vocab::LEGACY_REVISIONS
                .into_iter()
                .find(|r| *r == v)
                .unwrap_or(vocab::LEGACY_HTTP_DEFAULT),
            None => vocab::LEGACY_HTTP_DEFAULT,
        }
    }
}

/// Tunables of the engine.
#[derive(Debug, Clone)]
pub struct Settings {
    pub page_size: usize,
    /// `ttlMs` of list and discovery results.
    pub list_ttl_ms: u64,
    /// `ttlMs` of `resources/read` results.
    pub read_ttl_ms: u64,
    /// How long a request waits for the first catalog snapshot.
    pub catalog_wait: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            page_size: 100,
            list_ttl_ms: 60_000,
            read_ttl_ms: 0,
            catalog_wait: Duration::from_secs(10),
        }
    }
}

/// The protocol engine shared by the gRPC service and the stdio transport.
pub struct Engine {
    pub(crate) registry: RegistryClient<Channel>,
    pub(crate) catalog: CatalogCache,
    pub(crate) settings: Settings,
}

/// Methods this server knows, in either era.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Initialize,
    Ping,
    SetLogLevel,
    Discover,
    ToolsList,
    ToolsCall,
    ResourcesList,
    ResourceTemplatesList,
    ResourcesRead,
    PromptsList,
    PromptsGet,
    Complete,
    Unknown,
}

impl Method {
    pub fn parse(name: &str) -> Self {
        match name {
            "initialize" => Self::Initialize,
            "ping" => Self::Ping,
            "logging/setLevel" => Self::SetLogLevel,
            "server/discover" => Self::Discover,
            "tools/list" => Self::ToolsList,
            "tools/call" => Self::ToolsCall,
            "resources/list" => Self::ResourcesList,
            "resources/templates/list" => Self::ResourceTemplatesList,
            "resources/read" => Self::ResourcesRead,
            "prompts/list" => Self::PromptsList,
            "prompts/get" => Self::PromptsGet,
            "completion/complete" => Self::Complete,
            _ => Self::Unknown,
        }
    }

    /// Whether the method exists in `era`. The handshake, `ping` and `logging/setLevel` were
    /// removed in 2026-07-28; `server/discover` is answered in both (clients probe with it).
    pub fn served_in(self, era: Era) -> bool {
        match self {
            Self::Unknown => false,
            Self::Initialize | Self::Ping | Self::SetLogLevel => era == Era::Legacy,
            _ => true,
        }
    }

    /// The six results that carry `ttlMs`/`cacheScope` in 2026-07-28.
    pub fn cacheable(self) -> bool {
        matches!(
            self,
            Self::Discover
                | Self::ToolsList
                | Self::ResourcesList
                | Self::ResourceTemplatesList
                | Self::ResourcesRead
                | Self::PromptsList
        )
    }
}

/// A validated request on its way to a method handler.
pub struct Request<'a> {
    pub era: Era,
    /// The revision the reply is shaped for.
    pub revision: &'static str,
    pub method: Method,
    pub params: Value,
    pub ctx: &'a Context,
    pub sink: &'a Sink,
}

impl Request<'_> {
    pub fn modern(&self) -> bool {
        self.era == Era::Modern
    }

    pub fn meta(&self) -> Option<&Map<String, Value>> {
        self.params.get("_meta").and_then(Value::as_object)
    }

    /// `_meta.progressToken`, when it is a string or an integer.
    pub fn progress_token(&self) -> Option<Value> {
        self.meta()?
            .get(meta::PROGRESS_TOKEN)
            .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
            .cloned()
    }

    /// The minimum level of log notifications for this request, if any are wanted.
    /// Modern: only when the request opts in with `logLevel`. Legacy: the level set with
    /// `logging/setLevel` on this connection, else `info`.
    pub fn log_level(&self) -> Option<String> {
        match self.era {
            Era::Modern => self
                .meta()?
                .get(meta::LOG_LEVEL)?
                .as_str()
                .map(str::to_owned),
            Era::Legacy => Some(
                self.ctx
                    .session
                    .as_ref()
                    .and_then(|s| s.log_level.lock().ok()?.clone())
                    .unwrap_or_else(|| "info".to_owned()),
            ),
        }
    }

    /// A string parameter that must be present.
    pub fn required_str(&self, name: &str) -> Result<&str, Error> {
        self.params
            .get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| Error::InvalidParams(format!("`{name}` must be a string")))
    }

    /// An optional `cursor` parameter.
    pub fn cursor(&self) -> Result<Option<&str>, Error> {
        match self.params.get("cursor") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(Error::InvalidCursor),
        }
    }

    /// Send a notification on this request's stream (progress, log).
    pub async fn notify(&self, method: &str, params: Value) {
        let json = mcp_proto::jsonrpc::notification(method, &params);
        let _ = self
            .sink
            .send(Frame {
                json,
                disposition: Disposition::Interim,
            })
            .await;
    }

    pub fn caller(&self) -> Option<mcp_proto::registry::Caller> {
        self.ctx
            .principal
            .as_ref()
            .map(|p| mcp_proto::registry::Caller {
                subject: p.subject.clone(),
                scopes: p.scopes.clone(),
            })
    }

    /// Whether the caller may see an item with these scopes (everything when auth is off).
    pub fn permits(&self, scopes: &[String]) -> bool {
        match &self.ctx.principal {
            None => true,
            Some(p) => scopes.iter().all(|s| p.scopes.contains(s)),
        }
    }
}

// === impl Engine ===

impl Engine {
    pub fn new(
        registry: RegistryClient<Channel>,
        catalog: CatalogCache,
        settings: Settings,
    ) -> Self {
        Self {
            registry,
            catalog,
            settings,
        }
    }

    /// Handle one body (a message or a batch): interim frames, then exactly one final frame.
    pub async fn handle(&self, body: &[u8], ctx: &Context, sink: &Sink) {
        let era_hint = ctx.era.unwrap_or(Era::Legacy);
        let frame = match envelope::parse_body(body) {
            Err(e) => Some(envelope_error(e, era_hint)),
            Ok(Body::Single(env)) => self.handle_one(env, ctx, sink).await,
            Ok(Body::Batch(items)) => self.handle_batch(items, ctx, sink).await,
        };
        let frame = frame.unwrap_or(Frame {
            json: Vec::new(),
            disposition: Disposition::Accepted,
        });
        let _ = sink.send(frame).await;
    }

    /// One message; `None` when nothing is to be answered (a notification or a response).
    async fn handle_one(&self, env: Envelope<'_>, ctx: &Context, sink: &Sink) -> Option<Frame> {
        let era = ctx.era.unwrap_or_else(|| env.body_era());
        match env.kind {
            Kind::Request => {}
            Kind::Notification => {
                self.notification(&env, ctx);
                return None;
            }
            // Answers to server-to-client requests; none are outstanding yet.
            Kind::Response => return None,
        }
        let id = env.id_json();
        let outcome = match era {
            Era::Modern => self.modern(&env, ctx, sink).await,
            Era::Legacy => self.legacy(&env, ctx, sink).await,
        };
        Some(match outcome {
            Ok(result) => Frame {
                json: mcp_proto::jsonrpc::result(id, &result),
                disposition: Disposition::Reply,
            },
            Err(e) => Frame {
                json: e.to_json(id, era),
                disposition: e.disposition(era),
            },
        })
    }

    /// JSON-RPC batches exist only in revision 2025-03-26.
    async fn handle_batch(
        &self,
        items: Vec<&serde_json::value::RawValue>,
        ctx: &Context,
        sink: &Sink,
    ) -> Option<Frame> {
        let revision = ctx.legacy_revision();
        if ctx.era == Some(Era::Modern) || revision != "2025-03-26" {
            let e = Error::InvalidRequest(format!(
                "JSON-RPC batches are only part of protocol revision 2025-03-26 (this request is served as {})",
                if ctx.era == Some(Era::Modern) {
                    vocab::MODERN_REVISION
                } else {
                    revision
                }
            ));
            return Some(Frame {
                json: e.to_json(None, Era::Legacy),
                disposition: e.disposition(Era::Legacy),
            });
        }
        if items.is_empty() {
            let e = Error::InvalidRequest("empty batch".into());
            return Some(Frame {
                json: e.to_json(None, Era::Legacy),
                disposition: e.disposition(Era::Legacy),
            });
        }
        let mut replies: Vec<Box<serde_json::value::RawValue>> = Vec::new();
        for raw in items {
            let frame = match envelope::parse_message(raw) {
                Err(e) => Some(envelope_error(e, Era::Legacy)),
                Ok(env) if env.body_era() == Era::Modern || env.method == "initialize" => {
                    let e = Error::InvalidRequest(format!(
                        "`{}` cannot be part of a batch",
                        env.method
                    ));
                    env.id.map(|_| Frame {
                        json: e.to_json(env.id_json(), Era::Legacy),
                        disposition: Disposition::Reply,
                    })
                }
                Ok(env) => {
                    let ctx = Context {
                        era: Some(Era::Legacy),
                        ..ctx.clone()
                    };
                    Box::pin(self.handle_one(env, &ctx, sink)).await
                }
            };
            if let Some(f) = frame
                && let Ok(text) = String::from_utf8(f.json)
                && let Ok(raw) = serde_json::value::RawValue::from_string(text)
            {
                replies.push(raw);
            }
        }
        if replies.is_empty() {
            return None;
        }
        Some(Frame {
            json: serde_json::to_vec(&replies).unwrap_or_default(),
            disposition: Disposition::Reply,
        })
    }

    fn notification(&self, env: &Envelope<'_>, _ctx: &Context) {
        // `notifications/initialized`, `notifications/cancelled` (handled by the transport),
        // `notifications/roots/list_changed`: nothing to answer.
        tracing::debug!(method = %env.method, "notification");
    }

    async fn modern(&self, env: &Envelope<'_>, ctx: &Context, sink: &Sink) -> Result<Value, Error> {
        if let Some(reason) = env.missing_modern_meta() {
            return Err(Error::MissingMeta(reason.to_owned()));
        }
        let requested = env.meta_version_str().unwrap_or_default();
        if !vocab::MODERN_REVISIONS.contains(&requested.as_ref()) {
            return Err(Error::UnsupportedVersion {
                requested: requested.into_owned(),
            });
        }
        let params = parse_params(env)?;
        if let Some(level) = params.get("_meta").and_then(|m| m.get(meta::LOG_LEVEL))
            && level.as_str().and_then(vocab::log_level_rank).is_none()
        {
            return Err(Error::InvalidLogLevel(format!(
                "`{}` must be one of {}",
                meta::LOG_LEVEL,
                vocab::LOG_LEVELS.join(", ")
            )));
        }
        let method = Method::parse(&env.method);
        if !method.served_in(Era::Modern) {
            return Err(Error::MethodNotFound(env.method.to_string()));
        }
        let req = Request {
            era: Era::Modern,
            revision: vocab::MODERN_REVISION,
            method,
            params,
            ctx,
            sink,
        };
        let catalog = self.catalog().await?;
        let result = self.invoke(&req, &catalog).await?;
        Ok(self.wrap_modern(result, method, ctx, &catalog))
    }

    async fn legacy(&self, env: &Envelope<'_>, ctx: &Context, sink: &Sink) -> Result<Value, Error> {
        let method = Method::parse(&env.method);
        if !method.served_in(Era::Legacy) {
            return Err(Error::MethodNotFound(env.method.to_string()));
        }
        let params = parse_params(env)?;
        let req = Request {
            era: Era::Legacy,
            revision: ctx.legacy_revision(),
            method,
            params,
            ctx,
            sink,
        };
        let catalog = self.catalog().await?;
        let result = self.invoke(&req, &catalog).await?;
        // `server/discover` answers the same in both eras, so clients can probe with it.
        Ok(if method == Method::Discover {
            self.wrap_modern(result, method, ctx, &catalog)
        } else {
            result
        })
    }

    async fn invoke(&self, req: &Request<'_>, catalog: &CatalogView) -> Result<Value, Error> {
        match req.method {
            Method::Initialize => methods::lifecycle::initialize(req, catalog),
            Method::Ping => Ok(json!({})),
            Method::SetLogLevel => methods::lifecycle::set_log_level(req),
            Method::Discover => Ok(methods::lifecycle::discover(catalog)),
            Method::ToolsList => methods::tools::list(req, catalog, self.settings.page_size),
            Method::ToolsCall => methods::tools::call(self, req, catalog).await,
            Method::ResourcesList => {
                methods::resources::list(req, catalog, self.settings.page_size)
            }
            Method::ResourceTemplatesList => {
                methods::resources::list_templates(req, catalog, self.settings.page_size)
            }
            Method::ResourcesRead => methods::resources::read(self, req).await,
            Method::PromptsList => methods::prompts::list(req, catalog, self.settings.page_size),
            Method::PromptsGet => methods::prompts::get(self, req).await,
            Method::Complete => methods::prompts::complete(self, req).await,
            Method::Unknown => Err(Error::MethodNotFound(String::new())),
        }
    }

    async fn catalog(&self) -> Result<Arc<CatalogView>, Error> {
        self.catalog
            .ready(self.settings.catalog_wait)
            .await
            .ok_or_else(|| {
                Error::Internal("the catalog has not been loaded from the registry".into())
            })
    }

    /// Every modern result: `resultType`, `_meta` server identity, and cache hints on the six
    /// cacheable results (`private` when the answer depends on the caller's authorisation).
    fn wrap_modern(
        &self,
        mut result: Value,
        method: Method,
        ctx: &Context,
        catalog: &CatalogView,
    ) -> Value {
        let Some(obj) = result.as_object_mut() else {
            return result;
        };
        obj.entry("resultType").or_insert_with(|| json!("complete"));
        if method.cacheable() && obj.get("resultType").and_then(Value::as_str) == Some("complete") {
            let ttl = if method == Method::ResourcesRead {
                self.settings.read_ttl_ms
            } else {
                self.settings.list_ttl_ms
            };
            obj.insert("ttlMs".into(), json!(ttl));
            let scope = if ctx.principal.is_some() && method != Method::Discover {
                "private"
            } else {
                "public"
            };
            obj.insert("cacheScope".into(), json!(scope));
        }
        let meta = obj.entry("_meta").or_insert_with(|| json!({}));
        if let Some(m) = meta.as_object_mut() {
            m.insert(meta::SERVER_INFO.into(), catalog.server_info.clone());
        }
        result
    }
}

fn parse_params(env: &Envelope<'_>) -> Result<Value, Error> {
    match env.params {
        None => Ok(json!({})),
        Some(raw) if raw.get() == "null" => Ok(json!({})),
        Some(raw) => {
            let v: Value =
                serde_json::from_str(raw.get()).map_err(|e| Error::InvalidParams(e.to_string()))?;
            if v.is_object() {
                Ok(v)
            } else {
                Err(Error::InvalidParams("`params` must be an object".into()))
            }
        }
    }
}

fn envelope_error(e: EnvelopeError, era: Era) -> Frame {
    let (err, id) = match e {
        EnvelopeError::Parse(m) => (Error::Parse(m), None),
        EnvelopeError::Invalid { id, reason } => (Error::InvalidRequest(reason), id),
    };
    Frame {
        json: err.to_json(id.as_deref(), era),
        disposition: err.disposition(era),
    }
}
