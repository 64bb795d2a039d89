//! The embedded default: registry-service, mcp-service, oauth-service and the gateway in one
//! process — the same code paths as the separate deployment: the gateway calls mcp-service and
//! mcp-service calls the registry through the generated gRPC clients and servers, in process
//! (no sockets); oauth-service is reached over loopback HTTP.

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::{Config, Error};

async fn loopback() -> Result<(TcpListener, SocketAddr), Error> {
    let any: SocketAddr = ([127, 0, 0, 1], 0).into();
    let listener = TcpListener::bind(any).await.map_err(|source| Error::Bind { addr: any, source })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind { addr: any, source })?;
    Ok((listener, addr))
}

/// Run every component until `shutdown`. The gateway stops taking requests and drains first;
/// the inner components stop after it, so in-flight requests can finish.
pub async fn run(mut config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    let inner = CancellationToken::new();
    let mut tasks = JoinSet::new();

    let registry_config = registry_service::Config { definitions: config.definitions.clone(), ..Default::default() };
    let catalog = registry_service::live_catalog(&registry_config, &inner)?;
    let registry = registry_service::in_process(catalog, inner.clone());

    // The engine's own settings (page size, cache hints, state secret) come from its usual
    // `MCP_SERVICE_*` environment; it reaches the registry in process.
    let mcp_config: mcp_service::Config = mcp_proto::runtime::load_config(None, "MCP_SERVICE_", &NoFlags {})
        .map_err(|e| Error::Config(format!("mcp-service: {e}")))?;
    let engine = mcp_service::engine_with(&mcp_config, registry_service_client(registry), &inner);
    let in_process = mcp_service::in_process(engine.clone());
    // Its gRPC server on loopback still answers the gateway's health checks and ends legacy
    // streams on shutdown; requests go to it in process.
    let (listener, mcp_addr) = loopback().await?;
    tasks.spawn(component(mcp_service::serve(
        listener,
        engine.clone(),
        mcp_proto::trust::Require::new(None),
        inner.clone(),
    )));

    let gateway_listener =
        TcpListener::bind(config.listen).await.map_err(|source| Error::Bind { addr: config.listen, source })?;
    let gateway_addr = gateway_listener.local_addr().map_err(|source| Error::Bind { addr: config.listen, source })?;
    let issuer = match &config.public_url {
        Some(u) => u.clone(),
        None => url::Url::parse(&format!("http://{gateway_addr}")).map_err(|e| Error::Config(e.to_string()))?,
    };
    // The authorisation server reads its own `OAUTH_*` settings (bootstrap user, scopes, token
    // lifetimes); its issuer is this gateway, and its storage lives in the data directory when
    // sign-in is on (in memory otherwise, so a plain start writes nothing).
    let mut oauth_config: oauth_service::Config = mcp_proto::runtime::load_config(None, "OAUTH_", &NoFlags {})
        .map_err(|e| Error::Config(format!("oauth-service: {e}")))?;
    oauth_config.resource = url::Url::parse(&format!("{}/mcp", issuer.as_str().trim_end_matches('/'))).ok();
    oauth_config.issuer = issuer;
    // Only this gateway reaches the embedded service: the client address it forwards is true.
    oauth_config.trust_forwarded_for = true;
    if config.oauth() && oauth_config.data_dir.is_none() {
        oauth_config.data_dir = Some(config.data_dir.clone());
    }
    // Introspection asked for: the gateway gets its own confidential client, known only here.
    if config.oauth() && config.token_validation == "introspect" && config.introspection_client_secret.is_none() {
        let mut secret = [0u8; 32];
        rand::fill(&mut secret);
        let secret = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, secret);
        let id = "gateway-introspection".to_owned();
        oauth_config.clients.push(oauth_service::config::StaticClient {
            client_id: id.clone(),
            name: Some("gateway".into()),
            redirect_uris: Vec::new(),
            secret_sha256: Some(crate::auth::token_hash(&secret)),
            grant_types: vec!["client_credentials".into()],
            application_type: "web".into(),
        });
        config.introspection_client_id = Some(id);
        config.introspection_client_secret = Some(secret);
    }
    oauth_config.validate().map_err(|e| Error::Config(format!("oauth-service: {e}")))?;
    let (listener, oauth_addr) = loopback().await?;
    // Ready (storage open, bootstrap user created) before the gateway says it listens.
    let oauth_state = oauth_service::prepare(oauth_config).await?;
    tasks.spawn(component(oauth_service::serve_prepared(listener, oauth_state, inner.clone())));

    config.mcp_service = Some(format!("http://{mcp_addr}"));
    config.oauth_service = Some(format!("http://{oauth_addr}"));
    let embedded = crate::Embedded { channel: in_process, sessions: std::sync::Arc::new(EngineSessions(engine)) };
    let outcome = crate::serve_with(gateway_listener, config, Some(embedded), shutdown).await;

    inner.cancel();
    while let Some(done) = tasks.join_next().await {
        if let Ok(Err(e)) = done {
            tracing::error!(error = %e, "component failed");
        }
    }
    outcome
}

fn registry_service_client(
    channel: mcp_proto::transport::GrpcChannel,
) -> mcp_proto::registry::registry_client::RegistryClient<mcp_proto::transport::GrpcChannel> {
    mcp_proto::registry::registry_client::RegistryClient::new(channel)
}

/// The embedded mcp-service's legacy sessions: a session's end (its `DELETE`) is recorded
/// there before it is answered, so the gateway never reuses a list for an ended session.
struct EngineSessions(std::sync::Arc<mcp_service::Engine>);

impl crate::app::LegacySessions for EngineSessions {
    fn live_revision(&self, session_id: &str) -> Option<&'static str> {
        self.0.live_session_revision(session_id)
    }
}

/// Standalone passes no command-line flags to the embedded components.
#[derive(serde::Serialize)]
struct NoFlags {}

/// A component's future with its error unified, for the join set.
async fn component<E: Into<Error>>(run: impl Future<Output = Result<(), E>>) -> Result<(), Error> {
    run.await.map_err(Into::into)
}
