//! The requests of each scenario. A `tools/list` workload is every page of the catalog: the
//! pages are found by walking the list once through the server itself (which checks the whole
//! catalog comes back, each tool once), then each request of the load is one page, in turn.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::catalog;
use crate::client::{Conn, Target};
use crate::load::Workload;
use crate::mcp::{self, Call, Era, Expect, Op};

/// How many times a full listing is timed, sequentially, for the report.
const WALKS: usize = 3;

/// The workload of `op` in `era` against a server with `tools` tools.
pub async fn build(
    target: &Target,
    op: Op,
    era: Era,
    tools: usize,
    handshake: bool,
    timeout: Duration,
) -> Result<Workload, String> {
    let handshake = handshake && era == Era::Legacy;
    let calls = match op {
        Op::List => pages(target, era, tools, handshake, timeout).await?,
        Op::Call => (0..catalog::REFERENCE_TOOLS.min(tools))
            .map(|i| mcp::echo(era, &catalog::tool_name(i), &format!("echo {i} from the benchmark"), i as u64 + 1))
            .collect(),
        Op::Read => vec![mcp::read(era, 1)],
        Op::Discover => vec![mcp::discover(1)],
    };
    Ok(Workload::new(calls, handshake))
}

async fn connect(target: &Target, handshake: bool, timeout: Duration) -> Result<Conn, String> {
    let mut conn = Conn::open(target, timeout).await?;
    if handshake {
        conn.handshake(timeout).await?;
    }
    Ok(conn)
}

/// Walk `tools/list` to its end; one request per page, each with the answer it must get.
async fn pages(
    target: &Target,
    era: Era,
    tools: usize,
    handshake: bool,
    timeout: Duration,
) -> Result<Vec<Call>, String> {
    let mut conn = connect(target, handshake, timeout).await?;
    let mut calls = Vec::new();
    let mut seen = HashSet::new();
    let mut cursor: Option<String> = None;
    // Every page has at least one tool, so at most `tools` pages.
    for id in 1..=tools as u64 + 1 {
        let probe = mcp::list(era, cursor.as_deref(), id, Expect::AnyPage);
        let answer = conn.send(&probe, timeout).await?;
        let result = mcp::check(&probe, &answer).map_err(|e| format!("tools/list page {id}: {e}"))?;
        let names: Vec<String> = result["tools"]
            .as_array()
            .map(|t| t.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        let next = result["nextCursor"].as_str().map(str::to_owned);
        if names.is_empty() && next.is_some() {
            return Err(format!("page {id} is empty but has a nextCursor"));
        }
        for n in &names {
            if !seen.insert(n.clone()) {
                return Err(format!("{n} listed twice"));
            }
        }
        let expect = Expect::Page {
            count: names.len(),
            first: names.first().cloned().unwrap_or_default(),
            more: next.is_some(),
        };
        calls.push(mcp::list(era, cursor.as_deref(), id, expect));
        cursor = next;
        if cursor.is_none() {
            break;
        }
    }
    if cursor.is_some() {
        return Err(format!("tools/list did not end after {} pages", calls.len()));
    }
    let want: HashSet<String> = (0..tools).map(catalog::tool_name).collect();
    if seen != want {
        return Err(format!("tools/list gave {} tools, {} expected (or other names)", seen.len(), tools));
    }
    Ok(calls)
}

/// Median time of a full listing (every page, in order, on one connection), in milliseconds.
pub async fn time_listing(target: &Target, workload: &Workload, timeout: Duration) -> Result<f64, String> {
    let mut conn = connect(target, workload.handshake, timeout).await?;
    let mut times = Vec::with_capacity(WALKS);
    for _ in 0..WALKS {
        let started = Instant::now();
        for call in &workload.calls {
            let answer = conn.send(call, timeout).await?;
            mcp::check(call, &answer)?;
        }
        times.push(started.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}
