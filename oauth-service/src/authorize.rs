//! The authorisation endpoint: authorization code with PKCE S256 only, `state` round-tripped,
//! `iss` in every response (RFC 9207), `resource` required to name our MCP resource (RFC 8707),
//! redirect URIs matched exactly except for the port of loopback redirects (RFC 8252 §7.3).
//!
//! Errors about the client or its redirect URI are shown on a page and never redirected (the
//! URI is not verified); every later error is redirected to the client (RFC 6749 §4.1.2.1).
//! The sign-in page is the consent page: it names the client, the resource and the scopes.
//!
//! A successful sign-in leaves a signed, `HttpOnly`, `SameSite=Lax` session cookie (`Secure` on
//! an https issuer). A signed-in user who already allowed this client the same scopes is sent
//! straight back with a code; one who has not sees the consent page without the password
//! fields. Consent is remembered per user, client and scope set, and revocable.

use std::sync::Arc;

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use hmac::{Hmac, KeyInit, Mac};
use serde::Deserialize;
use sha2::Sha256;

use crate::AppState;
use crate::clients::{self, Lookup};
use crate::secrets;
use crate::store::{Code, Grant};

/// The parameters of an authorisation request, as received.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub struct Params {
    #[serde(default)]
    pub response_type: Option<String>,
    #[serde(default)]
    pub client_id: Option<String>,
    #[serde(default)]
    pub redirect_uri: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub scope: Option<String>,
    #[serde(default)]
    pub code_challenge: Option<String>,
    #[serde(default)]
    pub code_challenge_method: Option<String>,
    #[serde(default)]
    pub resource: Option<String>,
}

/// The sign-in form, with the request carried along.
#[derive(Debug, Deserialize)]
pub struct Submitted {
    #[serde(flatten)]
    params: Params,
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    decision: String,
}

/// Whether `requested` is one of the client's redirect URIs: the same string, or for a loopback
/// redirect the same URI on any port.
pub fn redirect_registered(requested: &str, registered: &[String]) -> bool {
    let loopback =
        |u: &url::Url| u.scheme() == "http" && matches!(u.host_str(), Some("127.0.0.1" | "[::1]" | "localhost"));
    registered.iter().any(|r| {
        if r == requested {
            return true;
        }
        match (url::Url::parse(r), url::Url::parse(requested)) {
            (Ok(a), Ok(b)) => {
                loopback(&a)
                    && loopback(&b)
                    && a.host_str() == b.host_str()
                    && a.path() == b.path()
                    && a.query() == b.query()
            }
            _ => false,
        }
    })
}

/// The CSP source of a verified redirect URI: its origin, or `scheme:` for a private-use scheme.
fn csp_source(redirect_uri: &str) -> Option<String> {
    let url = url::Url::parse(redirect_uri).ok()?;
    match url.scheme() {
        "http" | "https" => Some(url.origin().ascii_serialization()),
        scheme if scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+.-".contains(&b)) => {
            Some(format!("{scheme}:"))
        }
        _ => None,
    }
}

/// Secure headers for every page: no framing, no caching, no referrer, no scripts. The form
/// may post to this server only, and the redirect that follows it may go only to the client's
/// verified redirect URI (browsers apply `form-action` to that redirect too).
fn page(status: StatusCode, html: String, redirect_uri: Option<&str>) -> Response {
    let mut resp = (status, Html(html)).into_response();
    let h = resp.headers_mut();
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    let target = redirect_uri.and_then(csp_source).map(|s| format!(" {s}")).unwrap_or_default();
    let csp =
        format!("default-src 'none'; style-src 'unsafe-inline'; form-action 'self'{target}; frame-ancestors 'none'");
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_str(&csp)
            .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'")),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    resp
}

fn error_page(app: &AppState, message: &str) -> Response {
    page(StatusCode::BAD_REQUEST, app.pages.render("error", minijinja::context! { message }), None)
}

/// Redirect an error to the (verified) redirect URI, with `state` and `iss`.
fn redirect_error(app: &AppState, redirect_uri: &str, params: &Params, error: &str, description: &str) -> Response {
    redirect_with(app, redirect_uri, params, &[("error", error), ("error_description", description)])
}

fn redirect_with(app: &AppState, redirect_uri: &str, params: &Params, pairs: &[(&str, &str)]) -> Response {
    let Ok(mut url) = url::Url::parse(redirect_uri) else { return error_page(app, "invalid redirect_uri") };
    {
        let mut q = url.query_pairs_mut();
        for (k, v) in pairs {
            q.append_pair(k, v);
        }
        if let Some(state) = &params.state {
            q.append_pair("state", state);
        }
        q.append_pair("iss", &app.issuer);
    }
    let mut resp = Redirect::to(url.as_str()).into_response();
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// Everything checked before the sign-in page: `Ok` carries the verified redirect URI.
async fn check(app: &AppState, p: &Params) -> Result<String, Response> {
    let Some(client_id) = p.client_id.as_deref() else { return Err(error_page(app, "client_id is missing")) };
    let client = match clients::find(app, client_id).await {
        Ok(c) => c,
        Err(Lookup::Unknown) => return Err(error_page(app, "unknown client")),
        Err(Lookup::Invalid(reason)) => {
            return Err(error_page(app, &format!("the client's metadata document is not acceptable: {reason}")));
        }
        Err(Lookup::Store(e)) => {
            tracing::error!(error = %e, "store failed");
            return Err(error_page(app, "the service is unavailable"));
        }
    };
    if !client.grant_types.iter().any(|g| g == "authorization_code") {
        return Err(error_page(app, "this client may not use the authorisation code flow"));
    }
    let redirect_uri = match (&p.redirect_uri, client.redirect_uris.as_slice()) {
        (Some(r), registered) if redirect_registered(r, registered) => r.clone(),
        (None, [only]) => only.clone(),
        _ => return Err(error_page(app, "redirect_uri is missing or not registered for this client")),
    };
    // From here on, errors go back to the client.
    if p.response_type.as_deref() != Some("code") {
        return Err(redirect_error(app, &redirect_uri, p, "unsupported_response_type", "response_type must be code"));
    }
    if p.code_challenge_method.as_deref() != Some("S256") || p.code_challenge.as_deref().is_none_or(|c| c.len() != 43) {
        return Err(redirect_error(
            app,
            &redirect_uri,
            p,
            "invalid_request",
            "PKCE with code_challenge_method S256 is required",
        ));
    }
    match p.resource.as_deref() {
        Some(r) if r.trim_end_matches('/') == app.resource.trim_end_matches('/') => {}
        _ => {
            let message = format!("resource must be {}", app.resource);
            return Err(redirect_error(app, &redirect_uri, p, "invalid_target", &message));
        }
    }
    if p.scope.as_deref().is_some_and(|s| {
        !s.split(' ').all(|t| !t.is_empty() && t.bytes().all(|b| b > 0x20 && b != b'"' && b != b'\\' && b < 0x7f))
    }) {
        return Err(redirect_error(app, &redirect_uri, p, "invalid_scope", "malformed scope"));
    }
    Ok(redirect_uri)
}

type HmacSha256 = Hmac<Sha256>;

/// A token that ties the sign-in form to this request and expires.
fn csrf_token(app: &AppState, p: &Params, expires: i64) -> String {
    let mut mac = HmacSha256::new_from_slice(&app.csrf_key).expect("any key length");
    mac.update(serde_json::to_string(p).unwrap_or_default().as_bytes());
    mac.update(&expires.to_be_bytes());
    let tag = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, mac.finalize().into_bytes());
    format!("{expires}.{tag}")
}

fn csrf_valid(app: &AppState, p: &Params, token: &str) -> bool {
    let Some((expires, _)) = token.split_once('.') else { return false };
    let Ok(expires) = expires.parse::<i64>() else { return false };
    expires > secrets::now() && secrets::equal(&csrf_token(app, p, expires), token)
}

const SESSION_COOKIE: &str = "mcp_oauth_session";
/// How long a sign-in lasts in the browser.
const SESSION_SECS: i64 = 8 * 3600;

fn session_tag(app: &AppState, payload: &str) -> String {
    let mut mac = HmacSha256::new_from_slice(&app.csrf_key).expect("any key length");
    mac.update(b"session\0");
    mac.update(payload.as_bytes());
    base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, mac.finalize().into_bytes())
}

/// The signed-in user named by the session cookie, if it is ours and current.
fn session_user(app: &AppState, headers: &HeaderMap) -> Option<String> {
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().strip_prefix(SESSION_COOKIE)?.strip_prefix('='))
        .next()?;
    let (payload, tag) = cookie.rsplit_once('.')?;
    if !secrets::equal(&session_tag(app, payload), tag) {
        return None;
    }
    let decoded = base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, payload).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (expires, user) = text.split_once(':')?;
    (expires.parse::<i64>().ok()? > secrets::now()).then(|| user.to_owned())
}

fn session_cookie(app: &AppState, user: &str) -> HeaderValue {
    let payload = base64::Engine::encode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        format!("{}:{user}", secrets::now() + SESSION_SECS),
    );
    let secure = if app.issuer.starts_with("https://") { "; Secure" } else { "" };
    let value = format!(
        "{SESSION_COOKIE}={payload}.{}; Path=/oauth; HttpOnly; SameSite=Lax; Max-Age={SESSION_SECS}{secure}",
        session_tag(app, &payload)
    );
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The scope as granted and remembered: its tokens sorted and deduplicated.
fn scope_set(scope: Option<&str>) -> String {
    let mut tokens: Vec<&str> = scope.unwrap_or_default().split(' ').filter(|s| !s.is_empty()).collect();
    tokens.sort_unstable();
    tokens.dedup();
    tokens.join(" ")
}

/// Why the page is shown again: a message, and the name typed so far.
struct Notice<'a> {
    message: &'a str,
    username: Option<&'a str>,
}

fn sign_in(
    app: &AppState,
    p: &Params,
    redirect_uri: &str,
    client_name: &str,
    signed_in_as: Option<&str>,
    status: StatusCode,
    notice: Option<Notice<'_>>,
) -> Response {
    let (message, username) = notice.map_or((None, None), |n| (Some(n.message), n.username));
    let csrf = csrf_token(app, p, secrets::now() + 600);
    let scopes: Vec<String> =
        p.scope.as_deref().unwrap_or_default().split(' ').filter(|s| !s.is_empty()).map(str::to_owned).collect();
    let message = message.map(str::to_owned);
    let (client_name, resource) = (client_name.to_owned(), app.resource.clone());
    let signed_in_as = signed_in_as.map(str::to_owned);
    let html = app.pages.render(
        "sign_in",
        minijinja::context! {
            params => minijinja::Value::from(minijinja::value::Serde(p.clone())),
            csrf, client_name, resource, scopes, message, signed_in_as, username
        },
    );
    page(status, html, Some(redirect_uri))
}

pub async fn show(State(app): State<Arc<AppState>>, headers: HeaderMap, Query(p): Query<Params>) -> Response {
    let redirect_uri = match check(&app, &p).await {
        Err(resp) => return resp,
        Ok(r) => r,
    };
    let user = session_user(&app, &headers);
    if let Some(user) = &user {
        let client_id = p.client_id.as_deref().unwrap_or_default();
        let scope = scope_set(p.scope.as_deref());
        match app.store.has_consent(user, client_id, &scope).await {
            Ok(true) => return grant_code(&app, &p, &redirect_uri, user).await,
            Ok(false) => {}
            Err(e) => tracing::error!(error = %e, "store failed"),
        }
    }
    let name = client_name(&app, &p).await;
    sign_in(&app, &p, &redirect_uri, &name, user.as_deref(), StatusCode::OK, None)
}

async fn client_name(app: &AppState, p: &Params) -> String {
    let id = p.client_id.clone().unwrap_or_default();
    match clients::find(app, &id).await {
        Ok(c) => c.name.unwrap_or(id),
        Err(_) => id,
    }
}

pub async fn submit(State(app): State<Arc<AppState>>, headers: HeaderMap, Form(form): Form<Submitted>) -> Response {
    let p = &form.params;
    let redirect_uri = match check(&app, p).await {
        Err(resp) => return resp,
        Ok(r) => r,
    };
    if !csrf_valid(&app, p, &form.csrf) {
        return error_page(&app, "this sign-in form expired or was not ours; start again from your application");
    }
    if form.decision != "allow" {
        return redirect_error(&app, &redirect_uri, p, "access_denied", "the user declined");
    }
    // A password in the form signs in (again); otherwise the session must be current.
    let (user, fresh) = if form.username.is_empty() && form.password.is_empty() {
        match session_user(&app, &headers) {
            Some(user) => (user, false),
            None => {
                let name = client_name(&app, p).await;
                return sign_in(
                    &app,
                    p,
                    &redirect_uri,
                    &name,
                    None,
                    StatusCode::UNAUTHORIZED,
                    Some(Notice { message: "Please sign in.", username: None }),
                );
            }
        }
    } else if verify_password(&app, &form.username, &form.password).await {
        (form.username.clone(), true)
    } else {
        let name = client_name(&app, p).await;
        return sign_in(
            &app,
            p,
            &redirect_uri,
            &name,
            None,
            StatusCode::UNAUTHORIZED,
            Some(Notice { message: "Wrong username or password.", username: Some(&form.username) }),
        );
    };
    let client_id = p.client_id.as_deref().unwrap_or_default();
    if let Err(e) = app.store.add_consent(&user, client_id, &scope_set(p.scope.as_deref()), secrets::now()).await {
        tracing::error!(error = %e, "recording consent failed");
    }
    let mut resp = grant_code(&app, p, &redirect_uri, &user).await;
    if fresh {
        resp.headers_mut().append(header::SET_COOKIE, session_cookie(&app, &user));
    }
    resp
}

/// Issue a code for `user` and send it to the client.
async fn grant_code(app: &AppState, p: &Params, redirect_uri: &str, user: &str) -> Response {
    let code = secrets::random();
    let record = Code {
        grant: Grant {
            grant_id: secrets::random(),
            client_id: p.client_id.clone().unwrap_or_default(),
            username: user.to_owned(),
            scope: scope_set(p.scope.as_deref()),
            resource: app.resource.clone(),
        },
        redirect_uri: redirect_uri.to_owned(),
        challenge: p.code_challenge.clone().unwrap_or_default(),
        expires_at: secrets::now() + app.config.code_ttl_secs as i64,
    };
    if let Err(e) = app.store.insert_code(&secrets::hash(&code), &record, secrets::now()).await {
        tracing::error!(error = %e, "storing a code failed");
        return redirect_error(app, redirect_uri, p, "server_error", "could not issue a code");
    }
    tracing::info!(client_id = %record.grant.client_id, %user, "authorised");
    redirect_with(app, redirect_uri, p, &[("code", &code)])
}

/// Verify a password against its argon2 hash, off the async threads. An unknown user costs the
/// same time as a wrong password.
pub async fn verify_password(app: &AppState, username: &str, password: &str) -> bool {
    let stored = app.store.password_hash(username).await.ok().flatten();
    let hash = stored.clone().unwrap_or_else(|| app.dummy_hash.clone());
    let password = password.to_owned();
    let ok = tokio::task::spawn_blocking(move || {
        use argon2::{Argon2, PasswordHash, PasswordVerifier as _};
        PasswordHash::new(&hash).is_ok_and(|h| Argon2::default().verify_password(password.as_bytes(), &h).is_ok())
    })
    .await
    .unwrap_or(false);
    ok && stored.is_some()
}

/// The page templates, auto-escaped.
pub struct Pages {
    env: minijinja::Environment<'static>,
}

impl Pages {
    pub fn new() -> Self {
        let mut env = minijinja::Environment::new();
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
        env.add_template("sign_in", include_str!("pages/sign_in.html")).expect("a valid template");
        env.add_template("error", include_str!("pages/error.html")).expect("a valid template");
        Self { env }
    }

    pub fn render(&self, name: &str, ctx: minijinja::Value) -> String {
        self.env.get_template(name).and_then(|t| t.render(ctx)).unwrap_or_else(|e| {
            tracing::error!(error = %e, "page failed to render");
            "Something went wrong.".to_owned()
        })
    }
}

impl Default for Pages {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_may_lead_only_to_the_verified_redirect() {
        assert_eq!(csp_source("http://127.0.0.1:5000/callback").as_deref(), Some("http://127.0.0.1:5000"));
        assert_eq!(csp_source("https://app.example/cb?x=1").as_deref(), Some("https://app.example"));
        assert_eq!(csp_source("com.example.app:/cb").as_deref(), Some("com.example.app:"));
        assert_eq!(csp_source("not a url"), None);
    }

    #[test]
    fn loopback_redirects_match_on_any_port() {
        let reg = vec!["http://127.0.0.1/callback".to_owned(), "https://app.example/cb".to_owned()];
        assert!(redirect_registered("http://127.0.0.1:53122/callback", &reg));
        assert!(redirect_registered("https://app.example/cb", &reg));
        assert!(!redirect_registered("https://app.example:8443/cb", &reg));
        assert!(!redirect_registered("http://127.0.0.1:1/other", &reg));
        assert!(!redirect_registered("http://localhost:1/callback", &reg), "the host must be the same");
        assert!(!redirect_registered("https://app.example/cb/../x", &reg));
    }
}
