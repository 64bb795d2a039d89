//! Rate limits on `/mcp`: per client address and per authenticated caller, each a token bucket
//! (requests per second, with a burst of twice that). Over the limit: 429 with `Retry-After`
//! and a JSON-RPC error body. Off (0) unless configured; idle keys are forgotten.

use std::net::IpAddr;
use std::num::NonZeroU32;

use axum::response::{IntoResponse, Response};
use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use http::{HeaderValue, StatusCode, header};

pub struct Limits {
    per_ip: Option<DefaultKeyedRateLimiter<IpAddr>>,
    per_client: Option<DefaultKeyedRateLimiter<String>>,
}

fn limiter<K: std::hash::Hash + Eq + Clone>(per_second: u32) -> Option<DefaultKeyedRateLimiter<K>> {
    let rate = NonZeroU32::new(per_second)?;
    let burst = NonZeroU32::new(per_second.saturating_mul(2)).unwrap_or(rate);
    Some(RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst)))
}

impl Limits {
    pub fn new(per_ip_per_second: u32, per_client_per_second: u32) -> Self {
        Self { per_ip: limiter(per_ip_per_second), per_client: limiter(per_client_per_second) }
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

/// Over a rate limit: the 429 to send.
#[derive(Debug)]
pub struct Limited(pub std::time::Duration);

impl IntoResponse for Limited {
    fn into_response(self) -> Response {
        too_many(self.0)
    }
}

fn too_many(wait: std::time::Duration) -> Response {
    let body = mcp_proto::jsonrpc::error(
        None,
        mcp_proto::vocab::ErrorCode::INVALID_REQUEST,
        "Too many requests: slow down and retry later",
        None,
    );
    let mut resp = (StatusCode::TOO_MANY_REQUESTS, body).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    if let Ok(v) = HeaderValue::from_str(&secs.max(1).to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    metrics::counter!("gateway_rate_limited_total").increment(1);
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
}
