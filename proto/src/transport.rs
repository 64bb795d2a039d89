//! How a service reaches another's gRPC service: over the network (a [`crate::link::Link`]), or,
//! when both run in one process (standalone mode), by calling the generated server directly.
//!
//! Both are the same type, so callers are written once. In process, a request still goes
//! through what answers it over the network (the generated client and server; for `Handle`,
//! the gateway's [`crate::call`] and mcp-service's own answer): protobuf encoding, metadata,
//! the trace context, only without HTTP/2 framing and sockets (and without the service token's
//! check: the caller is the same process).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::body::Body;
use tower::ServiceExt as _;
use tower::util::BoxCloneSyncService;

/// A gRPC connection to another component, over the network or in process.
pub type GrpcChannel = BoxCloneSyncService<http::Request<Body>, http::Response<Body>, TransportError>;

/// Why a call did not reach the other component (a concrete type: the generated clients'
/// futures stay `Send` with it, where a boxed trait object as error type trips the compiler).
/// Its source is the gRPC status the call ends with (tonic finds it in the chain), coded as
/// gRPC says for HTTP/2 failures: a call that could not be made is `UNAVAILABLE`.
#[derive(Debug)]
pub struct TransportError {
    failure: Failure,
    status: tonic::Status,
}

#[derive(Debug)]
enum Failure {
    /// No connection could be made (refused, unreachable, timed out, or the handshake failed).
    Connect,
    /// The connection could not take the call (it had ended, or announced its shutdown).
    Unsent,
    /// The connection or the call's stream failed once the call was taken.
    Stream(h2::Error),
    /// A `dns:///` target with no address (see [`crate::balance`]).
    NoReplica,
    /// A call on a [`crate::pipe`] that the service did not take (it was shutting down).
    NotTaken,
    /// A call on a [`crate::pipe`] that ended without its answer: `true` when the service
    /// certainly did not take it (the pipe's own stream was refused).
    PipeLost(bool),
    /// The request body could not be read.
    Request,
}

impl TransportError {
    pub(crate) fn no_replica(component: &'static str) -> Self {
        let message = format!("no replica of {component} is known (its name resolves to nothing)");
        TransportError { failure: Failure::NoReplica, status: tonic::Status::unavailable(message) }
    }

    pub(crate) fn request(status: tonic::Status) -> Self {
        TransportError { failure: Failure::Request, status }
    }

    pub(crate) fn connect(error: std::io::Error) -> Self {
        TransportError {
            failure: Failure::Connect,
            status: tonic::Status::unavailable(format!("cannot connect: {error}")),
        }
    }

    pub(crate) fn unsent(error: h2::Error) -> Self {
        let status = tonic::Status::unavailable(format!("HTTP/2: the connection could not take the call: {error}"));
        TransportError { failure: Failure::Unsent, status }
    }

    pub(crate) fn stream(error: h2::Error) -> Self {
        TransportError { status: status_of(&error), failure: Failure::Stream(error) }
    }

    pub(crate) fn not_taken(why: &str) -> Self {
        let status = tonic::Status::unavailable(format!("the call was not taken: {why}"));
        TransportError { failure: Failure::NotTaken, status }
    }

    pub(crate) fn pipe_lost(status: tonic::Status, never_processed: bool) -> Self {
        TransportError { failure: Failure::PipeLost(never_processed), status }
    }

    /// Whether a stream that failed with `error` was certainly not processed (see
    /// [`TransportError::never_processed`]).
    pub(crate) fn stream_never_processed(error: &h2::Error) -> bool {
        error.reason() == Some(h2::Reason::REFUSED_STREAM)
            || (error.is_go_away() && error.is_remote() && error.reason() == Some(h2::Reason::NO_ERROR))
    }

    /// The gRPC status the call ends with.
    pub(crate) fn into_status(self) -> tonic::Status {
        self.status
    }

    /// Whether the other side certainly did not process the request: no connection was made,
    /// the connection could not take it, the HTTP/2 stream was refused, or the server had
    /// announced a graceful shutdown that left it out.
    pub fn never_processed(&self) -> bool {
        match &self.failure {
            Failure::Connect | Failure::Unsent | Failure::NotTaken => true,
            Failure::Stream(h2) => Self::stream_never_processed(h2),
            Failure::PipeLost(never) => *never,
            Failure::NoReplica | Failure::Request => false,
        }
    }
}

/// The gRPC status of a call that an HTTP/2 failure ended: a connection that broke or went away
/// is `UNAVAILABLE` (the call may be made again); a stream reset is coded by its reason, as
/// gRPC's HTTP/2 mapping says.
pub(crate) fn status_of(error: &h2::Error) -> tonic::Status {
    use h2::Reason;
    use tonic::Code;
    let code = if error.is_io() || error.is_go_away() {
        Code::Unavailable
    } else {
        match error.reason() {
            Some(Reason::REFUSED_STREAM) => Code::Unavailable,
            Some(Reason::CANCEL) => Code::Cancelled,
            Some(Reason::ENHANCE_YOUR_CALM) => Code::ResourceExhausted,
            Some(Reason::INADEQUATE_SECURITY) => Code::PermissionDenied,
            Some(_) => Code::Internal,
            None => Code::Unknown,
        }
    };
    tonic::Status::new(code, format!("HTTP/2: {error}"))
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.failure {
            Failure::Request => write!(f, "the request could not be read: {}", self.status.message()),
            _ => f.write_str(self.status.message()),
        }
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.status)
    }
}

/// A connection over the network to one address (see [`crate::link`]).
pub fn network(link: crate::link::Link) -> GrpcChannel {
    BoxCloneSyncService::new(Network(link))
}

/// `request`'s body read into one piece. Every RPC of the platform sends one message, and
/// tonic's encoder ends its body only when polled once more: sent as it comes, the message
/// and, apart, an empty frame that ends the stream would leave, and the other side awaits the
/// end before it starts the call (tonic reads a unary request to its end). Read whole, the
/// message leaves in one frame that ends the stream ([`crate::link::Link::send`]), and can be
/// sent again to another replica.
///
/// A body of one piece (as `crate::call` makes it) is taken as it is, with no buffer of
/// pieces allocated around it ([`crate::body::Gathered`]).
pub(crate) async fn read_message(
    request: http::Request<Body>,
) -> Result<(http::request::Parts, bytes::Bytes), TransportError> {
    use http_body_util::BodyExt as _;
    let (parts, mut body) = request.into_parts();
    let mut gathered = crate::body::Gathered::default();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.map_err(TransportError::request)?.into_data() {
            gathered.push(data);
        }
    }
    Ok((parts, gathered.into_bytes()))
}

#[derive(Clone)]
struct Network(crate::link::Link);

impl tower::Service<http::Request<Body>> for Network {
    type Response = http::Response<Body>;
    type Error = TransportError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The connection is made, or its readiness awaited, in `call`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let link = self.0.clone();
        Box::pin(async move { link.call(request).await })
    }
}

/// A connection to a service in this process: a generated server (`XxxServer::new(..)`), or
/// one that answers some methods itself before it (mcp-service's `InProcess`).
pub fn in_process<S>(server: S) -> GrpcChannel
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    BoxCloneSyncService::new(server.map_err(|never| match never {}))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body as tonic's encoder makes it: its pieces, then the end, known only when polled again.
    struct Streamed(Vec<bytes::Bytes>);

    impl http_body::Body for Streamed {
        type Data = bytes::Bytes;
        type Error = tonic::Status;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>> {
            let next = (!self.0.is_empty()).then(|| self.0.remove(0));
            Poll::Ready(next.map(|b| Ok(http_body::Frame::data(b))))
        }
    }

    /// A body whose end is known only after its last piece is read whole, in order.
    #[tokio::test]
    async fn a_message_is_read_whole() {
        let pieces = vec![bytes::Bytes::from_static(b"\0\0\0\0"), bytes::Bytes::from_static(b"\x02hi")];
        let request = http::Request::post("/mcp.Mcp/Call").body(Body::new(Streamed(pieces))).expect("request");
        let (parts, message) = read_message(request).await.expect("read");
        assert_eq!(&message[..], b"\0\0\0\0\x02hi");
        assert_eq!(parts.uri.path(), "/mcp.Mcp/Call");
        // One piece is taken as it is; three are joined in order; none is an empty message.
        let piece = bytes::Bytes::from_static(b"\0\0\0\0\x01x");
        let request = http::Request::post("/a").body(Body::new(Streamed(vec![piece.clone()]))).expect("request");
        let (_, message) = read_message(request).await.expect("read");
        assert_eq!(message.as_ptr(), piece.as_ptr(), "not copied");
        let three = ["a", "bc", "d"].map(|p| bytes::Bytes::from_static(p.as_bytes())).to_vec();
        let request = http::Request::post("/a").body(Body::new(Streamed(three))).expect("request");
        assert_eq!(&read_message(request).await.expect("read").1[..], b"abcd");
        let request = http::Request::post("/a").body(Body::new(Streamed(Vec::new()))).expect("request");
        assert!(read_message(request).await.expect("read").1.is_empty());
    }
}
