//! The names and numbers of the protocol, in one place.

/// Handshake-based revisions, oldest first.
pub const LEGACY_REVISIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The newest legacy revision: answered when `initialize` omits `protocolVersion`.
pub const LATEST_LEGACY: &str = "2025-11-25";

/// The stateless revision served through per-request `_meta`.
pub const MODERN_REVISION: &str = "2026-07-28";

/// Revisions accepted in a modern request's `_meta` (and listed by `server/discover`).
pub const MODERN_REVISIONS: [&str; 1] = [MODERN_REVISION];

/// The legacy revision assumed for an HTTP request after the handshake that carries no
/// `MCP-Protocol-Version` header (the header arrived with 2025-06-18).
pub const LEGACY_HTTP_DEFAULT: &str = "2025-03-26";

/// Whether `v` is one of the handshake-based revisions.
pub fn is_legacy_revision(v: &str) -> bool {
    LEGACY_REVISIONS.contains(&v)
}

/// The revision a legacy `initialize` settles on: the newest supported revision at or below
/// the requested one, the oldest for a request older than all, the newest when none was asked.
/// Never the stateless revision, which has no handshake.
pub fn negotiate_legacy(requested: Option<&str>) -> &'static str {
    let Some(requested) = requested else {
        return LATEST_LEGACY;
    };
    // Revisions are ISO dates, so string order is date order.
    LEGACY_REVISIONS.iter().rev().find(|r| **r <= requested).copied().unwrap_or(LEGACY_REVISIONS[0])
}

/// Reserved `_meta` keys.
/// Every method name either era defines, client → server and notifications: the bounded set of
/// labels metrics and traces use (anything else is `other`).
pub const METHODS: [&str; 22] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "subscriptions/listen",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
    "sampling/createMessage",
    "elicitation/create",
    "roots/list",
];

/// `name` if it is a method of [`METHODS`], else `other`.
pub fn method_label(name: &str) -> &'static str {
    METHODS.iter().find(|m| **m == name).copied().unwrap_or("other")
}

pub mod meta {
    pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
    pub const PROGRESS_TOKEN: &str = "progressToken";
}

/// HTTP header names of the Streamable HTTP transport (lower case, as `http` stores them).
pub mod header {
    pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
    pub const METHOD: &str = "mcp-method";
    pub const NAME: &str = "mcp-name";
    pub const SESSION_ID: &str = "mcp-session-id";
    pub const PARAM_PREFIX: &str = "mcp-param-";
}

/// The seal of a legacy session id (the text after its last `.`, a MAC of the rest): what names
/// the session among the ends mcp-service tells the gateways of.
pub fn session_seal(session_id: &str) -> Option<&str> {
    session_id_parts(session_id.trim()).map(|(_, seal)| seal).filter(|s| !s.is_empty())
}

/// A legacy session id's payload and seal, split at its last `.` (`str::rsplit_once`, with
/// the vector search of `memchr`: the seal is the id's last 43 characters).
pub fn session_id_parts(session_id: &str) -> Option<(&str, &str)> {
    let dot = memchr::memrchr(b'.', session_id.as_bytes())?;
    Some((session_id.get(..dot)?, session_id.get(dot + 1..)?))
}

/// JSON-RPC error codes used by MCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode(pub i64);

impl ErrorCode {
    pub const PARSE_ERROR: Self = Self(-32700);
    pub const INVALID_REQUEST: Self = Self(-32600);
    pub const METHOD_NOT_FOUND: Self = Self(-32601);
    pub const INVALID_PARAMS: Self = Self(-32602);
    pub const INTERNAL_ERROR: Self = Self(-32603);
    /// Legacy revisions: resource not found.
    pub const RESOURCE_NOT_FOUND_LEGACY: Self = Self(-32002);
    /// 2026-07-28: a standard header is missing or disagrees with the body.
    pub const HEADER_MISMATCH: Self = Self(-32020);
    /// 2026-07-28: the request needs a client capability it did not declare.
    pub const MISSING_CLIENT_CAPABILITY: Self = Self(-32021);
    /// 2026-07-28: the requested protocol version is not served.
    pub const UNSUPPORTED_PROTOCOL_VERSION: Self = Self(-32022);

    /// Resource-not-found was renumbered in 2026-07-28.
    pub fn resource_not_found(era: Era) -> Self {
        match era {
            Era::Legacy => Self::RESOURCE_NOT_FOUND_LEGACY,
            Era::Modern => Self::INVALID_PARAMS,
        }
    }
}

/// Which protocol model serves a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Era {
    /// 2024-11-05 .. 2025-11-25: `initialize` handshake.
    Legacy,
    /// 2026-07-28: stateless, per-request `_meta`.
    Modern,
}

impl Era {
    pub fn as_str(self) -> &'static str {
        match self {
            Era::Legacy => "legacy",
            Era::Modern => "modern",
        }
    }
}

impl From<Era> for crate::mcp::Era {
    fn from(e: Era) -> Self {
        match e {
            Era::Legacy => crate::mcp::Era::Legacy,
            Era::Modern => crate::mcp::Era::Modern,
        }
    }
}

/// Logging levels in increasing severity.
pub const LOG_LEVELS: [&str; 8] = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

/// The severity rank of a level name, `None` for an unknown name.
pub fn log_level_rank(level: &str) -> Option<usize> {
    LOG_LEVELS.iter().position(|l| *l == level)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_picks_newest_at_or_below() {
        assert_eq!(negotiate_legacy(Some("2025-06-18")), "2025-06-18");
        assert_eq!(negotiate_legacy(Some("2025-07-01")), "2025-06-18");
        assert_eq!(negotiate_legacy(Some("2026-07-28")), "2025-11-25");
        assert_eq!(negotiate_legacy(Some("2099-01-01")), "2025-11-25");
        assert_eq!(negotiate_legacy(Some("2024-01-01")), "2024-11-05");
        assert_eq!(negotiate_legacy(Some("garbage")), "2025-11-25");
        assert_eq!(negotiate_legacy(Some("")), "2024-11-05");
        assert_eq!(negotiate_legacy(None), "2025-11-25");
    }

    #[test]
    fn a_session_id_splits_at_its_last_dot_as_rsplit_once_does() {
        for id in ["payload.seal", "a.b.c", ".seal", "payload.", ".", "", "no-dot", "é.ü", "x..y"] {
            assert_eq!(session_id_parts(id), id.rsplit_once('.'), "{id}");
        }
        assert_eq!(session_seal(" payload.seal\t"), Some("seal"));
        assert_eq!(session_seal("payload."), None);
        assert_eq!(session_seal("no-dot"), None);
    }

    #[test]
    fn log_levels_rank() {
        assert!(log_level_rank("error") > log_level_rank("info"));
        assert_eq!(log_level_rank("verbose"), None);
    }
}
