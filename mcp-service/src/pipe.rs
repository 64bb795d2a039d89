//! mcp-service's side of `McpService/Pipe` ([`mcp_proto::pipe`]): `Handle` calls, many on one
//! HTTP/2 stream each way.
//!
//! The stream's answer is a body that reads the calls as they come, starts each one's work as
//! `Handle` would ([`crate::server::start`]), and writes each call's frames as a
//! [`pb::PipeFrame`] as the work sends them. The calls are polled as one set: only the calls
//! whose work or frames woke it are polled again, and none has a task of its own, as a `Handle`
//! call's work is polled inside its stream's body. A call's last frame carries its `end` when
//! the work has finished by the time the frame is sent (nearly always); otherwise the end
//! follows alone. A call cancelled by the caller has its work dropped, as a reset of its stream
//! does.
//!
//! When the service shuts down (`closing`), the body says so, answers every call that arrives
//! after that `not_taken` without starting it, and ends (`grpc-status: 0`) once the calls it
//! took have ended, so that the HTTP/2 connection's graceful shutdown is not held up by it. A
//! caller that breaks the rules (a message that does not decode, one larger than the limit, a
//! call number used twice) ends the stream with a status, every call with it.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{BufMut as _, Bytes, BytesMut};
use futures_util::stream::{AbortHandle, Abortable, SelectAll, Stream, StreamExt as _};
use mcp_proto::mcp as pb;
use mcp_proto::pipe::Messages;
use prost::Message as _;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::context::Frame;
use crate::dispatch::Engine;

/// The answer to one `Pipe` call: the frames of every call made on it.
pub struct PipeBody<B> {
    engine: Arc<Engine>,
    incoming: B,
    incoming_done: bool,
    messages: Messages,
    received: Vec<Bytes>,
    calls: SelectAll<Abortable<CallStream>>,
    /// The calls running, to cancel one.
    running: HashMap<u64, AbortHandle>,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    closing: bool,
    /// What is left to send, in order.
    out: VecDeque<Bytes>,
    ended: bool,
    /// `mcp_pipe_calls_total`.
    taken: metrics::Counter,
}

impl<B> Drop for PipeBody<B> {
    fn drop(&mut self) {
        metrics::gauge!("mcp_pipes_open").decrement(1.0);
    }
}

impl<B> PipeBody<B> {
    pub fn new(engine: Arc<Engine>, incoming: B, shutdown: CancellationToken) -> Self {
        metrics::gauge!("mcp_pipes_open").increment(1.0);
        PipeBody {
            engine,
            incoming,
            incoming_done: false,
            messages: Messages::new(mcp_proto::MAX_MESSAGE_BYTES),
            received: Vec::new(),
            calls: SelectAll::new(),
            running: HashMap::new(),
            shutdown: Box::pin(shutdown.cancelled_owned()),
            closing: false,
            out: VecDeque::new(),
            ended: false,
            taken: metrics::counter!("mcp_pipe_calls_total"),
        }
    }

    /// Take one `PipeCall`: start it, cancel one, or answer it `not_taken`.
    fn take(&mut self, message: Bytes) -> Result<(), tonic::Status> {
        let call = pb::PipeCall::decode(message)
            .map_err(|e| tonic::Status::internal(format!("failed to decode a PipeCall message: {e}")))?;
        if call.call == 0 {
            return Err(tonic::Status::internal("a PipeCall numbered 0"));
        }
        if call.request.is_empty() {
            if let Some(running) = self.running.remove(&call.call) {
                running.abort();
            }
            return Ok(());
        }
        if self.closing {
            write(&mut self.out, call.call, None, Flags { not_taken: true, ..Flags::default() });
            return Ok(());
        }
        if self.running.contains_key(&call.call) {
            return Err(tonic::Status::internal(format!("call number {} is already running", call.call)));
        }
        let request = pb::McpRequest::decode(call.request)
            .map_err(|e| tonic::Status::internal(format!("failed to decode the McpRequest message: {e}")))?;
        let mut metadata = tonic::metadata::MetadataMap::new();
        for (name, value) in [("traceparent", call.traceparent), ("tracestate", call.tracestate)] {
            if !value.is_empty()
                && let Ok(value) = value.parse()
            {
                metadata.insert(name, value);
            }
        }
        self.taken.increment(1);
        let (work, rx) = crate::server::start(self.engine.clone(), &metadata, request);
        let (abort, registration) = AbortHandle::new_pair();
        self.running.insert(call.call, abort);
        let stream = CallStream { call: call.call, work: Some(work), rx, held: None, done: false };
        self.calls.push(Abortable::new(stream, registration));
        Ok(())
    }

    /// End the stream with `status`, every call with it.
    fn fail(&mut self, status: &tonic::Status) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        tracing::warn!(code = ?status.code(), message = status.message(), "a Pipe call broke off");
        self.ended = true;
        self.out.clear();
        self.calls = SelectAll::new();
        self.running.clear();
        // The status's headers (`grpc-status`, `grpc-message`) as the stream's trailers.
        let mut trailers = status.clone().into_http::<tonic::body::Body>().into_parts().0.headers;
        trailers.remove(http::header::CONTENT_TYPE);
        Poll::Ready(Some(Ok(http_body::Frame::trailers(trailers))))
    }
}

impl<B> http_body::Body for PipeBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        loop {
            if let Some(piece) = this.out.pop_front() {
                return Poll::Ready(Some(Ok(http_body::Frame::data(piece))));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            let mut progress = false;
            if !this.closing && this.shutdown.as_mut().poll(cx).is_ready() {
                this.closing = true;
                write(&mut this.out, 0, None, Flags { closing: true, ..Flags::default() });
                progress = true;
            }
            if !this.incoming_done {
                match Pin::new(&mut this.incoming).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => {
                        progress = true;
                        if let Ok(data) = frame.into_data() {
                            let mut received = std::mem::take(&mut this.received);
                            let taken = this
                                .messages
                                .push(data, &mut received)
                                .and_then(|()| received.drain(..).try_for_each(|message| this.take(message)));
                            received.clear();
                            this.received = received;
                            if let Err(status) = taken {
                                return this.fail(&status);
                            }
                        }
                    }
                    // The caller reset the stream, or the connection broke: the calls end with it.
                    Poll::Ready(Some(Err(_))) => {
                        this.ended = true;
                        this.calls = SelectAll::new();
                        this.running.clear();
                        return Poll::Ready(None);
                    }
                    Poll::Ready(None) => {
                        progress = true;
                        this.incoming_done = true;
                        if this.messages.is_partial() {
                            return this.fail(&tonic::Status::internal("the stream ended within a message"));
                        }
                    }
                    Poll::Pending => {}
                }
            }
            if let Poll::Ready(Some(out)) = this.calls.poll_next_unpin(cx) {
                progress = true;
                match out {
                    Out::Frame { call, frame, end } => {
                        if end {
                            this.running.remove(&call);
                        }
                        let encoded = crate::grpc_server::encode(crate::server::message(frame));
                        write(&mut this.out, call, Some(encoded), Flags { end, ..Flags::default() });
                    }
                    Out::End(call) => {
                        this.running.remove(&call);
                        write(&mut this.out, call, None, Flags { end: true, ..Flags::default() });
                    }
                    Out::Failed(call) => {
                        this.running.remove(&call);
                        let failed = Flags { end: true, failed: Some(WORK_FAILED), ..Flags::default() };
                        write(&mut this.out, call, None, failed);
                    }
                }
            }
            if this.out.is_empty() && (this.incoming_done || this.closing) && this.calls.is_empty() {
                this.ended = true;
                let mut trailers = http::HeaderMap::with_capacity(1);
                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                return Poll::Ready(Some(Ok(http_body::Frame::trailers(trailers))));
            }
            if !progress {
                return Poll::Pending;
            }
        }
    }
}

/// What a call's stream yields.
enum Out {
    /// A frame; `end`: the call's last.
    Frame { call: u64, frame: Frame, end: bool },
    /// The call has ended, after the frames it sent.
    End(u64),
    /// The call's work panicked: it ends with `INTERNAL`, the other calls go on (with a stream
    /// per call, the stream's task ended with it, and the call's stream was reset).
    Failed(u64),
}

/// How a call whose work panicked ends.
const WORK_FAILED: (i32, &str) = (tonic::Code::Internal as i32, "the call's work failed on mcp-service");

/// One call: its work, polled here, and the frames it sends.
struct CallStream {
    call: u64,
    work: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    rx: mpsc::Receiver<Frame>,
    /// A frame received while looking whether the one before was the last.
    held: Option<Frame>,
    done: bool,
}

impl Stream for CallStream {
    type Item = Out;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Out>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Some(work) = self.work.as_mut() {
            // Polled here rather than on a task of its own: a panic must end this call alone.
            let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work.as_mut().poll(cx)));
            if !matches!(polled, Ok(Poll::Pending)) {
                // Its sender is gone with it (closed here too, so that the frames end even if
                // a sender outlived the work).
                self.work = None;
                self.rx.close();
                if polled.is_err() {
                    tracing::error!("a call's work panicked; the call ends with an error");
                    self.done = true;
                    return Poll::Ready(Some(Out::Failed(self.call)));
                }
            }
        }
        let next = match self.held.take() {
            Some(frame) => Poll::Ready(Some(frame)),
            None => self.rx.poll_recv(cx),
        };
        let call = self.call;
        match next {
            Poll::Ready(Some(frame)) => {
                // With the work finished, whether this frame is the last.
                let mut end = false;
                if self.work.is_none() {
                    match self.rx.poll_recv(cx) {
                        Poll::Ready(None) => {
                            end = true;
                            self.done = true;
                        }
                        Poll::Ready(Some(next)) => self.held = Some(next),
                        Poll::Pending => {}
                    }
                }
                Poll::Ready(Some(Out::Frame { call, frame, end }))
            }
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(Some(Out::End(call)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[derive(Clone, Copy, Default)]
struct Flags {
    end: bool,
    not_taken: bool,
    closing: bool,
    /// With `end`: the call failed (its gRPC code and why).
    failed: Option<(i32, &'static str)>,
}

/// Write a `PipeFrame` for `call` (0: the stream's own news) with gRPC's prefix, around an
/// encoded `McpFrame` (`frame`: its pieces as [`crate::grpc_server::encode`] made them) that is
/// sent from where it is when large, as a `Handle` answer sends it.
fn write(out: &mut VecDeque<Bytes>, call: u64, frame: Option<(Bytes, [Option<Bytes>; 2])>, flags: Flags) {
    use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint};
    let pieces: Vec<Bytes> = frame
        .map(|(first, rest)| std::iter::once(first).chain(rest.into_iter().flatten()).collect())
        .unwrap_or_default();
    let frame_len: usize = pieces.iter().map(Bytes::len).sum();
    let set = [flags.end, flags.not_taken, flags.closing];
    let mut length = 2 * set.iter().filter(|f| **f).count();
    if call != 0 {
        length += 1 + encoded_len_varint(call);
    }
    if frame_len > 0 {
        length += 1 + encoded_len_varint(frame_len as u64) + frame_len;
    }
    if let Some((code, message)) = flags.failed {
        length += 1 + encoded_len_varint(code as u64) + 1 + encoded_len_varint(message.len() as u64) + message.len();
    }
    let inline = frame_len < crate::grpc_server::SPLICE_FROM;
    let mut head = BytesMut::with_capacity(5 + 22 + if inline { frame_len + 6 } else { 0 });
    head.put_u8(0);
    head.put_u32(length as u32);
    if call != 0 {
        encode_key(1, WireType::Varint, &mut head);
        encode_varint(call, &mut head);
    }
    if frame_len > 0 {
        encode_key(2, WireType::LengthDelimited, &mut head);
        encode_varint(frame_len as u64, &mut head);
    }
    let flags_into = |buf: &mut BytesMut| {
        for (tag, on) in [3, 4, 5].into_iter().zip(set) {
            if on {
                encode_key(tag, WireType::Varint, buf);
                buf.put_u8(1);
            }
        }
        if let Some((code, message)) = flags.failed {
            encode_key(6, WireType::Varint, buf);
            encode_varint(code as u64, buf);
            encode_key(7, WireType::LengthDelimited, buf);
            encode_varint(message.len() as u64, buf);
            buf.put_slice(message.as_bytes());
        }
    };
    if inline {
        for piece in &pieces {
            head.extend_from_slice(piece);
        }
        flags_into(&mut head);
        out.push_back(head.freeze());
        return;
    }
    out.push_back(head.freeze());
    out.extend(pieces);
    let mut tail = BytesMut::new();
    flags_into(&mut tail);
    if !tail.is_empty() {
        out.push_back(tail.freeze());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `PipeFrame` written in pieces decodes as the message it stands for, small or large.
    #[test]
    fn a_pipe_frame_decodes_as_written() {
        for (size, call, flags) in [
            (0, 0, Flags { closing: true, ..Flags::default() }),
            (0, 7, Flags { not_taken: true, ..Flags::default() }),
            (0, 300, Flags { end: true, ..Flags::default() }),
            (40, 1, Flags::default()),
            (40, u64::MAX, Flags { end: true, ..Flags::default() }),
            (crate::grpc_server::SPLICE_FROM, 2, Flags::default()),
            (1 << 20, 3, Flags { end: true, ..Flags::default() }),
            (0, 9, Flags { end: true, failed: Some(WORK_FAILED), ..Flags::default() }),
            (1 << 20, 10, Flags { end: true, failed: Some(WORK_FAILED), ..Flags::default() }),
        ] {
            let frame = pb::McpFrame {
                json: Bytes::from(vec![b'x'; size]),
                disposition: pb::Disposition::Reply as i32,
                session_id: "s".into(),
                cache: None,
            };
            let encoded = (size > 0).then(|| crate::grpc_server::encode(frame.clone()));
            let mut out = VecDeque::new();
            write(&mut out, call, encoded, flags);
            let mut messages = Messages::new(usize::MAX);
            let mut received = Vec::new();
            for piece in out {
                messages.push(piece, &mut received).expect("well-formed");
            }
            assert!(!messages.is_partial());
            let [message] = received.as_slice() else { panic!("one message, size {size}") };
            let decoded = pb::PipeFrame::decode(message.clone()).expect("decodes");
            assert_eq!(
                (decoded.call, decoded.end, decoded.not_taken, decoded.closing),
                (call, flags.end, flags.not_taken, flags.closing),
                "size {size}"
            );
            let failed = flags.failed.map(|(code, message)| (code, message.to_owned()));
            assert_eq!((decoded.code != 0).then(|| (decoded.code, decoded.message.clone())), failed, "size {size}");
            if size == 0 {
                assert!(decoded.frame.is_empty());
            } else {
                let mut inner = Messages::new(usize::MAX);
                let mut frames = Vec::new();
                inner.push(decoded.frame, &mut frames).expect("a framed McpFrame");
                let [inner] = frames.as_slice() else { panic!("one McpFrame") };
                assert_eq!(pb::McpFrame::decode(inner.clone()).expect("decodes"), frame, "size {size}");
            }
        }
    }
}
