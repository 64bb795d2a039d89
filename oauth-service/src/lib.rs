//! # oauth-service: the OAuth 2.0 authorisation server
//!
//! Signs users in for the MCP resource that the gateway protects and issues the tokens the
//! gateway checks locally.
//!
//! ## Layout
//! - [`config`]: the typed configuration.
//! - [`metadata`]: the RFC 8414 authorisation server metadata document.
//! - [`clients`]: where clients come from: registered, static, or Client ID Metadata Documents.
//! - [`registration`]: dynamic client registration (RFC 7591), rate limited.
//! - [`authorize`]: the authorisation endpoint and its sign-in and consent page (PKCE S256,
//!   RFC 9207 `iss`, RFC 8707 `resource`).
//! - [`token`]: code, refresh-token and client-credentials grants; JWT access tokens;
//!   revocation (RFC 7009) and introspection (RFC 7662).
//! - [`keys`]: the signing keys, their rotation and the JWKS; [`store`]: SQLite or PostgreSQL
//!   storage; [`secrets`]: hashing, PKCE, constant-time comparison.
//! - [`admin`]: the operator's commands (users, clients, keys).
//! - [`serve`]: the HTTP routes, health endpoints and graceful shutdown.

pub mod admin;
pub mod authorize;
pub mod clients;
pub mod config;
pub mod keys;
pub mod metadata;
pub mod registration;
pub mod secrets;
pub mod store;
pub mod token;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use config::Config;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("HTTP server failed: {0}")]
    Serve(std::io::Error),
    #[error("storage: {0}")]
    Store(String),
}

/// What every handler shares.
pub struct AppState {
    pub config: Config,
    /// The issuer identifier, exactly as published (no trailing slash).
    pub issuer: String,
    /// The resource tokens are for.
    pub resource: String,
    pub store: store::Store,
    pub keys: keys::Keys,
    pub documents: clients::Documents,
    pub registrations: registration::Limiter,
    /// Token requests per client address.
    pub token_requests: registration::Limiter,
    pub pages: authorize::Pages,
    pub csrf_key: [u8; 32],
    /// A hash to verify against when the user is unknown, so timing does not tell.
    pub dummy_hash: String,
    draining: AtomicBool,
}

pub fn hash_password(password: &str) -> Result<String, String> {
    use argon2::password_hash::PasswordHasher as _;
    argon2::Argon2::default().hash_password(password.as_bytes()).map(|h| h.to_string()).map_err(|e| e.to_string())
}

/// Open storage and keys, and create the bootstrap user.
async fn state(config: Config) -> Result<AppState, Error> {
    config.check_database_dir().map_err(Error::Store)?;
    let store = store::Store::open(&config.database_url()).await.map_err(|e| Error::Store(e.to_string()))?;
    let keys =
        keys::Keys::load_or_create(config.data_dir.as_deref(), config.access_token_ttl_secs).map_err(Error::Store)?;
    for c in &config.clients {
        store.upsert_client(&clients::from_config(c), secrets::now()).await.map_err(|e| Error::Store(e.to_string()))?;
    }
    if let (Some(user), Some(password)) = (&config.bootstrap_user, &config.bootstrap_password) {
        let password = password.clone();
        let hash = tokio::task::spawn_blocking(move || hash_password(&password))
            .await
            .map_err(|e| Error::Store(e.to_string()))?
            .map_err(Error::Store)?;
        store.upsert_user(user, &hash, secrets::now()).await.map_err(|e| Error::Store(e.to_string()))?;
        tracing::info!(%user, "bootstrap user ready");
    }
    let dummy_hash = tokio::task::spawn_blocking(|| hash_password("not a password"))
        .await
        .map_err(|e| Error::Store(e.to_string()))?
        .map_err(Error::Store)?;
    let mut csrf_key = [0u8; 32];
    rand::fill(&mut csrf_key);
    Ok(AppState {
        documents: clients::Documents::new(&config).map_err(Error::Store)?,
        registrations: registration::Limiter::new(config.registration_per_minute),
        token_requests: registration::Limiter::new(config.token_per_minute),
        issuer: config.issuer_base(),
        resource: config.resource_url(),
        store,
        keys,
        pages: authorize::Pages::new(),
        csrf_key,
        dummy_hash,
        config,
        draining: AtomicBool::new(false),
    })
}

/// Bind the configured address and serve until `shutdown`.
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    let listener =
        TcpListener::bind(config.listen).await.map_err(|source| Error::Bind { addr: config.listen, source })?;
    let grace = std::time::Duration::from_secs(config.shutdown_grace_secs);
    let state = prepare(config).await?;
    let server = serve_prepared(listener, state, shutdown.clone());
    mcp_proto::runtime::drain(server, &shutdown, grace).await.unwrap_or(Ok(()))
}

/// Serve on a bound listener until `shutdown`.
pub async fn serve(listener: TcpListener, config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    let state = prepare(config).await?;
    serve_prepared(listener, state, shutdown).await
}

/// Open storage, load keys and create the bootstrap user: everything before the first request.
pub async fn prepare(config: Config) -> Result<Arc<AppState>, Error> {
    Ok(Arc::new(state(config).await?))
}

/// Serve a prepared service on a bound listener until `shutdown`.
pub async fn serve_prepared(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let addr = listener.local_addr().map_err(|source| Error::Bind { addr: state.config.listen, source })?;
    let app = router(state.clone());
    tokio::spawn(housekeeping(state.clone(), shutdown.clone()));
    tracing::info!(service = "oauth-service", %addr, issuer = %state.config.issuer, "listening");
    let drain = state.clone();
    axum::serve(mcp_proto::socket::no_delay(listener), app.into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(async move {
            shutdown.cancelled().await;
            drain.draining.store(true, Ordering::SeqCst);
        })
        .await
        .map_err(Error::Serve)?;
    tracing::info!(service = "oauth-service", "stopped");
    Ok(())
}

/// Every few seconds: pick up rotated keys; every hour: drop expired codes and tokens.
async fn housekeeping(state: Arc<AppState>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
    let mut n: u64 = 0;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = state.keys.reload() {
            tracing::warn!(error = %e, "re-reading the signing keys failed; keeping the current ones");
        }
        if n.is_multiple_of(720) {
            if let Err(e) = state.store.sweep(secrets::now()).await {
                tracing::warn!(error = %e, "sweeping expired records failed");
            }
            state.registrations.forget_idle();
            state.token_requests.forget_idle();
        }
        n += 1;
    }
}

fn router(state: Arc<AppState>) -> Router {
    // The metadata also answers at the path-suffixed location of an issuer with a path
    // (RFC 8414 §3.1), and under the OpenID Connect discovery name clients also try.
    let issuer_path =
        url::Url::parse(&state.issuer).map(|u| u.path().trim_end_matches('/').to_owned()).unwrap_or_default();
    let mut router = Router::new()
        .route("/.well-known/oauth-authorization-server", get(metadata_document))
        .route("/.well-known/openid-configuration", get(metadata_document));
    if !issuer_path.is_empty() {
        router = router
            .route(&format!("/.well-known/oauth-authorization-server{issuer_path}"), get(metadata_document))
            .route(&format!("/.well-known/openid-configuration{issuer_path}"), get(metadata_document))
            .route(&format!("{issuer_path}/.well-known/openid-configuration"), get(metadata_document));
    }
    router
        .route("/oauth/jwks", get(jwks))
        .route("/oauth/register", axum::routing::post(registration::register))
        .route("/oauth/authorize", get(authorize::show).post(authorize::submit))
        .route("/oauth/token", axum::routing::post(token::token))
        .route("/oauth/revoke", axum::routing::post(token::revoke))
        .route("/oauth/introspect", axum::routing::post(token::introspect))
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .layer(axum::middleware::from_fn(whole_body))
        .with_state(state)
}

/// The largest request body taken (the gateway relays no more either).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Every request's body is read whole before its route sees it. A route that refuses a request
/// before reading its body (a content type it does not take, a rate limit) left the rest of it
/// unread on the connection, and hyper then closed the connection with data unread: a reset,
/// which could cost the answer or the gateway's next request on that connection.
async fn whole_body(req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    use mcp_proto::body::{BodyError, read_whole};
    let (parts, body) = req.into_parts();
    let (status, description) = match read_whole(body, MAX_BODY_BYTES, None).await {
        Ok(bytes) => return next.run(axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes))).await,
        Err(BodyError::TooLarge) => {
            (StatusCode::PAYLOAD_TOO_LARGE, format!("the request body is larger than {MAX_BODY_BYTES} bytes"))
        }
        Err(BodyError::BrokeOff | BodyError::Timeout) => {
            (StatusCode::BAD_REQUEST, "the request body broke off".to_owned())
        }
    };
    let body = serde_json::json!({ "error": "invalid_request", "error_description": description });
    (status, [("cache-control", "no-store")], axum::Json(body)).into_response()
}

async fn metrics_text() -> impl axum::response::IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        mcp_proto::telemetry::render_metrics(),
    )
}

async fn jwks(State(app): State<Arc<AppState>>) -> impl axum::response::IntoResponse {
    ([(axum::http::header::CACHE_CONTROL, "public, max-age=60")], axum::Json(app.keys.jwks()))
}

async fn metadata_document(State(state): State<Arc<AppState>>) -> impl axum::response::IntoResponse {
    ([(axum::http::header::CACHE_CONTROL, "public, max-age=300")], axum::Json(metadata::document(&state.config)))
}

async fn ready(State(state): State<Arc<AppState>>) -> (StatusCode, &'static str) {
    if state.draining.load(Ordering::SeqCst) {
        (StatusCode::SERVICE_UNAVAILABLE, "draining")
    } else {
        (StatusCode::OK, "ready")
    }
}
