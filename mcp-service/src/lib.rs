//! # mcp-service: the JSON-RPC protocol engine
//!
//! Speaks MCP in both eras — the legacy handshake revisions (2024-11-05 … 2025-11-25) and the
//! stateless revision 2026-07-28 — over gRPC (behind the gateway) and over stdio. Knows nothing
//! of HTTP or authentication; takes its catalog from registry-service.
//!
//! ## Layout
//! - [`config`]: the typed configuration.
//! - [`dispatch`]: envelope, era and `_meta` validation, method routing, result wrapping.
//! - [`methods`]: one module per feature area (lifecycle, tools, resources, prompts).
//! - [`shape`]: per-revision result shapes for legacy clients.
//! - [`catalog`]: the in-memory catalog snapshot that follows the registry.
//! - [`paging`]: opaque cursors.
//! - [`session`]: legacy sessions; [`follow`]: the gateways that follow their ends.
//! - [`error`]: protocol errors and their one mapping to JSON-RPC codes.
//! - [`confirm`]: held reads' questions to the registry, asked together.
//! - [`server`]: the gRPC service; [`grpc_server`]: its connections over the network;
//!   [`stdio`]: the stdio transport.
//! - [`entry`]: the `main` of the `mcp-service` and `mcp-service-remote` binaries.

pub mod catalog;
pub mod config;
pub mod confirm;
pub mod context;
pub mod dispatch;
pub mod entry;
pub mod error;
pub mod follow;
pub mod grpc_server;
pub mod methods;
pub mod paging;
pub mod pipe;
pub mod request;
pub mod seal;
pub mod server;
pub mod session;
pub mod shape;
pub mod stdio;

use std::net::SocketAddr;
use std::sync::Arc;

use mcp_proto::registry::registry_client::RegistryClient;
use mcp_proto::transport::GrpcChannel;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use config::Config;
pub use dispatch::{Engine, Settings};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("registry: {0}")]
    RegistryTarget(String),
    #[error(transparent)]
    Registry(#[from] registry_service::Error),
    #[error("stdio failed: {0}")]
    Stdio(#[from] std::io::Error),
    #[error("{0}")]
    Config(String),
}

/// A lazily connecting client for registry-service at `target` (one URL, a comma-separated
/// list, or `dns:///host:port`: see [`mcp_proto::balance`]). Call inside the runtime.
pub fn registry_client(target: &str) -> Result<RegistryClient<GrpcChannel>, StartError> {
    let parsed = mcp_proto::balance::Target::parse(target).map_err(StartError::RegistryTarget)?;
    let channel = mcp_proto::balance::connect("registry-service", &parsed, mcp_proto::link::Settings::default())
        .map_err(StartError::RegistryTarget)?;
    Ok(RegistryClient::new(channel))
}

/// A registry in this process, for when none is configured. Passed in by the `mcp-service`
/// binary; `mcp-service-remote` has none, and so leaves registry-service's code out.
pub type EmbeddedRegistry = fn(&Config, &CancellationToken) -> Result<RegistryClient<GrpcChannel>, StartError>;

/// Serves `config.definitions` (called directly, no socket).
pub fn embedded_registry(
    config: &Config,
    shutdown: &CancellationToken,
) -> Result<RegistryClient<GrpcChannel>, StartError> {
    let registry_config = registry_service::Config { definitions: config.definitions.clone(), ..Default::default() };
    let catalog = registry_service::live_catalog(&registry_config, shutdown)?;
    Ok(RegistryClient::new(registry_service::in_process(catalog, shutdown.clone())))
}

/// The engine for `config`: against the configured registry, or against `embedded` when none
/// is configured.
pub async fn engine(
    config: &Config,
    embedded: Option<EmbeddedRegistry>,
    shutdown: &CancellationToken,
) -> Result<Arc<Engine>, StartError> {
    let client = match (&config.registry, embedded) {
        (Some(url), _) => registry_client(url)?,
        (None, Some(embedded)) => embedded(config, shutdown)?,
        (None, None) => return Err(StartError::Config(NO_EMBEDDED_REGISTRY.into())),
    };
    Ok(engine_with(config, client, shutdown))
}

/// Why `mcp-service-remote` will not start without `--registry`.
pub const NO_EMBEDDED_REGISTRY: &str = "registry: required (flag --registry or MCP_SERVICE_REGISTRY): this binary has no registry of its own; \
     `mcp-service` runs one in process";

/// The engine for `config` against `registry`.
pub fn engine_with(
    config: &Config,
    registry: RegistryClient<GrpcChannel>,
    shutdown: &CancellationToken,
) -> Arc<Engine> {
    // The one place the registry client's limit is set, whoever made the client.
    let registry = registry.max_decoding_message_size(mcp_proto::MAX_MESSAGE_BYTES);
    let cache = catalog::CatalogCache::follow(registry.clone(), shutdown.clone());
    let sealer = match &config.state_secret {
        Some(secret) => seal::Sealer::new(secret.as_bytes()),
        None => {
            if config.registry.is_some() {
                tracing::warn!(
                    "no state_secret configured: request states and session ids are valid only in this process"
                );
            }
            seal::Sealer::random()
        }
    };
    Engine::new(registry, cache, config.settings(), sealer, shutdown.clone())
}

/// The engine's gRPC service, called in this process (standalone mode) instead of over a
/// socket: `Handle` as mcp-service's own server answers it, the rest by the generated service
/// ([`grpc_server::InProcess`]).
pub fn in_process(engine: Arc<Engine>) -> GrpcChannel {
    use mcp_proto::mcp::mcp_service_server::McpServiceServer;
    let generated = McpServiceServer::new(server::McpGrpc::new(engine.clone()))
        .max_decoding_message_size(mcp_proto::MAX_MESSAGE_BYTES);
    mcp_proto::transport::in_process(grpc_server::InProcess { engine, generated })
}

/// Bind the configured address and serve gRPC until `shutdown`.
pub async fn run(
    config: Config,
    embedded: Option<EmbeddedRegistry>,
    shutdown: CancellationToken,
) -> Result<(), StartError> {
    if let Some(token) = &config.service_token {
        mcp_proto::trust::set_outgoing(token).map_err(StartError::Config)?;
    }
    let engine = engine(&config, embedded, &shutdown).await?;
    let listener =
        TcpListener::bind(config.listen).await.map_err(|source| StartError::Bind { addr: config.listen, source })?;
    if let Some(addr) = config.metrics_listen {
        mcp_proto::telemetry::serve_metrics(addr, shutdown.clone())
            .await
            .map_err(|source| StartError::Bind { addr, source })?;
    }
    let grace = std::time::Duration::from_secs(config.shutdown_grace_secs);
    let server =
        serve(listener, engine, mcp_proto::trust::Require::new(config.service_token.as_deref()), shutdown.clone());
    mcp_proto::runtime::drain(server, &shutdown, grace).await.unwrap_or(Ok(()))
}

/// Serve gRPC on a bound listener until `shutdown` (see [`grpc_server`]).
pub async fn serve(
    listener: TcpListener,
    engine: Arc<Engine>,
    callers: mcp_proto::trust::Require,
    shutdown: CancellationToken,
) -> Result<(), StartError> {
    use mcp_proto::mcp::mcp_service_server::McpServiceServer;
    let addr = listener.local_addr().map_err(|source| StartError::Bind { addr: ([0, 0, 0, 0], 0).into(), source })?;
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<McpServiceServer<server::McpGrpc>>().await;
    tracing::info!(service = "mcp-service", %addr, "listening");
    let routes = tonic::service::Routes::new(health_service)
        // Their requests are small (tonic's 4 MiB limit); `Handle` never reaches them here.
        .add_service(McpServiceServer::with_interceptor(server::McpGrpc::new(engine.clone()), callers.clone()))
        .prepare();
    let sessions = engine.clone();
    let served = grpc_server::Served { engine, callers, routes, shutdown: shutdown.clone() };
    grpc_server::serve(mcp_proto::socket::incoming(listener), served, shutdown, async move {
        health.set_not_serving::<McpServiceServer<server::McpGrpc>>().await;
        // Legacy sessions' standalone streams never end by themselves: end them, so the
        // drain waits only for requests (the client reopens them on another replica).
        for session in sessions.sessions.all() {
            if let Ok(mut outbound) = session.outbound.lock() {
                outbound.clear();
            }
        }
        // So are the gateways' streams of session ends.
        sessions.followers.close_all();
    })
    .await;
    tracing::info!(service = "mcp-service", "stopped");
    Ok(())
}

/// Serve one client over stdin/stdout until EOF or `shutdown`.
pub async fn run_stdio(
    config: Config,
    embedded: Option<EmbeddedRegistry>,
    shutdown: CancellationToken,
) -> Result<(), StartError> {
    let inner = shutdown.child_token();
    let engine = engine(&config, embedded, &inner).await?;
    stdio::serve(engine, tokio::io::stdin(), tokio::io::stdout(), shutdown).await?;
    inner.cancel();
    Ok(())
}
