//! # oauth-service: the OAuth 2.0 authorisation server
//!
//! Publishes RFC 8414 metadata for the MCP resource that the gateway protects. Registration,
//! authorisation, tokens and the sign-in pages build on this service.
//!
//! ## Layout
//! - [`config`]: the typed configuration.
//! - [`metadata`]: the RFC 8414 authorisation server metadata document.
//! - [`registration`]: dynamic client registration (RFC 7591).
//! - [`authorize`]: the authorisation endpoint and its sign-in page (PKCE S256, RFC 9207 `iss`).
//! - [`token`]: code and refresh-token grants; JWT access tokens.
//! - [`keys`]: the signing key and its JWKS; [`store`]: SQLite storage; [`secrets`]: hashing,
//!   PKCE, constant-time comparison.
//! - [`serve`]: the HTTP routes, health endpoints and graceful shutdown.

pub mod authorize;
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
    pub pages: authorize::Pages,
    pub csrf_key: [u8; 32],
    /// A hash to verify against when the user is unknown, so timing does not tell.
    pub dummy_hash: String,
    draining: AtomicBool,
}

fn hash_password(password: &str) -> Result<String, String> {
    use argon2::password_hash::PasswordHasher as _;
    argon2::Argon2::default().hash_password(password.as_bytes()).map(|h| h.to_string()).map_err(|e| e.to_string())
}

/// Open storage and keys, and create the bootstrap user.
async fn state(config: Config) -> Result<AppState, Error> {
    let store = store::Store::open(&config.database_url()).await.map_err(|e| Error::Store(e.to_string()))?;
    let keys = keys::Keys::load_or_create(config.data_dir.as_deref()).map_err(Error::Store)?;
    if let (Some(user), Some(password)) = (&config.bootstrap_user, &config.bootstrap_password) {
        let password = password.clone();
        let hash = tokio::task::spawn_blocking(move || hash_password(&password))
            .await
            .map_err(|e| Error::Store(e.to_string()))?
            .map_err(Error::Store)?;
        store.upsert_user(user, &hash).await.map_err(|e| Error::Store(e.to_string()))?;
        tracing::info!(%user, "bootstrap user ready");
    }
    let dummy_hash = tokio::task::spawn_blocking(|| hash_password("not a password"))
        .await
        .map_err(|e| Error::Store(e.to_string()))?
        .map_err(Error::Store)?;
    let mut csrf_key = [0u8; 32];
    rand::fill(&mut csrf_key);
    Ok(AppState {
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
    serve(listener, config, shutdown).await
}

/// Serve on a bound listener until `shutdown`.
pub async fn serve(listener: TcpListener, config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    let addr = listener.local_addr().map_err(|source| Error::Bind { addr: config.listen, source })?;
    let state = Arc::new(state(config).await?);
    let app = router(state.clone());
    tracing::info!(service = "oauth-service", %addr, issuer = %state.config.issuer, "listening");
    let drain = state.clone();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.cancelled().await;
            drain.draining.store(true, Ordering::SeqCst);
        })
        .await
        .map_err(Error::Serve)?;
    tracing::info!(service = "oauth-service", "stopped");
    Ok(())
}

fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/.well-known/oauth-authorization-server", get(metadata_document))
        .route("/oauth/jwks", get(|State(app): State<Arc<AppState>>| async move { axum::Json(app.keys.jwks()) }))
        .route("/oauth/register", axum::routing::post(registration::register))
        .route("/oauth/authorize", get(authorize::show).post(authorize::submit))
        .route("/oauth/token", axum::routing::post(token::token))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .with_state(state)
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
