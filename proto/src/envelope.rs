//! A borrowing first look at a JSON-RPC body: enough to route, classify the era and check
//! headers against, without building a tree of the whole message.
//!
//! The edge (HTTP) and the stdio transport both start here, so a message is classified the
//! same way whichever way it arrived.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::mcp as pb;
use crate::vocab::{Era, meta};

/// What kind of JSON-RPC message a body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Request,
    Notification,
    /// A client's answer to a server-to-client request.
    Response,
}

/// Why a body is not a JSON-RPC message we can serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvelopeError {
    /// Not JSON at all (-32700).
    Parse(String),
    /// JSON, but not a JSON-RPC message (-32600). `id` is echoed when it could be read.
    Invalid { id: Option<String>, reason: String },
}

/// The parsed outline of one JSON-RPC message. Borrowed from the body; raw JSON where the
/// value is passed on rather than interpreted.
#[derive(Debug)]
pub struct Envelope<'a> {
    /// The whole message, as JSON text (no whitespace around it).
    pub raw: &'a str,
    pub kind: Kind,
    /// The raw `id` (a string or an integer), absent for notifications.
    pub id: Option<&'a RawValue>,
    /// Empty for responses.
    pub method: Cow<'a, str>,
    /// The raw `params` (JSON text), if any.
    pub params: Option<&'a str>,
    /// `params.name` or `params.uri` when it is a string.
    pub name: Option<Cow<'a, str>>,
    pub uri: Option<Cow<'a, str>>,
    /// Whether `params._meta` is an object.
    pub meta: bool,
    /// The raw value of `_meta["io.modelcontextprotocol/protocolVersion"]`, if the key is present.
    pub meta_version: Option<&'a RawValue>,
    /// Whether `_meta["io.modelcontextprotocol/clientCapabilities"]` is present.
    pub meta_has_capabilities: bool,
}

/// A body is one message or, in 2025-03-26 only, a batch.
#[derive(Debug)]
pub enum Body<'a> {
    Single(Envelope<'a>),
    Batch(Vec<&'a RawValue>),
}

/// Deserialize a field into `Some(raw)` even when it is JSON `null`, so that `"id": null`
/// can be told apart from a missing `id`.
fn keep_null<'de, D>(d: D) -> Result<Option<&'de RawValue>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    <&RawValue>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct RawMessage<'a> {
    /// Raw, read with [`raw_str`]: serde's `Cow` in an `Option` is always an owned copy.
    #[serde(default, borrow, deserialize_with = "keep_null")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "keep_null")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "keep_null")]
    method: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "keep_null")]
    params: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "keep_null")]
    result: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "keep_null")]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ParamsPeek<'a> {
    #[serde(default, borrow, deserialize_with = "keep_null")]
    name: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "keep_null")]
    uri: Option<&'a RawValue>,
    #[serde(default, borrow, rename = "_meta")]
    meta: Option<MetaPeek<'a>>,
}

/// `params._meta`, read in the same pass as `params`: whether it is an object, and the two
/// keys a modern request must carry (a key given twice is refused, as for `params`' own).
#[derive(Default)]
struct MetaPeek<'a> {
    object: bool,
    version: Option<&'a RawValue>,
    capabilities: bool,
}

impl<'de: 'a, 'a> Deserialize<'de> for MetaPeek<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MetaVisitor(std::marker::PhantomData))
    }
}

struct MetaVisitor<'a>(std::marker::PhantomData<&'a ()>);

/// A key of `_meta`, compared as it is read (decoded when escaped), without a copy.
enum MetaKey {
    Version,
    Capabilities,
    Other,
}

impl<'de> Deserialize<'de> for MetaKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl serde::de::Visitor<'_> for KeyVisitor {
            type Value = MetaKey;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a key")
            }

            fn visit_str<E>(self, key: &str) -> Result<MetaKey, E> {
                Ok(match key {
                    meta::PROTOCOL_VERSION => MetaKey::Version,
                    meta::CLIENT_CAPABILITIES => MetaKey::Capabilities,
                    _ => MetaKey::Other,
                })
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de: 'a, 'a> serde::de::Visitor<'de> for MetaVisitor<'a> {
    type Value = MetaPeek<'a>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    // Anything but an object is no `_meta` (a modern request is then refused for lacking it).
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(MetaPeek::default())
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(MetaPeek::default())
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(MetaPeek::default())
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(MetaPeek::default())
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(MetaPeek::default())
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(MetaPeek::default())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(MetaPeek::default())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        use serde::de::Error as _;
        let mut peek = MetaPeek { object: true, ..MetaPeek::default() };
        while let Some(key) = map.next_key::<MetaKey>()? {
            match key {
                MetaKey::Version => {
                    if peek.version.is_some() {
                        return Err(A::Error::duplicate_field(meta::PROTOCOL_VERSION));
                    }
                    peek.version = Some(map.next_value::<&'de RawValue>()?);
                }
                MetaKey::Capabilities => {
                    if peek.capabilities {
                        return Err(A::Error::duplicate_field(meta::CLIENT_CAPABILITIES));
                    }
                    peek.capabilities = true;
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
                MetaKey::Other => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(peek)
    }
}

/// The string inside a raw JSON string value, `None` for any other JSON type.
pub fn raw_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    let s = raw.get();
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    // A raw value is valid JSON: a string without escapes is its own text.
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<Cow<'_, str>>(s).ok()
}

fn is_object(raw: &RawValue) -> bool {
    raw.get().starts_with('{')
}

/// Whether a raw `id` is a legal JSON-RPC id for MCP: a string or an integer (never null).
pub fn is_valid_id(raw: &RawValue) -> bool {
    let s = raw.get();
    if s.starts_with('"') {
        return true;
    }
    // An integer: optional minus, digits, no fraction or exponent.
    let digits = s.strip_prefix('-').unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// A pass over a whole JSON value with serde_json's own recursion limit (128 levels), so that a
/// body nested deeper than any later step (a `Value`, a schema check) may recurse is refused
/// here, as a parse error, whichever transport it came by. Borrowing parses of raw values skip
/// nested values without that limit; this pass does not. Numbers beyond `f64` (`1e400`) fail
/// here too: no step after this one could represent them.
struct Probe;

impl<'de> Deserialize<'de> for Probe {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Probe)
    }
}

impl<'de> serde::de::Visitor<'de> for Probe {
    type Value = Probe;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Probe, E> {
        Ok(Probe)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Probe, E> {
        Ok(Probe)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Probe, E> {
        Ok(Probe)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Probe, E> {
        Ok(Probe)
    }
    fn visit_str<E>(self, _: &str) -> Result<Probe, E> {
        Ok(Probe)
    }
    fn visit_unit<E>(self) -> Result<Probe, E> {
        Ok(Probe)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Probe, A::Error> {
        while seq.next_element::<Probe>()?.is_some() {}
        Ok(Probe)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Probe, A::Error> {
        while map.next_entry::<serde::de::IgnoredAny, Probe>()?.is_some() {}
        Ok(Probe)
    }
}

/// Parse a request body: one message, or a batch (an array) whose elements are parsed later.
/// Not UTF-8, not JSON, nested deeper than 128 levels or carrying a number beyond `f64`: a
/// parse error (-32700). A leading byte order mark is ignored (RFC 8259 §8.1).
pub fn parse_body(body: &[u8]) -> Result<Body<'_>, EnvelopeError> {
    parse(body, Probing::WhenNeeded)
}

/// [`parse_body`] with the probe run on every body, not only on those [`needs_probe`] picks:
/// the reference the fuzz target holds `parse_body` to (the same answer for any bytes).
#[doc(hidden)]
pub fn parse_body_always_probed(body: &[u8]) -> Result<Body<'_>, EnvelopeError> {
    parse(body, Probing::Always)
}

/// [`parse_body`] for a body the HTTP edge has parsed with it already, and so probed: mcp-service
/// over gRPC, behind the gateway, when the gateway sent no outline of it ([`from_outline`]).
/// Without the probe, a body no edge checked still cannot make a later step recurse without
/// limit (every tree of JSON values is built by serde_json, within its limit), and bad JSON is
/// still refused: a single message as an invalid one (-32600) rather than a parse error, a batch
/// or a body that is not UTF-8 as a parse error.
pub fn parse_checked_body(body: &[u8]) -> Result<Body<'_>, EnvelopeError> {
    parse(body, Probing::Never)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Probing {
    Always,
    /// Before the parse when [`needs_probe`] says so; otherwise only after a failed parse, to
    /// tell bad JSON (a parse error) from a bad message.
    WhenNeeded,
    Never,
}

/// Whether a body might fail the [`Probe`] even though it is valid JSON: nested deeper than 64
/// levels, a number with an exponent or a run of more than 20 digits (which might not fit an
/// `f64`), or an escape in a string (a lone surrogate escape fails the probe's read of a string
/// but not a borrowing parse's skip). Any other valid JSON passes the probe, so for it the probe
/// can wait: invalid JSON fails the parse that follows, and is probed then. Far cheaper than the
/// probe's pass through serde.
fn needs_probe(text: &str) -> bool {
    let bytes = text.as_bytes();
    if bytes.len() < SHORT {
        // Too short to nest 128 levels deep (valid JSON closes what it opens) or to write an
        // integer beyond `f64` (309 digits): only an escape or an exponent can fail the probe.
        // (An `e` after a digit inside a string sends a body to the probe for nothing.)
        return memchr::memchr(b'\\', bytes).is_some()
            || memchr::memchr2_iter(b'e', b'E', bytes).any(|at| at > 0 && bytes[at - 1].is_ascii_digit());
    }
    const DEEPEST: u32 = 64;
    let (mut depth, mut digits, mut next) = (0u32, 0u32, 0usize);
    while let Some(&b) = bytes.get(next) {
        next += 1;
        match OUTSIDE[usize::from(b)] {
            Class::Other => {}
            Class::Digit => {
                digits += 1;
                if digits > 20 {
                    return true;
                }
                continue;
            }
            // An exponent follows a digit; the `e` of `true` and `false` does not.
            Class::Exponent if digits > 0 => return true,
            Class::Exponent => {}
            // On to the closing quote; an escape, or no end, sends the body to the probe.
            Class::Quote => loop {
                match bytes.get(next) {
                    Some(b'"') => {
                        next += 1;
                        break;
                    }
                    Some(b'\\') | None => return true,
                    Some(_) => next += 1,
                }
            },
            Class::Open => {
                depth += 1;
                if depth > DEEPEST {
                    return true;
                }
            }
            Class::Close => depth = depth.saturating_sub(1),
        }
        digits = 0;
    }
    false
}

/// Bodies shorter than this are looked over by [`needs_probe`] without following their
/// structure.
const SHORT: usize = 256;

/// What [`needs_probe`] makes of a byte outside strings.
#[derive(Clone, Copy)]
enum Class {
    Other,
    Digit,
    Exponent,
    Quote,
    Open,
    Close,
}

const OUTSIDE: [Class; 256] = {
    let mut table = [Class::Other; 256];
    let mut b = b'0';
    while b <= b'9' {
        table[b as usize] = Class::Digit;
        b += 1;
    }
    table[b'e' as usize] = Class::Exponent;
    table[b'E' as usize] = Class::Exponent;
    table[b'"' as usize] = Class::Quote;
    table[b'{' as usize] = Class::Open;
    table[b'[' as usize] = Class::Open;
    table[b'}' as usize] = Class::Close;
    table[b']' as usize] = Class::Close;
    table
};

fn probe(text: &str) -> Result<(), EnvelopeError> {
    serde_json::from_str::<Probe>(text).map(drop).map_err(|e| EnvelopeError::Parse(e.to_string()))
}

fn parse(body: &[u8], probing: Probing) -> Result<Body<'_>, EnvelopeError> {
    let text = std::str::from_utf8(body).map_err(|e| EnvelopeError::Parse(format!("body is not valid UTF-8: {e}")))?;
    let text = text.trim_start_matches('\u{feff}');
    let probed = match probing {
        Probing::Always => true,
        Probing::WhenNeeded => needs_probe(text),
        Probing::Never => false,
    };
    if probed {
        probe(text)?;
    }
    let parsed = parse_unprobed(text);
    match parsed {
        // A body the probe was spared that fails: bad JSON is a parse error, as if probed first.
        Err(_) if probing == Probing::WhenNeeded && !probed => probe(text).and(parsed),
        _ => parsed,
    }
}

fn parse_unprobed(text: &str) -> Result<Body<'_>, EnvelopeError> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        let items: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| EnvelopeError::Parse(e.to_string()))?;
        return Ok(Body::Batch(items));
    }
    // Probed or about to be: one JSON value, with nothing but JSON's whitespace around it.
    parse_message(text.trim_matches([' ', '\t', '\n', '\r'])).map(Body::Single)
}

/// Parse one JSON-RPC message: `raw` is known to be one JSON value, whitespace trimmed.
pub fn parse_message(raw: &str) -> Result<Envelope<'_>, EnvelopeError> {
    if !raw.starts_with('{') {
        return Err(EnvelopeError::Invalid { id: None, reason: "a JSON-RPC message must be a JSON object".into() });
    }
    let msg: RawMessage<'_> = serde_json::from_str(raw)
        .map_err(|e| EnvelopeError::Invalid { id: None, reason: format!("malformed JSON-RPC message: {e}") })?;
    let echo_id = msg.id.filter(|id| is_valid_id(id)).map(|id| id.get().to_owned());
    let invalid = |reason: &str| EnvelopeError::Invalid { id: echo_id.clone(), reason: reason.to_owned() };

    if msg.jsonrpc.and_then(raw_str).as_deref() != Some("2.0") {
        return Err(invalid("`jsonrpc` must be \"2.0\""));
    }
    if let Some(id) = msg.id
        && !is_valid_id(id)
    {
        return Err(invalid("`id` must be a string or an integer"));
    }
    let method = match msg.method {
        Some(m) => Some(raw_str(m).ok_or_else(|| invalid("`method` must be a string"))?),
        None => None,
    };
    let kind = match (&method, msg.id, msg.result.is_some() || msg.error.is_some()) {
        (Some(_), Some(_), false) => Kind::Request,
        (Some(_), None, false) => Kind::Notification,
        (None, Some(_), true) => Kind::Response,
        (None, None, true) => return Err(invalid("a response must carry an `id`")),
        (Some(_), _, true) => {
            return Err(invalid("a message cannot carry both `method` and `result`/`error`"));
        }
        (None, _, false) => return Err(invalid("missing `method`")),
    };
    if msg.result.is_some() && msg.error.is_some() {
        return Err(invalid("a response cannot carry both `result` and `error`"));
    }
    let mut env = Envelope {
        raw,
        kind,
        id: msg.id,
        method: method.unwrap_or(Cow::Borrowed("")),
        params: msg.params.map(RawValue::get),
        name: None,
        uri: None,
        meta: false,
        meta_version: None,
        meta_has_capabilities: false,
    };
    if let Some(params) = msg.params {
        if params.get() != "null" && !is_object(params) && !params.get().starts_with('[') {
            return Err(invalid("`params` must be an object"));
        }
        if is_object(params) {
            // On a valid object these fail only for a duplicate key: refused, so that the value
            // the routing headers are checked against is the one the method is served with.
            let peek = serde_json::from_str::<ParamsPeek<'_>>(params.get())
                .map_err(|e| invalid(&format!("malformed `params`: {e}")))?;
            env.name = peek.name.and_then(raw_str);
            env.uri = peek.uri.and_then(raw_str);
            if let Some(meta) = peek.meta.filter(|m| m.object) {
                env.meta = true;
                env.meta_version = meta.version;
                env.meta_has_capabilities = meta.capabilities;
            }
        }
    }
    Ok(env)
}

impl Envelope<'_> {
    /// The body rule of era classification: a message whose `_meta` carries the protocol
    /// version key is modern, whatever its method; everything else is legacy. (HTTP adds a
    /// header rule on top, in the gateway.)
    pub fn body_era(&self) -> Era {
        if self.meta_version.is_some() { Era::Modern } else { Era::Legacy }
    }

    /// The `_meta` protocol version as a string, if it is one.
    pub fn meta_version_str(&self) -> Option<Cow<'_, str>> {
        self.meta_version.and_then(raw_str)
    }

    /// The id as raw JSON text, for echoing in a reply.
    pub fn id_json(&self) -> Option<&str> {
        self.id.map(RawValue::get)
    }

    /// The value that `Mcp-Name` must match for this method, if the method has one.
    pub fn name_target(&self) -> Option<NameTarget<'_>> {
        match self.method.as_ref() {
            "tools/call" | "prompts/get" => Some(NameTarget { field: "params.name", value: self.name.as_deref() }),
            "resources/read" => Some(NameTarget { field: "params.uri", value: self.uri.as_deref() }),
            _ => None,
        }
    }

    /// The first reason a modern request's `_meta` lacks a required field (-32602), if any.
    pub fn missing_modern_meta(&self) -> Option<&'static str> {
        if !self.meta {
            return Some("missing params._meta (required by protocol revision 2026-07-28)");
        }
        match self.meta_version {
            None => return Some("missing _meta[\"io.modelcontextprotocol/protocolVersion\"]"),
            Some(v) if raw_str(v).is_none() => {
                return Some("_meta[\"io.modelcontextprotocol/protocolVersion\"] must be a string");
            }
            _ => {}
        }
        if !self.meta_has_capabilities {
            return Some("missing _meta[\"io.modelcontextprotocol/clientCapabilities\"]");
        }
        None
    }
}

/// The parts of a message an outline places, in the order of `Outline.parts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The whole message.
    Message,
    Id,
    Method,
    Params,
    Name,
    Uri,
    /// `params._meta`'s protocol version.
    MetaVersion,
}

/// How many parts an outline places.
const PARTS: usize = 7;

/// The parts, in their order.
const PARTS_IN_ORDER: [Part; PARTS] =
    [Part::Message, Part::Id, Part::Method, Part::Params, Part::Name, Part::Uri, Part::MetaVersion];

/// The bytes an outline's numbers take.
const PARTS_BYTES: usize = 2 * PARTS * 4;

/// Where `outline` places `part`: `Some(None)` when the message has no such part, `None` when
/// the outline is not one (too few numbers).
pub fn place(outline: &pb::Outline, part: Part) -> Option<Option<std::ops::Range<usize>>> {
    let at = 8 * part as usize;
    let number = |at: usize| outline.parts.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let (start, length) = (number(at)? as usize, number(at + 4)? as usize);
    match length.checked_sub(1) {
        None => Some(None),
        Some(length) => Some(Some(start..start.checked_add(length)?)),
    }
}

/// Make `outline` place `part` at `at` (`None`: the message has no such part).
pub fn set_place(outline: &mut pb::Outline, part: Part, at: Option<std::ops::Range<usize>>) {
    let mut parts = outline.parts.to_vec();
    parts.resize(PARTS_BYTES, 0);
    let (start, length) = at.map_or((0, 0), |at| (at.start, at.len() + 1));
    let at = 8 * part as usize;
    parts[at..at + 4].copy_from_slice(&u32::try_from(start).unwrap_or(u32::MAX).to_le_bytes());
    parts[at + 4..at + 8].copy_from_slice(&u32::try_from(length).unwrap_or(u32::MAX).to_le_bytes());
    outline.parts = parts.into();
}

impl<'a> Envelope<'a> {
    /// Where this message's parts lie in `body`, the bytes it was parsed from, for a service
    /// that would otherwise parse the body again ([`from_outline`]). `None` when a part is not in
    /// the body as is (a method, name or uri written with escapes), or the envelope was not
    /// parsed from `body`.
    pub fn outline(&self, body: &[u8]) -> Option<pb::Outline> {
        let base = body.as_ptr() as usize;
        let mut parts = Vec::with_capacity(PARTS_BYTES);
        // A slice of the body: where it starts and its length plus one.
        let mut add = |part: Option<&str>| {
            let Some(part) = part else {
                parts.extend_from_slice(&[0; 8]);
                return Some(());
            };
            let start = (part.as_ptr() as usize).checked_sub(base)?;
            if start + part.len() > body.len() {
                return None;
            }
            parts.extend_from_slice(&u32::try_from(start).ok()?.to_le_bytes());
            parts.extend_from_slice(&u32::try_from(part.len() + 1).ok()?.to_le_bytes());
            Some(())
        };
        // A string's text, when it is in the body as is (no escapes decoded into a copy).
        fn text<'t>(value: Option<&'t Cow<'_, str>>) -> Result<Option<&'t str>, ()> {
            match value {
                Some(Cow::Owned(_)) => Err(()),
                Some(Cow::Borrowed(text)) => Ok(Some(text)),
                None => Ok(None),
            }
        }
        let method = match self.kind {
            Kind::Response => None,
            Kind::Request | Kind::Notification => text(Some(&self.method)).ok()?,
        };
        add(Some(self.raw))?;
        add(self.id.map(RawValue::get))?;
        add(method)?;
        add(self.params)?;
        add(text(self.name.as_ref()).ok()?)?;
        add(text(self.uri.as_ref()).ok()?)?;
        add(self.meta_version.map(RawValue::get))?;
        let kind = match self.kind {
            Kind::Request => pb::MessageKind::Request,
            Kind::Notification => pb::MessageKind::Notification,
            Kind::Response => pb::MessageKind::Response,
        };
        Some(pb::Outline {
            kind: kind as i32,
            parts: parts.into(),
            meta: self.meta,
            meta_has_capabilities: self.meta_has_capabilities,
        })
    }
}

/// The envelope `outline` describes in `body`, without parsing the body again: what a gateway
/// that parsed it with [`parse_body`] sent along ([`Envelope::outline`]). `None` when the outline
/// does not fit the body (a part outside it or not on a character's boundary, a kind not known,
/// a part outside the part it belongs to or not what its place needs): the body is then parsed
/// as usual. The short parts (the id, the protocol version) are read as JSON again, so that they
/// are echoed as valid JSON whatever the outline says; `params` is read whole later (into a
/// tree) by whoever uses it.
///
/// The rest is taken on trust, as the gateway's other findings are (the era, the caller): that
/// the message is a JSON-RPC message of `jsonrpc` "2.0", and which of its parts are where. Only
/// a caller that holds the service token reaches mcp-service, and only the gateway sends outlines.
pub fn from_outline<'a>(body: &'a [u8], outline: &pb::Outline) -> Option<Envelope<'a>> {
    if outline.parts.len() != PARTS_BYTES {
        return None;
    }
    // Every part's place, read once.
    let mut places: [Option<std::ops::Range<usize>>; PARTS] = Default::default();
    for (at, place_of) in places.iter_mut().zip(PARTS_IN_ORDER) {
        *at = place(outline, place_of)?;
    }
    let at = |part: Part| places[part as usize].as_ref();
    // Each part inside the one it belongs to: the message, then its `params`.
    let within = |inner: Part, outer: Part| match (at(inner), at(outer)) {
        (None, _) => true,
        (Some(inner), Some(outer)) => outer.start <= inner.start && inner.end <= outer.end,
        (Some(_), None) => false,
    };
    let nested = [Part::Id, Part::Method, Part::Params].into_iter().all(|part| within(part, Part::Message))
        && [Part::Name, Part::Uri, Part::MetaVersion].into_iter().all(|part| within(part, Part::Params));
    if !nested || (!outline.meta && at(Part::MetaVersion).is_some()) {
        return None;
    }
    // Each part's text: the outline does not fit when one is outside the body or cuts a
    // character.
    let text = std::str::from_utf8(body).ok()?;
    let mut texts: [Option<&'a str>; PARTS] = [None; PARTS];
    for (found, place) in texts.iter_mut().zip(&places) {
        if let Some(place) = place {
            *found = Some(text.get(place.clone())?);
        }
    }
    let part = |part: Part| texts[part as usize];
    // The short parts read as JSON again.
    let json = |which: Part| part(which).map(serde_json::from_str::<&RawValue>).transpose().ok();
    // A string's text as is: no quote or backslash can be in it.
    let plain = |which: Part| match part(which) {
        Some(text) if text.contains(['"', '\\']) => None,
        found => Some(found.map(Cow::Borrowed)),
    };
    let raw = part(Part::Message)?;
    if !(raw.starts_with('{') && raw.ends_with('}')) {
        return None;
    }
    let kind = match pb::MessageKind::try_from(outline.kind).ok()? {
        pb::MessageKind::Request => Kind::Request,
        pb::MessageKind::Notification => Kind::Notification,
        pb::MessageKind::Response => Kind::Response,
        pb::MessageKind::Unspecified => return None,
    };
    let id = json(Part::Id)?;
    if id.is_some_and(|id| !is_valid_id(id)) || (kind == Kind::Notification) != id.is_none() {
        return None;
    }
    let method = match kind {
        Kind::Response if part(Part::Method).is_none() => Cow::Borrowed(""),
        Kind::Response => return None,
        Kind::Request | Kind::Notification => plain(Part::Method)??,
    };
    let params = part(Part::Params);
    if params.is_some_and(|p| !(p.starts_with('{') || p.starts_with('[') || p == "null")) {
        return None;
    }
    Some(Envelope {
        raw,
        kind,
        id,
        method,
        params,
        name: plain(Part::Name)?,
        uri: plain(Part::Uri)?,
        meta: outline.meta,
        meta_version: json(Part::MetaVersion)?,
        meta_has_capabilities: outline.meta_has_capabilities,
    })
}

/// Which body field a routing header is compared with.
#[derive(Debug, Clone, Copy)]
pub struct NameTarget<'a> {
    pub field: &'static str,
    pub value: Option<&'a str>,
}

/// Keys a meta object must have, for documentation and tests.
pub const REQUIRED_MODERN_META: [&str; 2] = [meta::PROTOCOL_VERSION, meta::CLIENT_CAPABILITIES];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_strings_read_as_json_strings() {
        let raw = |json: &str| RawValue::from_string(json.to_owned()).expect("JSON");
        for json in
            [r#""""#, r#""tools/list""#, r#""a \"quoted\" name""#, r#""\u00e9t\u00e9 \ud83d\ude00""#, r#""café""#]
        {
            let expected: String = serde_json::from_str(json).expect("a string");
            let value = raw(json);
            let read = raw_str(&value).expect("read");
            assert_eq!(read, expected, "{json}");
            // Only a string with escapes is copied.
            assert_eq!(matches!(read, Cow::Borrowed(_)), !json.contains('\\'), "{json}");
        }
        for json in ["1", "null", "true", "{}", r#"["a"]"#] {
            assert!(raw_str(&raw(json)).is_none(), "{json}");
        }
    }

    fn single(s: &str) -> Envelope<'_> {
        match parse_body(s.as_bytes()).expect("parses") {
            Body::Single(e) => e,
            Body::Batch(_) => panic!("not a batch"),
        }
    }

    #[test]
    fn request_notification_response() {
        let e = single(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
        assert_eq!(e.kind, Kind::Request);
        assert_eq!(e.method, "ping");
        assert_eq!(e.id_json(), Some("1"));
        let e = single(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert_eq!(e.kind, Kind::Notification);
        let e = single(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#);
        assert_eq!(e.kind, Kind::Response);
    }

    #[test]
    fn modern_meta_and_targets() {
        let e = single(
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"x":[1,2]},
               "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#,
        );
        assert_eq!(e.body_era(), Era::Modern);
        assert_eq!(e.meta_version_str().as_deref(), Some("2026-07-28"));
        assert_eq!(e.name_target().and_then(|t| t.value), Some("echo"));
        assert_eq!(e.missing_modern_meta(), None);
    }

    #[test]
    fn modern_even_for_initialize() {
        let e = single(
            r#"{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
        );
        assert_eq!(e.body_era(), Era::Modern);
        assert!(e.missing_modern_meta().expect("capabilities missing").contains("clientCapabilities"));
    }

    #[test]
    fn legacy_without_meta_version() {
        let e = single(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"progressToken":1}}}"#);
        assert_eq!(e.body_era(), Era::Legacy);
        let e = single(r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":"nope"}}"#);
        assert_eq!(e.body_era(), Era::Legacy);
        // `_meta` that is not an object is no `_meta`, whatever it holds.
        for meta in [
            "null",
            "1",
            "-2",
            "1.5",
            "true",
            r#""io.modelcontextprotocol/protocolVersion""#,
            r#"[{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}]"#,
        ] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{{"_meta":{meta}}}}}"#);
            let e = single(&body);
            assert_eq!(e.body_era(), Era::Legacy, "{meta}");
            assert!(e.missing_modern_meta().expect("no _meta").contains("missing params._meta"), "{meta}");
        }
        // Keys are compared decoded.
        let e = single(
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol\/protocolVersion":"2026-07-28","io.modelcontextprotocol/client\u0043apabilities":{}}}}"#,
        );
        assert_eq!((e.body_era(), e.missing_modern_meta()), (Era::Modern, None));
    }

    #[test]
    fn escaped_strings_are_decoded() {
        let e = single(r#"{"jsonrpc":"2.0","id":"\u0041","method":"resources/read","params":{"uri":"test://\u4e16"}}"#);
        assert_eq!(e.uri.as_deref(), Some("test://世"));
        assert_eq!(e.id_json(), Some(r#""\u0041""#));
    }

    #[test]
    fn rejects() {
        assert!(matches!(parse_body(b"{"), Err(EnvelopeError::Parse(_))));
        assert!(matches!(parse_body(b"\xff"), Err(EnvelopeError::Parse(_))));
        assert!(matches!(parse_body(b"42"), Err(EnvelopeError::Invalid { .. })));
        assert!(matches!(parse_body(b"\"x\""), Err(EnvelopeError::Invalid { .. })));
        for bad in [
            r#"{"id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#"{"jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":3}"#,
        ] {
            assert!(matches!(parse_body(bad.as_bytes()), Err(EnvelopeError::Invalid { .. })), "{bad}");
        }
        // The id is echoed when it is legal, whatever `jsonrpc` holds instead of "2.0".
        for bad in [r#""1.0""#, "2", "null", r#"["2.0"]"#, r#"{"v":"2.0"}"#, r#""2.0 ""#] {
            let message = format!(r#"{{"jsonrpc":{bad},"id":7,"method":"ping"}}"#);
            match parse_body(message.as_bytes()) {
                Err(EnvelopeError::Invalid { id, reason }) => {
                    assert_eq!((id.as_deref(), reason.as_str()), (Some("7"), "`jsonrpc` must be \"2.0\""), "{bad}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        // "2.0" written with an escape is "2.0".
        assert!(parse_body(br#"{"jsonrpc":"2\u002e0","id":7,"method":"ping"}"#).is_ok());
    }

    #[test]
    fn batches() {
        match parse_body(br#" [{"jsonrpc":"2.0","id":1,"method":"ping"}, 3]"#).expect("parses") {
            Body::Batch(items) => assert_eq!(items.len(), 2),
            Body::Single(_) => panic!("batch expected"),
        }
    }

    #[test]
    fn deep_nesting_and_huge_numbers_are_parse_errors() {
        let deep = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"x\":{}1{}}}}}",
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        assert!(matches!(parse_body(deep.as_bytes()), Err(EnvelopeError::Parse(m)) if m.contains("recursion limit")));
        let batch = format!("[{}{{}}{}]", "{\"a\":".repeat(200), "}".repeat(200));
        assert!(matches!(parse_body(batch.as_bytes()), Err(EnvelopeError::Parse(_))));
        let fine = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"x\":{}1{}}}}}",
            "[".repeat(100),
            "]".repeat(100)
        );
        assert!(parse_body(fine.as_bytes()).is_ok());
        assert!(matches!(parse_body(br#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#), Err(EnvelopeError::Parse(_))));
        assert!(parse_body(br#"{"jsonrpc":"2.0","id":123456789012345678901234,"method":"ping"}"#).is_ok());
    }

    /// The probe is skipped only where it could not fail, and a body it was spared that turns
    /// out bad is still a parse error: every body is answered as if probed first.
    #[test]
    fn the_probe_is_spared_only_where_it_cannot_fail() {
        let plain =
            r#"{"jsonrpc":"2.0","id":12,"method":"tools/list","params":{"cursor":"a b","x":[true,false,null,-1.5,0]}}"#;
        // A long body is followed through its structure; a short one is only looked over.
        let long = |json: &str| format!("{json:<width$}", width = SHORT);
        assert!(!needs_probe(plain) && !needs_probe(&long(plain)));
        let deep = |n: usize| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"x":{}1{}}}}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        assert!(!needs_probe(&long(&deep(62))), "64 levels with the message and params");
        assert!(needs_probe(&long(&deep(63))));
        assert!(!needs_probe(&deep(63)), "too short to reach the probe's depth");
        for needy in [r#"{"id":1e5}"#, r#"{"id":1.5E-3}"#, r#"{"x":"\ud800"}"#, r#"{"x":"a\"b"}"#] {
            assert!(needs_probe(needy) && needs_probe(&long(needy)), "{needy}");
        }
        for needy_if_long in
            [r#"{"id":123456789012345678901}"#, r#"{"x":0.123456789012345678901}"#, r#"{"x":"unterminated"#]
        {
            assert!(!needs_probe(needy_if_long) && needs_probe(&long(needy_if_long)), "{needy_if_long}");
        }
        // Digits, `e` and brackets inside strings are text; `true` and `false` are no exponents.
        let texts = r#"{"x":"1e400 [[[[ 123456789012345678901234","y":true,"z":false}"#;
        assert!(!needs_probe(&long(texts)));
        assert!(needs_probe(texts), "an exponent's look inside a string, in a short body");
        let bodies = [
            plain.to_owned(),
            deep(62),
            long(&deep(62)),
            long(&deep(63)),
            deep(200),
            // The deepest a short body can go (255 bytes), and one level more.
            format!("{}1{}", "[".repeat(127), "]".repeat(127)),
            format!("{}1{}", "[".repeat(128), "]".repeat(128)),
            long(r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\ud800"}}"#),
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\ud800"}}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\ud83d\ude00"}}"#.into(),
            r#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":1e-400}}"#.into(),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"x":{}}}}}"#, "9".repeat(400)),
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"} x"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":01}}"#.into(),
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"a\tb\"}}".into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"ping",}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#.into(),
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"]"#.into(),
            r#"}}}{"jsonrpc":"2.0","id":1,"method":"ping"}"#.into(),
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},]"#.into(),
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}, 3]"#.into(),
            "\u{a0}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}".into(),
            "42".into(),
            "tru".into(),
            String::new(),
        ];
        for body in &bodies {
            let (spared, probed) = (parse_body(body.as_bytes()), parse_body_always_probed(body.as_bytes()));
            assert_eq!(format!("{spared:?}"), format!("{probed:?}"), "{body}");
        }
        // Bad JSON spared the probe is still a parse error, not an invalid message.
        let bad = r#"{"jsonrpc":"2.0","id":1,"method":"ping",}"#;
        assert!(!needs_probe(bad));
        assert!(matches!(parse_body(bad.as_bytes()), Err(EnvelopeError::Parse(_))));
    }

    #[test]
    fn duplicate_keys_are_refused() {
        for bad in [
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{},"_meta":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"a","io.modelcontextprotocol/protocolVersion":"b"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol\/clientCapabilities":1}}}"#,
        ] {
            assert!(matches!(parse_body(bad.as_bytes()), Err(EnvelopeError::Invalid { .. })), "{bad}");
        }
        // Deeper down (tool arguments) the last value wins, as in serde_json.
        assert!(
            parse_body(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"a":1,"a":2}}}"#)
                .is_ok()
        );
    }

    /// A checked body is parsed as `parse_body` parses it; JSON that is not one value is still
    /// refused, as an invalid message.
    #[test]
    fn a_checked_body_is_read_alike() {
        let bodies = [
            " \r\n{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"}}}\t ",
            "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}",
        ];
        for body in bodies {
            let (Ok(Body::Single(a)), Ok(Body::Single(b))) =
                (parse_body(body.as_bytes()), parse_checked_body(body.as_bytes()))
            else {
                panic!("{body}: one message both ways");
            };
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{body}");
            assert!(a.raw.starts_with('{') && a.raw.ends_with('}'), "{:?}", a.raw);
        }
        assert!(matches!(parse_checked_body(b"[1, 2]"), Ok(Body::Batch(items)) if items.len() == 2));
        for bad in [&b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"} x"[..], b"{\"jsonrpc\":", b"\xff"] {
            assert!(parse_checked_body(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn bom_is_tolerated() {
        let body = "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}";
        assert!(matches!(parse_body(body.as_bytes()), Ok(Body::Single(_))));
    }

    /// An outline, sent as it travels (encoded and decoded), reads as the parse it describes:
    /// requests of both eras, a notification, a response, a string id, text outside ASCII,
    /// whitespace and a byte order mark around the message, `params` that are `null` or absent.
    #[test]
    fn an_outline_reads_as_the_parse_it_describes() {
        use prost::Message as _;
        let bodies = [
            "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"écho ☃\",\"arguments\":{\"message\":\"hi\"},\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
            "\u{feff} \n{\"jsonrpc\":\"2.0\",\"id\":\"req-1\",\"method\":\"resources/read\",\"params\":{\"uri\":\"test://ü\"}}\r\n",
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}",
            "{\"jsonrpc\":\"2.0\",\"id\":-3,\"result\":{\"ok\":true}}",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":null}",
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":5}}}",
        ];
        for body in bodies {
            let parsed = single(body);
            let outline = parsed.outline(body.as_bytes()).expect("an outline");
            let outline = pb::Outline::decode(&outline.encode_to_vec()[..]).expect("decoded");
            let read = from_outline(body.as_bytes(), &outline).expect("fits");
            assert_eq!(format!("{read:?}"), format!("{parsed:?}"), "{body}");
            // Borrowed from the body, as the parse is.
            assert!(matches!(read.method, Cow::Borrowed(_)), "{body}");
        }
    }

    /// A part written with escapes is not in the body as its text: no outline (the service
    /// parses the body). An envelope is outlined only in the body it was parsed from.
    #[test]
    fn an_escaped_part_or_another_body_has_no_outline() {
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools\/list"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a\"b"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x\u0041"}}"#,
        ] {
            assert!(single(body).outline(body.as_bytes()).is_none(), "{body}");
        }
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        let copy = body.as_bytes().to_vec();
        assert!(single(body).outline(&copy).is_none());
    }

    /// An outline that does not fit its body is set aside (`None`): a part past the end or
    /// inside a character, too few or too many numbers, a kind not known, an id that is not
    /// JSON or not an id, a notification with an id or a request without one, a response with a
    /// method, a method with a quote in it, `params` that are not an object, an array or `null`,
    /// a part outside the part it belongs to, a message that is not an object, a protocol version
    /// without `_meta`.
    #[test]
    fn an_outline_that_does_not_fit_is_set_aside() {
        let body =
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"é\",\"x\":\"a\\\"b\"}}";
        let bytes = body.as_bytes();
        let good = single(body).outline(bytes).expect("an outline");
        assert!(from_outline(bytes, &good).is_some());
        let at = |part: &str| {
            let start = body.find(part).expect("in the body");
            Some(start..start + part.len())
        };
        let moved = |part: Part, to: Option<std::ops::Range<usize>>| {
            let mut outline = good.clone();
            set_place(&mut outline, part, to);
            outline
        };
        let inside_e = body.find('é').expect("é") + 1;
        let unfit = [
            moved(Part::Message, Some(0..body.len() + 1)),
            moved(Part::Name, Some(inside_e - 1..inside_e)),
            moved(Part::Message, None),
            pb::Outline { kind: 0, ..good.clone() },
            pb::Outline { kind: 9, ..good.clone() },
            pb::Outline { parts: good.parts.slice(..PARTS_BYTES - 8), ..good.clone() },
            pb::Outline { parts: [&good.parts[..], &[0; 8]].concat().into(), ..good.clone() },
            pb::Outline { parts: vec![0xff; PARTS_BYTES].into(), ..good.clone() },
            moved(Part::Id, at("tools/call")),
            moved(Part::Id, at("{\"name\"")),
            moved(Part::Id, None),
            pb::Outline { kind: pb::MessageKind::Notification as i32, ..good.clone() },
            pb::Outline { kind: pb::MessageKind::Response as i32, ..good.clone() },
            moved(Part::Method, None),
            moved(Part::Method, at("a\\\"b")),
            moved(Part::Params, at("tools/call")),
            moved(Part::MetaVersion, at("{\"name\"")),
            // Parts outside the part they belong to, or a message that is not an object.
            moved(Part::Message, at("{\"name\"")),
            moved(Part::Name, at("tools/call")),
            moved(Part::Message, at("\"jsonrpc\"")),
            // An id that is JSON but not an id; a version without `_meta`.
            moved(Part::Id, at("{\"name\":\"é\",\"x\":\"a\\\"b\"}")),
            pb::Outline { meta: false, ..moved(Part::MetaVersion, at("\"é\"")) },
        ];
        for (i, outline) in unfit.iter().enumerate() {
            assert!(from_outline(bytes, outline).is_none(), "case {i}: {outline:?}");
        }
        // Placed and read back.
        assert_eq!(place(&moved(Part::Uri, Some(3..9)), Part::Uri), Some(Some(3..9)));
        assert_eq!(place(&moved(Part::Uri, None), Part::Uri), Some(None));
        assert_eq!(place(&pb::Outline::default(), Part::Uri), None);
        assert!(from_outline(b"\xff{}", &good).is_none(), "not UTF-8");
    }
}
