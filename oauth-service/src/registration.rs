//! Dynamic client registration (RFC 7591), honouring `application_type` (native clients
//! redirect to loopback or private-use schemes; web clients to https), rate limited per client
//! address (429 with `Retry-After`).

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;

use axum::Json;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

use crate::AppState;
use crate::secrets;
use crate::store::Client;

#[derive(Debug, Deserialize)]
pub struct Request {
    #[serde(default)]
    redirect_uris: Vec<String>,
    #[serde(default)]
    client_name: Option<String>,
    #[serde(default)]
    token_endpoint_auth_method: Option<String>,
    #[serde(default)]
    grant_types: Option<Vec<String>>,
    #[serde(default)]
    response_types: Option<Vec<String>>,
    #[serde(default)]
    application_type: Option<String>,
}

/// Requests per client address per minute (registrations, token requests).
pub struct Limiter(Option<DefaultKeyedRateLimiter<IpAddr>>);

impl Limiter {
    pub fn new(per_minute: u32) -> Self {
        Self(NonZeroU32::new(per_minute).map(|n| RateLimiter::keyed(Quota::per_minute(n))))
    }

    /// `Err(seconds to wait)` when `ip` has registered too often.
    pub fn check(&self, ip: IpAddr) -> Result<(), u64> {
        let Some(limiter) = &self.0 else { return Ok(()) };
        limiter.check_key(&ip).map_err(|not_until| {
            let wait = not_until.wait_time_from(governor::clock::Clock::now(&governor::clock::DefaultClock::default()));
            wait.as_secs().max(1)
        })
    }

    /// Forget addresses that have not registered lately (bounded memory).
    pub fn forget_idle(&self) {
        if let Some(limiter) = &self.0 {
            limiter.retain_recent();
        }
    }
}

/// The address a request came from: the peer, or — when the operator says a proxy in front
/// (the gateway) is trusted — the last address that proxy added to `X-Forwarded-For`.
pub fn client_ip(trust_forwarded: bool, peer: SocketAddr, headers: &HeaderMap) -> IpAddr {
    if trust_forwarded
        && let Some(ip) = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|s| s.trim().parse::<IpAddr>().ok())
            .next_back()
    {
        return ip;
    }
    peer.ip()
}

/// An OAuth error response (RFC 6749 §5.2 shape), counted by its code.
pub fn error(status: StatusCode, code: &'static str, description: &str) -> Response {
    metrics::counter!("oauth_errors_total", "error" => code).increment(1);
    (status, [("cache-control", "no-store")], Json(json!({ "error": code, "error_description": description })))
        .into_response()
}

/// Whether `uri` is acceptable for a client of `application_type`.
pub fn redirect_allowed(uri: &str, application_type: &str) -> Result<(), String> {
    let url = url::Url::parse(uri).map_err(|_| format!("`{uri}` is not an absolute URI"))?;
    if url.fragment().is_some() {
        return Err(format!("`{uri}` must not have a fragment"));
    }
    let loopback = matches!(url.host_str(), Some("127.0.0.1" | "[::1]" | "localhost"));
    match (url.scheme(), application_type) {
        ("https", _) => Ok(()),
        ("http", _) if loopback => Ok(()),
        ("http", _) => Err(format!("`{uri}`: http is allowed only for loopback redirects")),
        (scheme, "native") if scheme.contains('.') => Ok(()), // private-use scheme, RFC 8252 §7.1
        _ => Err(format!("`{uri}`: a {application_type} client must redirect to https or loopback")),
    }
}

pub async fn register(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Result<Json<Request>, axum::extract::rejection::JsonRejection>,
) -> Response {
    if !app.config.registration {
        return error(StatusCode::FORBIDDEN, "access_denied", "dynamic client registration is turned off");
    }
    if let Err(wait) = app.registrations.check(client_ip(app.config.trust_forwarded_for, peer, &headers)) {
        let mut resp = error(StatusCode::TOO_MANY_REQUESTS, "slow_down", "too many registrations; try again later");
        if let Ok(v) = HeaderValue::from_str(&wait.to_string()) {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return resp;
    }
    let req = match body {
        Ok(Json(req)) => req,
        Err(e) => return error(StatusCode::BAD_REQUEST, "invalid_client_metadata", &e.body_text()),
    };
    let application_type = req.application_type.clone().unwrap_or_else(|| "web".to_owned());
    if application_type != "web" && application_type != "native" {
        return error(StatusCode::BAD_REQUEST, "invalid_client_metadata", "application_type must be web or native");
    }
    let auth_method = req.token_endpoint_auth_method.clone().unwrap_or_else(|| "client_secret_basic".to_owned());
    if !["none", "client_secret_basic", "client_secret_post"].contains(&auth_method.as_str()) {
        return error(StatusCode::BAD_REQUEST, "invalid_client_metadata", "unsupported token_endpoint_auth_method");
    }
    let grants = req.grant_types.clone().unwrap_or_else(|| vec!["authorization_code".into(), "refresh_token".into()]);
    let allowed = |g: &str| match g {
        "authorization_code" | "refresh_token" => true,
        "client_credentials" => auth_method != "none",
        _ => false,
    };
    if let Some(g) = grants.iter().find(|g| !allowed(g)) {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_client_metadata",
            &format!(
                "grant_types: `{g}` is not available (authorization_code, refresh_token; client_credentials for confidential clients)"
            ),
        );
    }
    let uses_redirects = grants.iter().any(|g| g == "authorization_code");
    if uses_redirects && req.redirect_uris.is_empty() {
        return error(StatusCode::BAD_REQUEST, "invalid_redirect_uri", "at least one redirect_uri is required");
    }
    for uri in &req.redirect_uris {
        if let Err(e) = redirect_allowed(uri, &application_type) {
            return error(StatusCode::BAD_REQUEST, "invalid_redirect_uri", &e);
        }
    }
    if req.response_types.as_ref().is_some_and(|r| r.iter().any(|t| t != "code")) {
        return error(StatusCode::BAD_REQUEST, "invalid_client_metadata", "response_types: code only");
    }
    let secret = (auth_method != "none").then(secrets::random);
    let client = Client {
        client_id: secrets::random(),
        secret_hash: secret.as_deref().map(secrets::hash),
        redirect_uris: req.redirect_uris.clone(),
        name: req.client_name.clone(),
        application_type: application_type.clone(),
        auth_method: auth_method.clone(),
        grant_types: grants.clone(),
        source: "dynamic".to_owned(),
    };
    let now = secrets::now();
    if let Err(e) = app.store.insert_client(&client, now).await {
        tracing::error!(error = %e, "storing a client failed");
        // Storage unreachable (a database restart): nothing was registered; try again.
        let mut resp = error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "could not store the client");
        resp.headers_mut().insert(header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
        return resp;
    }
    tracing::info!(client_id = %client.client_id, %application_type, "client registered");
    let mut body = json!({
        "client_id": client.client_id,
        "client_id_issued_at": now,
        "redirect_uris": client.redirect_uris,
        "token_endpoint_auth_method": auth_method,
        "grant_types": grants,
        "response_types": ["code"],
        "application_type": application_type,
    });
    if let Some(name) = &req.client_name {
        body["client_name"] = json!(name);
    }
    if let Some(secret) = secret {
        body["client_secret"] = json!(secret);
        body["client_secret_expires_at"] = json!(0);
    }
    (StatusCode::CREATED, [("cache-control", "no-store")], Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_rules() {
        assert!(redirect_allowed("https://app.example/cb", "web").is_ok());
        assert!(redirect_allowed("http://127.0.0.1/cb", "native").is_ok());
        assert!(redirect_allowed("http://localhost:3000/cb", "web").is_ok());
        assert!(redirect_allowed("com.example.app:/cb", "native").is_ok());
        assert!(redirect_allowed("com.example.app:/cb", "web").is_err());
        assert!(redirect_allowed("http://evil.example/cb", "web").is_err());
        assert!(redirect_allowed("https://app.example/cb#frag", "web").is_err());
        assert!(redirect_allowed("not a uri", "web").is_err());
    }
}
