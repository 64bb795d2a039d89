//! mcp-service's gRPC server over the network: HTTP/2 connections on which `Handle`, the call
//! behind every MCP message, is served directly, and every other method (the legacy session's
//! stream and its end, the catalog watch, the health service) by tonic's generated services.
//!
//! Served by tonic, a `Handle` call went through its server's layers (error recovery, the
//! `grpc-timeout` layer, connection information), its router, the interceptor, the generated
//! service's streaming codec and a boxed trait future: about a tenth of the service's CPU per
//! call, next to the engine's own quarter. Here the call is read whole (it is one message), its
//! frames are written as the work sends them, and the outcome ends the stream as tonic's would:
//! `grpc-status: 0`, or a status with no message before it. What a caller sees is the same;
//! the tests of every method run against this server.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{BufMut as _, Bytes, BytesMut};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use mcp_proto::mcp as pb;
use prost::Message as _;
use tokio::sync::mpsc;
use tokio_stream::{Stream, StreamExt as _};
use tokio_util::sync::CancellationToken;
use tower::Service as _;

use crate::context::Frame;
use crate::dispatch::Engine;

/// The path of `mcp.v1.McpService/Handle`.
const HANDLE: &str = "/mcp.v1.McpService/Handle";

/// The largest `Handle` message read (the JSON-RPC body and what travels with it): far above
/// any body the gateway forwards (`max_body_bytes`, 4 MiB by default). Only callers that
/// presented the service token, when one is configured, are read at all.
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// What every connection serves with.
#[derive(Clone)]
pub struct Served {
    pub engine: Arc<Engine>,
    pub callers: mcp_proto::trust::Require,
    /// The other methods (tonic's router, the interceptor included).
    pub routes: tonic::service::Routes,
}

/// Serve the connections `incoming` yields until `shutdown`; then stop accepting (the listening
/// socket is closed), run `on_shutdown`, and end each connection gracefully (HTTP/2 GOAWAY: the
/// calls it has taken finish, no new one is taken), returning once all have ended.
pub async fn serve<S, F>(incoming: S, served: Served, shutdown: CancellationToken, on_shutdown: F)
where
    S: Stream<Item = std::io::Result<mcp_proto::socket::Unvectored>>,
    F: Future<Output = ()>,
{
    let mut builder = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
    // As tonic's server: no limit on the calls open at once on a connection (each legacy
    // session's stream holds one for as long as the client listens). gRPC has no use for a
    // `date` header on each answer.
    builder.timer(hyper_util::rt::TokioTimer::new()).max_concurrent_streams(None).auto_date_header(false);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    {
        let mut incoming = std::pin::pin!(incoming);
        loop {
            let io = tokio::select! {
                () = shutdown.cancelled() => break,
                io = incoming.next() => io,
            };
            match io {
                Some(Ok(io)) => {
                    let served = served.clone();
                    let service = hyper::service::service_fn(move |request| served.clone().call(request));
                    let connection =
                        graceful.watch(builder.serve_connection(hyper_util::rt::TokioIo::new(io), service));
                    tokio::spawn(async move {
                        if let Err(e) = connection.await {
                            tracing::debug!(error = %e, "gRPC connection ended with an error");
                        }
                    });
                }
                Some(Err(e)) => {
                    // Out of file descriptors, say: wait a little rather than spin.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                None => break,
            }
        }
    }
    on_shutdown.await;
    graceful.shutdown().await;
}

/// An answer's body: a `Handle` call's frames, or what tonic's services answer.
type Answer = http_body_util::Either<Frames, tonic::body::Body>;

impl Served {
    async fn call(mut self, request: http::Request<Incoming>) -> Result<http::Response<Answer>, Infallible> {
        if request.uri().path() != HANDLE {
            let answer = self.routes.call(request).await?;
            return Ok(answer.map(http_body_util::Either::Right));
        }
        Ok(match self.handle(request).await {
            Ok(frames) => {
                let mut answer = http::Response::new(http_body_util::Either::Left(frames));
                answer.headers_mut().insert(http::header::CONTENT_TYPE, GRPC.clone());
                answer
            }
            // A status and no message (`grpc-status` in the head), as tonic answers one.
            Err(status) => status.into_http::<tonic::body::Body>().map(http_body_util::Either::Right),
        })
    }

    /// A `Handle` call: the caller checked, its one message read, the work started.
    async fn handle(&self, request: http::Request<Incoming>) -> Result<Frames, tonic::Status> {
        let (parts, body) = request.into_parts();
        let metadata = tonic::metadata::MetadataMap::from_headers(parts.headers);
        self.callers.check(&metadata)?;
        let whole = http_body_util::Limited::new(body, MAX_MESSAGE + 5).collect().await.map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                tonic::Status::resource_exhausted(format!("the message is larger than {MAX_MESSAGE} bytes"))
            } else {
                tonic::Status::internal(format!("the message could not be read: {e}"))
            }
        })?;
        let message = one_message(whole.to_bytes())?;
        let request = pb::McpRequest::decode(message)
            .map_err(|e| tonic::Status::internal(format!("failed to decode the McpRequest message: {e}")))?;
        let (work, rx) = crate::server::start(self.engine.clone(), &metadata, request);
        Ok(Frames { work: Some(Box::pin(work)), rx, rest: [None, None], ended: false })
    }
}

static GRPC: http::HeaderValue = http::HeaderValue::from_static("application/grpc");

/// The one message of a unary request body: not compressed, its length what its prefix says.
fn one_message(mut body: Bytes) -> Result<Bytes, tonic::Status> {
    if body.len() < 5 {
        return Err(tonic::Status::internal("the request carries no message"));
    }
    if body[0] != 0 {
        return Err(tonic::Status::unimplemented("compressed messages are not accepted"));
    }
    let length = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    if body.len() - 5 != length {
        return Err(tonic::Status::internal("the request is not one message of the length its prefix gives"));
    }
    Ok(body.split_off(5))
}

/// A `Handle` call's answer: the work, polled here (no task of its own: see
/// [`crate::server::Work::Inline`]), its frames as they come, then `grpc-status: 0`.
pub struct Frames {
    work: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    rx: mpsc::Receiver<Frame>,
    /// What is left to send of a message sent in pieces ([`encode`]), in order.
    rest: [Option<Bytes>; 2],
    ended: bool,
}

impl http_body::Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        if let Some(work) = self.work.as_mut()
            && work.as_mut().poll(cx).is_ready()
        {
            // Its sender is gone with it: the channel ends once its frames are read.
            self.work = None;
        }
        if let Some(piece) = self.rest.iter_mut().find_map(Option::take) {
            return Poll::Ready(Some(Ok(http_body::Frame::data(piece))));
        }
        if self.ended {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(frame)) => {
                let (first, rest) = encode(crate::server::message(frame));
                self.rest = rest;
                Poll::Ready(Some(Ok(http_body::Frame::data(first))))
            }
            Poll::Ready(None) => {
                self.ended = true;
                let mut trailers = http::HeaderMap::with_capacity(1);
                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                Poll::Ready(Some(Ok(http_body::Frame::trailers(trailers))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

/// From this size on, a frame's JSON is sent from where it is rather than copied next to the
/// message's other fields (a 1 MiB resource read twice as large for a moment otherwise).
const SPLICE_FROM: usize = 32 * 1024;

/// A message with gRPC's prefix (not compressed, then its length), in one piece; or, when its
/// JSON is large, in three: the prefix with the JSON field's key and length, the JSON, and the
/// other fields. `json` is field 1, and protobuf writes fields in their order.
fn encode(mut message: pb::McpFrame) -> (Bytes, [Option<Bytes>; 2]) {
    use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
    if message.json.len() < SPLICE_FROM {
        let length = message.encoded_len();
        let mut out = BytesMut::with_capacity(5 + length);
        out.put_u8(0);
        out.put_u32(length as u32);
        message.encode_raw(&mut out);
        return (out.freeze(), [None, None]);
    }
    let json = std::mem::take(&mut message.json);
    let field = key_len(1) + encoded_len_varint(json.len() as u64) + json.len();
    let others = message.encoded_len();
    let mut head = BytesMut::with_capacity(5 + key_len(1) + 10);
    head.put_u8(0);
    head.put_u32((field + others) as u32);
    encode_key(1, WireType::LengthDelimited, &mut head);
    encode_varint(json.len() as u64, &mut head);
    let mut tail = BytesMut::with_capacity(others);
    message.encode_raw(&mut tail);
    (head.freeze(), [Some(json), (!tail.is_empty()).then(|| tail.freeze())])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(flag: u8, declared: u32, payload: &[u8]) -> Bytes {
        let mut out = vec![flag];
        out.extend_from_slice(&declared.to_be_bytes());
        out.extend_from_slice(payload);
        out.into()
    }

    #[test]
    fn one_message_is_what_its_prefix_says() {
        assert_eq!(one_message(framed(0, 3, b"abc")).expect("one message"), Bytes::from_static(b"abc"));
        assert_eq!(one_message(framed(0, 0, b"")).expect("an empty message"), Bytes::new());
        let code = |body: Bytes| one_message(body).expect_err("refused").code();
        assert_eq!(code(Bytes::from_static(b"\0\0\0")), tonic::Code::Internal);
        assert_eq!(code(framed(1, 3, b"abc")), tonic::Code::Unimplemented);
        assert_eq!(code(framed(0, 4, b"abc")), tonic::Code::Internal, "shorter than declared");
        assert_eq!(code(framed(0, 2, b"abc")), tonic::Code::Internal, "a second message follows");
    }

    /// Small or large (sent in pieces), with or without the other fields, a frame decodes as
    /// the message it was.
    #[test]
    fn a_frame_decodes_as_the_message_it_was() {
        let cache = pb::CacheHint { ttl_ms: 5, catalog_fingerprint: 7, ..Default::default() };
        for (size, session_id, cache) in [
            (40, "s", None),
            (0, "", None),
            (SPLICE_FROM - 1, "", Some(cache.clone())),
            (SPLICE_FROM, "", None),
            (1 << 20, "s", Some(cache)),
        ] {
            let message = pb::McpFrame {
                json: Bytes::from(vec![b'x'; size]),
                disposition: pb::Disposition::Reply as i32,
                session_id: session_id.into(),
                cache,
            };
            let (first, rest) = encode(message.clone());
            assert_eq!(rest.iter().flatten().count() > 0, size >= SPLICE_FROM, "size {size}");
            let mut whole = first.to_vec();
            for piece in rest.into_iter().flatten() {
                whole.extend_from_slice(&piece);
            }
            let body = one_message(whole.into()).expect("one message");
            assert_eq!(pb::McpFrame::decode(body).expect("decodes"), message, "size {size}");
        }
    }
}
