//! The HTTP stack: routes, the CORS settings (applied by [`crate::front`]), and the `/mcp`
//! handler that runs the edge checks in the specification's order before forwarding.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use mcp_proto::body::{BodyError, read_whole};
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use http::{HeaderMap, HeaderName, Method, StatusCode, header};
use mcp_proto::envelope::{self, Body, EnvelopeError};
use mcp_proto::mcp::{self as pb, mcp_service_client::McpServiceClient};
use mcp_proto::transport::GrpcChannel;
use mcp_proto::vocab::{Era, ErrorCode};
use tonic_health::pb::health_client::HealthClient;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::era;
use crate::forward::{self, rpc_error};
use crate::headers::{self, OriginPolicy, Refusal};
use crate::oauth_proxy::OAuthProxy;

/// Shared state of the HTTP edge.
pub struct Gateway {
    /// Present when bearer tokens are required.
    pub auth: Option<crate::auth::Auth>,
    /// mcp-service's sessions' streams and ends, and its catalog's changes.
    pub mcp: McpServiceClient<GrpcChannel>,
    /// The same connection, for `Handle` (called without the generated client: [`mcp_proto::call`]).
    pub mcp_channel: GrpcChannel,
    pub health: HealthClient<GrpcChannel>,
    pub oauth: OAuthProxy,
    pub policy: OriginPolicy,
    pub limits: crate::limits::Limits,
    /// How long a client may take to send a request body (slow clients are cut off: 408).
    pub body_timeout: Duration,
    /// The largest request body accepted (413 above; refused before reading when announced).
    pub max_body_bytes: usize,
    pub draining: AtomicBool,
    /// Modern results anyone may be given, reused for their `ttlMs`.
    pub cache: crate::cache::ResultCache,
    /// Where a legacy session's liveness is known without a hop (standalone: mcp-service in
    /// this process); then lists asked in live sessions are reused too.
    pub sessions: Option<Arc<dyn LegacySessions>>,
}

/// Knows, without a hop, whether a legacy session is live and which revision it negotiated:
/// what mcp-service would find for a request of it (sealed by it, not expired, not ended).
/// Only a component that learns of a session's end before that end is answered may say so:
/// mcp-service in the same process (standalone), or gateway-edge following every replica's
/// session ends ([`crate::follow`]), which learns sessions from mcp-service's replies.
pub trait LegacySessions: Send + Sync {
    fn live_revision(&self, session_id: &str) -> Option<&'static str>;

    /// A mark taken before a request of a session this does not know crosses (`None`: what
    /// crosses now is not to be learnt).
    fn mark(&self) -> Option<u64> {
        None
    }

    /// mcp-service answered a list of session `session_id` as live, of `revision`, its id
    /// expiring at `expires` (Unix seconds); `mark` was taken before the request crossed.
    fn learn(&self, _session_id: &str, _revision: &str, _expires: u64, _mark: Option<u64>) {}
}

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// CORS for browser clients: the same origins the DNS-rebinding check accepts.
pub fn cors(policy: OriginPolicy) -> CorsLayer {
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin, _| origin.to_str().is_ok_and(|o| policy.origin_allowed(o))))
        .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
        .allow_headers([
            header::CONTENT_TYPE,
            header::ACCEPT,
            header::AUTHORIZATION,
            HeaderName::from_static("mcp-protocol-version"),
            HeaderName::from_static("mcp-method"),
            HeaderName::from_static("mcp-name"),
            HeaderName::from_static("mcp-session-id"),
            HeaderName::from_static("last-event-id"),
            REQUEST_ID,
        ])
        .expose_headers([HeaderName::from_static("mcp-session-id"), header::WWW_AUTHENTICATE])
        .max_age(Duration::from_secs(3600))
}

/// The routes, without the layers every request goes through (the crate's `serve_with` puts
/// those around the whole router, once: layers added with `Router::layer` wrap each route in a
/// box of its own, and each request cloned that nest of boxes several times).
pub fn router(state: Arc<Gateway>) -> Router {
    // Oversize bodies are refused with 413 by `mcp_post` before they are read whole (a layer
    // here would box the route again).
    let mcp = Router::new().route("/mcp", post(mcp_post).get(mcp_get).delete(mcp_delete));
    let resource_metadata = Router::new()
        .route("/.well-known/oauth-protected-resource", get(protected_resource))
        .route("/.well-known/oauth-protected-resource/{*rest}", get(protected_resource));
    let oauth = Router::new()
        .route("/.well-known/oauth-authorization-server", any(crate::oauth_proxy::proxy))
        .route("/.well-known/oauth-authorization-server/{*rest}", any(crate::oauth_proxy::proxy))
        .route("/oauth/{*rest}", any(crate::oauth_proxy::proxy));
    Router::new()
        .merge(mcp)
        .merge(oauth)
        .merge(resource_metadata)
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(crate::observe::metrics))
        .with_state(state)
}

/// RFC 9728 metadata (404 when authentication is off).
async fn protected_resource(State(gw): State<Arc<Gateway>>) -> Response {
    match &gw.auth {
        Some(auth) if auth.oauth() => axum::Json(auth.metadata()).into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The caller, when authentication is on (`Err` is the 401 to send), within the rate limits
/// per address and per caller (`Err` is the 429).
async fn authenticate(
    gw: &Gateway,
    peer: SocketAddr,
    headers: &HeaderMap,
) -> Result<Option<Arc<pb::Principal>>, Response> {
    gw.limits.check_ip(peer.ip()).map_err(IntoResponse::into_response)?;
    let principal = match &gw.auth {
        None => None,
        // Boxed, as the call in `mcp_post` is: its state is spent only when sign-in is on.
        Some(auth) => Some(Box::pin(auth.principal(headers)).await.map_err(|denied| auth.challenge(&denied))?),
    };
    if let Some(p) = &principal {
        gw.limits.check_client(&p.subject).map_err(IntoResponse::into_response)?;
    }
    Ok(principal)
}

async fn method_not_allowed() -> Response {
    (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "POST")]).into_response()
}

/// `GET /mcp`: a legacy session's stream of server-initiated messages. Without a session
/// there is no such stream (405, as a modern-only server answers).
async fn mcp_get(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    made_id: Option<axum::Extension<crate::front::MadeRequestId>>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = gw.policy.check(&headers) {
        return refusal(r, None);
    }
    let principal = match authenticate(&gw, peer, &headers).await {
        Ok(p) => p,
        Err(challenge) => return challenge,
    };
    let session_id = header_str(&headers, &headers::SESSION_ID);
    if session_id.is_empty() {
        return method_not_allowed().await;
    }
    match headers::accepts(&headers) {
        Ok(a) if a.stream => {}
        _ => return refusal(Refusal::NotAcceptable, None),
    }
    let stream = match gw.limits.admit_stream(principal.as_deref(), peer.ip(), true) {
        Ok(key) => key,
        Err(refused) => return refused.into_response(),
    };
    let principal = principal.map(Arc::unwrap_or_clone);
    let request_id = request_id(&headers, made_id.as_deref());
    let request = pb::ListenRequest { session_id, principal, request_id };
    gw.limits.hold_stream(stream, forward::listen(gw.mcp.clone(), request).await)
}

/// `DELETE /mcp`: the client ends its legacy session.
async fn mcp_delete(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = gw.policy.check(&headers) {
        return refusal(r, None);
    }
    let principal = match authenticate(&gw, peer, &headers).await {
        Ok(p) => p,
        Err(challenge) => return challenge,
    };
    let session_id = header_str(&headers, &headers::SESSION_ID);
    if session_id.is_empty() {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            ErrorCode::INVALID_REQUEST,
            "Bad Request: Mcp-Session-Id required",
        );
    }
    let principal = principal.map(Arc::unwrap_or_clone);
    let mut request = forward::traced(pb::EndSessionRequest { session_id: session_id.clone(), principal });
    mcp_proto::balance::set_affinity(&mut request, session_id);
    match gw.mcp.clone().end_session(request).await {
        Ok(r) if r.get_ref().ended => StatusCode::NO_CONTENT.into_response(),
        Ok(_) => rpc_error(StatusCode::NOT_FOUND, None, ErrorCode(-32001), "Session not found"),
        Err(status) => {
            tracing::warn!(error = %status.message(), "mcp-service call failed");
            rpc_error(StatusCode::BAD_GATEWAY, None, ErrorCode::INTERNAL_ERROR, "Internal error: upstream unavailable")
        }
    }
}

fn refusal(r: Refusal, id: Option<&str>) -> Response {
    match r {
        Refusal::Forbidden(m) => {
            rpc_error(StatusCode::FORBIDDEN, None, ErrorCode::INVALID_REQUEST, &format!("Forbidden: {m}"))
        }
        Refusal::UnsupportedMediaType => rpc_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            ErrorCode::INVALID_REQUEST,
            "Unsupported Media Type: Content-Type must be application/json",
        ),
        Refusal::NotAcceptable => rpc_error(
            StatusCode::NOT_ACCEPTABLE,
            None,
            ErrorCode::INVALID_REQUEST,
            "Not Acceptable: Accept must allow application/json or text/event-stream",
        ),
        Refusal::HeaderMismatch(m) => rpc_error(StatusCode::BAD_REQUEST, id, ErrorCode::HEADER_MISMATCH, &m),
    }
}

/// `POST /mcp`, checked in this order: a body announced over the limit (413) → Host/Origin
/// (403) → Content-Type (415) → Accept (406) → the body, read within the size (413) and time
/// (408) limits → JSON-RPC envelope (-32700/-32600, 400) → era → for a
/// modern request with complete `_meta`, the routing headers (-32020, 400) → forward. The
/// protocol engine then checks `_meta`, version, method and capabilities.
async fn mcp_post(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    // The request taken apart (the `HeaderMap` extractor would copy its headers).
    let (http::request::Parts { headers, extensions, .. }, body) = req.into_parts();
    // A length announced over the limit (hyper's size hint is the parsed `Content-Length`).
    if axum::body::HttpBody::size_hint(&body).lower() > gw.max_body_bytes as u64 {
        return payload_too_large();
    }
    if let Err(r) = gw.policy.check(&headers) {
        return refusal(r, None);
    }
    let principal = match authenticate(&gw, peer, &headers).await {
        Ok(p) => p,
        Err(challenge) => return challenge,
    };
    if let Err(r) = headers::check_content_type(&headers) {
        return refusal(r, None);
    }
    let accepts = match headers::accepts(&headers) {
        Ok(a) => a,
        Err(r) => return refusal(r, None),
    };
    let stream = match gw.limits.admit_stream(principal.as_deref(), peer.ip(), accepts.stream) {
        Ok(key) => key,
        Err(refused) => return refused.into_response(),
    };
    let body = match read_body(body, gw.body_timeout, gw.max_body_bytes).await {
        Ok(b) => b,
        Err(resp) => return resp,
    };
    let header_version = match headers::protocol_version(&headers) {
        Ok(v) => v,
        Err(r) => return refusal(r, None),
    };
    let mut cache_key = None;
    // A legacy list of a session not known to be live: the mark to learn it by.
    let mut learning = None;
    let (era, id, method, outline) = match envelope::parse_body(&body) {
        Err(EnvelopeError::Parse(m)) => {
            return rpc_error(StatusCode::BAD_REQUEST, None, ErrorCode::PARSE_ERROR, &format!("Parse error: {m}"));
        }
        Err(EnvelopeError::Invalid { id, reason }) => {
            return rpc_error(
                StatusCode::BAD_REQUEST,
                id.as_deref(),
                ErrorCode::INVALID_REQUEST,
                &format!("Invalid request: {reason}"),
            );
        }
        Ok(Body::Batch(_)) => {
            let modern = header_version.as_deref().is_some_and(|v| !mcp_proto::vocab::is_legacy_revision(v));
            (if modern { Era::Modern } else { Era::Legacy }, None, "batch", None)
        }
        Ok(Body::Single(env)) => {
            let era = era::classify(&env, header_version.as_deref());
            let id = env.id_json().map(str::to_owned);
            if era == Era::Modern
                && env.missing_modern_meta().is_none()
                && let Err(r) = headers::check_modern_headers(&headers, &env, header_version.as_deref())
            {
                return refusal(r, id.as_deref());
            }
            if env.kind == envelope::Kind::Request && accepts.json {
                let (method, params) = (env.method.as_ref(), env.params);
                let version = header_version.as_deref();
                cache_key = match era {
                    Era::Modern => gw.cache.key(method, version, params),
                    // A list asked in a session known here to be live: its page is its
                    // revision's (a session that is not is left for mcp-service to refuse, or
                    // to answer as live: then it is learnt).
                    Era::Legacy if gw.cache.session_list(method) => {
                        let session_id = headers.get(&headers::SESSION_ID).and_then(crate::headers::text);
                        match (gw.sessions.as_deref(), session_id) {
                            (Some(sessions), Some(session_id)) => match sessions.live_revision(session_id) {
                                Some(revision) => Some(gw.cache.session_list_key(method, revision, version, params)),
                                None => {
                                    learning = Some(Learning {
                                        mark: sessions.mark(),
                                        session_id: session_id.to_owned(),
                                        version: version.map(str::to_owned),
                                        params: params.map(str::to_owned),
                                    });
                                    None
                                }
                            },
                            _ => None,
                        }
                    }
                    Era::Legacy => gw.cache.legacy_key(method, version, params),
                };
            }
            // mcp-service reads the message's parts from where this parse found them.
            (era, id, mcp_proto::vocab::method_label(env.method.as_ref()), env.outline(&body))
        }
    };
    let labels = crate::observe::McpLabels { method, era: if era == Era::Modern { "modern" } else { "legacy" } };
    crate::observe::record_mcp(&labels, principal.as_ref().map(|p| p.subject.as_str()));
    // A fresh result is the answer; a named one is sent back for mcp-service to confirm.
    let mut named = None;
    // A read with nothing held goes first or waits for the one that did (`cache` module).
    let mut going_first = None;
    if let (Some(key), Some(id)) = (&cache_key, &id) {
        let mut held = gw.cache.held(key);
        if held.is_none() && method == "resources/read" {
            match gw.cache.turn(key) {
                crate::cache::Turn::Lead(lead) => {
                    going_first = Some(lead);
                    // A first read that ended between the look and the turn kept its answer.
                    held = gw.cache.held(key);
                }
                crate::cache::Turn::Wait(first) => {
                    crate::cache::ResultCache::wait(first).await;
                    held = gw.cache.held(key);
                }
                crate::cache::Turn::Alone => {}
            }
        }
        match held {
            Some(crate::cache::Held::Fresh(tail)) => {
                cache_outcome("hit").increment(1);
                return forward::json_response(StatusCode::OK, crate::cache::reply_body(id, tail));
            }
            Some(crate::cache::Held::Named { tag, tail }) => named = Some((tag, tail)),
            None => {}
        }
    }
    let request = pb::McpRequest {
        body: body.clone(),
        era: pb::Era::from(era) as i32,
        header_version: header_version.map(Cow::into_owned).unwrap_or_default(),
        principal: principal.map(Arc::unwrap_or_clone),
        transport: pb::Transport::StreamableHttp as i32,
        session_id: header_str(&headers, &headers::SESSION_ID),
        request_id: request_id(&headers, extensions.get()),
        accepts_stream: accepts.stream,
        param_headers: param_headers(&headers),
        if_tag: named.as_ref().map(|(tag, _)| tag.clone()).unwrap_or_default(),
        outline,
    };
    // Boxed: the call's state (about 2.7 KB) would otherwise make this handler's future, made
    // and moved whole for every request (a cached answer's too), that much larger.
    let mut resp = Box::pin(forward::forward(gw.mcp_channel.clone(), request, accepts, id.clone())).await;
    resp = gw.limits.hold_stream(stream, resp);
    if let (Some(learning), Some(sessions)) = (learning, &gw.sessions)
        && let Some(reusable) = resp.extensions().get::<crate::cache::Reusable>()
        && !reusable.session_revision.is_empty()
    {
        // mcp-service answered the session's list as live: the session is known from now on,
        // and the page is kept as its revision's.
        let revision = &reusable.session_revision;
        sessions.learn(&learning.session_id, revision, reusable.session_expires, learning.mark);
        let (version, params) = (learning.version.as_deref(), learning.params.as_deref());
        cache_key = Some(gw.cache.session_list_key(method, revision, version, params));
    }
    if let (Some(key), Some(id)) = (cache_key, &id) {
        match (resp.extensions_mut().remove::<crate::cache::Reusable>(), named) {
            (Some(reusable), Some((tag, tail))) if reusable.unchanged && reusable.tag == tag => {
                // The result held stands: it is the answer.
                cache_outcome("confirmed").increment(1);
                gw.cache.renew(&key, &reusable);
                *resp.body_mut() = crate::cache::reply_body(id, tail);
            }
            (Some(reusable), _) if reusable.unchanged => {
                tracing::warn!("mcp-service confirmed a result this request did not hold");
                resp = rpc_error(
                    StatusCode::BAD_GATEWAY,
                    Some(id),
                    ErrorCode::INTERNAL_ERROR,
                    "Internal error: upstream answered without a result",
                );
            }
            (reusable, _) => {
                cache_outcome("miss").increment(1);
                if let Some(reusable) = reusable {
                    gw.cache.keep(key, id, &reusable);
                }
            }
        }
    }
    // Kept (or not): the reads waiting for this one go on.
    drop(going_first);
    if let (Some(auth), Some(forward::RequiredScopes(scopes))) =
        (&gw.auth, resp.extensions().get::<forward::RequiredScopes>().cloned())
        && let Some(v) = auth.insufficient_scope(&scopes)
    {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    resp
}

/// A legacy list of a session not known to be live, crossing to mcp-service: what its page is
/// kept by if mcp-service answers it as live.
struct Learning {
    mark: Option<u64>,
    session_id: String,
    version: Option<String>,
    params: Option<String>,
}

/// The result cache's counter of hits or misses.
fn cache_outcome(outcome: &'static str) -> metrics::Counter {
    static COUNTERS: std::sync::LazyLock<mcp_proto::telemetry::Handles<&'static str, metrics::Counter>> =
        std::sync::LazyLock::new(Default::default);
    COUNTERS.get(outcome, |&outcome| metrics::counter!("gateway_result_cache_total", "outcome" => outcome))
}

fn payload_too_large() -> Response {
    rpc_error(StatusCode::PAYLOAD_TOO_LARGE, None, ErrorCode::INVALID_REQUEST, "Payload too large")
}

/// The whole body, within the size limit (413) and the time limit (408).
async fn read_body(body: axum::body::Body, timeout: Duration, limit: usize) -> Result<Bytes, Response> {
    read_whole(body, limit, Some(timeout)).await.map_err(|e| match e {
        BodyError::TooLarge => payload_too_large(),
        BodyError::BrokeOff => {
            rpc_error(StatusCode::BAD_REQUEST, None, ErrorCode::INVALID_REQUEST, "The request body broke off")
        }
        BodyError::Timeout => rpc_error(
            StatusCode::REQUEST_TIMEOUT,
            None,
            ErrorCode::INVALID_REQUEST,
            "Request timeout: the body did not arrive in time",
        ),
    })
}

/// `Mcp-Param-{Name}` headers, by lower-case name without the prefix.
fn param_headers(headers: &HeaderMap) -> std::collections::HashMap<String, String> {
    headers
        .iter()
        .filter_map(|(name, value)| {
            let param = name.as_str().strip_prefix(mcp_proto::vocab::header::PARAM_PREFIX)?;
            Some((param.to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        })
        .collect()
}

fn header_str(headers: &HeaderMap, name: &HeaderName) -> String {
    headers.get(name).and_then(crate::headers::text).unwrap_or_default().to_owned()
}

/// The request's id as text: the client's, else the one made for it (`front`).
fn request_id(headers: &HeaderMap, made: Option<&crate::front::MadeRequestId>) -> String {
    crate::front::request_id(headers, made).and_then(crate::headers::text).unwrap_or_default().to_owned()
}

/// Ready while not draining and while mcp-service reports itself serving.
async fn ready(State(gw): State<Arc<Gateway>>) -> (StatusCode, &'static str) {
    if gw.draining.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining");
    }
    let check = tonic_health::pb::HealthCheckRequest { service: "mcp.v1.McpService".into() };
    let serving = tokio::time::timeout(Duration::from_secs(2), gw.health.clone().check(check))
        .await
        .ok()
        .and_then(Result::ok)
        .is_some_and(|r| {
            r.into_inner().status == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        });
    if serving { (StatusCode::OK, "ready") } else { (StatusCode::SERVICE_UNAVAILABLE, "mcp-service not serving") }
}
