//! Limits at the edge, each answered with a JSON-RPC error body:
//!
//! - Rate limits on `/mcp`: per client address and per authenticated caller, each a token
//!   bucket (requests per second, with a burst of twice that). Over the limit: 429 with
//!   `Retry-After`. Off (0) unless configured; idle keys are forgotten.
//! - Open streams per client (the caller, else its address): legacy GET streams and POST
//!   replies that turned into SSE streams. A client at the cap gets 429 with `Retry-After` for
//!   another GET stream, and for a POST that accepts a stream; plain JSON replies are never
//!   counted.
//! - Request headers: more than `max_header_bytes` in all is 431; on `/mcp`, a repeated
//!   `Mcp-Session-Id` or `Authorization`, or one that is not visible ASCII, is 400.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use http::{HeaderValue, StatusCode, header};
use http_body_util::BodyExt as _;
use mcp_proto::mcp::Principal;

pub struct Limits {
    per_ip: Option<DefaultKeyedRateLimiter<IpAddr>>,
    per_client: Option<DefaultKeyedRateLimiter<String>>,
    /// Most open streams per client (0: no cap).
    max_streams: usize,
    /// Open streams by client; a client leaves when its last stream closes.
    streams: Arc<Mutex<HashMap<StreamOwner, usize>>>,
}

fn limiter<K: std::hash::Hash + Eq + Clone>(per_second: u32) -> Option<DefaultKeyedRateLimiter<K>> {
    let rate = NonZeroU32::new(per_second)?;
    let burst = NonZeroU32::new(per_second.saturating_mul(2)).unwrap_or(rate);
    Some(RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst)))
}

impl Limits {
    pub fn new(per_ip_per_second: u32, per_client_per_second: u32) -> Self {
        Self {
            per_ip: limiter(per_ip_per_second),
            per_client: limiter(per_client_per_second),
            max_streams: 0,
            streams: Arc::default(),
        }
    }

    /// Cap the streams one client may keep open (0: no cap).
    pub fn with_stream_cap(mut self, max_streams_per_client: usize) -> Self {
        self.max_streams = max_streams_per_client;
        self
    }

    /// Admit a request that opens (`GET`) or may open (a `POST` accepting SSE) a stream: `Err`
    /// when the client — the caller when signed in, else `ip` — already has the most allowed.
    pub fn admit_stream(
        &self,
        caller: Option<&Principal>,
        ip: IpAddr,
        may_stream: bool,
    ) -> Result<StreamKey, TooManyStreams> {
        // Without a cap, or for a request that cannot stream, there is nothing to count.
        if !may_stream || self.max_streams == 0 {
            return Ok(StreamKey(None));
        }
        let key = match caller {
            Some(p) => StreamOwner::Caller(p.subject.clone()),
            None => StreamOwner::Address(ip),
        };
        let open = self.streams.lock().map(|m| m.get(&key).copied().unwrap_or(0)).unwrap_or(0);
        if open >= self.max_streams {
            metrics::counter!("gateway_streams_refused_total").increment(1);
            return Err(TooManyStreams);
        }
        Ok(StreamKey(Some(key)))
    }

    /// Count `resp` against its client while it streams (SSE), until its body is dropped.
    pub fn hold_stream(&self, key: StreamKey, resp: Response) -> Response {
        let streaming = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let Some(key) = key.0.filter(|_| streaming) else { return resp };
        if let Ok(mut m) = self.streams.lock() {
            *m.entry(key.clone()).or_insert(0) += 1;
        }
        let open = OpenStream { streams: self.streams.clone(), key };
        // The closure owns the guard: it goes when the body does (ended or the client left).
        resp.map(|body| {
            axum::body::Body::new(body.map_frame(move |frame| {
                let _ = &open;
                frame
            }))
        })
    }

    /// `Err`: over the limit, with how long to wait.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), Limited> {
        match &self.per_ip {
            Some(l) => l.check_key(&ip).map_err(|n| Limited(n.wait_time_from(DefaultClock::default().now()))),
            None => Ok(()),
        }
    }

    pub fn check_client(&self, subject: &str) -> Result<(), Limited> {
        match &self.per_client {
            Some(l) => {
                l.check_key(&subject.to_owned()).map_err(|n| Limited(n.wait_time_from(DefaultClock::default().now())))
            }
            None => Ok(()),
        }
    }

    /// Forget keys that have been idle (bounded memory).
    pub fn forget_idle(&self) {
        if let Some(l) = &self.per_ip {
            l.retain_recent();
        }
        if let Some(l) = &self.per_client {
            l.retain_recent();
        }
    }
}

/// At the stream cap: the 429 to send.
#[derive(Debug)]
pub struct TooManyStreams;

impl IntoResponse for TooManyStreams {
    fn into_response(self) -> Response {
        refusal(STREAM_RETRY, "Too many open streams: close one (or wait for a reply to finish) and retry")
    }
}

/// Whose streams a request counts against (from [`Limits::admit_stream`]); `None` when its
/// streams are not counted (no cap, or a request that cannot stream).
#[derive(Debug, Clone)]
pub struct StreamKey(Option<StreamOwner>);

/// Whose streams are counted: the caller when signed in, else the client's address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum StreamOwner {
    Caller(String),
    Address(IpAddr),
}

/// One open stream; dropping it closes its count.
struct OpenStream {
    streams: Arc<Mutex<HashMap<StreamOwner, usize>>>,
    key: StreamOwner,
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        if let Ok(mut m) = self.streams.lock()
            && let Some(n) = m.get_mut(&self.key)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.key);
            }
        }
    }
}

/// How long a client at the stream cap is asked to wait.
const STREAM_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// Headers every request is checked against, before anything else reads them: the refusal to
/// send, if they fail.
pub fn header_refusal(req: &Request, max_header_bytes: usize) -> Option<Response> {
    // One pass over the headers: their size, and the values of the two that must be single.
    let (mut size, mut session_ids, mut authorizations) = (0, Values::default(), Values::default());
    for (name, value) in req.headers() {
        size += name.as_str().len() + value.len() + 4;
        if name == header::AUTHORIZATION {
            authorizations.add(value);
        } else if name == crate::headers::SESSION_ID {
            session_ids.add(value);
        }
    }
    if size > max_header_bytes {
        metrics::counter!("gateway_header_refusals_total", "reason" => "too_large").increment(1);
        return Some(edge_error(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            &format!("Request header fields too large: more than {max_header_bytes} bytes"),
        ));
    }
    if req.uri().path() == "/mcp" {
        for (name, values) in [(&crate::headers::SESSION_ID, session_ids), (&header::AUTHORIZATION, authorizations)] {
            let problem = if values.count > 1 {
                Some("appears more than once")
            } else if values.first_invisible {
                Some("must be visible ASCII")
            } else {
                None
            };
            if let Some(problem) = problem {
                metrics::counter!("gateway_header_refusals_total", "reason" => "malformed").increment(1);
                return Some(edge_error(StatusCode::BAD_REQUEST, &format!("Bad Request: header {name} {problem}")));
            }
        }
    }
    None
}

/// The values of a header that must be single: how many, and whether the first is not visible
/// ASCII.
#[derive(Default)]
struct Values {
    count: usize,
    first_invisible: bool,
}

impl Values {
    fn add(&mut self, value: &http::HeaderValue) {
        if self.count == 0 {
            self.first_invisible = !crate::headers::visible_ascii(value.as_bytes());
        }
        self.count += 1;
    }
}

fn edge_error(status: StatusCode, message: &str) -> Response {
    let body = mcp_proto::jsonrpc::error(None, mcp_proto::vocab::ErrorCode::INVALID_REQUEST, message, None);
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// Over a rate limit: the 429 to send.
#[derive(Debug)]
pub struct Limited(pub std::time::Duration);

impl IntoResponse for Limited {
    fn into_response(self) -> Response {
        too_many(self.0)
    }
}

fn too_many(wait: std::time::Duration) -> Response {
    metrics::counter!("gateway_rate_limited_total").increment(1);
    refusal(wait, "Too many requests: slow down and retry later")
}

/// 429 with `Retry-After` and a JSON-RPC error.
fn refusal(wait: std::time::Duration, message: &str) -> Response {
    let mut resp = edge_error(StatusCode::TOO_MANY_REQUESTS, message);
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    if let Ok(v) = HeaderValue::from_str(&secs.max(1).to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_429_with_retry_after() {
        let limits = Limits::new(2, 0);
        let ip: IpAddr = [10, 0, 0, 1].into();
        let ok = (0..10).take_while(|_| limits.check_ip(ip).is_ok()).count();
        assert_eq!(ok, 4, "a burst of twice the rate");
        let refused = limits.check_ip(ip).expect_err("limited").into_response();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(refused.headers().contains_key(header::RETRY_AFTER));
        assert!(limits.check_ip([10, 0, 0, 2].into()).is_ok(), "per address");
        assert!(limits.check_client("anyone").is_ok(), "off when 0");
    }

    fn sse() -> Response {
        ([(header::CONTENT_TYPE, "text/event-stream")], "data: {}\n\n").into_response()
    }

    #[test]
    fn streams_are_capped_per_client_and_released() {
        let limits = Limits::new(0, 0).with_stream_cap(2);
        let ip: IpAddr = [10, 0, 0, 1].into();
        let a = limits.hold_stream(limits.admit_stream(None, ip, true).expect("first"), sse());
        // JSON replies are never counted.
        let json = limits.hold_stream(limits.admit_stream(None, ip, true).expect("admitted"), "{}".into_response());
        let b = limits.hold_stream(limits.admit_stream(None, ip, true).expect("second"), sse());
        let refused = limits.admit_stream(None, ip, true).expect_err("third stream").into_response();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(refused.headers().contains_key(header::RETRY_AFTER));
        assert!(limits.admit_stream(None, ip, false).is_ok(), "a request that cannot stream passes");
        let alice = Principal { subject: "alice".into(), ..Default::default() };
        assert!(limits.admit_stream(Some(&alice), ip, true).is_ok(), "a signed-in caller is its own client");
        assert!(limits.admit_stream(None, [10, 0, 0, 2].into(), true).is_ok(), "per address");
        drop((json, a));
        assert!(limits.admit_stream(None, ip, true).is_ok(), "room again once one closed");
        drop(b);
        assert!(limits.streams.lock().expect("lock").is_empty(), "no key left behind");
        let uncapped = Limits::new(0, 0);
        let _s = uncapped.hold_stream(uncapped.admit_stream(None, ip, true).expect("ok"), sse());
        assert!(uncapped.admit_stream(None, ip, true).is_ok());
    }
}
