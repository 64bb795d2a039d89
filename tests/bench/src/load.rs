//! The load generator: N keep-alive HTTP/1.1 connections, each sending the workload's requests
//! back to back (cycling through them) for a duration. Connections are opened (and the legacy
//! handshake done) before the clock starts; every answer is checked, latencies of correct
//! answers go into an HDR histogram, anything else is counted as an error with its reason.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::sync::Barrier;
use tokio::task::JoinHandle;

use crate::client::{Conn, Target};
use crate::mcp::{self, Call};

/// The requests each connection sends in turn (connection `i` starts at request `i`).
pub struct Workload {
    pub calls: Vec<Call>,
    /// Do the legacy `initialize` handshake on each connection first.
    pub handshake: bool,
    /// The answers that passed, for every connection of every measurement of this workload.
    pub checker: mcp::Checker,
}

impl Workload {
    pub fn new(calls: Vec<Call>, handshake: bool) -> Self {
        let checker = mcp::Checker::new(calls.len());
        Workload { calls, handshake, checker }
    }
}

#[derive(Clone, Copy)]
pub struct Settings {
    pub concurrency: usize,
    pub duration: Duration,
    /// The longest one request (or connecting) may take before it counts as a hang.
    pub timeout: Duration,
}

/// What one measurement saw.
pub struct Outcome {
    pub ok: u64,
    pub errors: u64,
    /// Distinct error reasons with their counts, most frequent first.
    pub error_kinds: Vec<(String, u64)>,
    pub elapsed: Duration,
    /// Latencies of correct answers, in microseconds.
    pub latency: Histogram<u64>,
}

/// Connections opened and waiting for the start.
pub struct Fleet {
    tasks: Vec<JoinHandle<Tally>>,
    ready: Arc<Barrier>,
    go: Arc<Barrier>,
    /// An empty histogram with the bounds of the connections' ones.
    empty: Histogram<u64>,
}

/// What one connection saw.
struct Tally {
    latency: Histogram<u64>,
    ok: u64,
    errors: u64,
    kinds: HashMap<String, u64>,
}

impl Tally {
    fn error(&mut self, why: String) {
        self.errors += 1;
        *self.kinds.entry(error_kind(&why)).or_default() += 1;
    }
}

/// An error reason without the request id, so that the same failure counts as one kind.
fn error_kind(why: &str) -> String {
    let mut kind = String::with_capacity(why.len().min(240));
    let mut rest = why;
    while let Some(at) = rest.find("\"id\":") {
        let (head, tail) = rest.split_at(at + 5);
        kind.push_str(head);
        kind.push('…');
        rest = tail.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    kind.push_str(rest);
    kind.chars().take(240).collect()
}

/// Open `settings.concurrency` connections to `target` for `workload`; they wait for [`Fleet::go`].
pub fn connect(target: &Target, workload: &Arc<Workload>, settings: Settings) -> anyhow::Result<Fleet> {
    anyhow::ensure!(!workload.calls.is_empty(), "a workload without requests");
    // Microseconds, up to an hour, 3 significant digits.
    let latency = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)?;
    let ready = Arc::new(Barrier::new(settings.concurrency + 1));
    let go = Arc::new(Barrier::new(settings.concurrency + 1));
    let tasks = (0..settings.concurrency)
        .map(|index| {
            let tally = Tally { latency: latency.clone(), ok: 0, errors: 0, kinds: HashMap::new() };
            let (workload, ready, go, target) = (workload.clone(), ready.clone(), go.clone(), target.clone());
            tokio::spawn(connection(index, target, workload, settings, tally, ready, go))
        })
        .collect();
    Ok(Fleet { tasks, ready, go, empty: latency })
}

impl Fleet {
    /// Wait until every connection is open (or has failed to open).
    pub async fn ready(&self) {
        self.ready.wait().await;
    }

    /// Start the clock and the load; wait until every connection has finished.
    pub async fn go(self) -> Outcome {
        self.go.wait().await;
        let started = Instant::now();
        let mut total =
            Outcome { ok: 0, errors: 0, error_kinds: Vec::new(), elapsed: Duration::ZERO, latency: self.empty };
        let mut kinds: HashMap<String, u64> = HashMap::new();
        for task in self.tasks {
            match task.await {
                Ok(tally) => {
                    let _ = total.latency.add(&tally.latency);
                    total.ok += tally.ok;
                    total.errors += tally.errors;
                    for (k, n) in tally.kinds {
                        *kinds.entry(k).or_default() += n;
                    }
                }
                Err(e) => {
                    total.errors += 1;
                    *kinds.entry(format!("load task failed: {e}")).or_default() += 1;
                }
            }
        }
        total.elapsed = started.elapsed();
        let mut kinds: Vec<(String, u64)> = kinds.into_iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        total.error_kinds = kinds;
        total
    }
}

async fn open(target: &Target, workload: &Workload, timeout: Duration) -> Result<Conn, String> {
    let mut conn = Conn::open(target, timeout).await?;
    if workload.handshake {
        conn.handshake(timeout).await?;
    }
    Ok(conn)
}

async fn connection(
    index: usize,
    target: Target,
    workload: Arc<Workload>,
    settings: Settings,
    mut tally: Tally,
    ready: Arc<Barrier>,
    go: Arc<Barrier>,
) -> Tally {
    let mut conn = match open(&target, &workload, settings.timeout).await {
        Ok(c) => Some(c),
        Err(e) => {
            tally.error(e);
            None
        }
    };
    ready.wait().await;
    go.wait().await;
    let deadline = Instant::now() + settings.duration;
    let calls = &workload.calls;
    let mut next = index % calls.len();
    // At least one request per connection, then until the deadline.
    loop {
        match conn.as_mut() {
            None => match open(&target, &workload, settings.timeout).await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    tally.error(e);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(c) => {
                let (at, call) = (next, &calls[next]);
                next = (next + 1) % calls.len();
                let like = workload.checker.last_body(at);
                let started = Instant::now();
                match c.send_like(call, settings.timeout, like.as_ref()).await {
                    Ok(answer) => {
                        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
                        match workload.checker.check(at, call, &answer) {
                            Ok(()) => {
                                tally.ok += 1;
                                tally.latency.saturating_record(micros.max(1));
                            }
                            Err(e) => tally.error(e),
                        }
                    }
                    Err(e) => {
                        tally.error(e);
                        conn = None;
                    }
                }
            }
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    tally
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_kinds_ignore_ids() {
        let a = super::error_kind(r#"status: HTTP 502 {"jsonrpc":"2.0","id":17,"error":{}}"#);
        let b = super::error_kind(r#"status: HTTP 502 {"jsonrpc":"2.0","id":4,"error":{}}"#);
        assert_eq!(a, b);
        assert_eq!(a, r#"status: HTTP 502 {"jsonrpc":"2.0","id":…,"error":{}}"#);
    }
}
