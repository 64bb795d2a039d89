//! The gateway as an OAuth protected resource (RFC 9728): bearer tokens are JWTs checked
//! locally — signature against the authorisation server's JWKS (cached, refreshed when a new key
//! id appears), issuer, audience (this MCP endpoint), expiry — with no call per request.
//! Requests without a valid token get 401 and a `WWW-Authenticate` challenge that points to
//! the protected resource metadata.
//!
//! Operators who want revocation to take effect at once set `token_validation = "introspect"`:
//! each token is then checked with the authorisation server's introspection endpoint (RFC 7662)
//! as a confidential client, instead of locally.
//!
//! A second scheme serves machine clients: static API tokens, configured by their SHA-256 hash
//! only, each with a name and scopes, compared in constant time. With `--auth token` they are the
//! only scheme; with `--auth oauth` they are accepted beside JWTs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use http_body_util::BodyExt as _;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use mcp_proto::mcp::Principal;
use serde::Deserialize;
use serde_json::{Value, json};

/// How often the key set may be fetched again for an unknown key id (a rotation shows up as
/// one; a flood of made-up ids costs the authorisation server at most one fetch per interval).
const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// A static API token as configured.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiToken {
    /// Who the token stands for (the subject of its requests).
    pub name: String,
    /// SHA-256 of the token, Base64url without padding.
    pub sha256: String,
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// What is stored for a token: its SHA-256, Base64url without padding.
pub fn token_hash(token: impl AsRef<[u8]>) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(token))
}

/// HTTP Basic credentials for a client (RFC 6749 §2.3.1: form-encoded id and secret).
pub fn basic(id: &str, secret: &str) -> Result<HeaderValue, String> {
    use base64::Engine as _;
    let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let raw = format!("{}:{}", enc(id), enc(secret));
    HeaderValue::from_str(&format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(raw)))
        .map_err(|e| e.to_string())
}

pub struct Auth {
    /// The expected `iss`.
    pub issuer: String,
    /// This MCP endpoint: the expected `aud`, and the `resource` of the metadata.
    pub resource: String,
    /// Where the protected resource metadata is published.
    pub metadata_url: String,
    pub scopes: Vec<String>,
    /// Clock skew tolerated on `exp` and `nbf`, in seconds.
    pub leeway_secs: u64,
    /// `None` with `--auth token`: no authorisation server.
    jwks_url: Option<hyper::Uri>,
    api_tokens: Vec<ApiToken>,
    /// Set: ask the authorisation server about every token instead of checking it locally.
    pub introspection: Option<Introspection>,
    client: Client<HttpConnector, Body>,
    keys: Mutex<(HashMap<String, DecodingKey>, Option<Instant>)>,
    /// Tokens whose signature and claims were checked. A signature check costs far more than
    /// the rest of a request; a token is sent again and again until it expires, so it is
    /// checked once, and its caller shared, not copied.
    verified: Mutex<Verified>,
    /// Held while the key set is fetched again.
    refresh: tokio::sync::Mutex<()>,
}

/// Verified tokens by the SHA-256 of their signature (the part that makes a token a secret,
/// kept only hashed; from the last dot on, 87 bytes for an EdDSA token: hashing it costs a
/// fraction of hashing the whole token, several times longer). A token is the one remembered
/// only when the rest of it, its header and claims (no secret: anyone holding the token reads
/// them), is the same too, byte for byte. Keyed by digests, so foldhash serves.
type Verified = HashMap<[u8; 32], Seen, foldhash::fast::RandomState>;

/// What is remembered of a verified token.
struct Seen {
    /// The token up to its signature (its header and claims, as sent).
    signed: Box<[u8]>,
    principal: Arc<Principal>,
    exp: u64,
}

/// At most this many verified tokens are remembered (all are forgotten when it is reached).
/// Each keeps its header and claims, a few hundred bytes: at most a few megabytes in all.
const VERIFIED_TOKENS: usize = 10_000;

#[derive(Deserialize)]
struct Claims {
    sub: String,
    exp: u64,
    #[serde(default)]
    scope: String,
    #[serde(default)]
    client_id: String,
}

/// Why a request was not let in.
#[derive(Debug, PartialEq, Eq)]
pub enum Denied {
    /// No bearer token.
    Missing,
    /// A token that does not verify (signature, issuer, audience, expiry, form).
    Invalid(String),
    /// The authorisation server could not be asked (introspection mode).
    Unavailable(String),
}

/// How the gateway asks the authorisation server about a token.
pub struct Introspection {
    pub url: hyper::Uri,
    /// `Basic` credentials of the gateway's confidential client.
    pub authorization: HeaderValue,
}

impl Auth {
    /// `jwks_url` `None`: API tokens only.
    pub fn new(
        issuer: &str,
        resource: &str,
        jwks_url: Option<&str>,
        scopes: Vec<String>,
        api_tokens: Vec<ApiToken>,
    ) -> Result<Self, String> {
        let jwks_url = match jwks_url {
            Some(u) => Some(u.parse::<hyper::Uri>().map_err(|e| format!("jwks url `{u}`: {e}"))?),
            None => None,
        };
        let resource_url = url::Url::parse(resource).map_err(|e| format!("resource `{resource}`: {e}"))?;
        // RFC 9728 §3.1: the well-known path goes between the host and the resource's path.
        let path = resource_url.path().trim_end_matches('/');
        let metadata_url =
            format!("{}/.well-known/oauth-protected-resource{path}", resource_url.origin().ascii_serialization());
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        Ok(Self {
            issuer: issuer.trim_end_matches('/').to_owned(),
            resource: resource.to_owned(),
            metadata_url,
            scopes,
            leeway_secs: 30,
            jwks_url,
            api_tokens,
            introspection: None,
            client: Client::builder(TokioExecutor::new()).build(connector),
            keys: Mutex::new((HashMap::new(), None)),
            verified: Mutex::default(),
            refresh: tokio::sync::Mutex::new(()),
        })
    }

    /// The protected resource metadata document.
    pub fn metadata(&self) -> Value {
        json!({
            "resource": self.resource,
            "authorization_servers": [self.issuer],
            "scopes_supported": self.scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "MCP server",
        })
    }

    /// The caller a request's bearer token names.
    pub async fn principal(&self, headers: &HeaderMap) -> Result<Arc<Principal>, Denied> {
        // Read as bytes: visible ASCII (and tabs), as `HeaderValue::to_str` would have it, but
        // made text (which visible ASCII always is) only when the token is not a remembered one.
        let token = headers
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes)
            .filter(|v| crate::headers::visible_or_tab(v))
            .and_then(|v| v.strip_prefix(b"Bearer ").or_else(|| v.strip_prefix(b"bearer ")))
            .map(<[u8]>::trim_ascii)
            .ok_or(Denied::Missing)?;
        if let Some(p) = self.api_token(token) {
            return Ok(Arc::new(p));
        }
        if self.jwks_url.is_none() {
            return Err(Denied::Invalid("unknown API token".into()));
        }
        let malformed = || Denied::Invalid("malformed token: not text".into());
        if let Some(introspection) = &self.introspection {
            let token = std::str::from_utf8(token).map_err(|_| malformed())?;
            return self.introspect(introspection, token).await.map(Arc::new);
        }
        // A JWT's parts are split by dots; the signature is the last.
        let dot = memchr::memrchr(b'.', token).unwrap_or(0);
        let (signed, signature) = token.split_at(dot);
        let digest: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(signature).into();
        let now = jsonwebtoken::get_current_timestamp();
        let seen = self.verified.lock().ok().and_then(|v| {
            v.get(&digest).filter(|seen| *seen.signed == *signed).map(|seen| (seen.principal.clone(), seen.exp))
        });
        if let Some((principal, exp)) = seen {
            // The same rule as at the first check: expired once `exp` + leeway has passed.
            if exp.saturating_add(self.leeway_secs) >= now {
                return Ok(principal);
            }
            return Err(Denied::Invalid("the token does not verify: ExpiredSignature".into()));
        }
        let token = std::str::from_utf8(token).map_err(|_| malformed())?;
        let head = jsonwebtoken::decode_header(token).map_err(|e| Denied::Invalid(format!("malformed token: {e}")))?;
        if head.alg != Algorithm::EdDSA {
            return Err(Denied::Invalid("unexpected signing algorithm".into()));
        }
        let kid = head.kid.ok_or_else(|| Denied::Invalid("the token names no key".into()))?;
        let key = self.key(&kid).await.ok_or_else(|| Denied::Invalid("unknown signing key".into()))?;
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.resource]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.leeway = self.leeway_secs;
        let data = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|e| Denied::Invalid(format!("the token does not verify: {e}")))?;
        let claims = data.claims;
        let principal = Arc::new(Principal {
            subject: claims.sub,
            scopes: claims.scope.split(' ').filter(|s| !s.is_empty()).map(str::to_owned).collect(),
            client_id: claims.client_id,
        });
        if let Ok(mut verified) = self.verified.lock() {
            if verified.len() >= VERIFIED_TOKENS {
                verified.clear();
            }
            let seen = Seen { signed: signed.into(), principal: principal.clone(), exp: claims.exp };
            verified.insert(digest, seen);
        }
        Ok(principal)
    }

    /// The principal of a configured API token; every configured hash is compared, in
    /// constant time, so timing tells nothing about which one was close.
    fn api_token(&self, token: &[u8]) -> Option<Principal> {
        if self.api_tokens.is_empty() {
            return None;
        }
        let hash = token_hash(token);
        let mut found = None;
        for t in &self.api_tokens {
            if mcp_proto::trust::same_bytes(t.sha256.as_bytes(), hash.as_bytes()) {
                found = Some(t);
            }
        }
        found.map(|t| Principal { subject: t.name.clone(), scopes: t.scopes.clone(), client_id: "api-token".into() })
    }

    async fn introspect(&self, i: &Introspection, token: &str) -> Result<Principal, Denied> {
        let form = url::form_urlencoded::Serializer::new(String::new()).append_pair("token", token).finish();
        let request = http::Request::post(i.url.clone())
            .header(header::AUTHORIZATION, i.authorization.clone())
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(form))
            .map_err(|e| Denied::Unavailable(e.to_string()))?;
        let response = tokio::time::timeout(Duration::from_secs(5), self.client.request(request))
            .await
            .map_err(|_| Denied::Unavailable("introspection timed out".into()))?
            .map_err(|e| Denied::Unavailable(e.to_string()))?;
        if !response.status().is_success() {
            return Err(Denied::Unavailable(format!("introspection answered {}", response.status())));
        }
        let body = response.into_body().collect().await.map_err(|e| Denied::Unavailable(e.to_string()))?.to_bytes();
        let answer: Value = serde_json::from_slice(&body).map_err(|e| Denied::Unavailable(e.to_string()))?;
        if answer["active"] != true {
            return Err(Denied::Invalid("inactive token".into()));
        }
        if answer["token_type"] != "Bearer" {
            return Err(Denied::Invalid("not an access token".into()));
        }
        if answer["aud"].as_str() != Some(self.resource.as_str())
            || answer["iss"].as_str() != Some(self.issuer.as_str())
        {
            return Err(Denied::Invalid("a token for another resource or issuer".into()));
        }
        let text = |k: &str| answer[k].as_str().unwrap_or_default().to_owned();
        Ok(Principal {
            subject: text("sub"),
            scopes: text("scope").split(' ').filter(|s| !s.is_empty()).map(str::to_owned).collect(),
            client_id: text("client_id"),
        })
    }

    /// Whether this is OAuth (with metadata to publish), not API tokens alone.
    pub fn oauth(&self) -> bool {
        self.jwks_url.is_some()
    }

    async fn key(&self, kid: &str) -> Option<DecodingKey> {
        let known = |this: &Self| -> Option<Result<DecodingKey, Option<Instant>>> {
            let keys = this.keys.lock().ok()?;
            Some(keys.0.get(kid).cloned().ok_or(keys.1))
        };
        if let Ok(key) = known(self)? {
            return Some(key);
        }
        // An unknown key: fetch the set again, one fetch at a time and at most once per
        // `REFRESH_EVERY` (a token signed just after a fetch waits for the next one rather than
        // being refused; tokens naming keys that do not exist cannot make it fetch more often).
        let _one_at_a_time = tokio::time::timeout(2 * REFRESH_EVERY, self.refresh.lock()).await.ok()?;
        let last = match known(self)? {
            Ok(key) => return Some(key),
            Err(last) => last,
        };
        if let Some(wait) = last.and_then(|at| REFRESH_EVERY.checked_sub(at.elapsed())) {
            tokio::time::sleep(wait).await;
        }
        let fetched = self.fetch().await;
        let mut keys = self.keys.lock().ok()?;
        keys.1 = Some(Instant::now());
        match fetched {
            Ok(set) => keys.0 = set,
            Err(e) => tracing::warn!(error = %e, "fetching the JWKS failed"),
        }
        keys.0.get(kid).cloned()
    }

    async fn fetch(&self) -> Result<HashMap<String, DecodingKey>, String> {
        let url = self.jwks_url.clone().ok_or("no key set")?;
        let request = http::Request::get(url).body(Body::empty()).map_err(|e| e.to_string())?;
        let response = tokio::time::timeout(Duration::from_secs(5), self.client.request(request))
            .await
            .map_err(|_| "timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
        let set: jsonwebtoken::jwk::JwkSet = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        Ok(set
            .keys
            .iter()
            .filter_map(|jwk| Some((jwk.common.key_id.clone()?, DecodingKey::from_jwk(jwk).ok()?)))
            .collect())
    }

    /// The challenge on a 403: the scopes to ask for in a new authorisation (step-up).
    pub fn insufficient_scope(&self, scopes: &[String]) -> Option<HeaderValue> {
        let value = format!(
            "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{}\", error_description=\"The access token lacks a scope this request needs\"",
            scopes.join(" "),
            self.metadata_url
        );
        HeaderValue::from_str(&value).ok()
    }

    /// 401 with the challenge that leads a client to sign in.
    pub fn challenge(&self, denied: &Denied) -> Response {
        if let Denied::Unavailable(reason) = denied {
            tracing::warn!(%reason, "cannot check tokens");
            let body = mcp_proto::jsonrpc::error(
                None,
                mcp_proto::vocab::ErrorCode::INTERNAL_ERROR,
                "The authorisation server is unavailable; try again",
                None,
            );
            let mut resp = (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
            resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return resp;
        }
        let scope = self.scopes.join(" ");
        let mut value = if self.oauth() {
            format!("Bearer resource_metadata=\"{}\"", self.metadata_url)
        } else {
            "Bearer realm=\"mcp\"".to_owned()
        };
        if !scope.is_empty() && self.oauth() {
            value.push_str(&format!(", scope=\"{scope}\""));
        }
        let description = match denied {
            Denied::Missing => "Authorization required".to_owned(),
            Denied::Invalid(reason) => {
                value.push_str(", error=\"invalid_token\"");
                tracing::debug!(%reason, "token refused");
                "The access token is invalid or expired".to_owned()
            }
            Denied::Unavailable(_) => String::new(),
        };
        let body = mcp_proto::jsonrpc::error(None, mcp_proto::vocab::ErrorCode(-32001), &description, None);
        let mut resp = (StatusCode::UNAUTHORIZED, body).into_response();
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Ok(v) = HeaderValue::from_str(&value) {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_url_follows_rfc9728() {
        let a = Auth::new(
            "https://as.example",
            "https://mcp.example/public/mcp",
            Some("http://127.0.0.1:1/oauth/jwks"),
            vec![],
            vec![],
        )
        .expect("valid");
        assert_eq!(a.metadata_url, "https://mcp.example/.well-known/oauth-protected-resource/public/mcp");
        assert_eq!(a.metadata()["resource"], "https://mcp.example/public/mcp");
    }

    #[tokio::test]
    async fn missing_and_malformed_tokens_are_denied() {
        let a = Auth::new(
            "https://as.example",
            "https://mcp.example/mcp",
            Some("http://127.0.0.1:1/jwks"),
            vec!["mcp".into()],
            vec![],
        )
        .expect("valid");
        assert_eq!(a.principal(&HeaderMap::new()).await, Err(Denied::Missing));
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer not.a.jwt"));
        assert!(matches!(a.principal(&h).await, Err(Denied::Invalid(_))));
        let resp = a.challenge(&Denied::Missing);
        let www = resp.headers()[header::WWW_AUTHENTICATE].to_str().expect("ascii");
        assert!(www.contains("resource_metadata=\"https://mcp.example/.well-known/oauth-protected-resource/mcp\""));
        assert!(www.contains("scope=\"mcp\""));
    }

    #[tokio::test]
    async fn api_tokens_name_their_principal() {
        let token = ApiToken { name: "ci-bot".into(), sha256: token_hash("s3cret-token"), scopes: vec!["mcp".into()] };
        let a = Auth::new("https://mcp.example", "https://mcp.example/mcp", None, vec![], vec![token]).expect("valid");
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer s3cret-token"));
        let p = a.principal(&h).await.expect("accepted");
        assert_eq!((p.subject.as_str(), p.scopes.as_slice()), ("ci-bot", ["mcp".to_owned()].as_slice()));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer s3cret-tokeN"));
        assert!(matches!(a.principal(&h).await, Err(Denied::Invalid(_))));
        let www = a.challenge(&Denied::Missing);
        assert_eq!(www.headers()[header::WWW_AUTHENTICATE], "Bearer realm=\"mcp\"");
    }
}
