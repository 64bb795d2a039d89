//! # gateway: the HTTP edge
//!
//! Terminates Streamable HTTP for MCP clients of every era: DNS-rebinding checks, body limits,
//! content negotiation, era classification and the 2026-07-28 routing headers, then forwards
//! the JSON-RPC body to mcp-service over gRPC and maps its frames to HTTP (JSON or SSE).
//! Relays the OAuth paths to oauth-service. `--standalone` runs every component in this process.
//!
//! ## Layout
//! - [`config`]: the typed configuration.
//! - [`app`]: routes, the CORS settings and the `/mcp` handler.
//! - [`auth`]: the protected resource: bearer JWTs checked locally against the JWKS.
//! - [`limits`]: rate limits per client address and per caller.
//! - [`client_addr`]: the client's address behind trusted proxies (`X-Forwarded-For`).
//! - [`headers`]: pure checks over headers (`Host`, `Origin`, `Accept`, MCP routing headers).
//! - [`era`]: the HTTP era rule.
//! - [`forward`]: the gRPC call and the mapping of frames to HTTP.
//! - [`front`]: every request's first stop: its request id, and CORS.
//! - [`cache`]: modern results anyone may be given, reused without a hop.
//! - [`follow`]: gateway-edge's knowledge of live legacy sessions, from every replica's ends.
//! - [`oauth_proxy`]: relaying `/oauth/*` and the authorisation server metadata.
//! - [`observe`]: a span and metrics per request; `/metrics`.
//! - [`standalone`]: all four components in one process, gRPC calls made in process.
//! - [`entry`]: the `main` of the `gateway` and `gateway-edge` binaries.

pub mod app;
pub mod auth;
pub mod cache;
pub mod client_addr;
pub mod config;
pub mod entry;
pub mod era;
pub mod follow;
pub mod forward;
pub mod front;
pub mod headers;
pub mod limits;
pub mod oauth_proxy;
pub mod observe;
pub mod standalone;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mcp_proto::mcp::mcp_service_client::McpServiceClient;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use config::Config;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("{0}")]
    Config(String),
    #[error("HTTP server failed: {0}")]
    Serve(std::io::Error),
    #[error(transparent)]
    Registry(#[from] registry_service::Error),
    #[error(transparent)]
    Mcp(#[from] mcp_service::StartError),
    #[error(transparent)]
    OAuth(#[from] oauth_service::Error),
}

/// Bind the configured address and serve until `shutdown`.
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    let listener =
        TcpListener::bind(config.listen).await.map_err(|source| Error::Bind { addr: config.listen, source })?;
    serve(listener, config, shutdown).await
}

/// Serve HTTP on a bound listener until `shutdown`, then drain for up to the grace period.
pub async fn serve(listener: TcpListener, config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    serve_with(listener, config, None, shutdown).await
}

/// mcp-service in this process (standalone mode): its gRPC service called in process, and its
/// legacy sessions.
pub struct Embedded {
    pub channel: mcp_proto::transport::GrpcChannel,
    pub sessions: Arc<dyn app::LegacySessions>,
}

/// [`serve`], calling mcp-service through `embedded` when given (standalone mode: in process)
/// instead of the configured URL (still used for its health).
pub async fn serve_with(
    listener: TcpListener,
    config: Config,
    embedded: Option<Embedded>,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let addr = listener.local_addr().map_err(|source| Error::Bind { addr: config.listen, source })?;
    if let Some(token) = &config.service_token {
        mcp_proto::trust::set_outgoing(token).map_err(Error::Config)?;
    }
    let mcp_url = config.mcp_service.clone().ok_or_else(|| Error::Config("mcp_service: not set".into()))?;
    let oauth_url = config.oauth_service.clone().ok_or_else(|| Error::Config("oauth_service: not set".into()))?;
    let target = mcp_proto::balance::Target::parse(&mcp_url).map_err(|e| Error::Config(format!("mcp_service: {e}")))?;
    let (channel, replicas) =
        mcp_proto::balance::connect_each("mcp-service", &target, mcp_proto::link::Settings::default())
            .map_err(|e| Error::Config(format!("mcp_service: {e}")))?;
    let auth = if config.auth == "off" {
        None
    } else {
        let base = config.public_base(addr);
        let issuer = config.issuer.as_ref().map_or(base.clone(), |u| u.as_str().trim_end_matches('/').to_owned());
        let jwks = config.oauth().then(|| format!("{}/oauth/jwks", oauth_url.trim_end_matches('/')));
        let mut auth = auth::Auth::new(
            &issuer,
            &format!("{base}/mcp"),
            jwks.as_deref(),
            config.scopes.clone(),
            config.api_tokens.clone(),
        )
        .map_err(Error::Config)?;
        auth.leeway_secs = config.clock_skew_secs;
        if config.oauth() && config.token_validation == "introspect" {
            let (Some(id), Some(secret)) = (&config.introspection_client_id, &config.introspection_client_secret)
            else {
                return Err(Error::Config("introspection needs a client id and secret".into()));
            };
            let url = format!("{}/oauth/introspect", oauth_url.trim_end_matches('/'));
            auth.introspection = Some(auth::Introspection {
                url: url.parse().map_err(|e| Error::Config(format!("introspection url: {e}")))?,
                authorization: auth::basic(id, secret).map_err(Error::Config)?,
            });
        }
        Some(auth)
    };
    let (mcp_channel, sessions) = match embedded {
        Some(Embedded { channel, sessions }) => (channel, Some(sessions)),
        // Following every replica's session ends, to answer live sessions' lists.
        None if config.result_cache_bytes > 0 => {
            let follower = Arc::new(follow::SessionFollower::default());
            tokio::spawn(follower.clone().follow(replicas, shutdown.clone()));
            (channel.clone(), Some(follower as Arc<dyn app::LegacySessions>))
        }
        None => (channel.clone(), None),
    };
    let state = Arc::new(app::Gateway {
        auth,
        mcp: McpServiceClient::new(mcp_channel.clone()).max_decoding_message_size(mcp_proto::MAX_MESSAGE_BYTES),
        mcp_channel,
        health: tonic_health::pb::health_client::HealthClient::new(channel),
        oauth: oauth_proxy::OAuthProxy::new(&oauth_url).map_err(Error::Config)?,
        policy: config.origin_policy(addr),
        limits: limits::Limits::new(config.rate_limit_per_ip, config.rate_limit_per_client)
            .with_stream_cap(config.max_streams_per_client),
        body_timeout: Duration::from_secs(config.body_timeout_secs.max(1)),
        max_body_bytes: config.max_body_bytes,
        draining: AtomicBool::new(false),
        cache: cache::ResultCache::new(config.result_cache_bytes),
        sessions,
    });
    let follower = state.clone();
    let stop_following = shutdown.clone();
    tokio::spawn(async move { follower.cache.follow(follower.mcp.clone(), stop_following).await });
    let sweeper = state.clone();
    let stop_sweeping = shutdown.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        loop {
            tokio::select! {
                _ = stop_sweeping.cancelled() => return,
                _ = tick.tick() => sweeper.limits.forget_idle(),
            }
        }
    });
    let proxies = client_addr::TrustedProxies::parse(&config.trusted_proxies).map_err(Error::Config)?;
    let checks = Arc::new(EdgeChecks { max_header_bytes: config.max_header_bytes, proxies });
    // Around the whole router, built once as one concrete type (see `app::router`): every
    // request gets an id (kept if the client sent one, echoed to it), and CORS answers
    // preflights before anything else runs.
    let app = front::Front::new(app::cors(state.policy.clone()), Edge { checks, router: app::router(state.clone()) });
    tracing::info!(service = "gateway", %addr, endpoint = %format!("http://{addr}/mcp"), "listening");

    let drain = state.clone();
    let stop = shutdown.clone();
    let server =
        axum::serve(mcp_proto::socket::no_delay(listener), Connections(app)).with_graceful_shutdown(async move {
            stop.cancelled().await;
            drain.draining.store(true, Ordering::SeqCst);
        });
    let grace = Duration::from_secs(config.shutdown_grace_secs);
    tokio::select! {
        outcome = server => outcome.map_err(Error::Serve)?,
        _ = async { shutdown.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(grace_secs = config.shutdown_grace_secs, "drain deadline passed; closing open requests");
        }
    }
    tracing::info!(service = "gateway", "stopped");
    Ok(())
}

/// Makes each accepted connection its [`PerConnection`] handle on the stack.
struct Connections<S>(S);

impl<S: Clone> tower::Service<axum::serve::IncomingStream<'_, Listener>> for Connections<S> {
    type Response = PerConnection<S>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, stream: axum::serve::IncomingStream<'_, Listener>) -> Self::Future {
        let stack = Arc::new(std::sync::Mutex::new(self.0.clone()));
        std::future::ready(Ok(PerConnection { stack, peer: *stream.remote_addr() }))
    }
}

/// The listener `serve_with` accepts on (`TCP_NODELAY` set on each connection).
type Listener = axum::serve::TapIo<TcpListener, fn(&mut tokio::net::TcpStream)>;

/// One connection's handle on the stack, giving each request the peer's address
/// (`ConnectInfo`). hyper-util clones the service it serves a connection with for every request,
/// and the stack's clone is dear: [`front::Front`] holds tower-http's CORS configuration (a list
/// allocated, several reference counts moved on a copy) and two handles on `Edge`; a copy per
/// request was about 1 200 instructions. This handle's clone moves one reference count: the connection has
/// a copy of the stack of its own, behind a lock held only while the stack makes a request's
/// future (an HTTP/1.1 connection's requests are called one after another; only the streams of
/// one HTTP/2 connection can meet at it).
#[derive(Clone)]
struct PerConnection<S> {
    stack: Arc<std::sync::Mutex<S>>,
    peer: SocketAddr,
}

impl<S> tower::Service<axum::extract::Request> for PerConnection<S>
where
    S: tower::Service<axum::extract::Request, Response = axum::response::Response, Error = std::convert::Infallible>,
{
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = S::Future;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        // The stack is always ready: `Front` answers ready (`Edge` always is).
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: axum::extract::Request) -> Self::Future {
        req.extensions_mut().insert(axum::extract::ConnectInfo(self.peer));
        // The stack keeps no state a call changes: one that panicked left nothing half-done.
        let mut stack = self.stack.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        stack.call(req)
    }
}

/// Every request, before the routes: the header guard (a refusal is answered at once), the
/// client's address behind trusted proxies, then the request's log (and span) and metrics
/// around the router's answer. A service of its own (not `axum::middleware::from_fn`, which
/// boxes the rest of the stack, its call and its answer again for each request): one box
/// per request.
#[derive(Clone)]
struct Edge {
    checks: Arc<EdgeChecks>,
    router: axum::Router,
}

/// What [`Edge`] checks with.
struct EdgeChecks {
    max_header_bytes: usize,
    proxies: client_addr::TrustedProxies,
}

impl tower::Service<axum::extract::Request> for Edge {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = futures_util::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        // Always ready: a router answers every call.
        tower::Service::<axum::extract::Request>::poll_ready(&mut self.router, cx)
    }

    fn call(&mut self, mut req: axum::extract::Request) -> Self::Future {
        if let Some(refused) = limits::header_refusal(&req, self.checks.max_header_bytes) {
            return Box::pin(std::future::ready(Ok(refused)));
        }
        client_addr::apply(&self.checks.proxies, &mut req);
        let (observed, log) = observe::Observed::start(&req);
        // The router's call makes the request's work (axum's handlers start when polled, in
        // the request's log).
        let answer = log.in_span(|| tower::Service::call(&mut self.router, req));
        Box::pin(log.scope(async move {
            let Ok(resp) = answer.await;
            Ok(observed.finish(resp))
        }))
    }
}
