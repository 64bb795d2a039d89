//! The signing key for access tokens (Ed25519, `EdDSA`), kept in the data directory, and the
//! JWKS that publishes its public half. Resource servers verify tokens locally with it.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _, spki::der::pem::LineEnding};
use jsonwebtoken::EncodingKey;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const FILE: &str = "signing-key.pem";

/// The current signing key.
pub struct Keys {
    pub kid: String,
    pub encoding: EncodingKey,
    jwk: Value,
}

impl Keys {
    /// The key stored in `dir`, or a new one written there (mode 0600); without a directory,
    /// a key for this process only.
    pub fn load_or_create(dir: Option<&Path>) -> Result<Self, String> {
        let Some(dir) = dir else {
            tracing::warn!("no data directory: tokens are signed with a key that lives only as long as this process");
            return Self::from_signing_key(&generate());
        };
        let path = dir.join(FILE);
        if path.exists() {
            let pem = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let key =
                SigningKey::from_pkcs8_pem(&pem).map_err(|e| format!("{}: not an Ed25519 key: {e}", path.display()))?;
            return Self::from_signing_key(&key);
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let key = generate();
        let pem = key.to_pkcs8_pem(LineEnding::LF).map_err(|e| e.to_string())?;
        write_private(&path, pem.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
        tracing::info!(path = %path.display(), "created a signing key");
        Self::from_signing_key(&key)
    }

    fn from_signing_key(key: &SigningKey) -> Result<Self, String> {
        let public = key.verifying_key().to_bytes();
        let x = URL_SAFE_NO_PAD.encode(public);
        // The key id is derived from the public key, so every replica agrees on it.
        let kid = URL_SAFE_NO_PAD.encode(&Sha256::digest(public)[..12]);
        let pem = key.to_pkcs8_pem(LineEnding::LF).map_err(|e| e.to_string())?;
        let encoding = EncodingKey::from_ed_pem(pem.as_bytes()).map_err(|e| e.to_string())?;
        let jwk = json!({ "kty": "OKP", "crv": "Ed25519", "x": x, "kid": kid, "alg": "EdDSA", "use": "sig" });
        Ok(Self { kid, encoding, jwk })
    }

    /// The JWKS document.
    pub fn jwks(&self) -> Value {
        json!({ "keys": [self.jwk] })
    }
}

fn generate() -> SigningKey {
    let mut seed = [0u8; 32];
    rand::fill(&mut seed);
    SigningKey::from_bytes(&seed)
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_survives_a_restart_and_signs_verifiable_tokens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = Keys::load_or_create(Some(dir.path())).expect("created");
        let b = Keys::load_or_create(Some(dir.path())).expect("loaded");
        assert_eq!(a.kid, b.kid);
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
        header.kid = Some(a.kid.clone());
        let token =
            jsonwebtoken::encode(&header, &json!({"sub": "u", "exp": 4_000_000_000u64}), &a.encoding).expect("signed");
        let jwks: jsonwebtoken::jwk::JwkSet = serde_json::from_value(b.jwks()).expect("a JWKS");
        let key = jsonwebtoken::DecodingKey::from_jwk(&jwks.keys[0]).expect("decoding key");
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::EdDSA);
        validation.validate_aud = false;
        let data = jsonwebtoken::decode::<Value>(&token, &key, &validation).expect("verifies");
        assert_eq!(data.claims["sub"], "u");
        let mode = std::fs::metadata(dir.path().join(FILE)).expect("file").permissions();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777, 0o600);
    }
}
