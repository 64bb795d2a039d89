//! The run: for each catalog size, every server started; then for each scenario and
//! concurrency level, one measurement per server (one server loaded at a time, the others idle)
//! of throughput, latency, server CPU per request and peak memory per process — per round, when
//! `--rounds` asks for several.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::catalog::Files;
use crate::load::{self, Settings, Workload};
use crate::mcp::{Era, Op};
use crate::procs;
use crate::servers::{Kind, Launch, Server};
use crate::workload;

/// What to measure.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    pub smoke: bool,
    pub servers: Vec<Kind>,
    /// The operations measured, each in every era it has among `eras`.
    pub ops: Vec<Op>,
    pub eras: Vec<Era>,
    pub catalogs: Vec<usize>,
    pub concurrency: Vec<usize>,
    pub duration: Duration,
    pub warmup: Duration,
    pub timeout: Duration,
    pub bin_dir: PathBuf,
    /// Servers on CPU 0 and the load generator on CPU 1 (`taskset`).
    pub pinned: bool,
    /// How many times every measurement is taken, the servers in a rotating order.
    pub rounds: usize,
}

impl Plan {
    /// Whether the scenario of `op` in `era` is measured.
    pub fn measures(&self, op: Op, era: Era) -> bool {
        self.ops.contains(&op) && self.eras.contains(&era)
    }
}

/// One measurement: a server × scenario × catalog size × concurrency.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    /// The round (from 0); in a summary, the round of the median throughput.
    pub round: usize,
    /// How many rounds a summary row stands for (1 for a single measurement).
    pub rounds: usize,
    pub server: Kind,
    pub op: Op,
    pub era: Era,
    pub catalog: usize,
    pub concurrency: usize,
    /// Requests in the rotation: the pages of the list for `tools/list`.
    pub pages: usize,
    pub ok: u64,
    pub errors: u64,
    pub error_kinds: Vec<(String, u64)>,
    pub elapsed_s: f64,
    pub req_per_s: f64,
    pub mean_us: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    /// Server CPU (user + system, every process) per correct answer.
    pub cpu_us_per_req: f64,
    /// Server CPU time over wall time (100 = one core busy).
    pub server_cpu_pct: f64,
    /// The load generator's CPU time over wall time.
    pub loadgen_cpu_pct: f64,
    /// CPU used by everything else on the machine over wall time: noise (100 = one core).
    pub other_cpu_pct: f64,
    /// Server CPU per correct answer, by process (what to request for each component).
    pub cpu_us_per_req_by_process: Vec<(String, f64)>,
    /// Peak resident memory of each process during this measurement, KiB.
    pub peak_rss_kib: Vec<(String, u64)>,
    /// WARN/ERROR lines the server logged during this measurement, and the last few.
    pub server_warnings: u64,
    pub warning_samples: Vec<String>,
}

impl Row {
    /// What was measured, whatever the server: scenario, catalog size and concurrency.
    pub fn point(&self) -> Point {
        (self.op, self.era, self.catalog, self.concurrency)
    }
}

/// What a measurement measured: scenario, era, catalog size and connections.
pub type Point = (Op, Era, usize, usize);

/// A full `tools/list` on one connection, page after page.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Listing {
    pub server: Kind,
    pub era: Era,
    pub catalog: usize,
    pub pages: usize,
    pub first_page_tools: usize,
    pub median_ms: f64,
}

/// Something that went wrong outside a measurement (start, setup, warm-up, a crash).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Failure {
    pub server: Kind,
    pub catalog: usize,
    pub what: String,
    pub detail: String,
}

#[derive(Default, Debug, serde::Serialize)]
pub struct Results {
    /// One row per server × scenario × catalog × concurrency: with several rounds, their
    /// median (see [`Results::summarise`]).
    pub rows: Vec<Row>,
    /// Every measurement of every round, when there was more than one round.
    pub every_round: Vec<Row>,
    /// With several rounds, the platform's ratios to each reference round by round.
    pub by_round: Vec<Paired>,
    pub listings: Vec<Listing>,
    pub failures: Vec<Failure>,
    /// Whether each measurement's peak memory is its own (`/proc/PID/clear_refs`).
    pub peak_rss_per_measurement: bool,
}

impl Results {
    /// Wrong answers, errors or failures anywhere.
    pub fn failed(&self) -> bool {
        !self.failures.is_empty() || self.rows.iter().chain(&self.every_round).any(|r| r.errors > 0 || r.ok == 0)
    }

    /// With several rounds, replace the rows by one per server × scenario × catalog ×
    /// concurrency: the round of median throughput, with the median CPU per request and median
    /// latencies of all rounds, the highest peak memory and noise, and every round's errors and
    /// warnings. An even number of rounds takes the lower median. The rounds stay in
    /// `every_round`.
    pub fn summarise(&mut self) {
        if self.rows.iter().all(|r| r.round == 0) {
            return;
        }
        let all = std::mem::take(&mut self.rows);
        let mut groups: Vec<Vec<&Row>> = Vec::new();
        for row in &all {
            let same = |g: &&mut Vec<&Row>| (g[0].server, g[0].point()) == (row.server, row.point());
            match groups.iter_mut().find(same) {
                Some(g) => g.push(row),
                None => groups.push(vec![row]),
            }
        }
        for mut group in groups {
            group.sort_by(|a, b| a.req_per_s.total_cmp(&b.req_per_s));
            let mid = (group.len() - 1) / 2;
            let mut summary = group[mid].clone();
            summary.rounds = group.len();
            summary.cpu_us_per_req = median_f64(group.iter().map(|r| r.cpu_us_per_req));
            summary.mean_us = median_f64(group.iter().map(|r| r.mean_us));
            summary.p50_us = median_u64(group.iter().map(|r| r.p50_us));
            summary.p99_us = median_u64(group.iter().map(|r| r.p99_us));
            summary.p999_us = median_u64(group.iter().map(|r| r.p999_us));
            summary.max_us = group.iter().map(|r| r.max_us).max().unwrap_or(0);
            summary.other_cpu_pct = group.iter().map(|r| r.other_cpu_pct).fold(0.0, f64::max);
            summary.errors = group.iter().map(|r| r.errors).sum();
            summary.error_kinds = group.iter().flat_map(|r| r.error_kinds.iter().cloned()).take(5).collect();
            summary.server_warnings = group.iter().map(|r| r.server_warnings).sum();
            summary.warning_samples = group.iter().flat_map(|r| r.warning_samples.iter().cloned()).take(5).collect();
            for (name, kib) in &mut summary.peak_rss_kib {
                let most = group.iter().flat_map(|r| &r.peak_rss_kib).filter(|(n, _)| n == name).map(|(_, k)| *k);
                *kib = most.max().unwrap_or(*kib);
            }
            self.rows.push(summary);
        }
        let every = &all;
        self.by_round = PAIRS
            .into_iter()
            .flat_map(|pair| {
                let points: Vec<Point> = self.rows.iter().filter(|r| r.server == pair.0).map(Row::point).collect();
                points.into_iter().filter_map(move |point| Paired::of(every, pair, point))
            })
            .collect();
        self.by_round.sort_by_key(|p| (p.catalog, p.op, p.era, p.concurrency));
        self.every_round = all;
    }
}

/// The pairs compared round by round: (the platform, what it is compared with).
const PAIRS: [(Kind, Kind); 9] = [
    (Kind::Microservices, Kind::Rmcp),
    (Kind::Standalone, Kind::Rmcp),
    (Kind::Microservices, Kind::BareHyper),
    (Kind::Standalone, Kind::BareHyper),
    (Kind::Microservices, Kind::TypescriptSdk),
    (Kind::Microservices, Kind::PythonSdk),
    (Kind::Standalone, Kind::TypescriptSdk),
    (Kind::Standalone, Kind::PythonSdk),
    (Kind::MicroservicesJwt, Kind::Microservices),
];

/// One pair's ratios in one scenario, round by round: `ours`' throughput and p99 over
/// `theirs`' in the same round (seconds apart), for every round that measured both with
/// correct answers, and their medians. Steadier than the ratio of the median rounds when the
/// machine's pace moves between rounds: both measurements of a pair share their round's.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Paired {
    pub ours: Kind,
    pub theirs: Kind,
    pub op: Op,
    pub era: Era,
    pub catalog: usize,
    pub concurrency: usize,
    pub req_per_s: Vec<f64>,
    pub p99: Vec<f64>,
    pub median_req_per_s: f64,
    pub median_p99: f64,
}

impl Paired {
    fn of(every_round: &[Row], (ours, theirs): (Kind, Kind), point: Point) -> Option<Paired> {
        let (req_per_s, p99): (Vec<f64>, Vec<f64>) = every_round
            .iter()
            .filter(|a| a.server == ours && a.point() == point && a.ok > 0)
            .filter_map(|a| {
                let b = every_round.iter().find(|b| b.server == theirs && b.round == a.round && b.point() == point)?;
                let usable = b.ok > 0 && b.req_per_s > 0.0 && b.p99_us > 0;
                usable.then(|| (a.req_per_s / b.req_per_s, a.p99_us as f64 / b.p99_us as f64))
            })
            .unzip();
        if req_per_s.is_empty() {
            return None;
        }
        let (op, era, catalog, concurrency) = point;
        Some(Paired {
            ours,
            theirs,
            op,
            era,
            catalog,
            concurrency,
            median_req_per_s: median_f64(req_per_s.iter().copied()),
            median_p99: median_f64(p99.iter().copied()),
            req_per_s,
            p99,
        })
    }
}

/// The median (the lower one of an even count).
pub(crate) fn median_f64(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0.0)
}

fn median_u64(values: impl Iterator<Item = u64>) -> u64 {
    let mut v: Vec<u64> = values.collect();
    v.sort_unstable();
    v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0)
}

struct Clock {
    ticks_per_s: f64,
}

pub async fn run(plan: &Plan) -> anyhow::Result<Results> {
    let files = Files::new()?;
    let launch = Launch { bin_dir: &plan.bin_dir, files: &files, pin: plan.pinned.then_some(0) };
    let clock = Clock { ticks_per_s: procs::clock_ticks() };
    let mut results = Results { peak_rss_per_measurement: true, ..Results::default() };
    for &catalog in &plan.catalogs {
        catalog_run(plan, &launch, &clock, catalog, &mut results).await;
    }
    results.summarise();
    Ok(results)
}

/// How long the last server started runs before the first measurement.
const SETTLE: Duration = Duration::from_secs(3);

/// Every server of one catalog size: all started at once (idle while another is measured),
/// then each scenario in turn, and within it each concurrency level measured on every server
/// before the next level — so the measurements a ratio compares are seconds apart, not
/// minutes, and share the machine's state. With several rounds, each round of a level starts
/// one server later than the round before.
async fn catalog_run(plan: &Plan, launch: &Launch<'_>, clock: &Clock, catalog: usize, results: &mut Results) {
    let mut servers: Vec<Server> = Vec::new();
    for &kind in &plan.servers {
        let supported = |(op, era): (Op, Era)| plan.measures(op, era) && kind.supports(op, era, catalog);
        if !Op::scenarios().any(supported) {
            continue;
        }
        eprintln!("== starting {} with {catalog} tools", kind.name());
        match launch.start(kind, catalog).await {
            Ok(s) => servers.push(s),
            Err(e) => results.failures.push(failure(kind, catalog, "start", format!("{e:#}"))),
        }
    }
    // Measured as deployed servers run, not as they start: the services hand back their
    // start-up code two seconds after they start (`mcp_proto::resident`).
    tokio::time::sleep(SETTLE).await;
    for (op, era) in Op::scenarios().filter(|&(op, era)| plan.measures(op, era)) {
        let what = format!("{} ({})", op.label(), era.version());
        // Each server's requests for this scenario, set up and warmed up.
        let mut taking_part: Vec<(usize, Arc<Workload>)> = Vec::new();
        for (i, server) in servers.iter_mut().enumerate() {
            if !server.kind.supports(op, era, catalog) || server.check_alive().is_err() {
                continue;
            }
            match prepare(plan, server, op, era, catalog, results).await {
                Ok(w) => taking_part.push((i, w)),
                Err(e) => results.failures.push(failure(server.kind, catalog, &what, e)),
            }
        }
        if !taking_part.is_empty() {
            eprintln!("== {what} with {catalog} tools");
        }
        for &concurrency in &plan.concurrency {
            for round in 0..plan.rounds.max(1) {
                let mut order = taking_part.clone();
                let shift = round % order.len().max(1);
                order.rotate_left(shift);
                for (i, workload) in order {
                    let server = &mut servers[i];
                    if server.check_alive().is_err() {
                        continue;
                    }
                    let at = At { round, catalog, concurrency };
                    match measure(plan, clock, server, &workload, op, era, at).await {
                        Ok((row, rss_own)) => {
                            progress(&row);
                            results.peak_rss_per_measurement &= rss_own;
                            results.rows.push(row);
                        }
                        Err(e) => results.failures.push(failure(server.kind, catalog, &what, e)),
                    }
                    if let Err(e) = server.check_alive() {
                        let detail = format!("{e}; last warnings: {:?}", server.take_warnings());
                        results.failures.push(failure(server.kind, catalog, "crash", detail));
                    }
                    // Let the server close the old connections before the next measurement.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    for server in servers {
        server.stop().await;
    }
}

fn failure(server: Kind, catalog: usize, what: &str, detail: String) -> Failure {
    Failure { server, catalog, what: what.to_owned(), detail }
}

/// Which round, catalog and concurrency a measurement is.
#[derive(Clone, Copy)]
struct At {
    round: usize,
    catalog: usize,
    concurrency: usize,
}

/// Set up and warm up one scenario on one server; time a full listing of a list.
async fn prepare(
    plan: &Plan,
    server: &mut Server,
    op: Op,
    era: Era,
    catalog: usize,
    results: &mut Results,
) -> Result<Arc<Workload>, String> {
    let kind = server.kind;
    let workload = Arc::new(workload::build(&server.target, op, era, catalog, kind.handshakes(), plan.timeout).await?);
    if !plan.warmup.is_zero() {
        let c = plan.concurrency.iter().copied().max().unwrap_or(1).min(16);
        let settings = Settings { concurrency: c, duration: plan.warmup, timeout: plan.timeout };
        let warm = measure_load(server, &workload, settings).await?;
        // Reported, but the measurements still run: they count their own errors.
        if let Some((why, n)) = warm.error_kinds.first() {
            results.failures.push(Failure {
                server: kind,
                catalog,
                what: format!("{} ({}) warm-up", op.label(), era.version()),
                detail: format!(
                    "{} errors in {} answers, most often ({n}×): {why}",
                    warm.errors,
                    warm.ok + warm.errors
                ),
            });
        }
    }
    if op == Op::List {
        let median_ms = workload::time_listing(&server.target, &workload, plan.timeout).await?;
        let first_page_tools = match workload.calls.first().map(|c| &c.expect) {
            Some(crate::mcp::Expect::Page { count, .. }) => *count,
            _ => 0,
        };
        results.listings.push(Listing {
            server: kind,
            era,
            catalog,
            pages: workload.calls.len(),
            first_page_tools,
            median_ms,
        });
    }
    Ok(workload)
}

/// One measurement: one server, scenario and concurrency level; with it, whether its peak
/// memory is its own (`/proc/PID/clear_refs` worked) rather than the process's since it started.
async fn measure(
    plan: &Plan,
    clock: &Clock,
    server: &mut Server,
    workload: &Arc<Workload>,
    op: Op,
    era: Era,
    At { round, catalog, concurrency }: At,
) -> Result<(Row, bool), String> {
    let kind = server.kind;
    let settings = Settings { concurrency, duration: plan.duration, timeout: plan.timeout };
    let fleet = load::connect(&server.target, workload, settings).map_err(|e| e.to_string())?;
    fleet.ready().await;
    let rss_own = server.reset_peaks();
    let _ = server.take_warnings();
    let (server0, own0, all0, warn0) = (server.cpu_ticks(), own_ticks(), all_ticks(), server.warnings());
    let by_process0 = server.cpu_ticks_by_process();
    let outcome = fleet.go().await;
    let by_process1 = server.cpu_ticks_by_process();
    let (server1, own1, all1, warn1) = (server.cpu_ticks(), own_ticks(), all_ticks(), server.warnings());
    let secs = outcome.elapsed.as_secs_f64().max(1e-9);
    let (server_ticks, own_ticks) = (server1.saturating_sub(server0), own1.saturating_sub(own0));
    let other_ticks = all1.saturating_sub(all0).saturating_sub(server_ticks + own_ticks);
    let server_cpu_s = server_ticks as f64 / clock.ticks_per_s;
    let own_cpu_s = own_ticks as f64 / clock.ticks_per_s;
    let h = &outcome.latency;
    let row = Row {
        round,
        rounds: 1,
        server: kind,
        op,
        era,
        catalog,
        concurrency,
        pages: workload.calls.len(),
        ok: outcome.ok,
        errors: outcome.errors,
        error_kinds: outcome.error_kinds.into_iter().take(5).collect(),
        elapsed_s: secs,
        req_per_s: outcome.ok as f64 / secs,
        mean_us: h.mean(),
        p50_us: h.value_at_quantile(0.5),
        p99_us: h.value_at_quantile(0.99),
        p999_us: h.value_at_quantile(0.999),
        max_us: h.max(),
        cpu_us_per_req: server_cpu_s * 1e6 / outcome.ok.max(1) as f64,
        server_cpu_pct: server_cpu_s * 100.0 / secs,
        loadgen_cpu_pct: own_cpu_s * 100.0 / secs,
        other_cpu_pct: other_ticks as f64 / clock.ticks_per_s * 100.0 / secs,
        cpu_us_per_req_by_process: by_process0
            .iter()
            .zip(&by_process1)
            .map(|((name, t0), (_, t1))| {
                let cpu_s = t1.saturating_sub(*t0) as f64 / clock.ticks_per_s;
                (name.clone(), cpu_s * 1e6 / outcome.ok.max(1) as f64)
            })
            .collect(),
        peak_rss_kib: server.peaks(),
        server_warnings: warn1.saturating_sub(warn0),
        warning_samples: server.take_warnings(),
    };
    Ok((row, rss_own))
}

/// A load without measuring it (the warm-up).
async fn measure_load(server: &Server, workload: &Arc<Workload>, settings: Settings) -> Result<load::Outcome, String> {
    let fleet = load::connect(&server.target, workload, settings).map_err(|e| e.to_string())?;
    fleet.ready().await;
    Ok(fleet.go().await)
}

fn own_ticks() -> u64 {
    procs::cpu_ticks(std::process::id()).unwrap_or(0)
}

fn all_ticks() -> u64 {
    procs::machine_busy_ticks().unwrap_or(0)
}

fn progress(r: &Row) {
    let rss: u64 = r.peak_rss_kib.iter().map(|(_, k)| k).sum();
    eprintln!(
        "{:>13} {:<21} {} {:>5} tools c={:<3} {:>8.0} req/s  p50 {:>6} µs  p99 {:>7} µs  cpu {:>7.1} µs/req  rss {:>6.1} MiB  loadgen {:>3.0}%  other {:>3.0}%  errors {}",
        r.server.name(),
        r.op.label(),
        r.era.version(),
        r.catalog,
        r.concurrency,
        r.req_per_s,
        r.p50_us,
        r.p99_us,
        r.cpu_us_per_req,
        rss as f64 / 1024.0,
        r.loadgen_cpu_pct,
        r.other_cpu_pct,
        r.errors
    );
    if let Some((why, n)) = r.error_kinds.first() {
        eprintln!("{:>13} most frequent error ({n}×): {why}", "");
    }
    if let Some(line) = r.warning_samples.last() {
        eprintln!("{:>13} last server warning: {line}", "");
    }
}

/// A correct measurement of `tools/list` (5 tools) on `server` at `concurrency`, 1000
/// req/s per connection, for tests.
#[cfg(test)]
pub(crate) fn test_row(server: Kind, concurrency: usize) -> Row {
    Row {
        round: 0,
        rounds: 1,
        server,
        op: Op::List,
        era: Era::Modern,
        catalog: 5,
        concurrency,
        pages: 1,
        ok: 100,
        errors: 0,
        error_kinds: Vec::new(),
        elapsed_s: 1.0,
        req_per_s: 1000.0 * concurrency as f64,
        mean_us: 500.0,
        p50_us: 400,
        p99_us: 900,
        p999_us: 1000,
        max_us: 1200,
        cpu_us_per_req: 10.0,
        server_cpu_pct: 90.0,
        loadgen_cpu_pct: 50.0,
        other_cpu_pct: 0.0,
        cpu_us_per_req_by_process: Vec::new(),
        peak_rss_kib: Vec::new(),
        server_warnings: 0,
        warning_samples: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(server: Kind, round: usize, req_per_s: f64, p99_us: u64) -> Row {
        Row { round, req_per_s, p99_us, ..test_row(server, 64) }
    }

    #[test]
    fn the_ratios_pair_measurements_of_the_same_round() {
        let mut results = Results {
            rows: vec![
                round(Kind::Microservices, 0, 200.0, 100),
                round(Kind::Rmcp, 0, 100.0, 200),
                round(Kind::Microservices, 1, 90.0, 300),
                round(Kind::Rmcp, 1, 60.0, 100),
                round(Kind::Microservices, 2, 300.0, 100),
                // A round whose reference answered nothing pairs with nothing.
                Row { ok: 0, ..round(Kind::Rmcp, 2, 0.0, 0) },
                round(Kind::Standalone, 3, 500.0, 100),
            ],
            ..Default::default()
        };
        results.summarise();
        let pairs: Vec<(Kind, Kind)> = results.by_round.iter().map(|p| (p.ours, p.theirs)).collect();
        // Standalone was measured in a round without rmcp: no pair.
        assert_eq!(pairs, [(Kind::Microservices, Kind::Rmcp)]);
        let p = &results.by_round[0];
        assert_eq!(p.req_per_s, [2.0, 1.5]);
        assert_eq!(p.p99, [0.5, 3.0]);
        // The lower median of an even count; the ratio of the median rounds would be 200 / 60.
        assert_eq!((p.median_req_per_s, p.median_p99), (1.5, 0.5));
        assert_eq!((p.op, p.era, p.catalog, p.concurrency), (Op::List, Era::Modern, 5, 64));
    }
}
