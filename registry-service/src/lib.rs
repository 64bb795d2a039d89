//! # registry-service: the catalog
//!
//! Holds the tools, resources, resource templates and prompts that the server offers, executes
//! tools, reads resources, renders prompts and completes arguments, over the `registry.v1` gRPC
//! contract. Knows nothing of protocol revisions or HTTP.
//!
//! ## Layout
//! - [`config`]: the typed configuration (file, environment, flags).
//! - [`catalog`]: the catalog model, lookups and scope checks.
//! - [`definitions`]: the operator's definitions file, validated before anything is served.
//! - [`builtin`]: item sets compiled into the binary; [`conformance`]: the fixture set the
//!   official conformance suite drives.
//! - [`server`]: the gRPC service over a catalog, and [`serve`] to run it on a listener.

pub mod backends;
pub mod builtin;
pub mod catalog;
pub mod config;
pub mod conformance;
pub mod definitions;
pub mod server;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use catalog::Catalog;
pub use config::Config;

/// Why the service could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error(transparent)]
    Definitions(#[from] definitions::DefinitionsError),
    #[error("{0}")]
    DataDir(String),
}

/// Build the catalog the configuration describes (built-ins, later the definitions file).
pub fn load_catalog(config: &Config) -> Result<Arc<Catalog>, Error> {
    match &config.definitions {
        Some(path) => Ok(Arc::new(definitions::load_in(path, config.data_dir.as_deref())?)),
        None => Ok(Arc::new(builtin::catalog())),
    }
}

/// The catalog the configuration describes, kept current: when it comes from a definitions
/// file, the file is watched and reloaded until `shutdown`.
pub fn live_catalog(config: &Config, shutdown: &CancellationToken) -> Result<server::CatalogHandle, Error> {
    let handle = server::CatalogHandle::new(load_catalog(config)?);
    if let Some(path) = &config.definitions
        && let Err(e) =
            definitions::watch::spawn(path.clone(), config.data_dir.clone(), handle.clone(), shutdown.clone())
    {
        tracing::warn!(path = %path.display(), error = %e, "cannot watch the definitions file; it will not be reloaded");
    }
    Ok(handle)
}

/// Bind the configured address and serve until `shutdown` is cancelled.
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    if let Some(dir) = &config.data_dir {
        mcp_proto::runtime::check_writable_dir(dir).map_err(|e| Error::DataDir(format!("data_dir: {e}")))?;
    }
    let catalog = live_catalog(&config, &shutdown)?;
    let listener =
        TcpListener::bind(config.listen).await.map_err(|source| Error::Bind { addr: config.listen, source })?;
    if let Some(addr) = config.metrics_listen {
        mcp_proto::telemetry::serve_metrics(addr, shutdown.clone())
            .await
            .map_err(|source| Error::Bind { addr, source })?;
    }
    let grace = std::time::Duration::from_secs(config.shutdown_grace_secs);
    let server =
        serve(listener, catalog, mcp_proto::trust::Require::new(config.service_token.as_deref()), shutdown.clone());
    mcp_proto::runtime::drain(server, &shutdown, grace).await.unwrap_or(Ok(()))
}

/// Serve the catalog on an already bound listener until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    catalog: server::CatalogHandle,
    callers: mcp_proto::trust::Require,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let addr = listener.local_addr().map_err(|source| Error::Bind { addr: ([0, 0, 0, 0], 0).into(), source })?;
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<mcp_proto::registry::registry_server::RegistryServer<server::RegistryService>>()
        .await;
    let service = server::RegistryService::new(catalog).with_draining(shutdown.clone());
    tracing::info!(service = "registry-service", %addr, "listening");
    let incoming = mcp_proto::socket::incoming(listener);
    let drain = shutdown.clone();
    let reporter = health_reporter.clone();
    tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(tonic::service::interceptor::InterceptedService::new(
            mcp_proto::registry::registry_server::RegistryServer::new(service)
                .max_decoding_message_size(mcp_proto::MAX_MESSAGE_BYTES),
            callers,
        ))
        .serve_with_incoming_shutdown(incoming, async move {
            drain.cancelled().await;
            reporter
                .set_not_serving::<mcp_proto::registry::registry_server::RegistryServer<server::RegistryService>>()
                .await;
        })
        .await?;
    tracing::info!(service = "registry-service", "stopped");
    Ok(())
}

/// The catalog's gRPC service, called in this process (standalone mode, and mcp-service
/// without a configured registry) instead of over a socket.
pub fn in_process(catalog: server::CatalogHandle, shutdown: CancellationToken) -> mcp_proto::transport::GrpcChannel {
    let service = server::RegistryService::new(catalog).with_draining(shutdown);
    mcp_proto::transport::in_process(
        mcp_proto::registry::registry_server::RegistryServer::new(service)
            .max_decoding_message_size(mcp_proto::MAX_MESSAGE_BYTES),
    )
}
