//! The signing keys for access tokens (Ed25519, `EdDSA`) and the JWKS that publishes their
//! public halves, so resource servers verify tokens locally.
//!
//! Keys are PEM files in the data directory: `signing-key-<unix seconds>.pem` (and a plain
//! `signing-key.pem`, the oldest: the first key, which the service writes when it finds none). The newest signs. `oauth-service keys rotate` writes a new one;
//! a key that has been superseded stays published for the access-token lifetime (plus a
//! margin), so tokens it signed keep verifying, and is deleted by a later rotation. Replicas
//! sharing the directory (a mounted Secret) agree: the key id is derived from the public key,
//! and the set is re-read every few seconds.

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _, spki::der::pem::LineEnding};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const PREFIX: &str = "signing-key";
/// How long past the token lifetime a superseded key stays published.
const MARGIN_SECS: i64 = 300;

struct Key {
    kid: String,
    created: i64,
    encoding: EncodingKey,
    decoding: DecodingKey,
    jwk: Value,
}

/// The key set in use.
pub struct Keys {
    dir: Option<PathBuf>,
    /// How long a superseded key stays published: the access-token lifetime.
    token_ttl: i64,
    /// Newest first; the first signs.
    set: RwLock<Vec<Key>>,
}

impl Keys {
    /// The keys stored in `dir`, creating the first one if there is none; without a directory,
    /// a key for this process only.
    pub fn load_or_create(dir: Option<&Path>, token_ttl_secs: u64) -> Result<Self, String> {
        let token_ttl = token_ttl_secs as i64;
        let Some(dir) = dir else {
            tracing::warn!("no data directory: tokens are signed with a key that lives only as long as this process");
            let key = key_from(&generate(), 0)?;
            return Ok(Self { dir: None, token_ttl, set: RwLock::new(vec![key]) });
        };
        if read_dir(dir)?.is_empty() {
            // The first key's name does not depend on the clock: replicas starting together
            // across a second's boundary would otherwise each write a first key of their own.
            match create(dir, 0) {
                Ok(_) => {}
                // Another replica starting at the same moment made the first key: it is used.
                Err(Exists) => tracing::info!("another replica created the first signing key"),
                Err(Failed(e)) => return Err(e),
            }
        }
        let keys = Self { dir: Some(dir.to_owned()), token_ttl, set: RwLock::new(Vec::new()) };
        keys.reload()?;
        Ok(keys)
    }

    /// Re-read the key directory (a rotation by the admin command or another replica).
    pub fn reload(&self) -> Result<(), String> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let mut found = Vec::new();
        for (path, created) in read_dir(dir)? {
            let pem = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let key =
                SigningKey::from_pkcs8_pem(&pem).map_err(|e| format!("{}: not an Ed25519 key: {e}", path.display()))?;
            found.push(key_from(&key, created)?);
        }
        found.sort_by_key(|k| std::cmp::Reverse(k.created));
        let published = published(&found, crate::secrets::now(), self.token_ttl);
        found.truncate(published);
        if found.is_empty() {
            return Err(format!("{}: no signing key", dir.display()));
        }
        if let Ok(mut set) = self.set.write() {
            if set.first().map(|k| &k.kid) != found.first().map(|k| &k.kid) {
                tracing::info!(kid = %found[0].kid, "signing with key");
            }
            *set = found;
        }
        Ok(())
    }

    /// The id of the key that signs now.
    pub fn current_kid(&self) -> String {
        self.set.read().ok().and_then(|s| s.first().map(|k| k.kid.clone())).unwrap_or_default()
    }

    /// Sign claims as an `at+jwt` with the current key.
    pub fn sign(&self, claims: &Value) -> Result<String, String> {
        let set = self.set.read().map_err(|_| "key set unavailable".to_owned())?;
        let key = set.first().ok_or("no signing key")?;
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(key.kid.clone());
        header.typ = Some("at+jwt".into());
        jsonwebtoken::encode(&header, claims, &key.encoding).map_err(|e| e.to_string())
    }

    /// The claims of a token one of the published keys signed, for `issuer`, not expired.
    pub fn verify(&self, token: &str, issuer: &str) -> Option<Value> {
        let kid = jsonwebtoken::decode_header(token).ok()?.kid?;
        let set = self.set.read().ok()?;
        let key = set.iter().find(|k| k.kid == kid)?;
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.set_issuer(&[issuer]);
        validation.validate_aud = false;
        validation.set_required_spec_claims(&["exp", "iss", "sub"]);
        jsonwebtoken::decode::<Value>(token, &key.decoding, &validation).ok().map(|d| d.claims)
    }

    /// The JWKS document: every published key.
    pub fn jwks(&self) -> Value {
        let keys: Vec<Value> = self.set.read().map(|s| s.iter().map(|k| k.jwk.clone()).collect()).unwrap_or_default();
        json!({ "keys": keys })
    }
}

/// How many of `keys` (newest first) are still published at `now`: the newest, and each older
/// one until its successor has signed for longer than a token lives.
fn published(keys: &[Key], now: i64, token_ttl: i64) -> usize {
    let mut n = keys.len().min(1);
    while n < keys.len() && now - keys[n - 1].created <= token_ttl + MARGIN_SECS {
        n += 1;
    }
    n
}

/// Write a new signing key into `dir`; it signs from now on. Keys no longer published are
/// deleted. The new key's id.
pub fn rotate(dir: &Path, token_ttl_secs: u64) -> Result<String, String> {
    let now = crate::secrets::now();
    let existing = read_dir(dir)?;
    let mut created = existing.iter().map(|(_, c)| *c + 1).max().unwrap_or(now).max(now);
    // A key of that time written meanwhile (another rotation): the next second's name.
    let kid = loop {
        match create(dir, created) {
            Ok(kid) => break kid,
            Err(Exists) if created < now + 60 => created += 1,
            Err(Exists) => return Err(format!("{}: a signing key of every second up to {created}", dir.display())),
            Err(Failed(e)) => return Err(e),
        }
    };
    // Prune: a key whose successor was created more than a token lifetime ago.
    let mut all = read_dir(dir)?;
    all.sort_by_key(|k| std::cmp::Reverse(k.1));
    for pair in all.windows(2) {
        let (successor, older) = (&pair[0], &pair[1]);
        if now - successor.1 > token_ttl_secs as i64 + MARGIN_SECS {
            std::fs::remove_file(&older.0).map_err(|e| format!("{}: {e}", older.0.display()))?;
            tracing::info!(path = %older.0.display(), "removed a retired signing key");
        }
    }
    Ok(kid)
}

/// The key files in `dir` with their creation time (from the name).
fn read_dir(dir: &Path) -> Result<Vec<(PathBuf, i64)>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let mut keys = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".pem").and_then(|n| n.strip_prefix(PREFIX)) else { continue };
        let created = match stem.strip_prefix('-') {
            None if stem.is_empty() => 0,
            Some(t) => match t.parse::<i64>() {
                Ok(t) => t,
                Err(_) => continue,
            },
            None => continue,
        };
        keys.push((entry.path(), created));
    }
    Ok(keys)
}

/// Why a key was not created.
enum CreateError {
    /// A key of that time is there already (another replica or rotation wrote it).
    Exists,
    Failed(String),
}
use CreateError::{Exists, Failed};

/// Write a new key of time `created` into `dir`. The file appears under its name whole or not
/// at all: written apart, then linked to the name, which fails when the name is taken. Replicas
/// re-reading the directory never see a key half written, and two that create the same key
/// name at once both go on with the one that was linked first.
fn create(dir: &Path, created: i64) -> Result<String, CreateError> {
    let failed = |path: &Path, e: std::io::Error| Failed(format!("{}: {e}", path.display()));
    std::fs::create_dir_all(dir).map_err(|e| failed(dir, e))?;
    let key = generate();
    let pem = key.to_pkcs8_pem(LineEnding::LF).map_err(|e| Failed(e.to_string()))?;
    let path = match created {
        0 => dir.join(format!("{PREFIX}.pem")),
        _ => dir.join(format!("{PREFIX}-{created}.pem")),
    };
    // Not a key file's name (`read_dir` skips it); unique to this attempt.
    let mut nonce = [0u8; 8];
    rand::fill(&mut nonce);
    let partial = dir.join(format!(".{PREFIX}-{created}.{}.partial", URL_SAFE_NO_PAD.encode(nonce)));
    write_private(&partial, pem.as_bytes()).map_err(|e| failed(&partial, e))?;
    let linked = std::fs::hard_link(&partial, &path);
    let _ = std::fs::remove_file(&partial);
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(Exists),
        Err(e) => return Err(failed(&path, e)),
    }
    let kid = key_from(&key, created).map_err(Failed)?.kid;
    tracing::info!(path = %path.display(), %kid, "created a signing key");
    Ok(kid)
}

fn key_from(key: &SigningKey, created: i64) -> Result<Key, String> {
    let public = key.verifying_key().to_bytes();
    let x = URL_SAFE_NO_PAD.encode(public);
    // The key id is derived from the public key, so every replica agrees on it.
    let kid = URL_SAFE_NO_PAD.encode(&Sha256::digest(public)[..12]);
    let pem = key.to_pkcs8_pem(LineEnding::LF).map_err(|e| e.to_string())?;
    let encoding = EncodingKey::from_ed_pem(pem.as_bytes()).map_err(|e| e.to_string())?;
    let decoding = DecodingKey::from_ed_components(&x).map_err(|e| e.to_string())?;
    let jwk = json!({ "kty": "OKP", "crv": "Ed25519", "x": x, "kid": kid, "alg": "EdDSA", "use": "sig" });
    Ok(Key { kid, created, encoding, decoding, jwk })
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
        let a = Keys::load_or_create(Some(dir.path()), 3600).expect("created");
        let b = Keys::load_or_create(Some(dir.path()), 3600).expect("loaded");
        assert_eq!(a.current_kid(), b.current_kid());
        let token = a.sign(&json!({"sub": "u", "iss": "https://i", "exp": 4_000_000_000u64})).expect("signed");
        assert_eq!(b.verify(&token, "https://i").expect("verifies")["sub"], "u");
        assert!(b.verify(&token, "https://other").is_none(), "issuer checked");
        let jwks: jsonwebtoken::jwk::JwkSet = serde_json::from_value(b.jwks()).expect("a JWKS");
        let key = DecodingKey::from_jwk(&jwks.keys[0]).expect("decoding key");
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.validate_aud = false;
        assert!(jsonwebtoken::decode::<Value>(&token, &key, &validation).is_ok());
        let file = read_dir(dir.path()).expect("list")[0].0.clone();
        let mode = std::fs::metadata(file).expect("file").permissions();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777, 0o600);
    }

    /// `n` threads run `work` at the same moment; what each returned.
    fn at_once<T: Send>(n: usize, work: impl Fn() -> T + Sync) -> Vec<T> {
        let start = std::sync::Barrier::new(n);
        std::thread::scope(|scope| {
            let threads: Vec<_> = (0..n)
                .map(|_| {
                    scope.spawn(|| {
                        start.wait();
                        work()
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().expect("thread")).collect()
        })
    }

    /// Replicas sharing a data directory start at once: one first key, used by all of them.
    #[test]
    fn replicas_starting_together_share_the_first_key() {
        for _ in 0..20 {
            let dir = tempfile::tempdir().expect("tempdir");
            let kids = at_once(4, || Keys::load_or_create(Some(dir.path()), 3600).expect("started").current_kid());
            assert!(kids.iter().all(|k| *k == kids[0]), "{kids:?}");
            let names: Vec<_> = std::fs::read_dir(dir.path()).expect("dir").flatten().map(|e| e.file_name()).collect();
            // Named apart from the clock: replicas starting on either side of a second's
            // boundary write the same name, and only one of them links it.
            assert_eq!(names, ["signing-key.pem"], "one key file and nothing left behind");
        }
    }

    #[test]
    fn rotations_at_once_write_keys_of_their_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        Keys::load_or_create(Some(dir.path()), 3600).expect("created");
        let kids = at_once(3, || rotate(dir.path(), 3600).expect("rotated"));
        let mut unique = kids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 3, "{kids:?}");
        assert_eq!(read_dir(dir.path()).expect("list").len(), 4);
    }

    #[test]
    fn rotation_keeps_the_old_key_published_until_its_tokens_expire() {
        let dir = tempfile::tempdir().expect("tempdir");
        let keys = Keys::load_or_create(Some(dir.path()), 3600).expect("created");
        let old = keys.current_kid();
        let token = keys.sign(&json!({"sub": "u", "iss": "i", "exp": 4_000_000_000u64})).expect("signed");
        let new = rotate(dir.path(), 3600).expect("rotated");
        keys.reload().expect("reload");
        assert_eq!(keys.current_kid(), new);
        assert_ne!(old, new);
        assert_eq!(keys.jwks()["keys"].as_array().expect("keys").len(), 2);
        assert!(keys.verify(&token, "i").is_some(), "a token of the old key still verifies");

        // A key whose successor is older than a token lifetime is no longer published.
        let now = crate::secrets::now();
        let list =
            |created: &[i64]| -> Vec<Key> { created.iter().map(|c| key_from(&generate(), *c).expect("key")).collect() };
        assert_eq!(published(&list(&[now, now - 10]), now, 60), 2);
        assert_eq!(published(&list(&[now - 1000, now - 2000]), now, 60), 1);
        assert_eq!(published(&list(&[now, now - 100, now - 5000]), now, 60), 3);
    }
}
