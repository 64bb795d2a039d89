//! `/.well-known/oauth-authorization-server` and `/oauth/*` are served by oauth-service; the
//! gateway relays them so that clients find the authorisation server on the MCP origin.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::response::{IntoResponse, Response};
use http::{StatusCode, Uri, header};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::app::Gateway;

pub struct OAuthProxy {
    client: Client<HttpConnector, Body>,
    base: Uri,
}

impl OAuthProxy {
    pub fn new(base: &str) -> Result<Self, String> {
        let base: Uri = base.parse().map_err(|e| format!("oauth_service: invalid URL `{base}`: {e}"))?;
        if base.scheme_str() != Some("http") || base.authority().is_none() {
            return Err(format!("oauth_service: `{base}` must be an http://host:port URL"));
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        connector.set_nodelay(true);
        Ok(Self { client: Client::builder(TokioExecutor::new()).build(connector), base })
    }
}

/// Headers that describe one hop, not the message.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

pub async fn proxy(
    State(gw): State<Arc<Gateway>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut req: Request,
) -> Response {
    let proxy = &gw.oauth;
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let uri = format!("{}{}", proxy.base.to_string().trim_end_matches('/'), path);
    match uri.parse() {
        Ok(u) => *req.uri_mut() = u,
        Err(_) => return StatusCode::BAD_REQUEST.into_response(),
    }
    for h in HOP_BY_HOP {
        req.headers_mut().remove(h);
    }
    // The client's address, for oauth-service's per-client limits: the peer (or, behind a
    // trusted proxy, the address it forwarded: see `client_addr`) replaces whatever the
    // client claimed.
    req.headers_mut().remove("x-forwarded-for");
    if let Ok(v) = http::HeaderValue::from_str(&peer.ip().to_string()) {
        req.headers_mut().insert("x-forwarded-for", v);
    }
    match tokio::time::timeout(Duration::from_secs(30), proxy.client.request(req)).await {
        Ok(Ok(resp)) => {
            let (mut parts, body) = resp.into_parts();
            for h in HOP_BY_HOP {
                parts.headers.remove(h);
            }
            Response::from_parts(parts, Body::new(body))
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "oauth-service unreachable");
            unavailable()
        }
        Err(_) => {
            tracing::warn!("oauth-service did not answer in time");
            unavailable()
        }
    }
}

/// The authorisation server cannot be reached: 503 with a retry hint (RFC 6749 §4.1.2.1's
/// `temporarily_unavailable`); tokens already issued keep working at `/mcp`.
fn unavailable() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::CONTENT_TYPE, "application/json"), (header::RETRY_AFTER, "5"), (header::CACHE_CONTROL, "no-store")],
        r#"{"error":"temporarily_unavailable","error_description":"the authorisation server is unavailable; retry shortly"}"#,
    )
        .into_response()
}
