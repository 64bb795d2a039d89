//! The token endpoint — authorization code (with the PKCE verifier), refresh token and client
//! credentials grants — plus revocation (RFC 7009) and introspection (RFC 7662).
//!
//! Access tokens are short-lived JWTs (RFC 9068 shape) signed with the service's current key,
//! for the MCP resource as audience; refresh tokens are opaque, stored hashed, and rotate on
//! every use. A replayed code or refresh token revokes its grant, except a refresh token sent
//! twice within a short grace (clients that refresh concurrently). Errors follow RFC 6749 §5.2;
//! nothing is cached.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::registration::{client_ip, error};
use crate::secrets;
use crate::store::{Client, Grant, Redeemed};

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
    #[serde(default)]
    scope: Option<String>,
}

/// The form of `/oauth/revoke` and `/oauth/introspect`.
#[derive(Debug, Deserialize)]
pub struct TokenForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    token_type_hint: Option<String>,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    client_secret: Option<String>,
}

fn invalid_grant(description: &str) -> Response {
    error(StatusCode::BAD_REQUEST, "invalid_grant", description)
}

fn server_error(e: impl std::fmt::Display) -> Response {
    tracing::error!(error = %e, "store failed");
    let mut resp = error(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable", "try again");
    resp.headers_mut().insert(header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
    resp
}

/// The client's credentials: HTTP Basic, or `client_id` (and `client_secret`) in the form.
fn credentials(headers: &HeaderMap, id: Option<&str>, secret: Option<&str>) -> Option<(String, Option<String>)> {
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
    id.map(|id| (id.to_owned(), secret.map(str::to_owned)))
}

/// Authenticate the client: a confidential client needs its secret; a public one only its id.
async fn authenticate(
    app: &AppState,
    headers: &HeaderMap,
    id: Option<&str>,
    secret: Option<&str>,
) -> Result<Client, Response> {
    let unauthorized = || {
        let mut resp = error(StatusCode::UNAUTHORIZED, "invalid_client", "client authentication failed");
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, axum::http::HeaderValue::from_static("Basic"));
        resp
    };
    let (id, secret) = credentials(headers, id, secret).ok_or_else(unauthorized)?;
    let client = match crate::clients::find(app, &id).await {
        Ok(c) => c,
        Err(crate::clients::Lookup::Store(e)) => return Err(server_error(e)),
        Err(e) => {
            tracing::debug!(client_id = %id, reason = %e, "client refused");
            return Err(unauthorized());
        }
    };
    match (&client.secret_hash, secret) {
        (None, _) => Ok(client),
        (Some(stored), Some(given)) if secrets::equal(stored, &secrets::hash(&given)) => Ok(client),
        _ => Err(unauthorized()),
    }
}

/// The token endpoint: rate limited per client address first (429 `slow_down` with
/// `Retry-After`), then a form that does not parse is `invalid_request`.
pub async fn token(
    State(app): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    form: Result<Form<Request>, FormRejection>,
) -> Response {
    if let Err(wait) = app.token_requests.check(client_ip(app.config.trust_forwarded_for, peer, &headers)) {
        let mut resp = error(StatusCode::TOO_MANY_REQUESTS, "slow_down", "too many token requests; try again later");
        if let Ok(v) = axum::http::HeaderValue::from_str(&wait.to_string()) {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return resp;
    }
    let req = match form {
        Ok(Form(req)) => req,
        Err(e) => return error(StatusCode::BAD_REQUEST, "invalid_request", &e.body_text()),
    };
    let client = match authenticate(&app, &headers, req.client_id.as_deref(), req.client_secret.as_deref()).await {
        Ok(c) => c,
        Err(resp) => return resp,
    };
    if let Some(resource) = &req.resource
        && resource.trim_end_matches('/') != app.resource.trim_end_matches('/')
    {
        return error(StatusCode::BAD_REQUEST, "invalid_target", "unknown resource");
    }
    let known = ["authorization_code", "refresh_token", "client_credentials"].contains(&req.grant_type.as_str());
    if known && !client.grant_types.contains(&req.grant_type) {
        return error(StatusCode::BAD_REQUEST, "unauthorized_client", "this grant type is not allowed for the client");
    }
    let grant = match req.grant_type.as_str() {
        "authorization_code" => redeem_code(&app, &client.client_id, &req).await,
        "refresh_token" => redeem_refresh(&app, &client.client_id, &req).await.map(|g| (g, true)),
        "client_credentials" => client_credentials(&app, &client, &req).await,
        "" => Err(error(StatusCode::BAD_REQUEST, "invalid_request", "grant_type is missing")),
        _ => Err(error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            "authorization_code, refresh_token or client_credentials",
        )),
    };
    match grant {
        Ok((grant, with_refresh)) => {
            let resp = issue(&app, &grant, with_refresh).await;
            if resp.status() == StatusCode::OK {
                let grant_type = crate::metadata::grant_type_label(&req.grant_type);
                metrics::counter!("oauth_tokens_issued_total", "grant_type" => grant_type).increment(1);
            }
            resp
        }
        Err(resp) => resp,
    }
}

async fn redeem_code(app: &AppState, client_id: &str, req: &Request) -> Result<(Grant, bool), Response> {
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
        Err(e) => return Err(server_error(e)),
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
    Ok((code.grant, true))
}

async fn redeem_refresh(app: &AppState, client_id: &str, req: &Request) -> Result<Grant, Response> {
    let Some(token) = &req.refresh_token else {
        return Err(error(StatusCode::BAD_REQUEST, "invalid_request", "refresh_token is required"));
    };
    let grace = app.config.refresh_reuse_grace_secs as i64;
    let grant = match app.store.redeem_refresh(&secrets::hash(token), secrets::now(), grace).await {
        Ok(Redeemed::Valid(grant)) if grant.client_id == client_id => grant,
        Ok(Redeemed::Valid(_)) => return Err(invalid_grant("the refresh token was issued to another client")),
        Ok(Redeemed::Replayed(grant_id)) => {
            tracing::warn!(%client_id, "a refresh token was used twice; revoking its grant");
            let _ = app.store.revoke_grant(&grant_id).await;
            return Err(invalid_grant("the refresh token was already used"));
        }
        Ok(Redeemed::Unknown) => return Err(invalid_grant("unknown, expired or revoked refresh token")),
        Err(e) => return Err(server_error(e)),
    };
    // A client may narrow the scope on refresh, never widen it (RFC 6749 §6).
    if let Some(scope) = &req.scope {
        let granted: Vec<&str> = grant.scope.split(' ').collect();
        if !scope.split(' ').filter(|s| !s.is_empty()).all(|s| granted.contains(&s)) {
            return Err(error(StatusCode::BAD_REQUEST, "invalid_scope", "the scope exceeds what was granted"));
        }
        return Ok(Grant { scope: scope.clone(), ..grant });
    }
    Ok(grant)
}

/// A confidential client acting for itself: no user, no refresh token (RFC 6749 §4.4).
async fn client_credentials(app: &AppState, client: &Client, req: &Request) -> Result<(Grant, bool), Response> {
    if client.secret_hash.is_none() {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "unauthorized_client",
            "client_credentials needs a confidential client",
        ));
    }
    let scope = req.scope.clone().unwrap_or_else(|| app.config.scopes.join(" "));
    if !scope.split(' ').filter(|s| !s.is_empty()).all(|s| app.config.scopes.iter().any(|k| k == s)) {
        return Err(error(StatusCode::BAD_REQUEST, "invalid_scope", "unknown scope"));
    }
    let grant = Grant {
        grant_id: secrets::random(),
        client_id: client.client_id.clone(),
        username: client.client_id.clone(),
        scope,
        resource: app.resource.clone(),
    };
    app.store.insert_grant(&grant, secrets::now()).await.map_err(server_error)?;
    Ok((grant, false))
}

async fn issue(app: &AppState, grant: &Grant, with_refresh: bool) -> Response {
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
        "gid": grant.grant_id,
    });
    let access = match app.keys.sign(&claims) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(error = %e, "signing failed");
            return error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", "could not sign the token");
        }
    };
    let mut body = json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": ttl,
        "scope": grant.scope,
    });
    if with_refresh {
        let refresh = secrets::random();
        let expires = now + app.config.refresh_token_ttl_secs as i64;
        if let Err(e) = app.store.insert_refresh(&secrets::hash(&refresh), &grant.grant_id, expires).await {
            return server_error(e);
        }
        body["refresh_token"] = json!(refresh);
    }
    (StatusCode::OK, [(header::CACHE_CONTROL, "no-store"), (header::PRAGMA, "no-cache")], axum::Json(body))
        .into_response()
}

/// The claims of one of our access tokens, if it verifies (signature, issuer, expiry).
fn verify_access(app: &AppState, token: &str) -> Option<Value> {
    app.keys.verify(token, &app.issuer)
}

/// RFC 7009: revoke a refresh token (and its grant) or an access token. Always 200 for a
/// token the client cannot be told about.
pub async fn revoke(State(app): State<Arc<AppState>>, headers: HeaderMap, Form(form): Form<TokenForm>) -> Response {
    let client = match authenticate(&app, &headers, form.client_id.as_deref(), form.client_secret.as_deref()).await {
        Ok(c) => c,
        Err(resp) => return resp,
    };
    if form.token.is_empty() {
        return error(StatusCode::BAD_REQUEST, "invalid_request", "token is required");
    }
    let access_first = form.token_type_hint.as_deref() == Some("access_token") || form.token.contains('.');
    let outcome = if access_first {
        revoke_access(&app, &client, &form.token).await
    } else {
        revoke_refresh(&app, &client, &form.token).await
    };
    if let Err(e) = outcome {
        return server_error(e);
    }
    (StatusCode::OK, [(header::CACHE_CONTROL, "no-store")]).into_response()
}

async fn revoke_refresh(app: &AppState, client: &Client, token: &str) -> Result<(), sqlx::Error> {
    if let Some(grant) = app.store.refresh_grant(&secrets::hash(token), secrets::now()).await?
        && grant.client_id == client.client_id
    {
        app.store.revoke_grant(&grant.grant_id).await?;
        tracing::info!(client_id = %client.client_id, "grant revoked by its client");
    }
    Ok(())
}

async fn revoke_access(app: &AppState, client: &Client, token: &str) -> Result<(), sqlx::Error> {
    let Some(claims) = verify_access(app, token) else { return Ok(()) };
    if claims["client_id"] != client.client_id.as_str() {
        return Ok(());
    }
    if let (Some(jti), Some(exp)) = (claims["jti"].as_str(), claims["exp"].as_i64()) {
        app.store.revoke_jti(jti, exp).await?;
    }
    Ok(())
}

/// RFC 7662 for resource servers that prefer asking: the caller must be a confidential
/// client. Revoked grants and tokens are inactive.
pub async fn introspect(State(app): State<Arc<AppState>>, headers: HeaderMap, Form(form): Form<TokenForm>) -> Response {
    let client = match authenticate(&app, &headers, form.client_id.as_deref(), form.client_secret.as_deref()).await {
        Ok(c) => c,
        Err(resp) => return resp,
    };
    if client.secret_hash.is_none() {
        return error(StatusCode::UNAUTHORIZED, "invalid_client", "introspection needs a confidential client");
    }
    let answer = match introspection(&app, &form.token).await {
        Ok(v) => v,
        Err(e) => return server_error(e),
    };
    (StatusCode::OK, [(header::CACHE_CONTROL, "no-store")], axum::Json(answer)).into_response()
}

async fn introspection(app: &AppState, token: &str) -> Result<Value, sqlx::Error> {
    let inactive = json!({ "active": false });
    if let Some(claims) = verify_access(app, token) {
        let jti = claims["jti"].as_str().unwrap_or_default();
        let gid = claims["gid"].as_str().unwrap_or_default();
        if app.store.jti_revoked(jti).await? || app.store.grant_revoked(gid).await? {
            return Ok(inactive);
        }
        let mut answer = json!({ "active": true, "token_type": "Bearer" });
        for key in ["scope", "client_id", "sub", "aud", "iss", "exp", "iat", "jti"] {
            answer[key] = claims[key].clone();
        }
        answer["username"] = claims["sub"].clone();
        return Ok(answer);
    }
    if let Some(grant) = app.store.refresh_grant(&secrets::hash(token), secrets::now()).await? {
        return Ok(json!({
            "active": true,
            "token_type": "refresh_token",
            "scope": grant.scope,
            "client_id": grant.client_id,
            "sub": grant.username,
            "username": grant.username,
            "aud": grant.resource,
            "iss": app.issuer,
        }));
    }
    Ok(inactive)
}
