//! `mcp.v1.McpService/Pipe`: `Handle` calls, many on one HTTP/2 stream each way.
//!
//! A call on a stream of its own costs both sides the stream's setup, its headers (HPACK each
//! way), its trailers and the per-stream state that h2 and hyper keep and move about: measured
//! on a pair of processes sharing one core, 3.6 µs of the caller's CPU and 3.8 of the
//! answerer's per call, against 1.0 and 1.0 for the same messages on one long-lived stream
//! (docs/performance.md). On a `Pipe` each call is a [`PipeCall`](crate::mcp::PipeCall) one
//! way, numbered by the caller, and its frames come back as
//! [`PipeFrame`](crate::mcp::PipeFrame)s the other way, each carrying one of the call's
//! frames exactly as a `Handle` answer would (with gRPC's prefix), the last marked `end`.
//!
//! [`crate::link::Link`] sends every `Handle` call of a connection on one pipe, and hands each
//! caller what a `Handle` call would have given it: an answer of status 200 whose body is the
//! call's frames then `grpc-status: 0`. So nothing above the link changes ([`crate::call`]
//! decodes the frames, [`crate::balance`] sends a call never processed elsewhere). What a
//! stream per call gave for free is kept:
//!
//! - a caller that goes away (its answer, or the wait for it, dropped) cancels its call, as a
//!   stream's reset did: a `PipeCall` without a request;
//! - a call whose caller reads slowly (a client reading an SSE answer slowly) cannot hold up the
//!   others: its frames wait in a buffer of its own, and past [`CALL_BUFFER`] bytes the call is
//!   cancelled and fails (`RESOURCE_EXHAUSTED`), where the stream's flow control stalled it (a
//!   single frame larger than that still reaches a caller that has read everything before it);
//! - a call that fails on the service (its work panicked) fails alone, with the status the
//!   service gives; so does one whose frame is above the message limit ([`crate::call`]);
//! - a service shutting down says so (`closing`), answers each call that arrives after that
//!   `not_taken`, and ends the stream once the calls it took have ended; such calls, and any
//!   without an answer when a stream that said `closing` ends, fail as never processed, so that
//!   [`crate::balance`] sends them to another replica as it did for streams a GOAWAY left out;
//!   a connection that breaks fails the calls under way, as before;
//! - a service that does not know `Pipe` (an older one, during a rolling upgrade) answers it
//!   `UNIMPLEMENTED` (or HTTP 404): the link then calls `Handle` a stream per call, as before,
//!   until it connects again;
//! - a connection told to go away (HTTP/2 `GOAWAY`, from a proxy between the services that is
//!   draining, say) takes no new calls, as it took no new streams: the pipe looks every
//!   [`GOAWAY_CHECK`] whether its connection may still open streams and, once it may not, takes
//!   no more calls and ends its side of the stream; the service answers the calls it has and
//!   then ends its side, and the link sends the next calls on a new connection.
//!
//! What differs: one stream's flow control now carries every call of a connection, so a large
//! answer (a megabyte read that crosses) goes out before the frames queued behind it, where
//! streams shared only the connection's window; a caller reading slowly may have up to
//! [`CALL_BUFFER`] of its answer held in the gateway, where a stream held its 2 MiB window; and
//! a call whose caller goes away after its pipe has ended its side (told to go away) runs to
//! its end on the service, as no cancel can be sent any more.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use prost::Message as _;
use tokio::sync::mpsc;

use crate::mcp as pb;
use crate::transport::TransportError;

/// The path of `mcp.v1.McpService/Pipe`.
pub const PIPE_PATH: &str = "/mcp.v1.McpService/Pipe";

/// gRPC's message prefix: a compression flag and a 32-bit big-endian length.
pub const PREFIX: usize = 5;

/// The most bytes of one call's frames kept for a caller that has not read them; past it the
/// call is cancelled. A stream per call let the service send up to its window (2 MiB) ahead.
pub const CALL_BUFFER: usize = 16 * 1024 * 1024;

/// How often a pipe looks whether its connection was told to go away.
pub const GOAWAY_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Splits a stream of data into gRPC messages (their prefixes checked: not compressed, at most
/// `max` bytes). A message found whole in the piece that brought it is a slice of that piece;
/// one that spans pieces is gathered once, in a buffer sized by its prefix.
pub struct Messages {
    held: BytesMut,
    max: usize,
}

impl Messages {
    pub fn new(max: usize) -> Self {
        Messages { held: BytesMut::new(), max }
    }

    /// Whether a message has begun and not ended.
    pub fn is_partial(&self) -> bool {
        !self.held.is_empty()
    }

    /// Take `data` in; the messages it completes go to `out`, without their prefixes.
    pub fn push(&mut self, mut data: Bytes, out: &mut Vec<Bytes>) -> Result<(), tonic::Status> {
        if self.held.is_empty() {
            // Whole messages straight from the piece.
            while data.len() >= PREFIX {
                let length = self.length(&data)?;
                if data.len() < PREFIX + length {
                    break;
                }
                let mut message = data.split_to(PREFIX + length);
                message.advance(PREFIX);
                out.push(message);
            }
            if data.is_empty() {
                return Ok(());
            }
            if data.len() >= PREFIX {
                self.held.reserve(PREFIX + self.length(&data)?);
            }
            self.held.extend_from_slice(&data);
            return Ok(());
        }
        self.held.extend_from_slice(&data);
        while self.held.len() >= PREFIX {
            let length = self.length(&self.held)?;
            if self.held.len() < PREFIX + length {
                self.held.reserve(PREFIX + length - self.held.len());
                break;
            }
            let mut message = self.held.split_to(PREFIX + length).freeze();
            message.advance(PREFIX);
            out.push(message);
        }
        Ok(())
    }

    /// The length a message's prefix declares, checked.
    fn length(&self, prefix: &[u8]) -> Result<usize, tonic::Status> {
        if prefix[0] != 0 {
            return Err(tonic::Status::internal("compressed messages are not accepted"));
        }
        let length = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
        if length > self.max {
            return Err(tonic::Status::resource_exhausted(format!(
                "a message of {length} bytes, more than the {} accepted",
                self.max
            )));
        }
        Ok(length)
    }
}

/// A message with gRPC's prefix.
pub fn framed(message: &impl prost::Message) -> Bytes {
    let length = message.encoded_len();
    let mut out = BytesMut::with_capacity(PREFIX + length);
    out.put_u8(0);
    out.put_u32(length as u32);
    message.encode_raw(&mut out);
    out.freeze()
}

/// What reaches a call's caller.
enum Event {
    /// One of its frames, with gRPC's prefix.
    Frame(Bytes),
    /// The call's answer is complete.
    End,
    /// The call failed (or was never taken: see the error).
    Failed(TransportError),
    /// The service does not answer `Pipe`: call `Handle` instead.
    Unsupported,
}

enum Command {
    Start { call: u64, message: Bytes, events: Sender },
    Cancel(u64),
}

/// A call's end of its events, and the bytes of frames waiting in it.
#[derive(Clone)]
struct Sender {
    events: mpsc::UnboundedSender<Event>,
    waiting: Arc<AtomicUsize>,
}

/// One pipe on one connection: clones share it.
#[derive(Clone)]
pub(crate) struct Pipe(Arc<PipeShared>);

struct PipeShared {
    commands: mpsc::UnboundedSender<Command>,
    /// False once the pipe takes no more calls (it ended, or the service said `closing`).
    open: Arc<AtomicBool>,
    next: AtomicU64,
    /// Which of its link's connections it runs on.
    connection: u64,
}

/// How a call on a pipe went, before its answer.
pub(crate) enum Started {
    Answer(http::Response<tonic::body::Body>),
    /// The service does not answer `Pipe`.
    Unsupported,
}

impl Pipe {
    /// Open a pipe on a connection ready to take a stream: its head is `head` (the metadata
    /// that stands for every call: the service token), its path [`PIPE_PATH`].
    pub(crate) fn open(
        mut send: h2::client::SendRequest<Bytes>,
        mut head: http::request::Parts,
        connection: u64,
    ) -> Result<Pipe, TransportError> {
        let mut uri = http::uri::Parts::from(std::mem::take(&mut head.uri));
        uri.path_and_query = Some(http::uri::PathAndQuery::from_static(PIPE_PATH));
        head.uri =
            http::Uri::from_parts(uri).map_err(|e| TransportError::request(tonic::Status::internal(e.to_string())))?;
        for per_call in ["traceparent", "tracestate", "grpc-timeout"] {
            head.headers.remove(per_call);
        }
        let (response, stream) =
            send.send_request(http::Request::from_parts(head, ()), false).map_err(TransportError::unsent)?;
        let (commands, rx) = mpsc::unbounded_channel();
        let open = Arc::new(AtomicBool::new(true));
        tokio::spawn(run(send, response, stream, rx, open.clone()));
        Ok(Pipe(Arc::new(PipeShared { commands, open, next: AtomicU64::new(1), connection })))
    }

    pub(crate) fn is_open(&self) -> bool {
        self.0.open.load(Ordering::Acquire) && !self.0.commands.is_closed()
    }

    /// Which of its link's connections it runs on.
    pub(crate) fn connection(&self) -> u64 {
        self.0.connection
    }

    /// Send the call whose `Handle` request has head `parts` and the one message `message`
    /// (with its prefix), and wait for its answer's first frame.
    pub(crate) async fn call(&self, parts: &http::request::Parts, message: &Bytes) -> Result<Started, TransportError> {
        let request = message
            .get(PREFIX..)
            .ok_or_else(|| TransportError::request(tonic::Status::internal("a Handle request without its message")))?;
        let header = |name: &http::HeaderName| {
            parts.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
        };
        let call = self.0.next.fetch_add(1, Ordering::Relaxed);
        let framed = framed(&pb::PipeCall {
            call,
            request: message.slice_ref(request),
            traceparent: header(&crate::telemetry::TRACEPARENT),
            tracestate: header(&crate::telemetry::TRACESTATE),
        });
        let (events, mut rx) = mpsc::unbounded_channel();
        let waiting = Arc::new(AtomicUsize::new(0));
        let sender = Sender { events, waiting: waiting.clone() };
        if self.0.commands.send(Command::Start { call, message: framed, events: sender }).is_err() {
            self.0.open.store(false, Ordering::Release);
            return Err(TransportError::not_taken("the pipe had ended"));
        }
        // From here a caller that goes away cancels the call.
        let mut guard = Cancel { call, commands: Some(self.0.commands.clone()) };
        let first = match rx.recv().await {
            Some(Event::Frame(frame)) => {
                waiting.fetch_sub(frame.len(), Ordering::Relaxed);
                Some(frame)
            }
            Some(Event::End) => {
                guard.commands = None;
                None
            }
            Some(Event::Failed(error)) => {
                guard.commands = None;
                return Err(error);
            }
            Some(Event::Unsupported) => {
                guard.commands = None;
                return Ok(Started::Unsupported);
            }
            None => {
                guard.commands = None;
                return Err(TransportError::pipe_lost(tonic::Status::unavailable("the pipe ended"), false));
            }
        };
        let ended = first.is_none();
        let body = CallBody { first, events: rx, waiting, ended, trailers_sent: false, cancel: guard };
        let mut answer = http::Response::new(tonic::body::Body::new(body));
        answer.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
        Ok(Started::Answer(answer))
    }
}

/// Cancels its call when dropped, unless the call has ended.
struct Cancel {
    call: u64,
    commands: Option<mpsc::UnboundedSender<Command>>,
}

impl Drop for Cancel {
    fn drop(&mut self) {
        if let Some(commands) = self.commands.take() {
            let _ = commands.send(Command::Cancel(self.call));
        }
    }
}

/// A call's answer: its frames, then `grpc-status: 0` (or its failure).
struct CallBody {
    first: Option<Bytes>,
    events: mpsc::UnboundedReceiver<Event>,
    waiting: Arc<AtomicUsize>,
    /// The call's end has come (the trailers are next).
    ended: bool,
    trailers_sent: bool,
    cancel: Cancel,
}

impl http_body::Body for CallBody {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, tonic::Status>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(first))));
        }
        if self.trailers_sent {
            return Poll::Ready(None);
        }
        if !self.ended {
            match self.events.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Event::Frame(frame))) => {
                    self.waiting.fetch_sub(frame.len(), Ordering::Relaxed);
                    return Poll::Ready(Some(Ok(http_body::Frame::data(frame))));
                }
                Poll::Ready(Some(Event::End)) => self.ended = true,
                Poll::Ready(Some(Event::Failed(error))) => {
                    self.trailers_sent = true;
                    self.cancel.commands = None;
                    return Poll::Ready(Some(Err(error.into_status())));
                }
                Poll::Ready(Some(Event::Unsupported) | None) => {
                    self.trailers_sent = true;
                    self.cancel.commands = None;
                    return Poll::Ready(Some(Err(tonic::Status::unavailable(
                        "the pipe ended with the call unanswered",
                    ))));
                }
            }
        }
        self.trailers_sent = true;
        self.cancel.commands = None;
        let mut trailers = http::HeaderMap::with_capacity(1);
        trailers.insert(crate::call::GRPC_STATUS, http::HeaderValue::from_static("0"));
        Poll::Ready(Some(Ok(http_body::Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.trailers_sent && self.first.is_none()
    }
}

/// The pipe's task: sends the calls and their cancelling, routes each frame to its call.
async fn run(
    mut connection: h2::client::SendRequest<Bytes>,
    response: h2::client::ResponseFuture,
    mut stream: h2::SendStream<Bytes>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    open: Arc<AtomicBool>,
) {
    let mut calls: HashMap<u64, Sender> = HashMap::new();
    let mut closing = false;
    // False once nothing more can be sent: a call then is not taken.
    let mut sending = true;
    let mut response = Some(response);
    let mut body: Option<h2::RecvStream> = None;
    // A frame may carry an `McpFrame` above the message limit: its call alone fails, as over
    // `Handle` (`crate::call`), so the pipe reads it whole rather than break off.
    let mut messages = Messages::new(2 * crate::MAX_MESSAGE_BYTES);
    let mut received = Vec::new();
    let mut goaway_check = tokio::time::interval_at(tokio::time::Instant::now() + GOAWAY_CHECK, GOAWAY_CHECK);
    goaway_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Why the pipe ended, for the calls still waiting: (status, never processed), or the
    // service does not know `Pipe`.
    let outcome: Result<(tonic::Status, bool), ()> = loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(Command::Start { call, message, events }) => {
                    if closing || !sending {
                        let _ = events.events.send(Event::Failed(TransportError::not_taken("the pipe takes no more calls")));
                        continue;
                    }
                    if stream.send_data(message, false).is_err() {
                        // Not sent (the stream was reset, or is ending): this call was not taken;
                        // the others are answered, or not, as the stream ends.
                        sending = false;
                        open.store(false, Ordering::Release);
                        let _ = events.events.send(Event::Failed(TransportError::not_taken("the pipe could not send it")));
                        continue;
                    }
                    calls.insert(call, events);
                }
                Some(Command::Cancel(call)) => {
                    if calls.remove(&call).is_some() && sending {
                        let _ = stream.send_data(framed(&pb::PipeCall { call, ..Default::default() }), false);
                    }
                }
                // Every handle gone (the link dropped): end the stream.
                None => {
                    if sending {
                        let _ = stream.send_data(Bytes::new(), true);
                    }
                    break Ok((tonic::Status::unavailable("the link was dropped"), false));
                }
            },
            // A connection that may open no more streams was told to go away (or has failed):
            // no more calls here, and the service is told it has them all.
            _ = goaway_check.tick(), if sending => {
                let mut look = Context::from_waker(std::task::Waker::noop());
                if let Poll::Ready(Err(_)) = connection.poll_ready(&mut look) {
                    sending = false;
                    open.store(false, Ordering::Release);
                    let _ = stream.send_data(Bytes::new(), true);
                }
            }
            head = async { response.as_mut().expect("polled only while waiting").await }, if response.is_some() => {
                response = None;
                match head {
                    Ok(head) => match head.headers().get(&crate::call::GRPC_STATUS).map(|v| v.as_bytes().to_vec()).as_deref() {
                        // gRPC's UNIMPLEMENTED, or HTTP's 404 that gRPC maps to it.
                        Some(b"12") => break Err(()),
                        None if head.status() == http::StatusCode::NOT_FOUND => break Err(()),
                        Some(_) => {
                            let status = tonic::Status::from_header_map(head.headers())
                                .unwrap_or_else(|| tonic::Status::unknown("an unreadable grpc-status"));
                            break Ok((status, false));
                        }
                        None if head.status() != http::StatusCode::OK => {
                            break Ok((tonic::Status::unknown(format!("the pipe was answered {}", head.status())), false));
                        }
                        None => body = Some(head.into_body()),
                    },
                    Err(error) => {
                        let never = TransportError::stream_never_processed(&error);
                        break Ok((crate::transport::status_of(&error), never));
                    }
                }
            }
            data = async { body.as_mut().expect("polled only once answered").data().await }, if body.is_some() => match data {
                Some(Ok(data)) => {
                    if let Some(body) = body.as_mut() {
                        let _ = body.flow_control().release_capacity(data.len());
                    }
                    if let Err(status) = messages.push(data, &mut received) {
                        break Ok((status, false));
                    }
                    let mut malformed = None;
                    for message in received.drain(..) {
                        match pb::PipeFrame::decode(message) {
                            Ok(frame) => {
                                if frame.closing {
                                    closing = true;
                                    open.store(false, Ordering::Release);
                                }
                                route(&mut calls, &mut stream, sending, frame);
                            }
                            Err(e) => {
                                malformed = Some(tonic::Status::internal(format!("a PipeFrame that does not decode: {e}")));
                                break;
                            }
                        }
                    }
                    if let Some(status) = malformed {
                        break Ok((status, false));
                    }
                }
                Some(Err(error)) => {
                    let never = TransportError::stream_never_processed(&error);
                    break Ok((crate::transport::status_of(&error), never));
                }
                None => {
                    // Ended: with `grpc-status: 0` after `closing`, a call not answered was not
                    // taken; with another status every call unanswered fails with it.
                    let trailers = match body.as_mut() {
                        Some(body) => body.trailers().await,
                        None => Ok(None),
                    };
                    break match trailers {
                        Ok(Some(trailers)) if trailers.get(&crate::call::GRPC_STATUS).is_some_and(|v| v != "0") => {
                            let status = tonic::Status::from_header_map(&trailers)
                                .unwrap_or_else(|| tonic::Status::unknown("an unreadable grpc-status"));
                            Ok((status, false))
                        }
                        Ok(Some(_)) if closing => {
                            Ok((tonic::Status::unavailable("the service shut down before it took the call"), true))
                        }
                        Ok(_) => Ok((tonic::Status::unavailable("the pipe ended with the call unanswered"), false)),
                        Err(error) => Ok((crate::transport::status_of(&error), false)),
                    };
                }
            },
        }
    };
    open.store(false, Ordering::Release);
    commands.close();
    let failure = |status: &tonic::Status, never: bool| {
        if never {
            TransportError::not_taken(status.message())
        } else {
            TransportError::pipe_lost(status.clone(), false)
        }
    };
    for call in calls.into_values() {
        let event = match &outcome {
            Err(()) => Event::Unsupported,
            Ok((status, never)) => Event::Failed(failure(status, *never)),
        };
        let _ = call.events.send(event);
    }
    // Calls that were never sent.
    while let Ok(command) = commands.try_recv() {
        if let Command::Start { events, .. } = command {
            let event = match &outcome {
                Err(()) => Event::Unsupported,
                Ok(_) => Event::Failed(TransportError::not_taken("the pipe had ended")),
            };
            let _ = events.events.send(event);
        }
    }
}

/// Hand `frame` to its call (a call cancelled meanwhile is no longer listed: dropped).
fn route(calls: &mut HashMap<u64, Sender>, stream: &mut h2::SendStream<Bytes>, sending: bool, frame: pb::PipeFrame) {
    let pb::PipeFrame { call, frame, end, not_taken, code, message, .. } = frame;
    if call == 0 {
        return;
    }
    let Some(sender) = calls.get(&call) else { return };
    if not_taken {
        let _ = sender.events.send(Event::Failed(TransportError::not_taken("the service is shutting down")));
        calls.remove(&call);
        return;
    }
    if !frame.is_empty() {
        let before = sender.waiting.fetch_add(frame.len(), Ordering::Relaxed);
        // A frame alone may be larger than the buffer: what counts is what waits before it.
        if before > 0 && before + frame.len() > CALL_BUFFER {
            // Its caller reads too slowly: the call ends here, and on the service.
            let status = tonic::Status::resource_exhausted(format!(
                "the call's caller left more than {CALL_BUFFER} bytes of its answer unread"
            ));
            let _ = sender.events.send(Event::Failed(TransportError::pipe_lost(status, false)));
            calls.remove(&call);
            if sending {
                let _ = stream.send_data(framed(&pb::PipeCall { call, ..Default::default() }), false);
            }
            return;
        }
        if sender.events.send(Event::Frame(frame)).is_err() {
            // The caller went away; its `Cancel` is on its way.
            return;
        }
    }
    if end {
        let event = if code == 0 {
            Event::End
        } else {
            let status = tonic::Status::new(tonic::Code::from_i32(code), message);
            Event::Failed(TransportError::pipe_lost(status, false))
        };
        let _ = sender.events.send(event);
        calls.remove(&call);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http_body_util::BodyExt as _;

    use super::*;
    use crate::link::{Link, Settings};

    fn prefixed(payload: &[u8]) -> Bytes {
        let mut out = vec![0];
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(payload);
        out.into()
    }

    /// Messages come out whole wherever the data is cut; one found whole in its piece is a
    /// slice of it; a compressed one, or one above the limit, is refused from its prefix.
    #[test]
    fn messages_come_out_whole_wherever_the_data_is_cut() {
        let stream: Bytes = [prefixed(b"first"), prefixed(b""), prefixed(&[7; 300])].concat().into();
        for cut in [1, 4, 5, 6, 10, 11, 15, 100, stream.len() - 1] {
            let mut messages = Messages::new(1000);
            let mut out = Vec::new();
            messages.push(stream.slice(..cut), &mut out).expect("well-formed");
            messages.push(stream.slice(cut..), &mut out).expect("well-formed");
            assert!(!messages.is_partial(), "cut at {cut}");
            assert_eq!(out, [Bytes::from_static(b"first"), Bytes::new(), Bytes::from(vec![7; 300])], "cut at {cut}");
        }
        let mut out = Vec::new();
        Messages::new(1000).push(stream.clone(), &mut out).expect("well-formed");
        assert_eq!(out[0].as_ptr(), stream[5..].as_ptr(), "not copied");
        let mut partial = Messages::new(1000);
        partial.push(stream.slice(..7), &mut out).expect("a beginning");
        assert!(partial.is_partial());
        let mut compressed = prefixed(b"x").to_vec();
        compressed[0] = 1;
        let code = |data: Bytes, max: usize| Messages::new(max).push(data, &mut Vec::new()).map_err(|s| s.code());
        assert_eq!(code(compressed.into(), 1000), Err(tonic::Code::Internal));
        assert_eq!(code(prefixed(&[0; 11]).slice(..5), 10), Err(tonic::Code::ResourceExhausted), "from its prefix");
    }

    /// What a test's pipe server received, and how the test answers.
    struct Served {
        calls: mpsc::UnboundedReceiver<pb::PipeCall>,
        frames: mpsc::UnboundedSender<Answer>,
        /// Which of the server's connections the pipe came on (from 1).
        connection: usize,
        /// Notified: the connection says `GOAWAY` (h2's graceful shutdown).
        goaway: Arc<tokio::sync::Notify>,
    }

    enum Answer {
        Frame(pb::PipeFrame),
        /// Raw data, as written.
        Data(Bytes),
        /// End the stream with this `grpc-status`.
        End(&'static str),
    }

    /// An HTTP/2 server that answers `Pipe` as the test says and anything else not at all.
    async fn pipe_server() -> (String, mpsc::UnboundedReceiver<Served>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("test setup");
        let url = format!("http://{}", listener.local_addr().expect("test setup"));
        let (pipes_tx, pipes) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut connections = 0;
            while let Ok((tcp, _)) = listener.accept().await {
                let pipes_tx = pipes_tx.clone();
                connections += 1;
                let connection = connections;
                tokio::spawn(async move {
                    let mut conn = h2::server::handshake(tcp).await.expect("handshake");
                    let goaway = Arc::new(tokio::sync::Notify::new());
                    loop {
                        let accepted = tokio::select! {
                            accepted = conn.accept() => accepted,
                            () = goaway.notified() => {
                                conn.graceful_shutdown();
                                continue;
                            }
                        };
                        let Some(Ok((request, mut respond))) = accepted else { break };
                        assert_eq!(request.uri().path(), PIPE_PATH);
                        let (calls_tx, calls) = mpsc::unbounded_channel();
                        let (frames, mut answers) = mpsc::unbounded_channel();
                        let _ = pipes_tx.send(Served { calls, frames, connection, goaway: goaway.clone() });
                        let mut body = request.into_body();
                        tokio::spawn(async move {
                            let mut messages = Messages::new(usize::MAX);
                            let mut out = Vec::new();
                            while let Some(Ok(data)) = body.data().await {
                                let _ = body.flow_control().release_capacity(data.len());
                                messages.push(data, &mut out).expect("well-formed");
                                for message in out.drain(..) {
                                    let _ = calls_tx.send(pb::PipeCall::decode(message).expect("a PipeCall"));
                                }
                            }
                        });
                        let head = http::Response::builder().header("content-type", "application/grpc").body(());
                        let mut send = respond.send_response(head.expect("test setup"), false).expect("answered");
                        tokio::spawn(async move {
                            while let Some(answer) = answers.recv().await {
                                match answer {
                                    Answer::Frame(frame) => drop(send.send_data(framed(&frame), false)),
                                    Answer::Data(data) => drop(send.send_data(data, false)),
                                    Answer::End(status) => {
                                        let mut trailers = http::HeaderMap::new();
                                        trailers
                                            .insert(crate::call::GRPC_STATUS, http::HeaderValue::from_static(status));
                                        let _ = send.send_trailers(trailers);
                                        return;
                                    }
                                }
                            }
                        });
                    }
                });
            }
        });
        (url, pipes)
    }

    /// A `Handle` request as the gateway sends it, carrying `id` in its body.
    fn handle(id: u64) -> http::Request<tonic::body::Body> {
        let request = pb::McpRequest { body: Bytes::from(format!("{{\"id\":{id}}}")), ..Default::default() };
        let mut request = http::Request::new(tonic::body::Body::new(http_body_util::Full::new(framed(&request))));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = crate::call::HANDLE_PATH.parse().expect("test setup");
        request.headers_mut().insert(
            "traceparent",
            http::HeaderValue::from_static("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        );
        request
    }

    /// A `Handle` call on `link`, on a task of its own.
    fn spawn_call(
        link: &Link,
        id: u64,
    ) -> tokio::task::JoinHandle<Result<http::Response<tonic::body::Body>, TransportError>> {
        let link = link.clone();
        tokio::spawn(async move { link.call(handle(id)).await })
    }

    fn frame(call: u64, json: &str, end: bool) -> pb::PipeFrame {
        let inner = pb::McpFrame { json: Bytes::from(json.to_owned()), ..Default::default() };
        pb::PipeFrame { call, frame: framed(&inner), end, ..Default::default() }
    }

    async fn next_call(served: &mut Served) -> pb::PipeCall {
        tokio::time::timeout(Duration::from_secs(5), served.calls.recv()).await.expect("in time").expect("a call")
    }

    /// Calls share one pipe, carry their request and trace context, and get back their own
    /// frames (interleaved on the stream) as a `Handle` answer: the frames, then `grpc-status: 0`.
    #[tokio::test]
    async fn calls_share_a_pipe_and_get_their_own_frames() {
        let (url, mut pipes) = pipe_server().await;
        let link = Link::new(&url, Settings::default()).expect("a URL");
        let (first, second) = (spawn_call(&link, 1), spawn_call(&link, 2));
        let mut served = pipes.recv().await.expect("one pipe");
        let (a, b) = (next_call(&mut served).await, next_call(&mut served).await);
        assert_eq!(a.traceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        let by_id = |call: &pb::PipeCall| pb::McpRequest::decode(call.request.clone()).expect("an McpRequest").body;
        let (one, two) = if by_id(&a) == "{\"id\":1}" { (a.call, b.call) } else { (b.call, a.call) };
        assert_ne!(one, two);
        for answer in [frame(two, "two", false), frame(one, "one", true), frame(two, "two again", true)] {
            served.frames.send(Answer::Frame(answer)).expect("sent");
        }
        for (task, expected) in [(first, vec!["one"]), (second, vec!["two", "two again"])] {
            let answer = task.await.expect("joined").expect("an answer");
            assert_eq!(texts_of(answer).await, expected.iter().map(|t| Bytes::from(*t)).collect::<Vec<_>>());
        }
        assert!(pipes.try_recv().is_err(), "one pipe for both");
    }

    /// The frames' texts of a `Handle` answer that ended with `grpc-status: 0`.
    async fn texts_of(answer: http::Response<tonic::body::Body>) -> Vec<Bytes> {
        let collected = answer.into_body().collect().await.expect("whole");
        assert_eq!(collected.trailers().expect("trailers")["grpc-status"], "0");
        let mut out = Vec::new();
        Messages::new(usize::MAX).push(collected.to_bytes(), &mut out).expect("frames");
        out.into_iter().map(|m| pb::McpFrame::decode(m).expect("a frame").json).collect()
    }

    /// A connection told to go away (a draining proxy's `GOAWAY`) takes no new calls: the pipe
    /// ends its side once it sees it, the call it had is answered as usual, and the next call
    /// goes on a new connection's pipe.
    #[tokio::test]
    async fn a_connection_told_to_go_away_takes_no_new_calls() {
        let (url, mut pipes) = pipe_server().await;
        let link = Link::new(&url, Settings::default()).expect("a URL");
        let waiting = spawn_call(&link, 1);
        let mut served = pipes.recv().await.expect("one pipe");
        let taken = next_call(&mut served).await;
        served.goaway.notify_one();
        let ended = tokio::time::timeout(GOAWAY_CHECK * 5, served.calls.recv()).await;
        assert!(matches!(ended, Ok(None)), "the pipe ends its side within a few checks");
        served.frames.send(Answer::Frame(frame(taken.call, "one", true))).expect("sent");
        served.frames.send(Answer::End("0")).expect("sent");
        let answer = waiting.await.expect("joined").expect("the call taken is answered");
        assert_eq!(texts_of(answer).await, vec![Bytes::from("one")]);

        let next = spawn_call(&link, 2);
        let mut again =
            tokio::time::timeout(Duration::from_secs(5), pipes.recv()).await.expect("in time").expect("a pipe");
        assert_eq!((served.connection, again.connection), (1, 2), "a new connection");
        let call = next_call(&mut again).await;
        again.frames.send(Answer::Frame(frame(call.call, "two", true))).expect("sent");
        let answer = next.await.expect("joined").expect("answered on the new connection");
        assert_eq!(texts_of(answer).await, vec![Bytes::from("two")]);
    }

    /// A caller that goes away before its answer, or in the middle of it, cancels its call.
    #[tokio::test]
    async fn a_caller_that_goes_away_cancels_its_call() {
        let (url, mut pipes) = pipe_server().await;
        let link = Link::new(&url, Settings::default()).expect("a URL");
        let waiting = spawn_call(&link, 1);
        let mut served = pipes.recv().await.expect("a pipe");
        let call = next_call(&mut served).await;
        waiting.abort();
        let cancel = next_call(&mut served).await;
        assert_eq!((cancel.call, cancel.request.is_empty()), (call.call, true), "cancelled before its answer");

        let reading = spawn_call(&link, 2);
        let call = next_call(&mut served).await;
        served.frames.send(Answer::Frame(frame(call.call, "interim", false))).expect("sent");
        let answer = reading.await.expect("joined").expect("its first frame");
        drop(answer);
        let cancel = next_call(&mut served).await;
        assert_eq!((cancel.call, cancel.request.is_empty()), (call.call, true), "cancelled in its answer");
    }

    /// A service shutting down: a call it answers `not_taken`, or that is still unanswered when
    /// its stream ends after `closing`, is sent once more on a new pipe; failing there too, it
    /// fails as never processed (so that a pool sends it to another replica).
    #[tokio::test]
    async fn calls_not_taken_were_never_processed() {
        let (url, mut pipes) = pipe_server().await;
        let link = Link::new(&url, Settings::default()).expect("a URL");
        let refused = spawn_call(&link, 1);
        let mut served = pipes.recv().await.expect("a pipe");
        let call = next_call(&mut served).await;
        served.frames.send(Answer::Frame(pb::PipeFrame { closing: true, ..Default::default() })).expect("sent");
        served
            .frames
            .send(Answer::Frame(pb::PipeFrame { call: call.call, not_taken: true, ..Default::default() }))
            .expect("sent");
        // Once more, on a new pipe: answered there.
        let mut next = pipes.recv().await.expect("a new pipe");
        let call = next_call(&mut next).await;
        next.frames.send(Answer::Frame(frame(call.call, "taken", true))).expect("sent");
        refused.await.expect("joined").expect("answered on the new pipe");

        let unanswered = spawn_call(&link, 2);
        // On the pipe that is open, which then closes without answering it.
        next_call(&mut next).await;
        next.frames.send(Answer::Frame(pb::PipeFrame { closing: true, ..Default::default() })).expect("sent");
        next.frames.send(Answer::End("0")).expect("sent");
        // The link tries once more on a new pipe; that one ends the same way.
        let mut again = pipes.recv().await.expect("one more pipe");
        next_call(&mut again).await;
        again.frames.send(Answer::Frame(pb::PipeFrame { closing: true, ..Default::default() })).expect("sent");
        again.frames.send(Answer::End("0")).expect("sent");
        let error = unanswered.await.expect("joined").expect_err("not taken");
        assert!(error.never_processed(), "{error}");
        assert_eq!(tonic::Status::from_error(Box::new(error)).code(), tonic::Code::Unavailable);
    }

    /// A call the service ends with a status fails with it, alone; a frame larger than the
    /// per-call buffer reaches a caller that reads promptly; a stream that ends with an error
    /// after `closing` fails its calls unanswered as possibly processed (they may have run).
    #[tokio::test]
    async fn a_call_fails_alone_and_a_large_frame_passes() {
        let (url, mut pipes) = pipe_server().await;
        let link = Link::new(&url, Settings::default()).expect("a URL");
        let spawn = |id: u64| {
            let link = link.clone();
            tokio::spawn(async move {
                let answer = link.call(handle(id)).await?;
                let collected = answer.into_body().collect().await.map_err(|s| TransportError::pipe_lost(s, false))?;
                Ok::<_, TransportError>(collected.to_bytes().len())
            })
        };
        let failing = spawn(1);
        let mut served = pipes.recv().await.expect("a pipe");
        let call = next_call(&mut served).await.call;
        let failed = pb::PipeFrame { call, end: true, code: 13, message: "it broke".into(), ..Default::default() };
        served.frames.send(Answer::Frame(failed)).expect("sent");
        let error = failing.await.expect("joined").expect_err("failed");
        assert!(!error.never_processed(), "{error}");
        let status = error.into_status();
        assert_eq!((status.code(), status.message()), (tonic::Code::Internal, "it broke"));

        let large = spawn(2);
        let call = next_call(&mut served).await.call;
        let big = "y".repeat(CALL_BUFFER + 1);
        served.frames.send(Answer::Frame(frame(call, &big, true))).expect("sent");
        assert!(large.await.expect("joined").expect("whole") > CALL_BUFFER, "the large frame whole");

        let unanswered = spawn(3);
        let call = next_call(&mut served).await;
        assert!(call.call > 0);
        served.frames.send(Answer::Frame(pb::PipeFrame { closing: true, ..Default::default() })).expect("sent");
        served.frames.send(Answer::End("13")).expect("sent");
        let error = unanswered.await.expect("joined").expect_err("failed");
        assert!(!error.never_processed(), "an error after `closing` may have run it: {error}");
    }

    /// A pipe that breaks fails its calls under way as a broken connection does (not as never
    /// processed); a malformed frame breaks it.
    #[tokio::test]
    async fn a_broken_pipe_fails_its_calls() {
        let (url, mut pipes) = pipe_server().await;
        let link = Link::new(&url, Settings::default()).expect("a URL");
        let waiting = spawn_call(&link, 1);
        let mut served = pipes.recv().await.expect("a pipe");
        next_call(&mut served).await;
        served.frames.send(Answer::Data(prefixed(b"\xff\xff\xff"))).expect("sent");
        let error = waiting.await.expect("joined").expect_err("broken");
        assert!(!error.never_processed(), "{error}");
        assert!(error.to_string().contains("PipeFrame"), "{error}");
    }

    /// A caller that leaves its answer unread past [`CALL_BUFFER`] has its call ended: it reads
    /// `RESOURCE_EXHAUSTED` after what was kept, and the service is told to cancel it; the other
    /// calls on the pipe go on.
    #[tokio::test]
    async fn a_caller_that_reads_too_slowly_loses_its_call() {
        let (url, mut pipes) = pipe_server().await;
        let link = Link::new(&url, Settings::default()).expect("a URL");
        let slow = spawn_call(&link, 1);
        let mut served = pipes.recv().await.expect("a pipe");
        let call = next_call(&mut served).await.call;
        let chunk = "x".repeat(1024 * 1024);
        for _ in 0..(CALL_BUFFER / chunk.len() + 2) {
            served.frames.send(Answer::Frame(frame(call, &chunk, false))).expect("sent");
        }
        let answer = slow.await.expect("joined").expect("its first frame");
        let cancel = next_call(&mut served).await;
        assert_eq!((cancel.call, cancel.request.is_empty()), (call, true), "cancelled on the service");
        let mut body = answer.into_body();
        let mut kept = 0;
        let status = loop {
            match body.frame().await.expect("an end") {
                Ok(frame) => kept += frame.into_data().map(|d| d.len()).unwrap_or_default(),
                Err(status) => break status,
            }
        };
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        // What was kept: the buffer's worth, give or take a frame (the first was read at once).
        assert!(kept.abs_diff(CALL_BUFFER) <= 2 * chunk.len(), "{kept}");
        // The pipe goes on.
        let next = spawn_call(&link, 2);
        let call = next_call(&mut served).await.call;
        served.frames.send(Answer::Frame(frame(call, "fine", true))).expect("sent");
        next.await.expect("joined").expect("answered");
    }
}
