//! The load generator: N keep-alive HTTP/1.1 connections, each sending its requests back to
//! back for a duration; latencies into an HDR histogram; every answer checked.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;

/// One request, and what its answer must contain.
#[derive(Clone)]
pub struct Probe {
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    /// Every answer must be 200 and contain this.
    pub expect: String,
    /// And be at least this long (for the large resource).
    pub min_len: usize,
}

#[derive(Default, Debug, Clone, serde::Serialize)]
pub struct Outcome {
    pub requests: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub elapsed_secs: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
}

/// Run `concurrency` connections against `addr` for `duration`.
pub async fn run(addr: SocketAddr, path: &str, probe: Probe, concurrency: usize, duration: Duration) -> Outcome {
    let probe = Arc::new(probe);
    let deadline = Instant::now() + duration;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let probe = probe.clone();
        let path = path.to_owned();
        tasks.push(tokio::spawn(async move { connection(addr, &path, &probe, deadline).await }));
    }
    let mut hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let mut outcome = Outcome::default();
    for t in tasks {
        match t.await {
            Ok((h, errors, first)) => {
                let _ = hist.add(&h);
                outcome.errors += errors;
                if outcome.first_error.is_none() {
                    outcome.first_error = first;
                }
            }
            Err(e) => {
                outcome.errors += 1;
                outcome.first_error.get_or_insert(e.to_string());
            }
        }
    }
    outcome.elapsed_secs = started.elapsed().as_secs_f64();
    outcome.requests = hist.len();
    outcome.p50_us = hist.value_at_quantile(0.5);
    outcome.p99_us = hist.value_at_quantile(0.99);
    outcome.p999_us = hist.value_at_quantile(0.999);
    outcome
}

type Counts = (hdrhistogram::Histogram<u64>, u64, Option<String>);

async fn connection(addr: SocketAddr, path: &str, probe: &Probe, deadline: Instant) -> Counts {
    let mut hist = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let mut errors = 0;
    let mut first = None;
    let mut fail = |e: String, errors: &mut u64| {
        *errors += 1;
        first.get_or_insert(e);
    };
    let mut sender = None;
    while Instant::now() < deadline {
        if sender.is_none() {
            match connect(addr).await {
                Ok(s) => sender = Some(s),
                Err(e) => {
                    fail(e, &mut errors);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let Some(s) = sender.as_mut() else { continue };
        let mut req = hyper::Request::post(path).header("host", addr.to_string());
        for (k, v) in &probe.headers {
            req = req.header(k, v);
        }
        let Ok(req) = req.body(Full::new(probe.body.clone())) else {
            fail("cannot build the request".into(), &mut errors);
            break;
        };
        let t0 = Instant::now();
        let answer = async {
            let resp = s.send_request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status();
            let body = resp.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
            Ok::<_, String>((status, body))
        }
        .await;
        let us = t0.elapsed().as_micros().max(1) as u64;
        match answer {
            Ok((status, body)) if status == 200 && body.len() >= probe.min_len && contains(&body, &probe.expect) => {
                let _ = hist.record(us);
            }
            Ok((status, body)) => {
                let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
                fail(format!("{status}: {text}"), &mut errors);
            }
            Err(e) => {
                fail(e, &mut errors);
                sender = None;
            }
        }
    }
    (hist, errors, first)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

async fn connect(addr: SocketAddr) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, String> {
    let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}
