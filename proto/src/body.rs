//! Request bodies read whole, within a limit (and a time), by the services that take them whole.

use std::time::Duration;

use bytes::Bytes;

/// Why a request's body was not read whole.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    /// Longer than the limit (announced or as it arrived).
    TooLarge,
    /// The client's body ended in error (the connection broke, bad chunked framing).
    BrokeOff,
    /// It did not arrive within the time allowed.
    Timeout,
}

/// A request's body, whole, within `limit` bytes and `timeout` (when given); a length announced
/// over the limit is refused before any of it is read.
pub async fn read_whole(body: axum::body::Body, limit: usize, timeout: Option<Duration>) -> Result<Bytes, BodyError> {
    if http_body::Body::size_hint(&body).lower() > limit as u64 {
        return Err(BodyError::TooLarge);
    }
    let read = axum::body::to_bytes(body, limit);
    let read = match timeout {
        Some(timeout) => tokio::time::timeout(timeout, read).await.map_err(|_| BodyError::Timeout)?,
        None => read.await,
    };
    read.map_err(|e| {
        let too_large = std::iter::successors(Some(&e as &dyn std::error::Error), |e| e.source())
            .any(|e| e.is::<http_body_util::LengthLimitError>());
        if too_large { BodyError::TooLarge } else { BodyError::BrokeOff }
    })
}
