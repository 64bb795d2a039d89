//! One replica's HTTP/2 connection for gRPC calls, on the `h2` crate alone.
//!
//! Every RPC of the platform sends one message. A call here is one `send_request` and one
//! `send_data` that ends the stream, both queued on the connection before it writes: the
//! headers and the message leave in the same write, together with those of every other call
//! made meanwhile (see [`crate::socket`]). Through tonic's channel each call passed its buffer
//! task, hyper's dispatch to its connection task and a task hyper spawns for the body (which
//! waits for the stream's send window, granted only once the headers are out), and the
//! message left apart from its headers.
//!
//! What tonic's channel did and this does too:
//!
//! - connecting when first used, with a bounded wait and `TCP_NODELAY`;
//! - connecting again once the connection has ended: a call finds a connection that can take
//!   it, a new one if the open one has ended or announced its shutdown; a call under way when
//!   its connection ends fails (and [`crate::balance`] sends one never processed to another
//!   replica);
//! - HTTP/2 keep-alive: a PING every interval, the connection closed when none comes back
//!   within a bounded wait (20 s by default, as tonic's);
//! - flow control: received data is handed back to the window as it is read, with windows
//!   as large as hyper's (a 1 MiB answer does not wait for window updates).
//!
//! Only `http://` is spoken (the platform's services talk plain HTTP/2 inside the cluster;
//! TLS, when wanted, is the service mesh's).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::socket::Unvectored;
use crate::transport::TransportError;

/// The receive windows (hyper's client defaults): a stream may have 2 MiB in flight, the
/// connection 5 MiB.
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;

/// How a connection is set up.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// The longest wait for the TCP connection (h2's handshake only writes the preface; a peer
    /// that accepts and then says nothing is found out by the keep-alive).
    pub connect_timeout: Duration,
    /// How often to PING the other side; `None`: never.
    pub keep_alive: Option<Duration>,
    /// How long a PING may go unanswered before the connection is closed.
    pub ping_timeout: Duration,
    /// The largest frame the other side may send.
    pub max_frame_size: u32,
}

impl Default for Settings {
    /// Five seconds to connect; a keep-alive PING every 30 s, answered within 20 s; frames up to
    /// [`crate::balance::MAX_FRAME_SIZE`].
    fn default() -> Self {
        Settings {
            connect_timeout: Duration::from_secs(5),
            keep_alive: Some(Duration::from_secs(30)),
            ping_timeout: Duration::from_secs(20),
            max_frame_size: crate::balance::MAX_FRAME_SIZE,
        }
    }
}

/// A lazily connected HTTP/2 connection to one address; clones share it.
#[derive(Clone)]
pub struct Link(Arc<Shared>);

struct Shared {
    /// `host:port`, for connecting and for each request's `:authority`.
    authority: http::uri::Authority,
    settings: Settings,
    live: Mutex<Option<Live>>,
    /// Connections made so far.
    made: AtomicU64,
    /// Held while connecting, so that calls arriving meanwhile share one new connection; it
    /// holds the last failed attempt's error.
    connecting: tokio::sync::Mutex<Option<(std::io::ErrorKind, String)>>,
    /// Attempts to connect that failed, counted while `connecting` is held (read without
    /// waiting for it).
    failed: AtomicU64,
    /// The pipe that `Handle` calls take ([`crate::pipe`]), and a lock held while one opens.
    pipe: Mutex<Option<crate::pipe::Pipe>>,
    opening: tokio::sync::Mutex<()>,
    /// The service answered `Pipe` `UNIMPLEMENTED`: `Handle` calls take a stream each.
    no_pipe: std::sync::atomic::AtomicBool,
}

/// The authority of an `http://` URL.
fn authority_of(url: &str) -> Result<http::uri::Authority, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("not a URL ({e})"))?;
    if uri.scheme_str() != Some("http") {
        return Err("the scheme must be http (plain HTTP/2 inside the cluster)".into());
    }
    uri.authority().cloned().ok_or_else(|| "the host is missing".into())
}

/// An open connection. It closes by itself once every handle to it and every stream on it
/// has gone (h2 says GOAWAY then), so a link dropped leaves nothing running.
#[derive(Clone)]
struct Live {
    send: h2::client::SendRequest<Bytes>,
    /// Cancelled when the connection has ended.
    ended: CancellationToken,
    /// Which of the link's connections this is.
    number: u64,
}

impl Link {
    /// A link to `url` (`http://host:port`, nothing after the authority); nothing is connected
    /// until the first call.
    pub fn new(url: &str, settings: Settings) -> Result<Self, String> {
        Ok(Link(Arc::new(Shared {
            authority: authority_of(url)?,
            settings,
            live: Mutex::new(None),
            made: AtomicU64::new(0),
            connecting: tokio::sync::Mutex::new(None),
            failed: AtomicU64::new(0),
            pipe: Mutex::new(None),
            opening: tokio::sync::Mutex::new(()),
            no_pipe: std::sync::atomic::AtomicBool::new(false),
        })))
    }

    /// Whether [`Link::new`] would take `url`.
    pub fn check(url: &str) -> Result<(), String> {
        authority_of(url).map(drop)
    }

    /// Send `request` (its body read whole first) and return the answer as it arrives.
    pub async fn call(
        &self,
        request: http::Request<tonic::body::Body>,
    ) -> Result<http::Response<tonic::body::Body>, TransportError> {
        let (parts, message) = crate::transport::read_message(request).await?;
        self.send(parts, message).await
    }

    /// Send a request of head `parts` and one message, which ends the stream in the frame that
    /// carries it (an empty one: the head ends it), and return the answer as it arrives.
    pub async fn send(
        &self,
        mut parts: http::request::Parts,
        message: Bytes,
    ) -> Result<http::Response<tonic::body::Body>, TransportError> {
        // (A request that encodes to nothing would read as a cancel on a pipe: never sent.)
        if parts.uri.path() == crate::call::HANDLE_PATH
            && message.len() > crate::pipe::PREFIX
            && !self.0.no_pipe.load(Ordering::Relaxed)
            && let Some(answer) = self.send_on_pipe(&parts, &message).await?
        {
            return Ok(answer);
        }
        // A stream of its own: the request's URI in full (a call on the pipe needs only its
        // headers, and the pipe's own request is made so in `pipe`).
        parts.uri = self.full_uri(std::mem::take(&mut parts.uri))?;
        let (live, mut send) = self.ready().await?;
        let end = message.is_empty();
        let (response, mut stream) = send.send_request(http::Request::from_parts(parts, ()), end).map_err(|error| {
            self.forget(&live);
            TransportError::unsent(error)
        })?;
        let answered = async {
            if !end {
                stream.send_data(message, true)?;
            }
            response.await
        };
        let response = answered.await.map_err(|error| {
            // A reset ends one stream; anything else (GOAWAY, a broken socket, a protocol error)
            // the connection, and the next call connects again.
            if !error.is_reset() {
                self.forget(&live);
            }
            TransportError::stream(error)
        })?;
        Ok(response.map(|body| tonic::body::Body::new(Incoming { body, trailers: false })))
    }

    /// A `Handle` call on the connection's pipe ([`crate::pipe`]); `None` when the service does
    /// not answer `Pipe` (the call is then made on a stream of its own).
    async fn send_on_pipe(
        &self,
        parts: &http::request::Parts,
        message: &Bytes,
    ) -> Result<Option<http::Response<tonic::body::Body>>, TransportError> {
        let mut again = true;
        loop {
            let pipe = self.pipe(parts).await?;
            match pipe.call(parts, message).await {
                Ok(crate::pipe::Started::Answer(answer)) => return Ok(Some(answer)),
                Ok(crate::pipe::Started::Unsupported) => {
                    if !self.0.no_pipe.swap(true, Ordering::Relaxed) {
                        tracing::info!(
                            authority = %self.0.authority,
                            "the service does not answer Pipe; Handle calls take a stream each"
                        );
                    }
                    return Ok(None);
                }
                // A pipe that ended (its connection gone, its service shutting down) before it
                // took the call: once more on a new one, on a new connection.
                Err(error) if again && error.never_processed() => {
                    again = false;
                    self.forget_connection(pipe.connection());
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// `uri` with the link's scheme and authority, as HTTP/2 sends them.
    fn full_uri(&self, uri: http::Uri) -> Result<http::Uri, TransportError> {
        let mut parts = http::uri::Parts::from(uri);
        parts.scheme = Some(http::uri::Scheme::HTTP);
        parts.authority = Some(self.0.authority.clone());
        http::Uri::from_parts(parts).map_err(|e| TransportError::request(tonic::Status::internal(e.to_string())))
    }

    /// The connection's open pipe, or a new one.
    async fn pipe(&self, head: &http::request::Parts) -> Result<crate::pipe::Pipe, TransportError> {
        if let Some(pipe) = self.open_pipe() {
            return Ok(pipe);
        }
        let _opening = self.0.opening.lock().await;
        if let Some(pipe) = self.open_pipe() {
            return Ok(pipe);
        }
        let (live, send) = self.ready().await?;
        let mut head = head.clone();
        head.uri = self.full_uri(std::mem::take(&mut head.uri))?;
        let pipe = crate::pipe::Pipe::open(send, head, live.number).inspect_err(|_| self.forget(&live))?;
        *self.0.pipe.lock().unwrap_or_else(|p| p.into_inner()) = Some(pipe.clone());
        Ok(pipe)
    }

    /// The pipe, while it takes calls and its connection is the link's.
    fn open_pipe(&self) -> Option<crate::pipe::Pipe> {
        let live = self.current_number()?;
        let guard = self.0.pipe.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().filter(|pipe| pipe.is_open() && pipe.connection() == live).cloned()
    }

    /// A connection ready to take a call: the open one or, when that can take no more (it has
    /// ended, or announced its shutdown), a new one.
    async fn ready(&self) -> Result<(Live, h2::client::SendRequest<Bytes>), TransportError> {
        let mut attempts = 0;
        loop {
            let live = self.live().await?;
            match live.send.clone().ready().await {
                Ok(send) => return Ok((live, send)),
                Err(error) => {
                    self.forget(&live);
                    attempts += 1;
                    if attempts == 2 {
                        return Err(TransportError::unsent(error));
                    }
                }
            }
        }
    }

    /// The open connection, or a new one. Calls that waited while an attempt to connect failed
    /// fail with its error rather than each trying in turn (each could wait the whole timeout).
    async fn live(&self) -> Result<Live, TransportError> {
        if let Some(live) = self.current() {
            return Ok(live);
        }
        let failed_before = self.0.failed.load(Ordering::Acquire);
        let mut last_error = self.0.connecting.lock().await;
        if let Some(live) = self.current() {
            return Ok(live);
        }
        // Exact: the count changes only while the lock is held.
        if self.0.failed.load(Ordering::Acquire) != failed_before
            && let Some((kind, message)) = &*last_error
        {
            return Err(TransportError::connect(std::io::Error::new(*kind, message.clone())));
        }
        match self.connect().await {
            Ok(live) => {
                // A new connection (perhaps to a newer service at the same address) tries the
                // pipe again.
                self.0.no_pipe.store(false, Ordering::Relaxed);
                *self.0.live.lock().unwrap_or_else(|p| p.into_inner()) = Some(live.clone());
                Ok(live)
            }
            Err(error) => {
                *last_error = Some((error.kind(), error.to_string()));
                self.0.failed.fetch_add(1, Ordering::Release);
                Err(TransportError::connect(error))
            }
        }
    }

    /// Which connection [`Link::current`] would give, without a handle to it (a handle's clone
    /// and drop each take h2's and the token's locks).
    fn current_number(&self) -> Option<u64> {
        let guard = self.0.live.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().filter(|live| !live.ended.is_cancelled()).map(|live| live.number)
    }

    fn current(&self) -> Option<Live> {
        let guard = self.0.live.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().filter(|live| !live.ended.is_cancelled()).cloned()
    }

    /// Stop using `live` for new calls (a call saw it fail); the calls under way on it finish
    /// there, and the next call connects again.
    fn forget(&self, live: &Live) {
        self.forget_connection(live.number);
    }

    /// [`Link::forget`] the connection numbered `number`, if it is still the link's.
    fn forget_connection(&self, number: u64) {
        let mut guard = self.0.live.lock().unwrap_or_else(|p| p.into_inner());
        if guard.as_ref().is_some_and(|held| held.number == number) {
            *guard = None;
        }
    }

    async fn connect(&self) -> Result<Live, std::io::Error> {
        let settings = self.0.settings;
        let host = self.0.authority.host().trim_start_matches('[').trim_end_matches(']');
        let port = self.0.authority.port_u16().unwrap_or(80);
        let handshake = async {
            let tcp = TcpStream::connect((host, port)).await?;
            tcp.set_nodelay(true)?;
            h2::client::Builder::new()
                .enable_push(false)
                .initial_window_size(STREAM_WINDOW)
                .initial_connection_window_size(CONNECTION_WINDOW)
                // HTTP/2 allows frames of 16 KiB to 16 MiB (h2 panics outside).
                .max_frame_size(settings.max_frame_size.clamp(16 * 1024, 16 * 1024 * 1024 - 1))
                // hyper's client limits: streams opened before the server's SETTINGS arrive, and
                // the size of a received header list.
                .initial_max_send_streams(100)
                .max_header_list_size(16 * 1024)
                .handshake::<_, Bytes>(Unvectored::new(tcp))
                .await
                .map_err(std::io::Error::other)
        };
        let (send, connection) = tokio::time::timeout(settings.connect_timeout, handshake)
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out"))??;
        let ended = CancellationToken::new();
        let pings = settings.keep_alive.map(|every| (every, settings.ping_timeout));
        tokio::spawn(drive(connection, pings, ended.clone()));
        Ok(Live { send, ended, number: self.0.made.fetch_add(1, Ordering::Relaxed) })
    }
}

/// Run `connection` until it ends (its handles and streams all gone, or the other side closed
/// it) or a keep-alive PING (`pings`: every, timeout) goes unanswered.
async fn drive(
    mut connection: h2::client::Connection<Unvectored, Bytes>,
    pings: Option<(Duration, Duration)>,
    ended: CancellationToken,
) {
    let mut pings = pings.and_then(|(every, timeout)| connection.ping_pong().map(|p| (p, every, timeout)));
    loop {
        tokio::select! {
            outcome = &mut connection => {
                if let Err(error) = outcome {
                    tracing::debug!(%error, "HTTP/2 connection ended");
                }
                break;
            }
            answered = ping(pings.as_mut()) => {
                if !answered {
                    tracing::warn!("HTTP/2 keep-alive PING unanswered; closing the connection");
                    break;
                }
            }
        }
    }
    ended.cancel();
}

/// Wait one interval, PING, and say whether the PONG came back in time (never, without pings).
async fn ping(pings: Option<&mut (h2::PingPong, Duration, Duration)>) -> bool {
    let Some((pinger, every, timeout)) = pings else { return std::future::pending().await };
    tokio::time::sleep(*every).await;
    matches!(tokio::time::timeout(*timeout, pinger.ping(h2::Ping::opaque())).await, Ok(Ok(_)))
}

/// A response body: the data, each piece handed back to the flow-control window as it is
/// read, then the trailers (where gRPC puts the call's status).
struct Incoming {
    body: h2::RecvStream,
    trailers: bool,
}

impl http_body::Body for Incoming {
    type Data = Bytes;
    /// As a gRPC status (see [`crate::transport::status_of`]), which tonic's decoder keeps.
    type Error = tonic::Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        if !self.trailers {
            match ready!(self.body.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = self.body.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(crate::transport::status_of(&error)))),
                None => self.trailers = true,
            }
        }
        match ready!(self.body.poll_trailers(cx)) {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(error) => Poll::Ready(Some(Err(crate::transport::status_of(&error)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use http_body_util::BodyExt as _;

    use super::*;

    /// How the test's HTTP/2 server treats a connection after its first request.
    #[derive(Clone, Copy)]
    enum After {
        /// Answers every request.
        Serving,
        /// Closes the connection.
        Closing,
        /// Stops reading it (a peer that hangs: PINGs go unanswered).
        Hanging,
    }

    /// An HTTP/2 server on `listener` answering each request with its URI, the length of its
    /// message and the message as data (padded to 3 MiB for a path ending in `/large`) and
    /// `grpc-status: 0` as trailers (13 when the message did not come in one frame that ended
    /// the stream); returns the connections accepted.
    fn serve(listener: tokio::net::TcpListener, after: After) -> Arc<AtomicUsize> {
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut conn = h2::server::handshake(tcp).await.expect("handshake");
                    while let Some(Ok((request, respond))) = conn.accept().await {
                        tokio::spawn(answer_one(request, respond));
                        if !matches!(after, After::Serving) {
                            // Let the answer out, then close the connection or stop reading it.
                            let _ = tokio::time::timeout(Duration::from_millis(100), conn.accept()).await;
                            if matches!(after, After::Hanging) {
                                std::future::pending::<()>().await;
                            }
                            return;
                        }
                    }
                });
            }
        });
        accepted
    }

    async fn answer_one(request: http::Request<h2::RecvStream>, mut respond: h2::server::SendResponse<Bytes>) {
        let (parts, mut body) = request.into_parts();
        if parts.uri.path() == crate::pipe::PIPE_PATH {
            // As a service that does not know `Pipe` (tonic's answer: a status alone).
            let refused =
                http::Response::builder().header("content-type", "application/grpc").header("grpc-status", "12");
            let _ = respond.send_response(refused.body(()).expect("test setup"), true);
            return;
        }
        let mut received = Vec::new();
        // Whether the message came in one frame that ended the stream (or, empty, with the head).
        let mut pieces = 0;
        let mut in_one_frame = body.is_end_stream();
        while let Some(Ok(data)) = body.data().await {
            let _ = body.flow_control().release_capacity(data.len());
            received.extend_from_slice(&data);
            pieces += 1;
            in_one_frame = pieces == 1 && body.is_end_stream();
        }
        let mut answer =
            format!("{} {} {}", parts.uri, received.len(), String::from_utf8_lossy(&received)).into_bytes();
        if parts.uri.path().ends_with("/large") {
            answer.resize(3 * 1024 * 1024, b'.');
        }
        let response = http::Response::builder().header("content-type", "application/grpc");
        let Ok(mut send) = respond.send_response(response.body(()).expect("test setup"), false) else { return };
        let _ = send.send_data(Bytes::from(answer), false);
        let mut trailers = http::HeaderMap::new();
        // INTERNAL when the message did not end the stream in the frame that carried it.
        trailers.insert("grpc-status", http::HeaderValue::from_static(if in_one_frame { "0" } else { "13" }));
        let _ = send.send_trailers(trailers);
    }

    async fn server(after: After) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("test setup");
        let url = format!("http://{}", listener.local_addr().expect("test setup"));
        (url, serve(listener, after))
    }

    fn request(path: &str, message: &'static [u8]) -> http::Request<tonic::body::Body> {
        let mut request =
            http::Request::new(tonic::body::Body::new(http_body_util::Full::new(Bytes::from_static(message))));
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = path.parse().expect("test setup");
        request
    }

    /// The answer's data as text and its `grpc-status` trailer (within 10 s).
    async fn answer(link: &Link, path: &str) -> Result<(String, String), TransportError> {
        let whole = async {
            let response = link.call(request(path, b"hello")).await?;
            let collected = response.into_body().collect().await.expect("a whole answer");
            let status =
                collected.trailers().and_then(|t| t.get("grpc-status")).map(|v| v.to_str().unwrap_or("").to_owned());
            Ok((String::from_utf8_lossy(&collected.to_bytes()).into_owned(), status.unwrap_or_default()))
        };
        tokio::time::timeout(Duration::from_secs(10), whole).await.expect("an answer within 10 s")
    }

    /// Wait (at most 5 s) until the link holds no open connection.
    async fn until_ended(link: &Link) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while link.current().is_some() {
            assert!(tokio::time::Instant::now() < deadline, "the connection was not seen to end");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Calls made together before any connection share one new connection; each goes out with
    /// the link's scheme and authority and its whole message, in one frame that ends the
    /// stream, and its answer's data and trailers come back.
    #[tokio::test]
    async fn calls_go_out_whole_and_their_answers_come_back_with_trailers() {
        let (url, accepted) = server(After::Serving).await;
        let link = Link::new(&url, Settings::default()).expect("a URL");
        let mut together = tokio::task::JoinSet::new();
        for _ in 0..20 {
            let link = link.clone();
            together.spawn(async move { answer(&link, "/a/b").await.map(drop) });
        }
        while let Some(done) = together.join_next().await {
            done.expect("joined").expect("an answer");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "one connection for every call");
        for path in ["/mcp.v1.McpService/Handle", "/grpc.health.v1.Health/Check"] {
            let (data, status) = answer(&link, path).await.expect("an answer");
            assert_eq!(data, format!("{url}{path} 5 hello"));
            assert_eq!(status, "0");
        }
        // A message too short to be a request never goes on a pipe; a request does, and a
        // server that does not answer `Pipe` gets it on a stream of its own (and the next ones).
        assert!(!link.0.no_pipe.load(Ordering::Relaxed), "no pipe tried yet");
        let message = b"\0\0\0\0\x02hi";
        let response = link.call(request("/mcp.v1.McpService/Handle", message)).await.expect("an answer");
        let data = response.into_body().collect().await.expect("whole").to_bytes();
        assert_eq!(
            &data[..],
            format!("{url}/mcp.v1.McpService/Handle 7 ").as_bytes().iter().chain(message).copied().collect::<Vec<u8>>()
        );
        assert!(link.0.no_pipe.load(Ordering::Relaxed), "the pipe was tried and refused");
        assert!(link.open_pipe().is_none());
    }

    /// Received data is handed back to the flow-control window as it is read: answers of 3 MiB,
    /// each more than a stream's 2 MiB window, come whole on one connection.
    #[tokio::test]
    async fn large_answers_keep_flowing() {
        let (url, accepted) = server(After::Serving).await;
        let link = Link::new(&url, Settings::default()).expect("a URL");
        for _ in 0..3 {
            let (data, _) = answer(&link, "/a/large").await.expect("an answer");
            assert_eq!(data.len(), 3 * 1024 * 1024);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    /// A connection the other side closed is made again for the next call.
    #[tokio::test]
    async fn a_connection_that_ended_is_made_again_for_the_next_call() {
        let (url, accepted) = server(After::Closing).await;
        let link = Link::new(&url, Settings::default()).expect("a URL");
        for round in 1..=3 {
            answer(&link, "/a/b").await.expect("an answer");
            until_ended(&link).await;
            assert_eq!(accepted.load(Ordering::SeqCst), round);
        }
    }

    /// A peer that stops answering is found out by the keep-alive PING; the next call connects
    /// again instead of waiting on it for good.
    #[tokio::test]
    async fn an_unanswered_ping_closes_the_connection() {
        let (url, accepted) = server(After::Hanging).await;
        let settings = Settings {
            keep_alive: Some(Duration::from_millis(50)),
            ping_timeout: Duration::from_millis(100),
            ..Settings::default()
        };
        let link = Link::new(&url, settings).expect("a URL");
        answer(&link, "/a/b").await.expect("an answer");
        until_ended(&link).await;
        answer(&link, "/a/b").await.expect("an answer on a new connection");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    /// Nothing listening: the call fails as one the other side never processed (so a pool may
    /// send it to another replica), with the status UNAVAILABLE; once a server listens there,
    /// the next call connects.
    #[tokio::test]
    async fn a_refused_connection_was_never_processed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("test setup");
        let addr = listener.local_addr().expect("test setup");
        drop(listener);
        let link = Link::new(&format!("http://{addr}"), Settings::default()).expect("a URL");
        let error = answer(&link, "/a/b").await.expect_err("refused");
        assert!(error.never_processed(), "{error}");
        assert!(error.to_string().contains("cannot connect"), "{error}");
        // What the generated client makes of it: UNAVAILABLE, which callers treat as passing.
        let status = tonic::Status::from_error(Box::new(error));
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        let accepted = serve(tokio::net::TcpListener::bind(addr).await.expect("the port again"), After::Serving);
        answer(&link, "/a/b").await.expect("an answer once the server listens");
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    /// Calls made together while an attempt to connect hangs (the server's queue of
    /// connections waiting to be accepted is full, so the attempt is neither refused nor
    /// answered) share that one attempt and fail with its error when it times out, rather than
    /// each waiting out the timeout in turn.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn calls_waiting_on_a_failing_attempt_fail_with_it() {
        let socket = tokio::net::TcpSocket::new_v4().expect("test setup");
        socket.bind("127.0.0.1:0".parse().expect("test setup")).expect("test setup");
        let full = socket.listen(1).expect("test setup");
        let addr = full.local_addr().expect("test setup");
        // Connections are queued until the queue is full; the next one then hangs (Linux drops
        // the SYN of a connection its full queue cannot take).
        let mut queued = Vec::new();
        loop {
            match tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(addr)).await {
                Ok(Ok(tcp)) => queued.push(tcp),
                Ok(Err(e)) => panic!("a connection was refused rather than queued: {e}"),
                Err(_) => break,
            }
            assert!(queued.len() < 64, "the listener's queue never filled");
        }
        let timeout = Duration::from_millis(500);
        let link = Link::new(&format!("http://{addr}"), Settings { connect_timeout: timeout, ..Settings::default() })
            .expect("a URL");
        let mut together = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let link = link.clone();
            together.spawn(async move { answer(&link, "/a/b").await.map(drop) });
        }
        while let Some(done) = together.join_next().await {
            let error = done.expect("joined").expect_err("no connection");
            assert!(error.never_processed(), "{error}");
            assert!(error.to_string().contains("timed out"), "{error}");
        }
        // One attempt, not one each in turn (each would have waited out the timeout).
        assert_eq!(link.0.failed.load(Ordering::SeqCst), 1, "one attempt for every call");
        drop((full, queued));
    }

    #[test]
    fn only_plain_http_urls_make_links() {
        assert!(Link::new("http://127.0.0.1:1", Settings::default()).is_ok());
        assert!(Link::new("http://mcp-service", Settings::default()).is_ok());
        let https = Link::new("https://127.0.0.1:1", Settings::default()).err().expect("refused");
        assert!(https.contains("http"), "{https}");
        assert!(Link::new("not a url", Settings::default()).is_err());
    }
}
