//! The report: tables with ratios against the references, and a throughput chart.

use std::fmt::Write as _;

use crate::scenarios::{Plan, Row};

fn find<'a>(rows: &'a [Row], server: &str, r: &Row) -> Option<&'a Row> {
    rows.iter().find(|x| {
        x.server == server && x.scenario == r.scenario && x.catalog == r.catalog && x.concurrency == r.concurrency
    })
}

fn ratio(a: f64, b: Option<f64>) -> String {
    match b {
        Some(b) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".into(),
    }
}

pub fn markdown(rows: &[Row], plan: &Plan) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Benchmark report\n\n{} s per measurement; servers pinned to CPU 0 and the load generator to CPU 1 when `taskset` is available; keep-alive HTTP/1.1; every answer checked.\n",
        plan.duration.as_secs_f64()
    );
    let _ = writeln!(
        s,
        "| server | scenario | catalog | conns | req/s | p50 µs | p99 µs | p99.9 µs | CPU µs/req | peak RSS MiB | vs rmcp | vs bare hyper | errors |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let rss: Vec<String> = r.peak_rss_kib.iter().map(|k| format!("{:.1}", *k as f64 / 1024.0)).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.0} | {} | {} | {} | {:.1} | {} | {} | {} | {} |",
            r.server,
            r.scenario,
            r.catalog,
            r.concurrency,
            r.req_per_sec,
            r.outcome.p50_us,
            r.outcome.p99_us,
            r.outcome.p999_us,
            r.cpu_us_per_req,
            rss.join(" + "),
            ratio(r.req_per_sec, find(rows, "rmcp", r).map(|x| x.req_per_sec)),
            ratio(r.req_per_sec, find(rows, "bare-hyper", r).map(|x| x.req_per_sec)),
            r.outcome.errors
        );
    }
    s
}

/// Throughput by concurrency for `tools/list (2026-07-28)`, 5 tools, one line per server.
pub fn svg(rows: &[Row]) -> String {
    let (w, h, pad) = (640.0, 360.0, 50.0);
    let pick: Vec<&Row> = rows.iter().filter(|r| r.scenario == "tools/list (2026-07-28)" && r.catalog == 5).collect();
    let max = pick.iter().map(|r| r.req_per_sec).fold(1.0, f64::max);
    let mut levels: Vec<usize> = pick.iter().map(|r| r.concurrency).collect();
    levels.sort_unstable();
    levels.dedup();
    let x = |c: usize| {
        let i = levels.iter().position(|l| *l == c).unwrap_or(0) as f64;
        pad + i * (w - 2.0 * pad) / (levels.len().max(2) - 1) as f64
    };
    let y = |v: f64| h - pad - v / max * (h - 2.0 * pad);
    let colors = [("bare-hyper", "#888"), ("rmcp", "#d95f02"), ("standalone", "#1b9e77"), ("microservices", "#7570b3")];
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<text x=\"{pad}\" y=\"20\">tools/list (2026-07-28, 5 tools): requests per second by connections</text>\n"
    );
    let _ =
        writeln!(s, "<line x1=\"{pad}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#000\"/>", h - pad, w - pad, h - pad);
    let _ = writeln!(s, "<line x1=\"{pad}\" y1=\"{pad}\" x2=\"{pad}\" y2=\"{}\" stroke=\"#000\"/>", h - pad);
    let _ = writeln!(s, "<text x=\"5\" y=\"{}\">{max:.0}</text>", pad);
    for &c in &levels {
        let _ = writeln!(s, "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{c}</text>", x(c), h - pad + 16.0);
    }
    for (i, (server, color)) in colors.iter().enumerate() {
        let mut pts: Vec<&&Row> = pick.iter().filter(|r| r.server == *server).collect();
        pts.sort_by_key(|r| r.concurrency);
        if pts.is_empty() {
            continue;
        }
        let path: Vec<String> =
            pts.iter().map(|r| format!("{:.1},{:.1}", x(r.concurrency), y(r.req_per_sec))).collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            path.join(" ")
        );
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{server}</text>",
            w - pad - 90.0,
            pad + 16.0 * i as f64
        );
    }
    s.push_str("</svg>\n");
    s
}
