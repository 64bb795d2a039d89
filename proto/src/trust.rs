//! Service-to-service trust: mcp-service and registry-service accept calls only from their
//! callers, who present a shared token in the gRPC metadata (`authorization: Bearer …`),
//! compared in constant time. Configure the same `service_token` on the gateway, mcp-service
//! and registry-service (in Kubernetes, one Secret); without one, calls are not checked, which
//! is only right on loopback (standalone mode) or behind a network policy. The gRPC health
//! service stays open for probes.

use std::sync::{Arc, OnceLock};

use subtle::ConstantTimeEq as _;
use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::{Request, Status};

static OUTGOING: OnceLock<MetadataValue<tonic::metadata::Ascii>> = OnceLock::new();

/// The token this process presents on its outgoing calls (set once, at start).
pub fn set_outgoing(token: &str) -> Result<(), String> {
    let value = MetadataValue::try_from(format!("Bearer {token}"))
        .map_err(|_| "service_token: must be printable ASCII".to_owned())?;
    let _ = OUTGOING.set(value);
    Ok(())
}

/// A request to another service: the current trace, and the service token when configured.
pub fn outgoing<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    crate::telemetry::inject_grpc(request.metadata_mut());
    if let Some(token) = OUTGOING.get() {
        request.metadata_mut().insert("authorization", token.clone());
    }
    request
}

/// The server-side check: with a token configured, a call without it is `UNAUTHENTICATED`.
#[derive(Clone)]
pub struct Require(Option<Arc<str>>);

impl Require {
    pub fn new(token: Option<&str>) -> Self {
        Self(token.filter(|t| !t.is_empty()).map(|t| Arc::from(format!("Bearer {t}"))))
    }
}

impl Require {
    /// Whether a call with `metadata` may be served: without a configured token, always.
    pub fn check(&self, metadata: &tonic::metadata::MetadataMap) -> Result<(), Status> {
        let Some(expected) = &self.0 else { return Ok(()) };
        let given = metadata.get("authorization").map(|v| v.as_bytes()).unwrap_or_default();
        if bool::from(given.ct_eq(expected.as_bytes())) {
            Ok(())
        } else {
            Err(Status::unauthenticated("this service accepts calls only from its callers"))
        }
    }
}

impl Interceptor for Require {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        self.check(request.metadata())?;
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_required_when_configured() {
        let mut open = Require::new(None);
        assert!(open.call(Request::new(())).is_ok());
        let mut closed = Require::new(Some("s3cret"));
        assert_eq!(closed.call(Request::new(())).map_err(|s| s.code()).err(), Some(tonic::Code::Unauthenticated));
        let mut wrong = Request::new(());
        wrong.metadata_mut().insert("authorization", "Bearer s3cre7".parse().expect("ascii"));
        assert!(closed.call(wrong).is_err());
        let mut right = Request::new(());
        right.metadata_mut().insert("authorization", "Bearer s3cret".parse().expect("ascii"));
        assert!(closed.call(right).is_ok());
    }
}
