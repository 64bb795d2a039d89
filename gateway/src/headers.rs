//! Pure checks over request headers: DNS-rebinding protection (`Host`, `Origin`), content
//! negotiation, and the 2026-07-28 routing headers against the body.

use std::borrow::Cow;

use http::header::{ACCEPT, CONTENT_TYPE, HOST, ORIGIN};
use http::{HeaderMap, HeaderName, HeaderValue};
use mcp_proto::envelope::Envelope;
use mcp_proto::header_codec;
use mcp_proto::vocab::header;

/// The routing headers' names, made once (a lookup by `&str` parses the name each time).
pub const PROTOCOL_VERSION: HeaderName = HeaderName::from_static(header::PROTOCOL_VERSION);
pub const METHOD: HeaderName = HeaderName::from_static(header::METHOD);
pub const NAME: HeaderName = HeaderName::from_static(header::NAME);
pub const SESSION_ID: HeaderName = HeaderName::from_static(header::SESSION_ID);

/// Which `Host` and `Origin` values a request may carry.
#[derive(Debug, Clone, Default)]
pub struct OriginPolicy {
    /// Host names (without port) accepted in `Host`; empty means any, unless `loopback_only`.
    pub allowed_hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`) accepted besides loopback ones.
    pub allowed_origins: Vec<String>,
    /// Bound to a loopback address: only loopback `Host` names are accepted (DNS rebinding).
    pub loopback_only: bool,
}

/// Why a request was refused at the edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 403: `Host` or `Origin` not allowed.
    Forbidden(String),
    /// 415.
    UnsupportedMediaType,
    /// 406.
    NotAcceptable,
    /// 400 with -32020: a routing header is missing, malformed or disagrees with the body.
    HeaderMismatch(String),
}

fn is_loopback_host(host: &str) -> bool {
    const SUBDOMAIN: &str = ".localhost";
    let host = host.trim_end_matches('.');
    host.parse::<std::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
        || host.eq_ignore_ascii_case("localhost")
        || (host.len() > SUBDOMAIN.len()
            && host.get(host.len() - SUBDOMAIN.len()..).is_some_and(|end| end.eq_ignore_ascii_case(SUBDOMAIN)))
        || host == "[::1]"
        || host == "::1"
}

/// The host name of a `Host` header value (`name[:port]`, `[v6][:port]`).
fn host_name(value: &str) -> &str {
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split(']').next().map_or(value, |h| &value[..h.len() + 2]);
    }
    value.rsplit_once(':').map_or(value, |(h, port)| if port.bytes().all(|b| b.is_ascii_digit()) { h } else { value })
}

impl OriginPolicy {
    /// DNS-rebinding protection: `Host` must name this server, and a browser's `Origin`, when
    /// present, must be an allowed one.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let host = headers.get(HOST).and_then(|h| h.to_str().ok()).map(host_name);
        if let Some(host) = host {
            let listed = self.allowed_hosts.iter().any(|a| a.eq_ignore_ascii_case(host));
            let ok = if !self.allowed_hosts.is_empty() {
                listed || (self.loopback_only && is_loopback_host(host))
            } else {
                !self.loopback_only || is_loopback_host(host)
            };
            if !ok {
                return Err(Refusal::Forbidden(format!("Host `{host}` is not allowed")));
            }
        }
        if let Some(origin) = headers.get(ORIGIN) {
            let origin = origin.to_str().map_err(|_| Refusal::Forbidden("malformed Origin".into()))?;
            if !self.origin_allowed(origin) {
                return Err(Refusal::Forbidden(format!("Origin `{origin}` is not allowed")));
            }
        }
        Ok(())
    }

    /// Loopback origins and configured ones; never `null`.
    pub fn origin_allowed(&self, origin: &str) -> bool {
        if self.allowed_origins.iter().any(|a| a == "*" || a.eq_ignore_ascii_case(origin)) {
            return true;
        }
        match url::Url::parse(origin) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => {
                u.host_str().is_some_and(is_loopback_host) && (self.loopback_only || self.allowed_origins.is_empty())
            }
            _ => false,
        }
    }
}

/// Whether every byte is visible ASCII (0x20 to 0x7e).
pub fn visible_ascii(bytes: &[u8]) -> bool {
    only_visible(bytes, false)
}

/// A header's value as text, under the rule of `HeaderValue::to_str` (visible ASCII and tabs).
pub fn text(value: &HeaderValue) -> Option<&str> {
    let bytes = value.as_bytes();
    visible_or_tab(bytes).then(|| std::str::from_utf8(bytes).ok()).flatten()
}

/// Whether every byte is visible ASCII or a tab: `HeaderValue::to_str`'s rule, for values read
/// as bytes.
pub fn visible_or_tab(bytes: &[u8]) -> bool {
    only_visible(bytes, true)
}

/// Whether every byte is visible ASCII, or a tab when `tab` allows it. Checked without stopping
/// at the first bad byte, so that the compiler checks many bytes at once: an `Authorization`
/// header with a JWT is about 800 bytes, and a byte-by-byte loop that may stop early cost about
/// 0.2 us there.
#[inline(always)]
fn only_visible(bytes: &[u8], tab: bool) -> bool {
    bytes.iter().fold(0u8, |bad, &b| bad | u8::from(!(tab && b == b'\t') && b.wrapping_sub(0x20) >= 0x5f)) == 0
}

/// `Content-Type` must be JSON (415 otherwise).
pub fn check_content_type(headers: &HeaderMap) -> Result<(), Refusal> {
    let ok = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    if ok { Ok(()) } else { Err(Refusal::UnsupportedMediaType) }
}

/// What the client accepts. Lenient: a missing `Accept`, or one that names only JSON, still
/// gets a reply (as JSON); only an `Accept` that excludes both types is refused (406).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepts {
    pub json: bool,
    pub stream: bool,
}

pub fn accepts(headers: &HeaderMap) -> Result<Accepts, Refusal> {
    // What MCP clients send, answered without reading it range by range.
    const BOTH: &[u8] = b"application/json, text/event-stream";
    let mut all = headers.get_all(ACCEPT).iter();
    if let (Some(only), None) = (all.next(), all.next())
        && only.as_bytes() == BOTH
    {
        return Ok(Accepts { json: true, stream: true });
    }
    read_accept(headers)
}

/// [`accepts`], range by range.
fn read_accept(headers: &HeaderMap) -> Result<Accepts, Refusal> {
    let mut values = headers.get_all(ACCEPT).iter().filter(|v| text(v).is_some()).peekable();
    if values.peek().is_none() {
        return Ok(Accepts { json: true, stream: true });
    }
    let mut acc = Accepts { json: false, stream: false };
    for range in values.flat_map(|v| v.as_bytes().split(|&b| b == b',')) {
        let mut parts = range.split(|&b| b == b';');
        let media = parts.next().unwrap_or_default().trim_ascii();
        // `q=0` means "not acceptable".
        if parts.any(refuses) {
            continue;
        }
        let is = |name: &[u8]| media.eq_ignore_ascii_case(name);
        if is(b"*/*") {
            acc = Accepts { json: true, stream: true };
        } else if is(b"application/*") || is(b"application/json") {
            acc.json = true;
        } else if is(b"text/*") || is(b"text/event-stream") {
            acc.stream = true;
        }
    }
    if acc.json || acc.stream { Ok(acc) } else { Err(Refusal::NotAcceptable) }
}

/// Whether a media range's parameter is a quality of zero (`q=0`, `Q = 0.000`: "not
/// acceptable").
fn refuses(parameter: &[u8]) -> bool {
    let Some(eq) = parameter.iter().position(|&b| b == b'=') else { return false };
    let (name, value) = (parameter[..eq].trim_ascii(), parameter[eq + 1..].trim_ascii());
    name.eq_ignore_ascii_case(b"q") && std::str::from_utf8(value).is_ok_and(|v| v.parse::<f32>() == Ok(0.0))
}

/// The single value of a header: absent is `None`; repeated or undecodable is a mismatch.
fn single<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Result<Option<&'h http::HeaderValue>, Refusal> {
    let mut all = headers.get_all(name).iter();
    let first = all.next();
    if all.next().is_some() {
        return Err(Refusal::HeaderMismatch(format!("Header mismatch: {name} appears more than once")));
    }
    Ok(first)
}

/// The `MCP-Protocol-Version` value, trimmed; `Err` when repeated or not visible ASCII.
pub fn protocol_version(headers: &HeaderMap) -> Result<Option<Cow<'_, str>>, Refusal> {
    match single(headers, &PROTOCOL_VERSION)? {
        None => Ok(None),
        Some(v) => header_codec::decode(v.as_bytes())
            .map(Some)
            .map_err(|e| Refusal::HeaderMismatch(format!("Header mismatch: MCP-Protocol-Version {e}"))),
    }
}

/// 2026-07-28 routing headers: `MCP-Protocol-Version` must equal `_meta`'s version,
/// `Mcp-Method` the method, and `Mcp-Name` the tool or prompt name or resource URI.
/// Values compare case-sensitively after trimming and Base64-sentinel decoding.
pub fn check_modern_headers(headers: &HeaderMap, env: &Envelope<'_>, version: Option<&str>) -> Result<(), Refusal> {
    let mismatch = |m: String| Refusal::HeaderMismatch(format!("Header mismatch: {m}"));
    let body_version = env.meta_version_str();
    match (version, body_version.as_deref()) {
        (None, _) => return Err(mismatch("missing MCP-Protocol-Version header".into())),
        (Some(h), Some(b)) if h != b => {
            return Err(mismatch(format!("MCP-Protocol-Version header value '{h}' does not match body value '{b}'")));
        }
        _ => {}
    }
    let method = single(headers, &METHOD)?
        .map(|v| header_codec::decode(v.as_bytes()).map_err(|e| mismatch(format!("Mcp-Method {e}"))))
        .transpose()?;
    match method {
        None if env.kind == mcp_proto::envelope::Kind::Request => {
            return Err(mismatch("missing Mcp-Method header".into()));
        }
        Some(m) if m != env.method => {
            return Err(mismatch(format!("Mcp-Method header value '{m}' does not match body value '{}'", env.method)));
        }
        _ => {}
    }
    if let Some(target) = env.name_target() {
        let name = single(headers, &NAME)?
            .map(|v| header_codec::decode(v.as_bytes()).map_err(|e| mismatch(format!("Mcp-Name {e}"))))
            .transpose()?;
        match (name, target.value) {
            // Nothing in the body to compare with: the request itself is malformed, which the
            // protocol engine reports.
            (_, None) => {}
            (None, Some(_)) => return Err(mismatch("missing Mcp-Name header".into())),
            (Some(h), Some(b)) if h != b => {
                return Err(mismatch(format!(
                    "Mcp-Name header value '{h}' does not match body value '{b}' ({})",
                    target.field
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use mcp_proto::envelope::{Body, parse_body};

    #[test]
    fn header_text_follows_to_str() {
        let mut checked = 0;
        for b in 0..=255u8 {
            for bytes in [vec![b], vec![b'a'; 40].into_iter().chain([b]).chain(vec![b'z'; 40]).collect()] {
                let Ok(value) = http::HeaderValue::from_bytes(&bytes) else { continue };
                checked += 1;
                assert_eq!(super::text(&value), value.to_str().ok(), "byte {b:#04x}");
                let visible = (0x20..=0x7e).contains(&b);
                assert_eq!(super::visible_ascii(value.as_bytes()), visible, "byte {b:#04x}");
            }
        }
        // Every byte a header value may hold: a tab, 0x20 to 0x7e and 0x80 to 0xff, alone and
        // amid visible ASCII.
        assert_eq!(checked, 2 * (1 + 95 + 128));
        assert!(super::visible_ascii(b""));
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    fn env(body: &str) -> Envelope<'_> {
        match parse_body(body.as_bytes()).expect("parses") {
            Body::Single(e) => e,
            Body::Batch(_) => panic!("single expected"),
        }
    }

    const CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo",
        "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;

    #[test]
    fn loopback_policy() {
        let p = OriginPolicy { loopback_only: true, ..Default::default() };
        for host in ["localhost:8080", "127.0.0.1:1", "[::1]:9", "localhost"] {
            assert_eq!(p.check(&headers(&[("host", host)])), Ok(()), "{host}");
        }
        assert!(p.check(&headers(&[("host", "evil.example.com")])).is_err());
        assert!(p.check(&headers(&[("host", "localhost:1"), ("origin", "http://evil.example.com")])).is_err());
        assert!(p.check(&headers(&[("host", "localhost:1"), ("origin", "null")])).is_err());
        assert_eq!(p.check(&headers(&[("host", "localhost:1"), ("origin", "http://localhost:6274")])), Ok(()));
    }

    #[test]
    fn public_policy() {
        let p = OriginPolicy {
            allowed_hosts: vec!["mcp.example.com".into()],
            allowed_origins: vec!["https://app.example.com".into()],
            loopback_only: false,
        };
        assert_eq!(p.check(&headers(&[("host", "mcp.example.com")])), Ok(()));
        assert!(p.check(&headers(&[("host", "other.example.com")])).is_err());
        assert_eq!(p.check(&headers(&[("host", "mcp.example.com"), ("origin", "https://app.example.com")])), Ok(()));
        assert!(p.check(&headers(&[("host", "mcp.example.com"), ("origin", "http://localhost:3000")])).is_err());
    }

    #[test]
    fn accept_variants() {
        assert_eq!(accepts(&headers(&[])), Ok(Accepts { json: true, stream: true }));
        assert_eq!(
            accepts(&headers(&[("accept", "application/json, text/event-stream")])),
            Ok(Accepts { json: true, stream: true })
        );
        assert_eq!(accepts(&headers(&[("accept", "application/json")])), Ok(Accepts { json: true, stream: false }));
        assert_eq!(accepts(&headers(&[("accept", "*/*")])), Ok(Accepts { json: true, stream: true }));
        assert_eq!(accepts(&headers(&[("accept", "text/html")])), Err(Refusal::NotAcceptable));
        assert_eq!(accepts(&headers(&[("accept", "application/json;q=0, text/html")])), Err(Refusal::NotAcceptable));
        // Media types and parameter names are case-insensitive; spaces around `=` are allowed.
        assert_eq!(
            accepts(&headers(&[("accept", "Application/JSON ; Q = 0.000, TEXT/Event-Stream;charset=utf-8")])),
            Ok(Accepts { json: false, stream: true })
        );
        // Only a quality of zero refuses; other parameters and qualities do not.
        assert_eq!(
            accepts(&headers(&[("accept", "application/json;q=0.5;level=0, text/event-stream;q=0")])),
            Ok(Accepts { json: true, stream: false })
        );
        assert_eq!(accepts(&headers(&[("accept", "text/*;q=1")])), Ok(Accepts { json: false, stream: true }));
        assert_eq!(accepts(&headers(&[("accept", "application/*")])), Ok(Accepts { json: true, stream: false }));
        // Repeated headers count together.
        assert_eq!(
            accepts(&headers(&[("accept", "text/html"), ("accept", "text/event-stream")])),
            Ok(Accepts { json: false, stream: true })
        );
        assert_eq!(accepts(&headers(&[("accept", "*/*;q=0")])), Err(Refusal::NotAcceptable));
        // The value clients send is answered at once, as read range by range; near it, read.
        let common = headers(&[("accept", "application/json, text/event-stream")]);
        assert_eq!(accepts(&common), read_accept(&common));
        assert_eq!(
            accepts(&headers(&[("accept", "application/json, text/event-stream;q=0")])),
            Ok(Accepts { json: true, stream: false })
        );
        assert_eq!(
            accepts(&headers(&[("accept", "application/json, text/event-stream"), ("accept", "text/html")])),
            Ok(Accepts { json: true, stream: true })
        );
    }

    #[test]
    fn loopback_host_names() {
        for host in
            ["localhost", "LOCALHOST", "localhost.", "app.localhost", "a.b.LocalHost.", "127.0.0.1", "127.9.9.9"]
        {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in ["[::1]", "::1"] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [".localhost", "localhost.example.com", "notlocalhost", "10.0.0.1", "example.com", "", "xlocalhost"]
        {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn content_type() {
        assert!(check_content_type(&headers(&[("content-type", "application/json; charset=utf-8")])).is_ok());
        assert!(check_content_type(&headers(&[("content-type", "text/plain")])).is_err());
        assert!(check_content_type(&headers(&[])).is_err());
    }

    #[test]
    fn modern_headers_match() {
        let e = env(CALL);
        let ok =
            headers(&[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "  echo ")]);
        assert_eq!(check_modern_headers(&ok, &e, Some("2026-07-28")), Ok(()));
        let b64 = headers(&[("mcp-method", "tools/call"), ("mcp-name", "=?base64?ZWNobw==?=")]);
        assert_eq!(check_modern_headers(&b64, &e, Some("2026-07-28")), Ok(()));
    }

    #[test]
    fn modern_headers_mismatch() {
        let e = env(CALL);
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>);
        let cases: &[Case<'_>] = &[
            (&[("mcp-method", "tools/call"), ("mcp-name", "echo")], None),
            (&[("mcp-method", "tools/call"), ("mcp-name", "echo")], Some("2025-11-25")),
            (&[("mcp-name", "echo")], Some("2026-07-28")),
            (&[("mcp-method", "TOOLS/CALL"), ("mcp-name", "echo")], Some("2026-07-28")),
            (&[("mcp-method", "tools/call")], Some("2026-07-28")),
            (&[("mcp-method", "tools/call"), ("mcp-name", "other")], Some("2026-07-28")),
            (&[("mcp-method", "tools/call"), ("mcp-name", "=?base64?!!?=")], Some("2026-07-28")),
            (&[("mcp-method", "tools/call"), ("mcp-method", "tools/call"), ("mcp-name", "echo")], Some("2026-07-28")),
        ];
        for (pairs, version) in cases {
            let r = check_modern_headers(&headers(pairs), &e, *version);
            assert!(matches!(r, Err(Refusal::HeaderMismatch(_))), "{pairs:?} {version:?}: {r:?}");
        }
    }
}
