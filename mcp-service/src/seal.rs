//! Integrity-protected tokens: the 2026-07-28 `requestState` and the legacy `Mcp-Session-Id`.
//!
//! A token is `BASE64URL(payload JSON) "." BASE64URL(HMAC-SHA256(key, purpose "." payload))`.
//! The purpose separates the token kinds, so one can never be replayed as the other. The key
//! comes from configuration, so that every replica accepts every other replica's tokens.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("malformed token")]
    Malformed,
    #[error("token signature does not verify")]
    BadSignature,
    #[error("token expired")]
    Expired,
    #[error("token does not belong to this request")]
    Mismatch,
}

/// Signs and verifies tokens with one secret key.
#[derive(Clone)]
pub struct Sealer {
    key: Vec<u8>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer { key: <redacted> }")
    }
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Sealer {
    /// A sealer over `secret` (at least 32 bytes of entropy expected).
    pub fn new(secret: &[u8]) -> Self {
        // Derive the working key, so a short or structured secret is spread evenly.
        Self { key: Sha256::digest(secret).to_vec() }
    }

    /// A sealer with a fresh random key: tokens are valid only in this process.
    pub fn random() -> Self {
        let mut key = [0u8; 32];
        rand::fill(&mut key);
        Self::new(&key)
    }

    fn mac(&self, purpose: &str, payload: &str) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC accepts any key length");
        mac.update(purpose.as_bytes());
        mac.update(b".");
        mac.update(payload.as_bytes());
        mac
    }

    pub fn seal<T: Serialize>(&self, purpose: &str, value: &T) -> String {
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(value).unwrap_or_default());
        let tag = URL_SAFE_NO_PAD.encode(self.mac(purpose, &payload).finalize().into_bytes());
        format!("{payload}.{tag}")
    }

    /// Verify (in constant time) and decode a token sealed for `purpose`.
    pub fn open<T: DeserializeOwned>(&self, purpose: &str, token: &str) -> Result<T, SealError> {
        let (payload, tag) = token.split_once('.').ok_or(SealError::Malformed)?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| SealError::Malformed)?;
        self.mac(purpose, payload).verify_slice(&tag).map_err(|_| SealError::BadSignature)?;
        let bytes = URL_SAFE_NO_PAD.decode(payload).map_err(|_| SealError::Malformed)?;
        serde_json::from_slice(&bytes).map_err(|_| SealError::Malformed)
    }
}

/// A short digest of a JSON value (keys are sorted by `serde_json`'s map, so equal values
/// digest equally).
pub fn digest(value: &serde_json::Value) -> String {
    URL_SAFE_NO_PAD.encode(&Sha256::digest(value.to_string().as_bytes())[..16])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn round_trip_and_tampering() {
        let s = Sealer::new(b"a test secret that is long enough");
        let token = s.seal("state", &json!({"x": 1}));
        assert_eq!(s.open::<Value>("state", &token), Ok(json!({"x": 1})));
        // Another purpose, another key, or a changed payload or tag are refused.
        assert_eq!(s.open::<Value>("session", &token), Err(SealError::BadSignature));
        assert_eq!(Sealer::random().open::<Value>("state", &token), Err(SealError::BadSignature));
        let (payload, tag) = token.split_once('.').expect("two parts");
        let forged = URL_SAFE_NO_PAD.encode(br#"{"x":2}"#);
        assert_eq!(s.open::<Value>("state", &format!("{forged}.{tag}")), Err(SealError::BadSignature));
        assert_eq!(s.open::<Value>("state", &format!("{payload}.AAAA")), Err(SealError::BadSignature));
        assert_eq!(s.open::<Value>("state", "no-dot"), Err(SealError::Malformed));
        assert_eq!(s.open::<Value>("state", "a.!!"), Err(SealError::Malformed));
    }

    #[test]
    fn digests_ignore_key_order() {
        assert_eq!(digest(&json!({"a":1,"b":2})), digest(&serde_json::from_str(r#"{"b":2,"a":1}"#).expect("json")));
        assert_ne!(digest(&json!({"a":1})), digest(&json!({"a":2})));
    }
}
