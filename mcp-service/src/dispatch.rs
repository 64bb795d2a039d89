//! JSON-RPC dispatch for both eras: parse, classify, validate in the order the 2026-07-28
//! specification requires, route by method, and wrap every reply the same way.
//!
//! Validation order for a modern request: envelope (-32700/-32600) → required `_meta`
//! (-32602) → protocol version (-32022) → `logLevel` (-32602) → method known (-32601) →
//! handler (which may need a client capability, -32021). Header checks sit between `_meta`
//! and version on HTTP; the gateway does them.

use std::sync::Arc;

use mcp_proto::envelope::{self, Body, Envelope, EnvelopeError, Kind};
use mcp_proto::mcp::{Disposition, Transport};
use mcp_proto::registry::registry_client::RegistryClient;
use mcp_proto::transport::GrpcChannel;
use mcp_proto::vocab::{self, Era, meta};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::catalog::{CatalogCache, CatalogView};
pub use crate::context::{Context, Frame, Settings, Sink};
use crate::error::Error;
use crate::methods;
use crate::request::Request;
use crate::seal::Sealer;
use crate::session::{Pending, Sessions};

/// The protocol engine shared by the gRPC service and the stdio transport.
pub struct Engine {
    pub(crate) registry: RegistryClient<GrpcChannel>,
    pub(crate) catalog: CatalogCache,
    pub(crate) settings: Settings,
    pub(crate) sealer: Sealer,
    pub(crate) sessions: Sessions,
    /// The gateways that follow the ends of this engine's sessions.
    pub(crate) followers: crate::follow::Followers,
    pub(crate) pending: Pending,
    /// Held reads' questions to the registry, asked together.
    pub(crate) confirmations: crate::confirm::Confirmations,
    pub(crate) shutdown: CancellationToken,
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
    ResourcesSubscribe,
    ResourcesUnsubscribe,
    SubscriptionsListen,
    PromptsList,
    PromptsGet,
    Complete,
    Unknown,
}

impl Method {
    /// A bounded label for metrics and traces: the method's name, or `other`.
    pub fn label(name: &str) -> &'static str {
        if Self::parse(name) == Self::Unknown { "other" } else { mcp_proto::vocab::method_label(name) }
    }

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
            "resources/subscribe" => Self::ResourcesSubscribe,
            "resources/unsubscribe" => Self::ResourcesUnsubscribe,
            "subscriptions/listen" => Self::SubscriptionsListen,
            "prompts/list" => Self::PromptsList,
            "prompts/get" => Self::PromptsGet,
            "completion/complete" => Self::Complete,
            _ => Self::Unknown,
        }
    }

    /// Whether the method exists in `era`. 2026-07-28 removed the handshake, `ping`,
    /// `logging/setLevel` and resource subscriptions, and added `subscriptions/listen`;
    /// `server/discover` is answered in both (clients probe with it).
    pub fn served_in(self, era: Era) -> bool {
        match self {
            Self::Unknown => false,
            Self::Initialize
            | Self::Ping
            | Self::SetLogLevel
            | Self::ResourcesSubscribe
            | Self::ResourcesUnsubscribe => era == Era::Legacy,
            Self::SubscriptionsListen => era == Era::Modern,
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

// === impl Engine ===

impl Engine {
    pub fn new(
        registry: RegistryClient<GrpcChannel>,
        catalog: CatalogCache,
        settings: Settings,
        sealer: Sealer,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let sessions = Sessions::new(sealer.clone(), settings.session_ttl);
        let engine = Arc::new(Self {
            registry,
            catalog,
            settings,
            sealer,
            sessions,
            followers: crate::follow::Followers::default(),
            pending: Pending::default(),
            confirmations: crate::confirm::Confirmations::default(),
            shutdown,
        });
        tokio::spawn(methods::subscriptions::notify_sessions(engine.clone()));
        engine
    }

    /// The revision a legacy HTTP session negotiated, if the id `token` names a live one: what
    /// a request of it would find (sealed by this service, not expired, not ended), counted as
    /// the session's use. For a gateway in this process, which may then answer a request of it
    /// from what it keeps.
    pub fn live_session_revision(&self, token: &str) -> Option<&'static str> {
        self.sessions.resolve(token).ok().and_then(|s| s.revision())
    }

    /// Handle one body (a message or a batch): interim frames, then exactly one final frame.
    /// `outline`: where the gateway found the message's parts in the body
    /// (`McpRequest.outline`), which then stands for the engine's own parse when it fits.
    pub async fn handle(&self, body: &[u8], outline: Option<&mcp_proto::mcp::Outline>, ctx: &Context, sink: &Sink) {
        let era_hint = ctx.era.unwrap_or(Era::Legacy);
        // Over HTTP the gateway parsed the body before it, with the same function.
        let parsed = match ctx.transport {
            Transport::StreamableHttp => {
                let read = outline.and_then(|outline| envelope::from_outline(body, outline));
                if outline.is_some() && read.is_none() {
                    tracing::debug!("the envelope's outline does not fit the body: parsed instead");
                }
                envelope_read(if read.is_some() { "outline" } else { "body" });
                match read {
                    Some(env) => Ok(Body::Single(env)),
                    None => envelope::parse_checked_body(body),
                }
            }
            _ => envelope::parse_body(body),
        };
        let frame = match parsed {
            Err(e) => Some(envelope_error(e, era_hint)),
            Ok(Body::Single(env)) => self.handle_one(env, ctx, sink).await,
            Ok(Body::Batch(items)) => self.handle_batch(items, ctx, sink).await,
        };
        let _ = sink.send(frame.unwrap_or_else(Frame::accepted)).await;
    }

    /// One message; `None` when nothing is to be answered (a notification or a response).
    async fn handle_one(&self, env: Envelope<'_>, ctx: &Context, sink: &Sink) -> Option<Frame> {
        let era = ctx.era.unwrap_or_else(|| env.body_era());
        let id = env.id_json();
        // A legacy request names its session; a modern one never has one (the header is ignored).
        let resolved;
        let ctx = match (&ctx.session_token, era, env.method.as_ref()) {
            (Some(token), Era::Legacy, m) if ctx.session.is_none() && m != "initialize" => {
                match self.sessions.resolve(token) {
                    Ok(session) => {
                        resolved = Context { session: Some(session), ..ctx.clone() };
                        &resolved
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "session refused");
                        let err = Error::SessionNotFound;
                        return env
                            .id
                            .map(|_| Frame::new(err.to_json(id, era), err.disposition(era)))
                            .or_else(|| Some(Frame::new(Vec::new(), Disposition::SessionNotFound)));
                    }
                }
            }
            _ => ctx,
        };
        match env.kind {
            Kind::Request => {}
            Kind::Notification => {
                self.notification(&env, ctx);
                return None;
            }
            Kind::Response => {
                // The client's answer to one of our requests.
                if let (Some(id), Ok(message)) = (env.id, serde_json::from_slice::<Value>(env_bytes(&env))) {
                    let id: Value = serde_json::from_str(id.get()).unwrap_or(Value::Null);
                    if !self.pending.resolve(&id, message) {
                        tracing::debug!(%id, "response to no pending request");
                    }
                }
                return None;
            }
        }
        let started = std::time::Instant::now();
        let outcome = match era {
            Era::Modern => self.modern(&env, ctx, sink).await,
            Era::Legacy => self.legacy(&env, ctx, sink).await,
        };
        observe(&env, era, &outcome, started);
        Some(match outcome {
            Ok(Answer { result, session_id, cache }) => {
                Frame { json: result.reply(id), disposition: Disposition::Reply, session_id, cache }
            }
            Err(e) => Frame::new(e.to_json(id, era), e.disposition(era)),
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
        let reject = |reason: String| {
            let e = Error::InvalidRequest(reason);
            Some(Frame::new(e.to_json(None, Era::Legacy), e.disposition(Era::Legacy)))
        };
        if ctx.era == Some(Era::Modern) {
            return reject(format!("JSON-RPC batches are not part of protocol revision {}", vocab::MODERN_REVISION));
        }
        if revision != "2025-03-26" {
            return reject(format!(
                "JSON-RPC batches are only part of protocol revision 2025-03-26 (this request is served as {revision})"
            ));
        }
        if items.is_empty() {
            return reject("empty batch".into());
        }
        let mut replies: Vec<Box<serde_json::value::RawValue>> = Vec::new();
        for raw in items {
            let frame = match envelope::parse_message(raw.get()) {
                Err(e) => Some(envelope_error(e, Era::Legacy)),
                Ok(env) if env.body_era() == Era::Modern || env.method == "initialize" => {
                    let e = Error::InvalidRequest(format!("`{}` cannot be part of a batch", env.method));
                    env.id.map(|_| Frame::new(e.to_json(env.id_json(), Era::Legacy), Disposition::Reply))
                }
                Ok(env) => {
                    // A held result's name is for a single request, never a batch's items.
                    let ctx = Context { era: Some(Era::Legacy), if_tag: None, ..ctx.clone() };
                    Box::pin(self.handle_one(env, &ctx, sink)).await
                }
            };
            let raw = frame
                .and_then(|f| String::from_utf8(f.json).ok())
                .and_then(|text| serde_json::value::RawValue::from_string(text).ok());
            if let Some(raw) = raw {
                replies.push(raw);
            }
        }
        if replies.is_empty() {
            return None;
        }
        Some(Frame::new(serde_json::to_vec(&replies).unwrap_or_default(), Disposition::Reply))
    }

    fn notification(&self, env: &Envelope<'_>, _ctx: &Context) {
        // `notifications/initialized`, `notifications/roots/list_changed`; cancellation is
        // handled by the transport (stdio) or by closing the stream (HTTP).
        tracing::debug!(method = %env.method, "notification");
    }

    async fn modern(&self, env: &Envelope<'_>, ctx: &Context, sink: &Sink) -> Result<Answer, Error> {
        if let Some(reason) = env.missing_modern_meta() {
            return Err(Error::MissingMeta(reason.to_owned()));
        }
        let requested = env.meta_version_str().unwrap_or_default();
        if !vocab::MODERN_REVISIONS.contains(&requested.as_ref()) {
            return Err(Error::UnsupportedVersion { requested: requested.into_owned() });
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
            id: env.id_json(),
            params,
            ctx,
            sink,
        };
        let catalog = self.catalog().await?;
        let result = match self.invoke(&req, &catalog).await? {
            Payload::Call { json, is_error } => {
                Payload::Call { json: with_members(json, catalog.modern_members()), is_error }
            }
            result => result.map_tree(|tree| self.wrap_modern(tree, method, ctx, &catalog)),
        };
        let cache = cache_hint(&result, Era::Modern, catalog.fingerprint, self.settings.read_ttl_ms);
        Ok(Answer { result, session_id: None, cache })
    }

    async fn legacy(&self, env: &Envelope<'_>, ctx: &Context, sink: &Sink) -> Result<Answer, Error> {
        let method = Method::parse(&env.method);
        if !method.served_in(Era::Legacy) {
            return Err(Error::MethodNotFound(env.method.to_string()));
        }
        let params = parse_params(env)?;
        let req =
            Request { era: Era::Legacy, revision: ctx.legacy_revision(), method, id: env.id_json(), params, ctx, sink };
        let catalog = self.catalog().await?;
        if let Some(page) = methods::legacy_list(&req, &catalog, self.settings.page_size) {
            // A session's page is the same for every session of its revision: a gateway that
            // can tell, without a hop, that a session is live (standalone's, in this process;
            // gateway-edge, following every replica's session ends) may answer it again for the
            // lists' lifetime.
            let session = ctx.session.as_ref().filter(|_| ctx.transport == Transport::StreamableHttp);
            let cache = session.filter(|_| self.settings.list_ttl_ms > 0 && public_answer(ctx, &catalog, method)).map(
                |session| mcp_proto::mcp::CacheHint {
                    ttl_ms: self.settings.list_ttl_ms,
                    catalog_fingerprint: catalog.fingerprint,
                    session_revision: req.revision.to_owned(),
                    session_expires: session.expires(),
                    ..Default::default()
                },
            );
            return Ok(Answer { result: Payload::Serialized(page?), session_id: None, cache });
        }
        let result = self.invoke(&req, &catalog).await?;
        if let Some(cache) = cache_hint(&result, Era::Legacy, catalog.fingerprint, 0) {
            // A named read, or the confirmation of one.
            return Ok(Answer { result, session_id: None, cache: Some(cache) });
        }
        if method == Method::Discover {
            // `server/discover` answers the same in both eras, so clients can probe with it.
            return Ok(Answer::plain(result.map_tree(|tree| self.wrap_modern(tree, method, ctx, &catalog))));
        }
        // A handshake over HTTP starts a session; its id carries the negotiated revision.
        let session_id = (method == Method::Initialize && ctx.transport == Transport::StreamableHttp).then(|| {
            let revision = vocab::LEGACY_REVISIONS
                .into_iter()
                .find(|r| result.get("protocolVersion").and_then(Value::as_str) == Some(*r))
                .unwrap_or(vocab::LATEST_LEGACY);
            // None (absent or null) is no capability, as over stdio.
            let capabilities =
                req.params.get("capabilities").filter(|c| !c.is_null()).cloned().unwrap_or_else(|| json!({}));
            self.sessions.create(revision, capabilities).0
        });
        Ok(Answer { result, session_id, cache: None })
    }

    /// Methods that wait on the registry or the client are boxed (as a tool that is not a `text`
    /// tool is, in [`tools::call`]): their state would make every request's work as large, and
    /// each request's work is moved whole into its task.
    async fn invoke(&self, req: &Request<'_>, catalog: &CatalogView) -> Result<Payload, Error> {
        use methods::{lifecycle, prompts, resources, subscriptions, tools};
        let page = self.settings.page_size;
        let tree = match req.method {
            Method::Initialize => lifecycle::initialize(req, catalog),
            Method::Ping => Ok(json!({})),
            Method::SetLogLevel => lifecycle::set_log_level(req),
            Method::Discover => Ok(lifecycle::discover(catalog)),
            Method::ToolsList => tools::list(req, catalog, page),
            Method::ToolsCall => return tools::call(self, req, catalog).await,
            Method::ResourcesList => resources::list(req, catalog, page),
            Method::ResourceTemplatesList => resources::list_templates(req, catalog, page),
            Method::ResourcesRead => return Box::pin(resources::read(self, req, catalog)).await,
            Method::ResourcesSubscribe => subscriptions::subscribe(req, true),
            Method::ResourcesUnsubscribe => subscriptions::subscribe(req, false),
            Method::SubscriptionsListen => Box::pin(subscriptions::listen(self, req, catalog)).await,
            Method::PromptsList => prompts::list(req, catalog, page),
            Method::PromptsGet => Box::pin(prompts::get(self, req)).await,
            Method::Complete => Box::pin(prompts::complete(self, req)).await,
            Method::Unknown => Err(Error::MethodNotFound(String::new())),
        };
        tree.map(Payload::Tree)
    }

    async fn catalog(&self) -> Result<Arc<CatalogView>, Error> {
        self.catalog
            .ready(self.settings.catalog_wait)
            .await
            .ok_or_else(|| Error::Internal("the catalog has not been loaded from the registry".into()))
    }

    /// Every modern result: `resultType`, `_meta` server identity, and cache hints on the six
    /// cacheable results when complete (`private` when the answer depends on the caller's
    /// authorisation, `public` otherwise). A result written without a tree (`Payload::Call`)
    /// gains the same members from `CatalogView::modern_members` instead.
    fn wrap_modern(&self, mut result: Value, method: Method, ctx: &Context, catalog: &CatalogView) -> Value {
        let Some(obj) = result.as_object_mut() else { return result };
        obj.entry("resultType").or_insert_with(|| json!("complete"));
        if method.cacheable() && obj.get("resultType").and_then(Value::as_str) == Some("complete") {
            let ttl =
                if method == Method::ResourcesRead { self.settings.read_ttl_ms } else { self.settings.list_ttl_ms };
            obj.insert("ttlMs".into(), json!(ttl));
            let scope = if public_answer(ctx, catalog, method) { "public" } else { "private" };
            obj.insert("cacheScope".into(), json!(scope));
        }
        let meta = obj.entry("_meta").or_insert_with(|| json!({}));
        if let Some(m) = meta.as_object_mut() {
            m.insert(meta::SERVER_INFO.into(), catalog.server_info.clone());
        }
        result
    }
}

/// What the gateway may do with `result` (of catalog `fingerprint`). A modern result that is
/// the same for anyone asking the same question of this catalog may be reused for its `ttlMs`
/// (`read_ttl_ms` for a read's confirmation). A named result (a read of contents the registry
/// names, in either era) may be kept after that and sent back by name: `Payload::Unchanged`
/// says it stands.
fn cache_hint(result: &Payload, era: Era, fingerprint: u64, read_ttl_ms: u64) -> Option<mcp_proto::mcp::CacheHint> {
    let hint = |ttl_ms, tag: &str, unchanged| mcp_proto::mcp::CacheHint {
        ttl_ms,
        catalog_fingerprint: fingerprint,
        tag: tag.to_owned(),
        unchanged,
        ..Default::default()
    };
    let tag = result.tag().unwrap_or_default();
    match (result, era) {
        (Payload::Unchanged { .. }, _) => Some(hint(if era == Era::Modern { read_ttl_ms } else { 0 }, tag, true)),
        (_, Era::Legacy) => (!tag.is_empty()).then(|| hint(0, tag, false)),
        (_, Era::Modern) => {
            let ttl_ms = result.get("ttlMs").and_then(Value::as_u64).unwrap_or(0);
            let public = result.get("cacheScope").and_then(Value::as_str) == Some("public");
            (public && (ttl_ms > 0 || !tag.is_empty())).then(|| hint(ttl_ms, tag, false))
        }
    }
}

/// Whether the answer to `method` is the same for anyone who asks (`cacheScope: public`).
/// Signed-in callers see only the items their scopes reach: where the catalog has such items,
/// the answer is the caller's own.
pub(crate) fn public_answer(ctx: &Context, catalog: &CatalogView, method: Method) -> bool {
    ctx.principal.is_none() || !catalog.scoped(method)
}

/// A request's result, with what the transport needs besides it.
struct Answer {
    result: Payload,
    /// A new legacy session's id (the reply to `initialize` over HTTP).
    session_id: Option<String>,
    cache: Option<mcp_proto::mcp::CacheHint>,
}

impl Answer {
    fn plain(result: Payload) -> Self {
        Self { result, session_id: None, cache: None }
    }
}

/// A result as a tree, already serialized (legacy lists, written from the catalog's
/// serialized items; a `text` tool's result, with whether it reports a failure beside it), or
/// a tree with one member passed through as serialized JSON (a `resources/read`'s `contents`
/// as the registry wrote them: a megabyte of text is neither parsed nor written again).
pub(crate) enum Payload {
    Tree(Value),
    Serialized(Vec<u8>),
    /// `tag` names the whole result, when it can be named (`CacheHint.tag`).
    Spliced {
        head: Value,
        member: &'static str,
        json: bytes::Bytes,
        tag: Option<String>,
    },
    /// The result the gateway keeps under `tag` stands: nothing is sent again.
    Unchanged {
        tag: String,
    },
    /// A tool's result serialized whole as it was made (a `text` tool's: no tree), an object
    /// without `resultType` and `_meta` (a modern answer gains them: [`with_members`], which
    /// only appends: a result with a `_meta` of its own does not belong here); `is_error`: it
    /// reports the tool's failure (`isError: true`).
    Call {
        json: Vec<u8>,
        is_error: bool,
    },
}

/// `result` (a serialized object) with the serialized `members` added at its end. (Only a
/// catalog never loaded has no members: it has no tools either.)
fn with_members(mut result: Vec<u8>, members: &str) -> Vec<u8> {
    debug_assert!(!members.is_empty(), "a loaded catalog's modern members");
    if members.is_empty() || result.last() != Some(&b'}') {
        return result;
    }
    result.pop();
    if result.iter().rev().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        result.push(b',');
    }
    result.extend_from_slice(members.as_bytes());
    result.push(b'}');
    result
}

impl Payload {
    /// A member of a result tree (a serialized result has none worth asking for; a spliced
    /// member is not looked into).
    fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Payload::Tree(result) | Payload::Spliced { head: result, .. } => result.get(key),
            Payload::Serialized(_) | Payload::Unchanged { .. } | Payload::Call { .. } => None,
        }
    }

    /// Whether the result reports a tool's failure (`isError: true`).
    fn is_error(&self) -> bool {
        match self {
            Payload::Call { is_error, .. } => *is_error,
            _ => self.get("isError") == Some(&Value::Bool(true)),
        }
    }

    /// The name of the result, if it has one.
    fn tag(&self) -> Option<&str> {
        match self {
            Payload::Spliced { tag, .. } => tag.as_deref(),
            Payload::Unchanged { tag } => Some(tag),
            Payload::Tree(_) | Payload::Serialized(_) | Payload::Call { .. } => None,
        }
    }

    /// `f` applied to the tree (to the head of a spliced result).
    fn map_tree(self, f: impl FnOnce(Value) -> Value) -> Self {
        match self {
            Payload::Tree(tree) => Payload::Tree(f(tree)),
            Payload::Spliced { head, member, json, tag } => Payload::Spliced { head: f(head), member, json, tag },
            other @ (Payload::Serialized(_) | Payload::Unchanged { .. } | Payload::Call { .. }) => other,
        }
    }

    /// The JSON-RPC reply to request `id` carrying this result.
    fn reply(&self, id: Option<&str>) -> Vec<u8> {
        match self {
            Payload::Tree(result) => mcp_proto::jsonrpc::result(id, result),
            Payload::Serialized(result) | Payload::Call { json: result, .. } => {
                mcp_proto::jsonrpc::result_serialized(id, result)
            }
            Payload::Spliced { head, member, json, .. } => mcp_proto::jsonrpc::result_spliced(id, head, member, json),
            Payload::Unchanged { .. } => Vec::new(),
        }
    }
}

/// The bytes of a whole message (responses are re-parsed whole).
fn env_bytes<'a>(env: &Envelope<'a>) -> &'a [u8] {
    env.raw.as_bytes()
}

fn parse_params(env: &Envelope<'_>) -> Result<Value, Error> {
    match env.params {
        None => Ok(json!({})),
        Some("null") => Ok(json!({})),
        Some(raw) => {
            let v: Value = serde_json::from_str(raw).map_err(|e| Error::InvalidParams(e.to_string()))?;
            if v.is_object() { Ok(v) } else { Err(Error::InvalidParams("`params` must be an object".into())) }
        }
    }
}

fn envelope_error(e: EnvelopeError, era: Era) -> Frame {
    let (err, id) = match e {
        EnvelopeError::Parse(m) => (Error::Parse(m), None),
        EnvelopeError::Invalid { id, reason } => (Error::InvalidRequest(reason), id),
    };
    Frame::new(err.to_json(id.as_deref(), era), err.disposition(era))
}

/// Metrics and trace attributes of one handled request: method, era, tool and outcome.
fn observe(env: &Envelope<'_>, era: Era, outcome: &Result<Answer, Error>, started: std::time::Instant) {
    let method = Method::label(env.method.as_ref());
    let era = match era {
        Era::Modern => "modern",
        Era::Legacy => "legacy",
    };
    let result = match outcome {
        Ok(a) if a.result.is_error() => "tool_error",
        Ok(a) if a.result.get("resultType").and_then(Value::as_str) == Some("input_required") => "input_required",
        Ok(_) => "ok",
        Err(_) => "error",
    };
    let code = outcome.as_ref().err().map(|e| e.code(Era::Modern).0);
    mcp_proto::request_log::record([
        ("mcp.method", Some(method.into())),
        ("mcp.era", Some(era.into())),
        ("outcome", Some(result.into())),
        ("error.code", code.map(Into::into)),
    ]);
    let (count, duration) = REQUESTS.get((method, era, result), |&(method, era, result)| {
        (
            metrics::counter!("mcp_requests_total", "method" => method, "era" => era, "outcome" => result),
            metrics::histogram!("mcp_request_duration_seconds", "method" => method, "era" => era),
        )
    });
    count.increment(1);
    duration.record(started.elapsed().as_secs_f64());
}

/// `mcp_envelopes_total`: bodies that came over HTTP (through the gateway) whose envelope was
/// read `from` the gateway's outline or parsed from the `body`.
fn envelope_read(from: &'static str) {
    ENVELOPES.get(from, |&from| metrics::counter!("mcp_envelopes_total", "from" => from)).increment(1);
}

static ENVELOPES: std::sync::LazyLock<mcp_proto::telemetry::Handles<&'static str, metrics::Counter>> =
    std::sync::LazyLock::new(Default::default);

/// Each label set's request counter and latency histogram, by method, era and outcome.
type RequestHandles =
    mcp_proto::telemetry::Handles<(&'static str, &'static str, &'static str), (metrics::Counter, metrics::Histogram)>;
static REQUESTS: std::sync::LazyLock<RequestHandles> = std::sync::LazyLock::new(Default::default);

#[cfg(test)]
mod tests {
    use super::*;

    fn spliced(tag: Option<&str>) -> Payload {
        Payload::Spliced { head: json!({}), member: "contents", json: bytes::Bytes::new(), tag: tag.map(str::to_owned) }
    }

    #[test]
    fn what_the_gateway_may_do_with_a_result() {
        let hint = |result: &Payload, era| cache_hint(result, era, 9, 250);
        let summary =
            |h: Option<mcp_proto::mcp::CacheHint>| h.map(|h| (h.ttl_ms, h.catalog_fingerprint, h.tag, h.unchanged));
        // Modern: public results with a ttl are reused for it; named ones are confirmed later.
        let list = Payload::Tree(json!({"tools": [], "ttlMs": 60000, "cacheScope": "public"}));
        assert_eq!(summary(hint(&list, Era::Modern)), Some((60000, 9, String::new(), false)));
        let private = Payload::Tree(json!({"tools": [], "ttlMs": 60000, "cacheScope": "private"}));
        assert_eq!(summary(hint(&private, Era::Modern)), None);
        let stale = Payload::Tree(json!({"contents": [], "ttlMs": 0, "cacheScope": "public"}));
        assert_eq!(summary(hint(&stale, Era::Modern)), None, "unnamed and at once stale: of no use");
        let named = Payload::Spliced {
            head: json!({"ttlMs": 0, "cacheScope": "public"}),
            member: "contents",
            json: bytes::Bytes::new(),
            tag: Some("n".into()),
        };
        assert_eq!(summary(hint(&named, Era::Modern)), Some((0, 9, "n".into(), false)));
        let unchanged = Payload::Unchanged { tag: "n".into() };
        assert_eq!(summary(hint(&unchanged, Era::Modern)), Some((250, 9, "n".into(), true)));
        // Legacy: only named results, never reused without confirmation.
        assert_eq!(summary(hint(&spliced(Some("l")), Era::Legacy)), Some((0, 9, "l".into(), false)));
        assert_eq!(summary(hint(&unchanged, Era::Legacy)), Some((0, 9, "n".into(), true)));
        assert_eq!(summary(hint(&spliced(None), Era::Legacy)), None);
        assert_eq!(summary(hint(&list, Era::Legacy)), None);
        // A call's result is never reused.
        let call = Payload::Call { json: br#"{"content":[],"isError":false}"#.to_vec(), is_error: false };
        assert_eq!(summary(hint(&call, Era::Modern)), None);
        assert_eq!(summary(hint(&call, Era::Legacy)), None);
    }

    #[test]
    fn a_serialized_call_result_gains_what_every_modern_result_has() {
        let catalog = CatalogView::from_proto(mcp_proto::registry::Catalog {
            server_info_json: br#"{"name":"s","version":"1.0.0","title":"S \"q\""}"#.to_vec(),
            ..Default::default()
        });
        let result = br#"{"content":[{"type":"text","text":"hi"}],"isError":false}"#.to_vec();
        let written = with_members(result, catalog.modern_members());
        // The members `wrap_modern` inserts into a tree (`resultType`, the server's identity),
        // each once: compared as text too, as a tree would hide a key given twice.
        assert_eq!(
            std::str::from_utf8(&written).expect("utf-8"),
            r#"{"content":[{"type":"text","text":"hi"}],"isError":false,"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","title":"S \"q\"","version":"1.0.0"}}}"#
        );
        let answer: Value = serde_json::from_slice(&written).expect("json");
        let expected = json!({
            "content": [{ "type": "text", "text": "hi" }],
            "isError": false,
            "resultType": "complete",
            "_meta": { meta::SERVER_INFO: { "name": "s", "version": "1.0.0", "title": "S \"q\"" } }
        });
        assert_eq!(answer, expected);
        assert_eq!(with_members(b"{}".to_vec(), r#""a":1"#), br#"{"a":1}"#);
        assert_eq!(with_members(b"{ }".to_vec(), r#""a":1"#), br#"{ "a":1}"#);
        assert_eq!(with_members(b"[1]".to_vec(), r#""a":1"#), b"[1]", "not an object: as it was");
        // Whether it reports a failure is kept beside it.
        let failed = Payload::Call { json: br#"{"content":[],"isError":true}"#.to_vec(), is_error: true };
        assert!(failed.is_error() && !Payload::Call { json: Vec::new(), is_error: false }.is_error());
        assert!(Payload::Tree(json!({ "isError": true })).is_error());
    }
}
