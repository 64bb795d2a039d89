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
        self.send_like(call, timeout, None).await
    }

    /// [`Conn::send`], comparing the body as it comes with `like` (the last body that passed):
    /// a body of the same bytes is answered as `like` itself, not copied out of the pieces it
    /// came in. A megabyte read is then compared once and never copied here, which kept the
    /// load generator's core busy enough to be the limit.
    pub async fn send_like(&mut self, call: &Call, timeout: Duration, like: Option<&Bytes>) -> Result<Answer, String> {
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
            let (parts, mut body) = resp.into_parts();
            let mut pieces = Vec::new();
            // `like`, and how much of it the pieces so far match, while they do.
            let mut matched = like.map(|like| (like, 0));
            while let Some(frame) = body.frame().await {
                let Ok(piece) = frame.map_err(|e| format!("reading the answer: {e}"))?.into_data() else { continue };
                if let Some((like, at)) = matched {
                    let end = at + piece.len();
                    matched = like.get(at..end).filter(|l| *l == &piece[..]).map(|_| (like, end));
                }
                pieces.push(piece);
            }
            let body = match matched {
                Some((like, at)) if at == like.len() => like.clone(),
                _ if pieces.len() == 1 => pieces.swap_remove(0),
                _ => Bytes::from(pieces.concat()),
            };
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

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;
    use crate::mcp::Era;

    /// A server on port 0 answering every request with the next of `bodies`.
    async fn serve(bodies: Vec<Bytes>) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.expect("accept");
            let bodies = std::sync::Mutex::new(bodies.into_iter());
            let service = hyper::service::service_fn(move |_req| {
                let body = bodies.lock().expect("lock").next().unwrap_or_default();
                async move {
                    let mut resp = hyper::Response::new(Full::new(body));
                    resp.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
                    Ok::<_, Infallible>(resp)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
        addr
    }

    /// Bodies read like the last one are that one when every byte is the same, and their own
    /// bytes when any differs (one byte, one more, one fewer).
    #[tokio::test]
    async fn a_body_read_like_another_is_it_only_when_every_byte_is_the_same() {
        let like = Bytes::from(vec![b'a'; 1 << 20]);
        let mut changed = like.to_vec();
        changed[(1 << 20) - 10] = b'b';
        let bodies = vec![
            Bytes::from(like.to_vec()),
            Bytes::from(changed.clone()),
            Bytes::from(vec![b'a'; (1 << 20) + 1]),
            Bytes::from(vec![b'a'; (1 << 20) - 1]),
            Bytes::from_static(b"{}"),
        ];
        let addr = serve(bodies.clone()).await;
        let timeout = Duration::from_secs(10);
        let mut conn = Conn::open(&Target { addr, authorization: None }, timeout).await.expect("open");
        let call = crate::mcp::read(Era::Modern, 1);
        for (i, sent) in bodies.iter().enumerate() {
            let answer = conn.send_like(&call, timeout, Some(&like)).await.expect("answer");
            assert_eq!(answer.body, sent, "body {i}");
            assert_eq!(answer.body.as_ptr() == like.as_ptr(), i == 0, "body {i} is `like` itself only when the same");
        }
    }
}
