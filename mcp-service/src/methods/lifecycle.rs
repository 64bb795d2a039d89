//! `initialize`, `logging/setLevel` (legacy) and `server/discover` (both eras).

use mcp_proto::mcp::Transport;
use mcp_proto::vocab::{self, MODERN_REVISIONS};
use serde_json::{Value, json};

use crate::catalog::CatalogView;
use crate::error::Error;
use crate::request::Request;
use crate::session::MAX_CLIENT_CAPABILITIES;
use crate::shape;

/// What the server offers, in the legacy shape; list changes and resource subscriptions are
/// advertised only when the catalog can change while served.
fn legacy_capabilities(rev: &str, live: bool) -> Value {
    let mut caps = json!({
        "tools": { "listChanged": live },
        "resources": { "subscribe": live, "listChanged": live },
        "prompts": { "listChanged": live },
        "logging": {}
    });
    if shape::at_least(rev, "2025-03-26") {
        caps["completions"] = json!({});
    }
    caps
}

/// The legacy handshake: answer with the newest supported revision at or below the requested
/// one (never the handshake-less 2026-07-28).
pub fn initialize(req: &Request<'_>, catalog: &CatalogView) -> Result<Value, Error> {
    let requested = match req.params.get("protocolVersion") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => {
            return Err(Error::InvalidParams("`protocolVersion` must be a string".into()));
        }
    };
    let capabilities = match req.params.get("capabilities") {
        None | Some(Value::Null) => None,
        Some(c @ Value::Object(_)) => Some(c),
        Some(_) => return Err(Error::InvalidParams("`capabilities` must be an object".into())),
    };
    if req.ctx.transport == Transport::StreamableHttp
        && let Some(size) = capabilities.map(|c| serde_json::to_string(c).map_or(usize::MAX, |json| json.len()))
        && size > MAX_CLIENT_CAPABILITIES
    {
        return Err(Error::InvalidParams(format!(
            "`capabilities` take {size} bytes as JSON; the session id that carries them over HTTP holds at most {MAX_CLIENT_CAPABILITIES}"
        )));
    }
    let negotiated = vocab::negotiate_legacy(requested);
    if let Some(session) = &req.ctx.session {
        if let Ok(mut n) = session.negotiated.lock() {
            *n = Some(negotiated);
        }
        if let Ok(mut c) = session.client_capabilities.lock() {
            *c = capabilities.cloned().unwrap_or_else(|| json!({}));
        }
    }
    tracing::info!(requested = requested.unwrap_or("(none)"), negotiated, "initialize");
    let mut result = json!({
        "protocolVersion": negotiated,
        "capabilities": legacy_capabilities(negotiated, catalog.live),
        "serverInfo": shape::server_info(&catalog.server_info, negotiated, false),
    });
    if !catalog.instructions.is_empty() {
        result["instructions"] = json!(catalog.instructions);
    }
    Ok(result)
}

pub fn set_log_level(req: &Request<'_>) -> Result<Value, Error> {
    let level = req.required_str("level")?;
    if vocab::log_level_rank(level).is_none() {
        return Err(Error::InvalidParams(format!("unknown log level `{level}`")));
    }
    if let Some(session) = &req.ctx.session
        && let Ok(mut l) = session.log_level.lock()
    {
        *l = Some(level.to_owned());
    }
    Ok(json!({}))
}

/// `server/discover`: what this server speaks and offers. Identity goes in `_meta` (added
/// by the modern wrapper), not in the body.
pub fn discover(catalog: &CatalogView) -> Value {
    let mut result = json!({
        "supportedVersions": MODERN_REVISIONS,
        "capabilities": {
            "tools": { "listChanged": catalog.live },
            "resources": { "subscribe": catalog.live, "listChanged": catalog.live },
            "prompts": { "listChanged": catalog.live },
            "completions": {},
            "logging": {},
            "extensions": {}
        },
    });
    if !catalog.instructions.is_empty() {
        result["instructions"] = json!(catalog.instructions);
    }
    result
}
