//! The Base64 sentinel of the Streamable HTTP transport: a header value that cannot travel as
//! plain header text is sent as `=?base64?{BASE64(UTF-8)}?=`.

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

const PREFIX: &str = "=?base64?";
const SUFFIX: &str = "?=";

/// Why a header value could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The header bytes are not visible ASCII, space or tab.
    InvalidCharacters,
    /// The sentinel's payload is not Base64.
    InvalidBase64,
    /// The decoded bytes are not UTF-8.
    InvalidUtf8,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DecodeError::InvalidCharacters => "contains characters not allowed in a header value",
            DecodeError::InvalidBase64 => "has a malformed =?base64?…?= value",
            DecodeError::InvalidUtf8 => "has a =?base64?…?= value that is not UTF-8",
        })
    }
}

/// Decode a raw header value: surrounding whitespace trimmed, then the sentinel (if present)
/// decoded. Plain values must be visible ASCII, space or tab; they are borrowed from `raw`.
pub fn decode(raw: &[u8]) -> Result<Cow<'_, str>, DecodeError> {
    if !raw.iter().all(|&b| b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b)) {
        return Err(DecodeError::InvalidCharacters);
    }
    // All bytes are ASCII, so this cannot fail.
    let text = std::str::from_utf8(raw).map_err(|_| DecodeError::InvalidCharacters)?;
    let text = text.trim_matches([' ', '\t']);
    match text.strip_prefix(PREFIX).and_then(|t| t.strip_suffix(SUFFIX)) {
        Some(payload) => {
            let bytes = STANDARD.decode(payload).map_err(|_| DecodeError::InvalidBase64)?;
            String::from_utf8(bytes).map(Cow::Owned).map_err(|_| DecodeError::InvalidUtf8)
        }
        None => Ok(Cow::Borrowed(text)),
    }
}

/// Encode a value for a header, using the sentinel only when plain text cannot carry it.
pub fn encode(value: &str) -> String {
    let visible = value.bytes().all(|b| b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b));
    let padded = value.starts_with([' ', '\t']) || value.ends_with([' ', '\t']);
    let looks_encoded = value.starts_with(PREFIX) && value.ends_with(SUFFIX);
    let plain_safe = visible && !padded && !looks_encoded;
    if plain_safe { value.to_owned() } else { format!("{PREFIX}{}{SUFFIX}", STANDARD.encode(value.as_bytes())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_examples() {
        assert_eq!(encode("Hello, 世界"), "=?base64?SGVsbG8sIOS4lueVjA==?=");
        assert_eq!(encode(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(encode("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(decode(b"=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(), Ok("Hello, 世界"));
        assert_eq!(decode(b"=?base64?IHBhZGRlZCA=?=").as_deref(), Ok(" padded "));
    }

    #[test]
    fn plain_values_and_whitespace() {
        assert_eq!(decode(b"  foo  ").as_deref(), Ok("foo"));
        assert_eq!(encode("tools_1"), "tools_1");
        // A plain value that looks like a sentinel is itself encoded.
        let tricky = "=?base64?abc?=";
        assert_eq!(decode(encode(tricky).as_bytes()).as_deref(), Ok(tricky));
    }

    #[test]
    fn bad_values() {
        assert_eq!(decode(b"=?base64?!!!?="), Err(DecodeError::InvalidBase64));
        assert_eq!(decode(b"=?base64?/w==?="), Err(DecodeError::InvalidUtf8));
        assert_eq!(decode("caf\u{e9}".as_bytes()), Err(DecodeError::InvalidCharacters));
        assert_eq!(decode(b"a\r\nb"), Err(DecodeError::InvalidCharacters));
    }

    #[test]
    fn round_trip() {
        for v in ["", "x", "ünïcödé", "a b", "\t", "test://template/123/data"] {
            assert_eq!(decode(encode(v).as_bytes()).as_deref(), Ok(v), "{v:?}");
        }
    }
}
