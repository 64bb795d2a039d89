//! mcp-service's gRPC server over the network: HTTP/2 connections on which `Handle`, the call
//! behind every MCP message, is served directly, and every other method (the legacy session's
//! stream and its end, the catalog watch, the health service) by tonic's generated services.
//!
//! Served by tonic, a `Handle` call went through its server's layers (error recovery, the
//! `grpc-timeout` layer, connection information), its router, the interceptor, the generated
//! service's streaming codec and a boxed trait future: about a tenth of the service's CPU per
//! call, next to the engine's own quarter. Here the call's one message is read as it comes, its
//! frames are written as the work sends them, and the outcome ends the stream as tonic's would:
//! `grpc-status: 0`, or a status with no message before it. A well-formed call (what the
//! gateway sends) sees what it saw from tonic; a malformed one is refused with its own reason
//! (a second message, for one, which tonic would have dropped unread). Nothing sends
//! `grpc-timeout` to this service, and no deadline is kept here.
//!
//! In process (standalone mode), [`InProcess`] answers `Handle` the same way, without the
//! sockets and HTTP/2; there the caller is in the same process, and no token is checked.

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
use tokio_util::task::AbortOnDrop;
use tower::Service as _;

use crate::context::Frame;
use crate::dispatch::Engine;

/// The path of `mcp.v1.McpService/Handle`.
const HANDLE: &str = "/mcp.v1.McpService/Handle";

/// What every connection serves with.
#[derive(Clone)]
pub struct Served {
    pub engine: Arc<Engine>,
    pub callers: mcp_proto::trust::Require,
    /// The other methods (tonic's router, the interceptor included).
    pub routes: tonic::service::Routes,
    /// Cancelled when the service shuts down: each `Pipe` then says `closing` ([`crate::pipe`]).
    pub shutdown: CancellationToken,
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
    // As tonic's server, no limit on the calls open at once on a connection (each legacy
    // session's stream holds one for as long as the client listens); unlike it, hyper's limit
    // on the streams a peer makes this side reset (1 024) is kept. gRPC has no use for a `date`
    // header on each answer.
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
                    use std::io::ErrorKind as K;
                    if matches!(e.kind(), K::ConnectionAborted | K::ConnectionReset | K::Interrupted) {
                        // That connection's trouble, not the listener's.
                        tracing::debug!(error = %e, "a connection ended before it was accepted");
                    } else {
                        // Out of file descriptors, say: wait a little rather than spin.
                        tracing::warn!(error = %e, "cannot accept a connection");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
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
        if request.uri().path() == mcp_proto::pipe::PIPE_PATH {
            return Ok(self.pipe(request));
        }
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

    /// A `Pipe` call: the caller checked once for every call it will carry.
    fn pipe(&self, request: http::Request<Incoming>) -> http::Response<Answer> {
        let (parts, body) = request.into_parts();
        let metadata = tonic::metadata::MetadataMap::from_headers(parts.headers);
        if let Err(status) = self.callers.check(&metadata) {
            return status.into_http::<tonic::body::Body>().map(http_body_util::Either::Right);
        }
        let body = crate::pipe::PipeBody::new(self.engine.clone(), body, self.shutdown.clone());
        let mut answer = http::Response::new(http_body_util::Either::Right(tonic::body::Body::new(body)));
        answer.headers_mut().insert(http::header::CONTENT_TYPE, GRPC.clone());
        answer
    }

    /// A `Handle` call: the caller checked, its one message read, the work started.
    async fn handle(&self, request: http::Request<Incoming>) -> Result<Frames, tonic::Status> {
        let (parts, body) = request.into_parts();
        let metadata = tonic::metadata::MetadataMap::from_headers(parts.headers);
        self.callers.check(&metadata)?;
        let message = read_message(body, mcp_proto::MAX_MESSAGE_BYTES).await?;
        let request = pb::McpRequest::decode(message)
            .map_err(|e| tonic::Status::internal(format!("failed to decode the McpRequest message: {e}")))?;
        let (work, rx) = crate::server::start(self.engine.clone(), &metadata, request);
        Ok(Frames { work: Some(work), _task: None, rx, rest: [None, None], ended: false })
    }
}

static GRPC: http::HeaderValue = http::HeaderValue::from_static("application/grpc");

/// mcp-service called in this process (standalone mode, through
/// [`mcp_proto::transport::in_process`]): `Handle` answered as over the network (its one
/// message read, the same frames and trailers, without tonic's server codec), every other
/// method by the generated service. The work runs on a task of its own here: in process the
/// caller's HTTP connection task polls the answer, and work polled inside it would wake that
/// very task with each frame it sends (measured with the generated service's stream: standalone
/// calls and legacy lists cost 50 % more CPU inline, the kernel's thread wake-up path growing
/// from 2 % to 13 % of the profile). When the caller goes away the answer is dropped and the
/// task aborted, as the work is dropped over the network.
#[derive(Clone)]
pub struct InProcess {
    pub engine: Arc<Engine>,
    pub generated: pb::mcp_service_server::McpServiceServer<crate::server::McpGrpc>,
}

impl tower::Service<http::Request<tonic::body::Body>> for InProcess {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        if request.uri().path() != HANDLE {
            return Box::pin(self.generated.call(request));
        }
        let engine = self.engine.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let metadata = tonic::metadata::MetadataMap::from_headers(parts.headers);
            let started = async {
                let message = read_message(body, mcp_proto::MAX_MESSAGE_BYTES).await?;
                pb::McpRequest::decode(message)
                    .map_err(|e| tonic::Status::internal(format!("failed to decode the McpRequest message: {e}")))
            };
            Ok(match started.await {
                Ok(request) => {
                    let (work, rx) = crate::server::start(engine, &metadata, request);
                    let task = AbortOnDrop::new(tokio::spawn(work).abort_handle());
                    let frames = Frames { work: None, _task: Some(task), rx, rest: [None, None], ended: false };
                    let mut answer = http::Response::new(tonic::body::Body::new(frames));
                    answer.headers_mut().insert(http::header::CONTENT_TYPE, GRPC.clone());
                    answer
                }
                Err(status) => status.into_http(),
            })
        })
    }
}

/// The one message of a unary request body, read as it comes: not compressed, its length
/// what its prefix says and at most `max`. A message that came in one piece (as the gateway
/// sends it) is not copied.
async fn read_message<B>(mut body: B, max: usize) -> Result<Bytes, tonic::Status>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let internal = |why: &str| tonic::Status::internal(why.to_owned());
    let mut gathered = mcp_proto::body::Gathered::default();
    let mut length = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| tonic::Status::internal(format!("the message could not be read: {e}")))?;
        let Ok(data) = frame.into_data() else { continue };
        gathered.push(data);
        let have = gathered.bytes();
        if length.is_none() && have.len() >= 5 {
            if have[0] != 0 {
                // A compressed message where none was announced (gRPC's HTTP/2 mapping).
                return Err(internal("compressed messages are not accepted"));
            }
            let declared = u32::from_be_bytes([have[1], have[2], have[3], have[4]]) as usize;
            if declared > max {
                return Err(tonic::Status::resource_exhausted(format!(
                    "the message is {declared} bytes, more than the {max} this service reads"
                )));
            }
            length = Some(declared);
        }
        if length.is_some_and(|l| have.len() > 5 + l) {
            return Err(internal("the request carries more than one message"));
        }
    }
    let mut whole = gathered.into_bytes();
    match length {
        None => Err(internal("the request carries no message")),
        Some(l) if whole.len() < 5 + l => Err(internal("the request ended before its message did")),
        Some(_) => Ok(whole.split_off(5)),
    }
}

/// A `Handle` call's answer: the work's frames as they come, then `grpc-status: 0`. Over the
/// network the work is polled here and has no task of its own: a spawn copied the large future
/// into a new task, and each frame woke the stream's task from another one (measured with
/// tonic's stream, mcp-service's CPU per `tools/call` 44 → 32 µs, per legacy `tools/list`
/// 47 → 35). In process it runs on a task of its own ([`InProcess`]), aborted with the answer.
/// Either way a client that goes away drops the answer, and the work with it.
pub struct Frames {
    work: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// The work's own task, when it has one: held to be aborted with the answer.
    _task: Option<AbortOnDrop>,
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
            // Its sender is gone with it: the channel ends once its frames are read (closed
            // here too, so that it would end even if a sender outlived the work).
            self.work = None;
            self.rx.close();
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
                trailers.insert(mcp_proto::call::GRPC_STATUS, http::HeaderValue::from_static("0"));
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
pub(crate) const SPLICE_FROM: usize = 32 * 1024;

/// A message with gRPC's prefix (not compressed, then its length), in one piece; or, when its
/// JSON is large, in three: the prefix with the JSON field's key and length, the JSON, and the
/// other fields. `json` is field 1, and protobuf writes fields in their order.
pub(crate) fn encode(mut message: pb::McpFrame) -> (Bytes, [Option<Bytes>; 2]) {
    use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
    if message.json.len() < SPLICE_FROM {
        return (mcp_proto::pipe::framed(&message), [None, None]);
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
    use futures_util::StreamExt as _;
    use http_body_util::{BodyExt as _, StreamBody};

    use super::*;

    fn framed(flag: u8, declared: u32, payload: &[u8]) -> Bytes {
        let mut out = vec![flag];
        out.extend_from_slice(&declared.to_be_bytes());
        out.extend_from_slice(payload);
        out.into()
    }

    /// A body that sends `pieces`, then (with `more`) waits for ever.
    fn body(
        pieces: Vec<Bytes>,
        more: bool,
    ) -> StreamBody<impl tokio_stream::Stream<Item = Result<http_body::Frame<Bytes>, Infallible>> + Unpin> {
        let sent = futures_util::stream::iter(pieces.into_iter().map(|p| Ok(http_body::Frame::data(p))));
        let rest = if more {
            futures_util::stream::pending().left_stream()
        } else {
            futures_util::stream::empty().right_stream()
        };
        StreamBody::new(futures_util::StreamExt::chain(sent, rest))
    }

    async fn read(pieces: Vec<Bytes>, more: bool) -> Result<Bytes, tonic::Code> {
        tokio::time::timeout(std::time::Duration::from_secs(5), read_message(body(pieces, more), 100))
            .await
            .expect("no wait for what is not needed")
            .map_err(|s| s.code())
    }

    /// The message whole, in one piece or many; in one piece not copied.
    #[tokio::test]
    async fn a_message_is_read_as_it_comes() {
        let whole = framed(0, 10, b"0123456789");
        let read_whole = read(vec![whole.clone()], false).await.expect("read");
        assert_eq!(read_whole, Bytes::from_static(b"0123456789"));
        assert_eq!(read_whole.as_ptr(), whole[5..].as_ptr(), "not copied");
        for cuts in [vec![1], vec![5], vec![3, 4, 9], vec![6, 14]] {
            let mut pieces = Vec::new();
            let mut from = 0;
            for cut in cuts.iter().copied().chain([whole.len()]) {
                pieces.push(whole.slice(from..cut));
                from = cut;
            }
            assert_eq!(read(pieces, false).await, Ok(Bytes::from_static(b"0123456789")), "cut at {cuts:?}");
        }
        assert_eq!(read(vec![framed(0, 0, b"")], false).await, Ok(Bytes::new()), "an empty message");
    }

    /// What is not one uncompressed message of at most the limit is refused; a length above the
    /// limit or a compressed message as soon as the prefix says so, without waiting for more.
    #[tokio::test]
    async fn what_is_not_one_message_is_refused() {
        assert_eq!(read(vec![framed(0, 101, b"x")], true).await, Err(tonic::Code::ResourceExhausted));
        assert_eq!(read(vec![framed(1, 3, b"abc")], true).await, Err(tonic::Code::Internal), "compressed");
        assert_eq!(read(vec![framed(0, 2, b"abc")], true).await, Err(tonic::Code::Internal), "a second message");
        assert_eq!(read(vec![framed(0, 4, b"abc")], false).await, Err(tonic::Code::Internal), "shorter");
        assert_eq!(read(vec![Bytes::from_static(b"\0\0\0")], false).await, Err(tonic::Code::Internal));
        assert_eq!(read(vec![], false).await, Err(tonic::Code::Internal), "no message");
    }

    /// Small or large (sent in pieces), with or without the other fields, a frame decodes as
    /// the message it was.
    #[tokio::test]
    async fn a_frame_decodes_as_the_message_it_was() {
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
            let pieces = [first].into_iter().chain(rest.into_iter().flatten()).collect();
            let body = read_message(body(pieces, false), usize::MAX).await.expect("one message");
            assert_eq!(pb::McpFrame::decode(body).expect("decodes"), message, "size {size}");
        }
    }

    /// The frames a work sends, between waits, reach the body in order, a large one in its
    /// pieces, and `grpc-status: 0` ends it.
    #[tokio::test]
    async fn the_work_s_frames_then_ok() {
        let (tx, rx) = mpsc::channel(16);
        let jsons = [b"{\"progress\":1}".to_vec(), vec![b'x'; SPLICE_FROM + 3], b"{\"result\":{}}".to_vec()];
        let sent = jsons.clone();
        let work = async move {
            for (i, json) in sent.into_iter().enumerate() {
                tokio::task::yield_now().await;
                let disposition = if i == 2 { pb::Disposition::Reply } else { pb::Disposition::Interim };
                tx.send(Frame::new(json, disposition)).await.expect("sent");
            }
        };
        let mut answer = Frames { work: Some(Box::pin(work)), _task: None, rx, rest: [None, None], ended: false };
        let (mut data, mut trailers) = (Vec::new(), None);
        while let Some(frame) = answer.frame().await {
            match frame.expect("a frame").into_data() {
                Ok(piece) => {
                    assert!(trailers.is_none(), "nothing after the trailers");
                    data.extend_from_slice(&piece);
                }
                Err(frame) => trailers = frame.into_trailers().ok(),
            }
        }
        assert!(http_body::Body::is_end_stream(&answer));
        assert_eq!(trailers.expect("trailers").get("grpc-status").map(|v| v.as_bytes()), Some(&b"0"[..]));
        let mut rest = Bytes::from(data);
        for json in jsons {
            let length = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
            let frame = pb::McpFrame::decode(rest.slice(5..5 + length)).expect("an McpFrame");
            assert_eq!(frame.json, json);
            rest = rest.slice(5 + length..);
        }
        assert!(rest.is_empty());
    }

    /// An answer dropped (the client went away) drops its work.
    #[tokio::test]
    async fn a_dropped_answer_drops_its_work() {
        let (_tx, rx) = mpsc::channel(1);
        let (alive, gone) = tokio::sync::oneshot::channel::<()>();
        let work = async move {
            let _alive = alive;
            std::future::pending::<()>().await;
        };
        let mut answer = Frames { work: Some(Box::pin(work)), _task: None, rx, rest: [None, None], ended: false };
        let waited = tokio::time::timeout(std::time::Duration::from_millis(20), answer.frame()).await;
        assert!(waited.is_err(), "the work runs on");
        drop(answer);
        assert!(gone.await.is_err(), "the work was dropped");
    }
    /// In process the work has a task of its own: an answer dropped aborts it.
    #[tokio::test]
    async fn a_dropped_answer_aborts_its_work_s_task() {
        let (_tx, rx) = mpsc::channel(1);
        let (alive, gone) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _alive = alive;
            std::future::pending::<()>().await;
        });
        let answer = Frames {
            work: None,
            _task: Some(AbortOnDrop::new(task.abort_handle())),
            rx,
            rest: [None, None],
            ended: false,
        };
        tokio::task::yield_now().await;
        assert!(!task.is_finished(), "the work runs on");
        drop(answer);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(5), gone).await;
        assert!(matches!(ended, Ok(Err(_))), "the work was aborted");
    }
}
