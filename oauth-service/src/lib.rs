//! # oauth-service: the OAuth 2.0 authorisation server
//!
//! Publishes RFC 8414 metadata for the MCP resource that the gateway protects. Registration,
//! authorisation, tokens and the sign-in pages build on this service.
//!
//! ## Layout
//! - [`config`]: the typed configuration.
//! - [`metadata`]: the RFC 8414 authorisation server metadata document.
//! - [`serve`]: the HTTP routes, health endpoints and graceful shutdown.

pub mod config;
pub mod metadata;

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
}

struct AppState {
    config: Config,
    draining: AtomicBool,
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
    let state = Arc::new(AppState { config, draining: AtomicBool::new(false) });
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
