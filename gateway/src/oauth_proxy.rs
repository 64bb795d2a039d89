//! `/.well-known/oauth-authorization-server` and `/oauth/*` are served by oauth-service; the
//! gateway relays them so that clients find the authorisation server on the MCP origin.
//!
//! A request's body is read whole before it is relayed (OAuth's requests are small forms and
//! JSON documents: above [`MAX_BODY_BYTES`] the gateway answers 413 itself), and sent with its
//! length in one piece. A request that changes nothing (`GET`, `HEAD`: the metadata, the keys,
//! the sign-in page) is sent again, once, when the connection closed before its answer came;
//! a `POST` never is, since oauth-service may have acted on it (a code or a refresh token sent
//! twice counts as a replay and revokes the grant).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{StatusCode, Uri, header};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::app::Gateway;
use mcp_proto::body::{BodyError, read_whole};
use mcp_proto::outbound::error_chain;

/// The largest request body relayed: the most oauth-service takes.
pub use oauth_service::MAX_BODY_BYTES;

/// How long oauth-service has to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

pub struct OAuthProxy {
    client: Client<HttpConnector, Full<Bytes>>,
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

    /// Send `parts` with `body` to oauth-service; a request that changes nothing once more
    /// when the connection closed before its answer came.
    async fn send(
        &self,
        parts: &http::request::Parts,
        body: &Bytes,
    ) -> Result<http::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error> {
        let request = || {
            // HTTP/1.1 to oauth-service whatever the client spoke (this client speaks no other).
            let mut req = http::Request::new(Full::new(body.clone()));
            *req.method_mut() = parts.method.clone();
            *req.uri_mut() = parts.uri.clone();
            *req.headers_mut() = parts.headers.clone();
            req
        };
        match self.client.request(request()).await {
            Err(e) if parts.method.is_safe() && closed_before_answer(&e) => {
                tracing::debug!(error = %error_chain(&e), "oauth-service closed the connection before answering; sending again");
                self.client.request(request()).await
            }
            answer => answer,
        }
    }
}

/// The connection closed before the answer came (hyper-util already sends again by itself a
/// request it never wrote to a reused connection).
fn closed_before_answer(e: &hyper_util::client::legacy::Error) -> bool {
    std::iter::successors(Some(e as &dyn std::error::Error), |e| e.source())
        .filter_map(|e| e.downcast_ref::<hyper::Error>())
        .any(hyper::Error::is_incomplete_message)
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
    req: Request,
) -> Response {
    let proxy = &gw.oauth;
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let uri = format!("{}{}", proxy.base.to_string().trim_end_matches('/'), path);
    match uri.parse() {
        Ok(u) => parts.uri = u,
        Err(_) => return StatusCode::BAD_REQUEST.into_response(),
    }
    for h in HOP_BY_HOP {
        parts.headers.remove(h);
    }
    // The body is sent whole with its length (whatever framing the client used).
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::EXPECT);
    // The client's address, for oauth-service's per-client limits: the peer (or, behind a
    // trusted proxy, the address it forwarded: see `client_addr`) replaces whatever the
    // client claimed.
    parts.headers.remove("x-forwarded-for");
    if let Ok(v) = http::HeaderValue::from_str(&peer.ip().to_string()) {
        parts.headers.insert("x-forwarded-for", v);
    }
    let body = match read_body(body, gw.body_timeout).await {
        Ok(body) => body,
        Err(refusal) => return refusal,
    };
    match tokio::time::timeout(ANSWER_TIMEOUT, proxy.send(&parts, &body)).await {
        Ok(Ok(resp)) => {
            let (mut parts, body) = resp.into_parts();
            for h in HOP_BY_HOP {
                parts.headers.remove(h);
            }
            Response::from_parts(parts, Body::new(body))
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %error_chain(&e), "oauth-service unreachable");
            unavailable()
        }
        Err(_) => {
            tracing::warn!("oauth-service did not answer in time");
            unavailable()
        }
    }
}

/// The request's body, whole, or the OAuth error that refuses it (see [`read_whole`]).
async fn read_body(body: Body, timeout: Duration) -> Result<Bytes, Response> {
    read_whole(body, MAX_BODY_BYTES, Some(timeout)).await.map_err(|e| match e {
        BodyError::TooLarge => too_large(),
        BodyError::BrokeOff => refusal(StatusCode::BAD_REQUEST, "the request body broke off"),
        BodyError::Timeout => refusal(StatusCode::REQUEST_TIMEOUT, "the request body did not arrive in time"),
    })
}

fn too_large() -> Response {
    refusal(StatusCode::PAYLOAD_TOO_LARGE, &format!("the request body is larger than {MAX_BODY_BYTES} bytes"))
}

/// An OAuth error document (RFC 6749 §5.2's shape) for a request the gateway refuses itself.
fn refusal(status: StatusCode, description: &str) -> Response {
    let body = serde_json::json!({ "error": "invalid_request", "error_description": description });
    (status, [(header::CACHE_CONTROL, "no-store")], axum::Json(body)).into_response()
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// Read one request's head (these requests have no body).
    async fn read_head(stream: &mut tokio::net::TcpStream) -> bool {
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        true
    }

    /// A server that counts its connections and, on each, answers the first request and keeps
    /// the connection open when `answer_first`, then closes it when the next request arrives,
    /// without an answer (as a server does that closed an idle connection as the request left).
    async fn closing_server(answer_first: bool) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = connections.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    if answer_first && read_head(&mut stream).await {
                        let answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        let _ = stream.write_all(answer.as_bytes()).await;
                    }
                    let _ = read_head(&mut stream).await;
                });
            }
        });
        (format!("http://{addr}"), connections)
    }

    fn get(uri: &str) -> http::request::Parts {
        http::Request::get(format!("{uri}/oauth/jwks")).body(()).expect("request").into_parts().0
    }

    #[tokio::test]
    async fn a_request_on_a_connection_closed_before_answering_is_sent_again() {
        let (base, connections) = closing_server(true).await;
        let proxy = OAuthProxy::new(&base).expect("proxy");
        for n in 1..=3 {
            let answer = proxy.send(&get(&base), &Bytes::new()).await.expect("answered");
            assert_eq!(answer.status(), 200);
            let body = http_body_util::BodyExt::collect(answer.into_body()).await.expect("body").to_bytes();
            assert_eq!(&body[..], b"ok");
            // Each answer after the first came on a new connection, after the pooled one closed.
            assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), n);
        }
    }

    #[tokio::test]
    async fn a_connection_that_closes_twice_is_unavailable_not_retried_forever() {
        // Every connection closes without an answer: one retry, then the error.
        let (base, connections) = closing_server(false).await;
        let proxy = OAuthProxy::new(&base).expect("proxy");
        let e = proxy.send(&get(&base), &Bytes::new()).await.expect_err("never answered");
        assert!(closed_before_answer(&e), "{}", error_chain(&e));
        assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_post_is_never_sent_twice() {
        // oauth-service may have acted on it: the error is the answer (503 for the client).
        let (base, connections) = closing_server(true).await;
        let proxy = OAuthProxy::new(&base).expect("proxy");
        let mut post = get(&base);
        post.method = http::Method::POST;
        let answer = proxy.send(&post, &Bytes::from_static(b"grant_type=x")).await.expect("answered");
        assert_eq!(answer.status(), 200);
        let _ = http_body_util::BodyExt::collect(answer.into_body()).await;
        let e = proxy.send(&post, &Bytes::from_static(b"grant_type=x")).await.expect_err("not answered");
        assert!(closed_before_answer(&e), "{}", error_chain(&e));
        assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 1, "not sent again");
    }

    #[tokio::test]
    async fn bodies_that_break_off_or_do_not_come_are_refused() {
        let broken =
            futures_util::stream::iter([Ok(Bytes::from_static(b"grant")), Err(std::io::Error::other("reset"))]);
        let refused = read_body(Body::from_stream(broken), Duration::from_secs(5)).await;
        assert_eq!(refused.expect_err("broke off").status(), StatusCode::BAD_REQUEST);
        let never = futures_util::stream::pending::<Result<Bytes, std::io::Error>>();
        let refused = read_body(Body::from_stream(never), Duration::from_millis(50)).await;
        assert_eq!(refused.expect_err("never came").status(), StatusCode::REQUEST_TIMEOUT);
    }

    #[tokio::test]
    async fn bodies_above_the_limit_are_refused_before_they_are_relayed() {
        let refused = read_body(Body::from(vec![b'x'; MAX_BODY_BYTES + 1]), Duration::from_secs(5)).await;
        assert_eq!(refused.expect_err("too large").status(), StatusCode::PAYLOAD_TOO_LARGE);
        let stream = futures_util::stream::iter([vec![b'x'; MAX_BODY_BYTES], vec![b'x']].map(Ok::<_, std::io::Error>));
        let refused = read_body(Body::from_stream(stream), Duration::from_secs(5)).await;
        assert_eq!(refused.expect_err("too large").status(), StatusCode::PAYLOAD_TOO_LARGE);
        let whole = read_body(Body::from(vec![b'x'; MAX_BODY_BYTES]), Duration::from_secs(5)).await;
        assert_eq!(whole.expect("at the limit").len(), MAX_BODY_BYTES);
    }
}
