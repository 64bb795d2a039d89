//! The token endpoint: authorization code (with the PKCE verifier) and refresh token grants.
//! Access tokens are short-lived JWTs signed with the service's key, for the MCP resource as
//! audience; refresh tokens are opaque, stored hashed, and rotate on every use. A replayed code
//! or refresh token revokes its grant. Errors follow RFC 6749 §5.2; nothing is cached.

use std::sync::Arc;

use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::json;

use crate::AppState;
use crate::registration::error;
use crate::secrets;
use crate::store::{Grant, Redeemed};

#[derive(Debug, Deserialize)]
pub struct Request {
    #[serde(default)]
    grant_type: String,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    redirect_uri: Option<String>,
    #[serde(default)]
    code_verifier: Option<String>,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    client_secret: Option<String>,
    #[serde(default)]
    resource: Option<String>,
}

fn invalid_grant(description: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "invalid_grant", description)
}

/// The client's credentials: HTTP Basic, or `client_id` (and `client_secret`) in the form.
fn credentials(headers: &HeaderMap, req: &Request) -> Option<(String, Option<String>)> {
    if let Some(basic) =
        headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Basic "))
    {
        let decoded = base64::engine::general_purpose::STANDARD.decode(basic.trim()).ok()?;
        let text = String::from_utf8(decoded).ok()?;
        let (id, secret) = text.split_once(':')?;
        let unescape =
            |s: &str| url::form_urlencoded::parse(format!("x={s}").as_bytes()).next().map(|(_, v)| v.into_owned());
        return Some((unescape(id)?, Some(unescape(secret)?)));
    }
    req.client_id.clone().map(|id| (id, req.client_secret.clone()))
}

/// Authenticate the client: a confidential client needs its secret; a public one only its id.
async fn authenticate(app: &AppState, headers: &HeaderMap, req: &Request) -> Result<String, Response> {
    let unauthorized = || error(StatusCode::UNAUTHORIZED, "invalid_client", "client authentication failed");
    let (id, secret) = credentials(headers, req).ok_or_else(unauthorized)?;
    let client = app.store.client(&id).await.ok().flatten().ok_or_else(unauthorized)?;
    match (&client.secret_hash, secret) {
        (None, _) => Ok(id),
        (Some(stored), Some(given)) if secrets::equal(stored, &secrets::hash(&given)) => Ok(id),
        _ => Err(unauthorized()),
    }
}

pub async fn token(State(app): State<Arc<AppState>>, headers: HeaderMap, Form(req): Form<Request>) -> Response {
    let client_id = match authenticate(&app, &headers, &req).await {
        Ok(id) => id,
        Err(resp) => return resp,
    };
    if let Some(resource) = &req.resource
        && resource.trim_end_matches('/') != app.resource.trim_end_matches('/')
    {
        return error(StatusCode::BAD_REQUEST, "invalid_target", "unknown resource");
    }
    let grant = match req.grant_type.as_str() {
        "authorization_code" => redeem_code(&app, &client_id, &req).await,
        "refresh_token" => redeem_refresh(&app, &client_id, &req).await,
        "" => Err(error(StatusCode::BAD_REQUEST, "invalid_request", "grant_type is missing")),
        _ => Err(error(StatusCode::BAD_REQUEST, "unsupported_grant_type", "authorization_code or refresh_token")),
    };
    match grant {
        Ok(grant) => issue(&app, &grant).await,
        Err(resp) => resp,
    }
}

async fn redeem_code(app: &AppState, client_id: &str, req: &Request) -> Result<Grant, Response> {
    let (Some(code), Some(verifier)) = (&req.code, &req.code_verifier) else {
        return Err(error(StatusCode::BAD_REQUEST, "invalid_request", "code and code_verifier are required"));
    };
    let code = match app.store.redeem_code(&secrets::hash(code)).await {
        Ok(Redeemed::Valid(c)) => c,
        Ok(Redeemed::Replayed(grant_id)) => {
            tracing::warn!(%client_id, "an authorisation code was used twice; revoking its grant");
            let _ = app.store.revoke_grant(&grant_id).await;
            return Err(invalid_grant("the code was already used"));
        }
        Ok(Redeemed::Unknown) => return Err(invalid_grant("unknown code")),
        Err(e) => {
            tracing::error!(error = %e, "store failed");
            return Err(error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "try again"));
        }
    };
    if code.grant.client_id != client_id {
        return Err(invalid_grant("the code was issued to another client"));
    }
    if code.expires_at <= secrets::now() {
        return Err(invalid_grant("the code expired"));
    }
    if req.redirect_uri.as_deref().is_some_and(|r| r != code.redirect_uri) {
        return Err(invalid_grant("redirect_uri does not match the authorisation request"));
    }
    if !secrets::pkce_matches(verifier, &code.challenge) {
        return Err(invalid_grant("the code_verifier does not match the code_challenge"));
    }
    Ok(code.grant)
}

async fn redeem_refresh(app: &AppState, client_id: &str, req: &Request) -> Result<Grant, Response> {
    let Some(token) = &req.refresh_token else {
        return Err(error(StatusCode::BAD_REQUEST, "invalid_request", "refresh_token is required"));
    };
    match app.store.redeem_refresh(&secrets::hash(token), secrets::now()).await {
        Ok(Redeemed::Valid(grant)) if grant.client_id == client_id => Ok(grant),
        Ok(Redeemed::Valid(_)) => Err(invalid_grant("the refresh token was issued to another client")),
        Ok(Redeemed::Replayed(grant_id)) => {
            tracing::warn!(%client_id, "a refresh token was used twice; revoking its grant");
            let _ = app.store.revoke_grant(&grant_id).await;
            Err(invalid_grant("the refresh token was already used"))
        }
        Ok(Redeemed::Unknown) => Err(invalid_grant("unknown or expired refresh token")),
        Err(e) => {
            tracing::error!(error = %e, "store failed");
            Err(error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "try again"))
        }
    }
}

async fn issue(app: &AppState, grant: &Grant) -> Response {
    let now = secrets::now();
    let ttl = app.config.access_token_ttl_secs as i64;
    let claims = json!({
        "iss": app.issuer,
        "sub": grant.username,
        "aud": grant.resource,
        "client_id": grant.client_id,
        "scope": grant.scope,
        "iat": now,
        "exp": now + ttl,
        "jti": secrets::random(),
    });
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some(app.keys.kid.clone());
    header.typ = Some("at+jwt".into());
    let access = match jsonwebtoken::encode(&header, &claims, &app.keys.encoding) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(error = %e, "signing failed");
            return error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "could not sign the token");
        }
    };
    let refresh = secrets::random();
    let expires = now + app.config.refresh_token_ttl_secs as i64;
    if let Err(e) = app.store.insert_refresh(&secrets::hash(&refresh), grant, expires).await {
        tracing::error!(error = %e, "storing a refresh token failed");
        return error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "try again");
    }
    let body = json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": ttl,
        "refresh_token": refresh,
        "scope": grant.scope,
    });
    (StatusCode::OK, [(header::CACHE_CONTROL, "no-store"), (header::PRAGMA, "no-cache")], axum::Json(body))
        .into_response()
}
