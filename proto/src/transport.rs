//! How a service reaches another's gRPC service: over the network (a tonic [`Channel`]), or,
//! when both run in one process (standalone mode), by calling the generated server directly.
//!
//! Both are the same type, so callers are written once. In process, the request still goes
//! through the generated client and server (protobuf encoding, metadata, interceptors, the
//! trace context), only without HTTP/2 framing, sockets and a second runtime task per call.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::transport::Channel;
use tower::ServiceExt as _;
use tower::util::BoxCloneSyncService;

/// A gRPC connection to another component, over the network or in process.
pub type GrpcChannel = BoxCloneSyncService<http::Request<Body>, http::Response<Body>, TransportError>;

/// Why a call did not reach the other component (a concrete type: the generated clients'
/// futures stay `Send` with it, where a boxed trait object as error type trips the compiler).
#[derive(Debug)]
pub struct TransportError(Failure);

#[derive(Debug)]
enum Failure {
    Connection(tonic::transport::Error),
    /// A `dns:///` target with no address (see [`crate::balance`]).
    NoReplica(&'static str),
    /// The request body could not be read (to be kept for a retry).
    Request(tonic::Status),
}

impl TransportError {
    pub(crate) fn no_replica(component: &'static str) -> Self {
        TransportError(Failure::NoReplica(component))
    }

    pub(crate) fn request(status: tonic::Status) -> Self {
        TransportError(Failure::Request(status))
    }

    /// Whether the other side certainly did not process the request: the connection was
    /// refused, the HTTP/2 stream was refused, or the request was never sent (the connection
    /// had closed, or the server had announced a graceful shutdown before it).
    pub fn never_processed(&self) -> bool {
        let Failure::Connection(error) = &self.0 else { return false };
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
        while let Some(e) = cause {
            if let Some(io) = e.downcast_ref::<std::io::Error>()
                && io.kind() == std::io::ErrorKind::ConnectionRefused
            {
                return true;
            }
            if let Some(h2) = e.downcast_ref::<h2::Error>() {
                return h2.reason() == Some(h2::Reason::REFUSED_STREAM)
                    || (h2.is_go_away() && h2.is_remote() && h2.reason() == Some(h2::Reason::NO_ERROR));
            }
            if let Some(hyper) = e.downcast_ref::<hyper::Error>()
                && hyper.is_canceled()
            {
                return true;
            }
            cause = e.source();
        }
        false
    }
}

impl From<tonic::transport::Error> for TransportError {
    fn from(error: tonic::transport::Error) -> Self {
        TransportError(Failure::Connection(error))
    }
}

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Failure::Connection(e) => e.fmt(f),
            Failure::NoReplica(component) => {
                write!(f, "no replica of {component} is known (its name resolves to nothing)")
            }
            Failure::Request(status) => write!(f, "the request could not be read: {}", status.message()),
        }
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0 {
            Failure::Connection(e) => Some(e),
            // tonic finds the status in the chain and keeps its code.
            Failure::Request(status) => Some(status),
            Failure::NoReplica(_) => None,
        }
    }
}

/// A connection over the network.
pub fn network(channel: Channel) -> GrpcChannel {
    BoxCloneSyncService::new(OneFrame(channel))
}

/// `request`'s body read into one piece. Every RPC of the platform sends one message, and
/// tonic's encoder ends its body only when polled once more: HTTP/2 then sends the message and,
/// apart (often in a write of its own), an empty frame that ends the stream, which the other
/// side awaits before it starts the call (tonic reads a unary request to its end). A body in
/// one piece ([`in_one_frame`]) leaves in one frame that ends the stream. (The request's headers
/// still leave before it: hyper sends a body only once its stream has a send window, which
/// HTTP/2 grants after the headers are out.)
pub(crate) async fn read_message(
    request: http::Request<Body>,
) -> Result<(http::request::Parts, bytes::Bytes), TransportError> {
    let (parts, body) = request.into_parts();
    let bytes = http_body_util::BodyExt::collect(body).await.map_err(TransportError::request)?.to_bytes();
    Ok((parts, bytes))
}

/// A request whose body is `message`, sent in one frame (see [`read_message`]).
pub(crate) fn in_one_frame(parts: http::request::Parts, message: bytes::Bytes) -> http::Request<Body> {
    http::Request::from_parts(parts, Body::new(http_body_util::Full::new(message)))
}

/// A channel that sends each request's body in one frame ([`read_message`]).
#[derive(Clone)]
struct OneFrame(Channel);

impl tower::Service<http::Request<Body>> for OneFrame {
    type Response = http::Response<Body>;
    type Error = TransportError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx).map_err(TransportError::from)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        // The channel made ready goes with the call (it holds the call's place); a clone stays.
        let clone = self.0.clone();
        let mut ready = std::mem::replace(&mut self.0, clone);
        Box::pin(async move {
            let (parts, message) = read_message(request).await?;
            ready.call(in_one_frame(parts, message)).await.map_err(TransportError::from)
        })
    }
}

/// A connection to a generated server (`XxxServer::new(..)`) in this process.
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
    use http_body::Body as _;
    use http_body_util::BodyExt as _;

    use super::*;

    /// A body as tonic's encoder makes it: one piece, then the end, known only when polled again.
    struct Streamed(Option<bytes::Bytes>);

    impl http_body::Body for Streamed {
        type Data = bytes::Bytes;
        type Error = tonic::Status;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>> {
            Poll::Ready(self.0.take().map(|b| Ok(http_body::Frame::data(b))))
        }
    }

    /// What HTTP/2 needs to send a body in one frame that ends the stream: after its one piece,
    /// the body says it has ended.
    #[tokio::test]
    async fn a_message_goes_in_one_frame_that_ends_the_stream() {
        let streamed = Body::new(Streamed(Some(bytes::Bytes::from_static(b"\0\0\0\0\x02hi"))));
        assert_eq!(streamed.size_hint().exact(), None);
        let (parts, message) = read_message(http::Request::new(streamed)).await.expect("read");
        assert_eq!(&message[..], b"\0\0\0\0\x02hi");
        let mut body = in_one_frame(parts, message).into_body();
        assert_eq!(body.size_hint().exact(), Some(7));
        assert!(!body.is_end_stream());
        let frame = body.frame().await.expect("a frame").expect("data");
        assert_eq!(frame.into_data().expect("data").len(), 7);
        assert!(body.is_end_stream(), "the body has ended with its one piece");
    }
}
