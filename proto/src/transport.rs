//! How a service reaches another's gRPC service: over the network (a tonic [`Channel`]), or,
//! when both run in one process (standalone mode), by calling the generated server directly.
//!
//! Both are the same type, so callers are written once. In process, the request still goes
//! through the generated client and server (protobuf encoding, metadata, interceptors, the
//! trace context), only without HTTP/2 framing, sockets and a second runtime task per call.

use std::convert::Infallible;

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
            Failure::NoReplica(_) | Failure::Request(_) => None,
        }
    }
}

/// A connection over the network.
pub fn network(channel: Channel) -> GrpcChannel {
    BoxCloneSyncService::new(channel.map_err(TransportError::from))
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
