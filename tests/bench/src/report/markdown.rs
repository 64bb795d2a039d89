//! `report.md`: the summary tables (each server side by side, with the platform's ratios to
//! bare hyper and to rmcp), the cost per page of paginated lists, every measurement, and
//! every error.

use std::fmt::Write as _;

use super::Environment;
use crate::mcp::{Era, Op};
use crate::measure::{Plan, Results, Row};
use crate::servers::Kind;

/// CPU used by other processes (percent of one core) above which a measurement is disturbed.
const NOISY_PCT: f64 = 10.0;

pub fn render(env: &Environment, plan: &Plan, results: &Results) -> String {
    let mut s = String::new();
    header(&mut s, env, plan, results);
    side_by_side(
        &mut s,
        "Throughput (correct answers per second; ratio > 1: the platform is faster)",
        &results.rows,
        |r| r.req_per_s,
    );
    side_by_side(
        &mut s,
        "Server CPU per request (µs, every server process; ratio < 1: the platform is cheaper)",
        &results.rows,
        |r| r.cpu_us_per_req,
    );
    side_by_side(&mut s, "p99 latency (µs; ratio < 1: the platform is quicker)", &results.rows, |r| r.p99_us as f64);
    pagination(&mut s, results);
    rounds(&mut s, results);
    all_rows(&mut s, results);
    problems(&mut s, results);
    s
}

fn header(s: &mut String, env: &Environment, plan: &Plan, results: &Results) {
    let _ = writeln!(s, "# Benchmark: the MCP platform against bare hyper and rmcp\n");
    let _ = writeln!(
        s,
        "- {}; {} ({} cores); Linux {}; load average {} before, {} after",
        env.date, env.cpu, env.cores, env.kernel, env.load_average_before, env.load_average_after
    );
    let pin = if plan.pinned {
        "servers pinned to CPU 0, load generator to CPU 1 (`taskset`)"
    } else {
        "not pinned (`taskset` missing): servers and load generator share the CPUs"
    };
    let _ = writeln!(s, "- {pin}; binaries from `{}`; rmcp {}", plan.bin_dir.display(), env.rmcp_version);
    let _ = writeln!(
        s,
        "- {:.2} s per measurement after a {:.2} s warm-up per scenario; connections {:?}; catalogs {:?} tools; \
         HTTP/1.1 keep-alive, connections opened (and the legacy `initialize` done) before the clock starts",
        plan.duration.as_secs_f64(),
        plan.warmup.as_secs_f64(),
        plan.concurrency,
        plan.catalogs
    );
    let _ = writeln!(
        s,
        "- every answer checked (status, JSON-RPC envelope and id, result shape and content); peak RSS {}",
        if results.peak_rss_per_measurement { "per measurement (`clear_refs`)" } else { "since the process started" }
    );
    if plan.rounds > 1 {
        let _ = writeln!(
            s,
            "- {} rounds, each starting one server later than the one before; every table gives the median round \
             (throughput), the median CPU per request and latencies, the highest peak memory and noise",
            plan.rounds
        );
    }
    let noisy = results.rows.iter().filter(|r| r.other_cpu_pct > NOISY_PCT).count();
    let worst = results.rows.iter().map(|r| r.other_cpu_pct).fold(0.0, f64::max);
    let _ = writeln!(
        s,
        "- other processes on the machine: {noisy} of {} measurements saw more than {NOISY_PCT:.0}% of a core used \
         by something else (at most {worst:.0}%; column \"other CPU %\")\n",
        results.rows.len()
    );
}

/// The scenarios in report order: (op, era, catalog).
fn scenarios(rows: &[Row]) -> Vec<(Op, Era, usize)> {
    let mut keys: Vec<(Op, Era, usize)> = rows.iter().map(|r| (r.op, r.era, r.catalog)).collect();
    keys.sort_by_key(|&(op, era, catalog)| (catalog, op, era));
    keys.dedup();
    keys
}

fn find(rows: &[Row], kind: Kind, op: Op, era: Era, catalog: usize, concurrency: usize) -> Option<&Row> {
    rows.iter().find(|r| {
        r.server == kind && r.op == op && r.era == era && r.catalog == catalog && r.concurrency == concurrency
    })
}

fn levels(rows: &[Row]) -> Vec<usize> {
    let mut v: Vec<usize> = rows.iter().map(|r| r.concurrency).collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn number(v: f64) -> String {
    if v >= 100.0 { format!("{v:.0}") } else { format!("{v:.1}") }
}

fn ratio(ours: Option<f64>, reference: Option<f64>) -> String {
    match (ours, reference) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "–".into(),
    }
}

/// One metric, each server side by side, with the platform's ratios to the references.
fn side_by_side(s: &mut String, title: &str, rows: &[Row], metric: fn(&Row) -> f64) {
    let _ = writeln!(s, "## {title}\n");
    let _ = writeln!(
        s,
        "| scenario | era | tools | conns | bare-hyper | rmcp | python-sdk | typescript-sdk | standalone | microservices | microservices-jwt | standalone ÷ bare-hyper | standalone ÷ rmcp | microservices ÷ bare-hyper | microservices ÷ rmcp | microservices ÷ python-sdk | microservices ÷ typescript-sdk | jwt ÷ microservices |"
    );
    let _ = writeln!(s, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for (op, era, catalog) in scenarios(rows) {
        for c in levels(rows) {
            let get = |k: Kind| find(rows, k, op, era, catalog, c).filter(|r| r.ok > 0).map(metric);
            let values = Kind::ALL.map(get);
            if values.iter().all(Option::is_none) {
                continue;
            }
            let [hyper, sdk, standalone, micro, jwt, python, typescript] = values;
            let cell = |v: Option<f64>| v.map(number).unwrap_or_else(|| "–".into());
            let _ = writeln!(
                s,
                "| {} | {} | {catalog} | {c} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                op.label(),
                era.version(),
                cell(hyper),
                cell(sdk),
                cell(python),
                cell(typescript),
                cell(standalone),
                cell(micro),
                cell(jwt),
                ratio(standalone, hyper),
                ratio(standalone, sdk),
                ratio(micro, hyper),
                ratio(micro, sdk),
                ratio(micro, python),
                ratio(micro, typescript),
                ratio(jwt, micro)
            );
        }
    }
    s.push('\n');
}

fn pagination(s: &mut String, results: &Results) {
    if results.listings.is_empty() {
        return;
    }
    let _ = writeln!(s, "## Paginated lists: cost per page\n");
    // Per-page figures come from the fewest connections measured (one, unless left out).
    let min_c = levels(&results.rows).first().copied().unwrap_or(1);
    let _ = writeln!(
        s,
        "Each `tools/list` request of the load is one page, the pages in turn; per-page figures are from the \
         measurements with {min_c} connection(s).\n"
    );
    let _ = writeln!(
        s,
        "| server | era | tools | pages | tools on page 1 | p50 per page µs ({min_c} conns) | CPU µs per page ({min_c} conns) | full listing ms (one connection, median of 3) |"
    );
    let _ = writeln!(s, "|---|---|--:|--:|--:|--:|--:|--:|");
    for l in &results.listings {
        let row = find(&results.rows, l.server, Op::List, l.era, l.catalog, min_c);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {:.1} |",
            l.server.name(),
            l.era.version(),
            l.catalog,
            l.pages,
            l.first_page_tools,
            row.map(|r| r.p50_us.to_string()).unwrap_or_else(|| "–".into()),
            row.map(|r| number(r.cpu_us_per_req)).unwrap_or_else(|| "–".into()),
            l.median_ms
        );
    }
    s.push('\n');
}

/// With several rounds: each measurement's throughput and CPU per request in every round, and
/// how far apart the rounds were.
fn rounds(s: &mut String, results: &Results) {
    if results.every_round.is_empty() {
        return;
    }
    let _ = writeln!(s, "## Rounds\n");
    let _ = writeln!(
        s,
        "Spread: the fastest round's throughput over the slowest's, less one. The table after it gives the \
         platform's ratios round by round (the two measurements of a pair are from the same round of the same \
         level, seconds apart), and their median.\n"
    );
    let _ = writeln!(s, "| server | scenario | era | tools | conns | req/s by round | spread | CPU µs/req by round |");
    let _ = writeln!(s, "|---|---|---|--:|--:|---|--:|---|");
    for summary in &results.rows {
        let same: Vec<&Row> =
            results.every_round.iter().filter(|r| (r.server, r.point()) == (summary.server, summary.point())).collect();
        let rps: Vec<String> = same.iter().map(|r| format!("{:.0}", r.req_per_s)).collect();
        let cpu: Vec<String> = same.iter().map(|r| number(r.cpu_us_per_req)).collect();
        let (lo, hi) = same.iter().fold((f64::MAX, 0.0_f64), |(lo, hi), r| (lo.min(r.req_per_s), hi.max(r.req_per_s)));
        let spread = if lo > 0.0 && lo < f64::MAX { format!("{:.0} %", (hi / lo - 1.0) * 100.0) } else { "–".into() };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {spread} | {} |",
            summary.server.name(),
            summary.op.label(),
            summary.era.version(),
            summary.catalog,
            summary.concurrency,
            rps.join(", "),
            cpu.join(", ")
        );
    }
    paired(s, results);
    s.push('\n');
}

/// The platform's ratios round by round, with their medians (`Results::by_round`).
fn paired(s: &mut String, results: &Results) {
    if results.by_round.is_empty() {
        return;
    }
    let _ =
        writeln!(s, "\n| scenario | era | tools | conns | ratio | req/s by round | median | p99 by round | median |");
    let _ = writeln!(s, "|---|---|--:|--:|---|---|--:|---|--:|");
    let listed = |v: &[f64]| v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", ");
    for p in &results.by_round {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} ÷ {} | {} | {:.2} | {} | {:.2} |",
            p.op.label(),
            p.era.version(),
            p.catalog,
            p.concurrency,
            p.ours.name(),
            p.theirs.name(),
            listed(&p.req_per_s),
            p.median_req_per_s,
            listed(&p.p99),
            p.median_p99
        );
    }
}

fn all_rows(s: &mut String, results: &Results) {
    let _ = writeln!(s, "## Every measurement\n");
    let _ = writeln!(
        s,
        "| round | server | scenario | era | tools | conns | ok | errors | req/s | mean µs | p50 µs | p99 µs | p99.9 µs | max µs | CPU µs/req | CPU µs/req (per process) | server CPU % | load gen CPU % | other CPU % | peak RSS MiB (per process) | log warnings |"
    );
    let _ = writeln!(s, "|--:|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|---|--:|");
    let every = if results.every_round.is_empty() { &results.rows } else { &results.every_round };
    for r in every {
        let rss: Vec<String> =
            r.peak_rss_kib.iter().map(|(name, k)| format!("{name} {:.1}", *k as f64 / 1024.0)).collect();
        let cpu: Vec<String> = r.cpu_us_per_req_by_process.iter().map(|(name, us)| format!("{name} {us:.0}")).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {} | {} |",
            r.round + 1,
            r.server.name(),
            r.op.label(),
            r.era.version(),
            r.catalog,
            r.concurrency,
            r.ok,
            r.errors,
            r.req_per_s,
            r.mean_us,
            r.p50_us,
            r.p99_us,
            r.p999_us,
            r.max_us,
            number(r.cpu_us_per_req),
            cpu.join(", "),
            r.server_cpu_pct,
            r.loadgen_cpu_pct,
            r.other_cpu_pct,
            rss.join(", "),
            r.server_warnings
        );
    }
    s.push('\n');
}

fn problems(s: &mut String, results: &Results) {
    let _ = writeln!(s, "## Errors\n");
    let bad: Vec<&Row> = results.rows.iter().filter(|r| r.errors > 0 || r.ok == 0 || r.server_warnings > 0).collect();
    if results.failures.is_empty() && bad.is_empty() {
        let _ = writeln!(s, "None: every answer was checked and correct, and no server logged a warning.");
        return;
    }
    for f in &results.failures {
        let _ = writeln!(s, "- **{}** ({} tools), {}: {}", f.server.name(), f.catalog, f.what, f.detail);
    }
    for r in bad {
        let _ = writeln!(
            s,
            "- **{}** {} {} ({} tools, {} conns): {} errors, {} correct, {} log warnings",
            r.server.name(),
            r.op.label(),
            r.era.version(),
            r.catalog,
            r.concurrency,
            r.errors,
            r.ok,
            r.server_warnings
        );
        for (why, n) in &r.error_kinds {
            let _ = writeln!(s, "  - {n}× `{}`", why.replace('`', "'"));
        }
        for line in &r.warning_samples {
            let _ = writeln!(s, "  - log: `{}`", line.replace('`', "'"));
        }
    }
}
