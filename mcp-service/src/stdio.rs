//! The stdio transport: newline-delimited JSON-RPC on stdin/stdout, logs on stderr.
//!
//! Messages are handled concurrently, except `initialize`, which is handled before the next
//! line is read so that the negotiated revision applies to everything after it. A
//! `notifications/cancelled` stops the named request, which then sends nothing more.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use mcp_proto::envelope::{self, Body};
use mcp_proto::mcp::{Disposition, Transport};
use serde_json::Value;
use tokio::io::AsyncReadExt as _;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError, Decoder as _};
use tokio_util::sync::CancellationToken;

use crate::context::{Context, Frame};
use crate::dispatch::Engine;
use crate::session::Session;

/// Longest accepted line (one message).
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// How long in-flight requests may finish after stdin closes.
const DRAIN: Duration = Duration::from_secs(5);

/// Serve one client on `input`/`output` until EOF or `shutdown`.
pub async fn serve<R, W>(engine: Arc<Engine>, input: R, output: W, shutdown: CancellationToken) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Frame>(64);
    let writer = tokio::spawn(write_frames(rx, output));
    // The connection is the session; it receives list-changed notifications like any other.
    let session = Arc::new(Session::stdio(tx.clone()));
    let session_key = engine.sessions.attach(session.clone());
    let ctx =
        Context { transport: Transport::Stdio, session: Some(session), accepts_stream: true, ..Context::default() };
    let in_flight: Arc<Mutex<HashMap<String, AbortHandle>>> = Arc::default();
    let mut tasks = JoinSet::new();
    let mut lines = Lines::new(input);

    loop {
        let line = tokio::select! {
            _ = shutdown.cancelled() => break,
            line = lines.next() => line,
        };
        let line = match line {
            None => break,
            Some(Ok(line)) => line,
            Some(Err(AnyDelimiterCodecError::MaxChunkLengthExceeded)) => {
                let json = mcp_proto::jsonrpc::error(
                    None,
                    mcp_proto::vocab::ErrorCode::INVALID_REQUEST,
                    &format!("Invalid request: message longer than {MAX_LINE} bytes"),
                    None,
                );
                let _ = tx.send(Frame::new(json, Disposition::Rejected)).await;
                continue;
            }
            Some(Err(AnyDelimiterCodecError::Io(e))) => {
                tracing::warn!(error = %e, "stdin read failed");
                break;
            }
        };
        if line.trim_ascii().is_empty() {
            continue;
        }
        // A first look, to route cancellation and keep `initialize` in order. A line that is
        // not UTF-8 is answered like any other unparsable one (-32700); the session goes on.
        let (method, id) = match envelope::parse_body(&line) {
            Ok(Body::Single(env)) => (env.method.to_string(), env.id_json().map(id_key)),
            _ => (String::new(), None),
        };
        if method == "notifications/cancelled" {
            cancel(&line, &in_flight);
            continue;
        }
        if method == "initialize" {
            engine.handle(&line, None, &ctx, &tx).await;
            continue;
        }
        let (engine, ctx, tx, registry) = (engine.clone(), ctx.clone(), tx.clone(), in_flight.clone());
        let key = id.clone();
        let handle = tasks.spawn(async move {
            engine.handle(&line, None, &ctx, &tx).await;
            if let Some(key) = key {
                registry.lock().map(|mut m| m.remove(&key)).ok();
            }
        });
        if let Some(id) = id
            && let Ok(mut m) = in_flight.lock()
        {
            m.insert(id, handle);
        }
    }

    // Let in-flight requests finish (bounded), then close the writer.
    let _ = tokio::time::timeout(DRAIN, async { while tasks.join_next().await.is_some() {} }).await;
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    engine.sessions.detach(&session_key);
    drop(ctx);
    drop(tx);
    writer.await.map_err(std::io::Error::other)?
}

/// A canonical form of an id, so `"\u0041"` and `"A"` name the same request.
fn id_key(raw: &str) -> String {
    serde_json::from_str::<Value>(raw).map(|v| v.to_string()).unwrap_or_else(|_| raw.to_owned())
}

fn cancel(line: &[u8], in_flight: &Mutex<HashMap<String, AbortHandle>>) {
    let Ok(msg) = serde_json::from_slice::<Value>(line) else {
        return;
    };
    let Some(id) = msg.pointer("/params/requestId") else {
        return;
    };
    let key = id.to_string();
    if let Some(handle) = in_flight.lock().ok().and_then(|mut m| m.remove(&key)) {
        tracing::info!(request_id = %key, "request cancelled by the client");
        handle.abort();
    }
}

async fn write_frames<W: AsyncWrite + Unpin>(mut rx: mpsc::Receiver<Frame>, mut out: W) -> std::io::Result<()> {
    while let Some(frame) = rx.recv().await {
        if frame.json.is_empty() {
            continue;
        }
        out.write_all(&frame.json).await?;
        out.write_all(b"\n").await?;
        // Flush when nothing else is queued, so bursts are written together.
        if rx.is_empty() {
            out.flush().await?;
        }
    }
    out.flush().await
}

/// Newline-delimited input with a length limit, as bytes (a line that is not UTF-8 is a bad
/// message, not a broken stream; a trailing CR is dropped). Unlike a framed stream, it keeps
/// reading after an oversize line (which it skips and reports), so one bad message does not
/// end the session.
struct Lines<R> {
    input: R,
    codec: AnyDelimiterCodec,
    buffer: BytesMut,
    eof: bool,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    fn new(input: R) -> Self {
        let codec = AnyDelimiterCodec::new_with_max_length(b"\n".to_vec(), Vec::new(), MAX_LINE);
        Self { input, codec, buffer: BytesMut::new(), eof: false }
    }

    async fn next(&mut self) -> Option<Result<Bytes, AnyDelimiterCodecError>> {
        loop {
            let decoded =
                if self.eof { self.codec.decode_eof(&mut self.buffer) } else { self.codec.decode(&mut self.buffer) };
            match decoded {
                Ok(Some(mut line)) => {
                    if line.ends_with(b"\r") {
                        line.truncate(line.len() - 1);
                    }
                    return Some(Ok(line));
                }
                Err(e) => return Some(Err(e)),
                Ok(None) if self.eof => return None,
                Ok(None) => {}
            }
            match self.input.read_buf(&mut self.buffer).await {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e) => return Some(Err(AnyDelimiterCodecError::Io(e))),
            }
        }
    }
}
