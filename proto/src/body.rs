//! Request bodies read whole, within a limit (and a time), by the services that take them whole.

use std::time::Duration;

use bytes::Bytes;

/// The pieces of a body as they arrive, gathered: a body of one piece is kept as it is (not
/// copied), the pieces of a longer one are joined in one buffer. Empty pieces are skipped.
#[derive(Default)]
pub struct Gathered {
    first: Option<Bytes>,
    joined: bytes::BytesMut,
}

impl Gathered {
    pub fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        match self.first.take() {
            None if self.joined.is_empty() => self.first = Some(data),
            held => {
                self.joined.extend_from_slice(&held.unwrap_or_default());
                self.joined.extend_from_slice(&data);
            }
        }
    }

    /// What has arrived so far.
    pub fn bytes(&self) -> &[u8] {
        self.first.as_deref().unwrap_or(&self.joined)
    }

    pub fn into_bytes(self) -> Bytes {
        self.first.unwrap_or_else(|| self.joined.freeze())
    }
}

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
