//! The HTTP half of era classification (the body half is `mcp_proto::envelope`).
//!
//! 1. A body whose `_meta` carries the protocol version is modern, whatever its method.
//! 2. Otherwise an `MCP-Protocol-Version` header decides by its *value*: a legacy revision
//!    (which legacy clients of 2025-06-18 and later send after the handshake) keeps the request
//!    legacy; any other value — 2026-07-28 included — marks it modern, so a client that meant
//!    to be modern but sent no usable `_meta` is told so instead of being silently served as
//!    legacy.
//! 3. Everything else, every bare `initialize` included, is legacy.

use mcp_proto::envelope::Envelope;
use mcp_proto::vocab::{Era, is_legacy_revision};

pub fn classify(env: &Envelope<'_>, header_version: Option<&str>) -> Era {
    if env.body_era() == Era::Modern {
        return Era::Modern;
    }
    match header_version {
        Some(v) if !is_legacy_revision(v) => Era::Modern,
        _ => Era::Legacy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcp_proto::envelope::{Body, parse_body};

    fn era(body: &str, header: Option<&str>) -> Era {
        match parse_body(body.as_bytes()).expect("parses") {
            Body::Single(e) => classify(&e, header),
            Body::Batch(_) => panic!("single expected"),
        }
    }

    #[test]
    fn rules() {
        let bare = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        let modern = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#;
        assert_eq!(era(bare, None), Era::Legacy);
        assert_eq!(era(bare, Some("2025-06-18")), Era::Legacy);
        assert_eq!(era(bare, Some("2025-11-25")), Era::Legacy);
        assert_eq!(era(bare, Some("2026-07-28")), Era::Modern);
        assert_eq!(era(bare, Some("1999-01-01")), Era::Modern);
        assert_eq!(era(modern, None), Era::Modern);
        assert_eq!(era(modern, Some("2025-06-18")), Era::Modern);
        assert_eq!(era(init, None), Era::Legacy);
    }
}
