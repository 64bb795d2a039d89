//! What travels with a message through the engine: its transport context, the frames it
//! produces, and the engine's tunables.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use mcp_proto::mcp::{Disposition, Principal, Transport};
use mcp_proto::vocab::{self, Era};
use tokio::sync::mpsc;

use crate::session::Session;

/// One message out: an interim message (notification or server-to-client request), or the
/// final reply.
#[derive(Debug)]
pub struct Frame {
    pub json: Vec<u8>,
    pub disposition: Disposition,
    /// A new legacy session's id, on the reply to `initialize` over HTTP.
    pub session_id: Option<String>,
    /// On a modern reply anyone may be given again: for how long, and from which catalog.
    pub cache: Option<mcp_proto::mcp::CacheHint>,
}

impl Frame {
    pub fn interim(json: Vec<u8>) -> Self {
        Self { json, disposition: Disposition::Interim, session_id: None, cache: None }
    }

    pub fn new(json: Vec<u8>, disposition: Disposition) -> Self {
        Self { json, disposition, session_id: None, cache: None }
    }

    pub fn accepted() -> Self {
        Self { json: Vec::new(), disposition: Disposition::Accepted, session_id: None, cache: None }
    }
}

pub type Sink = mpsc::Sender<Frame>;

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
    /// The legacy session: the stdio connection, or the one named by `Mcp-Session-Id`.
    pub session: Option<Arc<Session>>,
    /// `Mcp-Session-Id` as received (HTTP), resolved by the engine for legacy requests.
    pub session_token: Option<String>,
    /// Whether interim messages can reach the client (SSE accepted, or stdio).
    pub accepts_stream: bool,
    /// `Mcp-Param-*` headers: lower-case name without the prefix → raw value.
    pub param_headers: HashMap<String, String>,
    /// The tag of the result the gateway keeps for this request (`CacheHint.tag`).
    pub if_tag: Option<String>,
}

impl Context {
    /// The legacy revision in force for a request after the handshake: the session's, else
    /// the `MCP-Protocol-Version` header's, else 2025-03-26 (HTTP) or the newest (stdio).
    pub fn legacy_revision(&self) -> &'static str {
        if let Some(r) = self.session.as_ref().and_then(|s| s.revision()) {
            return r;
        }
        if self.transport == Transport::Stdio {
            return vocab::LATEST_LEGACY;
        }
        match self.header_version.as_deref() {
            Some(v) => vocab::LEGACY_REVISIONS.into_iter().find(|r| *r == v).unwrap_or(vocab::LEGACY_HTTP_DEFAULT),
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
    /// How long a sealed `requestState` stays valid.
    pub request_state_ttl: Duration,
    /// How long a legacy session stays valid.
    pub session_ttl: Duration,
    /// How long the server waits for a client's answer to a server-to-client request.
    pub client_answer_timeout: Duration,
    /// Most input rounds one legacy call may take.
    pub max_input_rounds: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            page_size: 100,
            list_ttl_ms: 60_000,
            read_ttl_ms: 0,
            catalog_wait: Duration::from_secs(10),
            request_state_ttl: Duration::from_secs(600),
            session_ttl: Duration::from_secs(24 * 3600),
            client_answer_timeout: Duration::from_secs(300),
            max_input_rounds: 16,
        }
    }
}
