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
pub struct TransportError(tonic::transport::Error);

impl std::fmt::Display for TransportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// A connection over the network.
pub fn network(channel: Channel) -> GrpcChannel {
    BoxCloneSyncService::new(channel.map_err(TransportError))
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
