//! One HTTP/1.1 keep-alive connection of the load generator (hyper's client connection, no
//! pool): send a request, read the whole answer, with a timeout on each.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::HeaderValue;
use hyper_util::rt::TokioIo;

use crate::mcp::{self, Answer, Call};

/// Where every server under test answers MCP (the references answer on any path).
pub const PATH: &str = "/mcp";

/// Where a server under test answers, and the bearer token it wants (when signing in is on).
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    pub authorization: Option<HeaderValue>,
}

pub struct Conn {
    sender: SendRequest<Full<Bytes>>,
    host: HeaderValue,
    authorization: Option<HeaderValue>,
    /// The legacy session, after `handshake`.
    session: Option<HeaderValue>,
}

impl Conn {
    pub async fn open(target: &Target, timeout: Duration) -> Result<Conn, String> {
        let addr = target.addr;
        let connect = async {
            let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
            let _ = stream.set_nodelay(true);
            let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| format!("HTTP handshake: {e}"))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            let host = HeaderValue::from_str(&addr.to_string()).map_err(|e| e.to_string())?;
            Ok(Conn { sender, host, authorization: target.authorization.clone(), session: None })
        };
        tokio::time::timeout(timeout, connect).await.map_err(|_| format!("connect: no answer in {timeout:?}"))?
    }

    /// Send `call` and read the whole answer. `Err` is a transport failure (the connection
    /// is unusable afterwards) or a timeout.
    pub async fn send(&mut self, call: &Call, timeout: Duration) -> Result<Answer, String> {
        let mut req = hyper::Request::post(PATH)
            .body(Full::new(call.body.clone()))
            .map_err(|e| format!("cannot build the request: {e}"))?;
        let headers = req.headers_mut();
        headers.extend(call.headers.clone());
        headers.insert(hyper::header::HOST, self.host.clone());
        if let Some(authorization) = &self.authorization {
            headers.insert(hyper::header::AUTHORIZATION, authorization.clone());
        }
        if let Some(session) = &self.session {
            headers.insert("mcp-session-id", session.clone());
        }
        let exchange = async {
            self.sender.ready().await.map_err(|e| format!("connection: {e}"))?;
            let resp = self.sender.send_request(req).await.map_err(|e| format!("request: {e}"))?;
            let (parts, body) = resp.into_parts();
            let body = body.collect().await.map_err(|e| format!("reading the answer: {e}"))?.to_bytes();
            Ok(Answer { status: parts.status, headers: parts.headers, body })
        };
        tokio::time::timeout(timeout, exchange).await.map_err(|_| format!("no answer in {timeout:?} (hang?)"))?
    }

    /// The legacy handshake: `initialize` (keeping the `Mcp-Session-Id` the server gives,
    /// if any) then `notifications/initialized`.
    pub async fn handshake(&mut self, timeout: Duration) -> Result<(), String> {
        let init = mcp::initialize();
        let answer = self.send(&init, timeout).await?;
        mcp::check(&init, &answer).map_err(|e| format!("initialize: {e}"))?;
        self.session = answer.headers.get("mcp-session-id").cloned();
        let note = mcp::initialized();
        let answer = self.send(&note, timeout).await?;
        mcp::check(&note, &answer).map_err(|e| format!("notifications/initialized: {e}"))?;
        Ok(())
    }
}
