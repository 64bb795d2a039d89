//! `chart.svg`, written by hand: one row of two panels per scenario — throughput and p99
//! latency by number of connections, one line per server, logarithmic y axes.

use std::fmt::Write as _;

use crate::mcp::{Era, Op};
use crate::measure::Row;
use crate::servers::Kind;

const PANEL_W: f64 = 380.0;
const PANEL_H: f64 = 190.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 30.0;
/// The legend: entries of this width, as many to a line as the chart's width holds.
const LEGEND_ENTRY_W: f64 = 150.0;
const LEGEND_LINE_H: f64 = 16.0;

fn color(kind: Kind) -> &'static str {
    match kind {
        Kind::BareHyper => "#7f7f7f",
        Kind::Rmcp => "#d95f02",
        Kind::Standalone => "#1b9e77",
        Kind::Microservices => "#7570b3",
        Kind::MicroservicesJwt => "#e7298a",
        Kind::PythonSdk => "#e6ab02",
        Kind::TypescriptSdk => "#66a61e",
    }
}

/// Every scenario (op, era, catalog) that has rows, in report order.
fn scenarios(rows: &[Row]) -> Vec<(Op, Era, usize)> {
    let mut keys: Vec<(Op, Era, usize)> = rows.iter().map(|r| (r.op, r.era, r.catalog)).collect();
    keys.sort_by_key(|&(op, era, catalog)| (catalog, op, era));
    keys.dedup();
    keys
}

pub fn render(rows: &[Row], levels: &[usize]) -> String {
    let keys = scenarios(rows);
    let width = 2.0 * PANEL_W;
    // The servers with a line to draw (a correct answer somewhere), in the report's order,
    // wrapped to the chart's width.
    let shown: Vec<Kind> = Kind::ALL.into_iter().filter(|k| rows.iter().any(|r| r.server == *k && r.ok > 0)).collect();
    let per_line = (((width - LEFT) / LEGEND_ENTRY_W).floor() as usize).max(1);
    let legend_h = 14.0 + shown.len().div_ceil(per_line).max(1) as f64 * LEGEND_LINE_H;
    let height = legend_h + keys.len() as f64 * PANEL_H;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" \
         font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for (i, kind) in shown.iter().enumerate() {
        let x = LEFT + (i % per_line) as f64 * LEGEND_ENTRY_W;
        let y = 10.0 + (i / per_line) as f64 * LEGEND_LINE_H;
        let _ = writeln!(
            s,
            "<rect x=\"{x}\" y=\"{y}\" width=\"14\" height=\"4\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>",
            color(*kind),
            x + 18.0,
            y + 6.0,
            kind.name()
        );
    }
    for (i, &(op, era, catalog)) in keys.iter().enumerate() {
        let y0 = legend_h + i as f64 * PANEL_H;
        let pick: Vec<&Row> =
            rows.iter().filter(|r| r.op == op && r.era == era && r.catalog == catalog && r.ok > 0).collect();
        let title = format!("{} {} ({catalog} tools)", op.label(), era.version());
        panel(&mut s, 0.0, y0, &format!("{title}: req/s"), &pick, levels, |r| r.req_per_s);
        panel(&mut s, PANEL_W, y0, &format!("{title}: p99 ms"), &pick, levels, |r| r.p99_us as f64 / 1000.0);
    }
    s.push_str("</svg>\n");
    s
}

fn panel(s: &mut String, x0: f64, y0: f64, title: &str, rows: &[&Row], levels: &[usize], metric: fn(&Row) -> f64) {
    let (plot_w, plot_h) = (PANEL_W - LEFT - RIGHT, PANEL_H - TOP - BOTTOM);
    let (left, top) = (x0 + LEFT, y0 + TOP);
    let _ = writeln!(s, "<text x=\"{left}\" y=\"{}\" font-weight=\"bold\">{}</text>", y0 + 16.0, escape(title));
    let values: Vec<f64> = rows.iter().map(|r| metric(r)).filter(|v| *v > 0.0).collect();
    if values.is_empty() || levels.is_empty() {
        return;
    }
    // Whole decades around the values.
    let lo = values.iter().copied().fold(f64::MAX, f64::min).log10().floor();
    let mut hi = values.iter().copied().fold(0.0, f64::max).log10().ceil();
    if hi <= lo {
        hi = lo + 1.0;
    }
    let y = |v: f64| top + plot_h - (v.max(1e-12).log10() - lo) / (hi - lo) * plot_h;
    let step = plot_w / (levels.len().max(2) - 1) as f64;
    let x = |c: usize| left + levels.iter().position(|l| *l == c).unwrap_or(0) as f64 * step;
    for d in (lo as i32)..=(hi as i32) {
        let v = 10f64.powi(d);
        let yy = y(v);
        let _ = writeln!(
            s,
            "<line x1=\"{left}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left + plot_w,
            left - 4.0,
            yy + 4.0,
            si(v)
        );
    }
    for &c in levels {
        let _ =
            writeln!(s, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{c}</text>", x(c), top + plot_h + 14.0);
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#555\">connections</text>",
        left + plot_w / 2.0,
        top + plot_h + 26.0
    );
    for kind in Kind::ALL {
        let mut pts: Vec<(f64, f64)> =
            rows.iter().filter(|r| r.server == kind).map(|r| (x(r.concurrency), y(metric(r)))).collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        if pts.is_empty() {
            continue;
        }
        let line: Vec<String> = pts.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>",
            color(kind),
            line.join(" ")
        );
        for (a, b) in pts {
            let _ = writeln!(s, "<circle cx=\"{a:.1}\" cy=\"{b:.1}\" r=\"2.5\" fill=\"{}\"/>", color(kind));
        }
    }
}

/// 1k, 10k, 1M, 0.01 …
fn si(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{}M", v / 1e6),
        v if v >= 1e3 => format!("{}k", v / 1e3),
        v => format!("{v}"),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::test_row;

    /// The legend's entries: (x of the text, its line's y, the name).
    fn legend(svg: &str) -> Vec<(f64, f64, String)> {
        svg.lines()
            .filter(|l| l.starts_with("<rect x=") && l.contains("<text"))
            .map(|l| {
                let text = &l[l.find("<text").expect("text")..];
                let attr = |name: &str| -> f64 {
                    let at = text.find(&format!("{name}=\"")).expect("attribute") + name.len() + 2;
                    text[at..at + text[at..].find('"').expect("quote")].parse().expect("number")
                };
                let name = &text[text.find('>').expect(">") + 1..text.find("</text>").expect("end")];
                (attr("x"), attr("y"), name.to_owned())
            })
            .collect()
    }

    #[test]
    fn the_legend_names_the_servers_measured_within_the_chart() {
        let every: Vec<Row> = Kind::ALL.into_iter().flat_map(|k| [test_row(k, 1), test_row(k, 64)]).collect();
        let svg = render(&every, &[1, 64]);
        let entries = legend(&svg);
        assert_eq!(entries.iter().map(|e| e.2.as_str()).collect::<Vec<_>>(), Kind::ALL.map(Kind::name));
        // About 7 px a character at 11 px sans-serif: each name ends inside the chart's width.
        for (x, _, name) in &entries {
            assert!(x + 7.0 * name.len() as f64 <= 2.0 * PANEL_W, "{name} at {x} runs past the chart");
        }
        assert!(entries.iter().any(|e| e.1 > entries[0].1), "seven names take more than one line");
        // The first panel's title comes below the legend's last line.
        let last_line = entries.iter().map(|e| e.1).fold(0.0, f64::max);
        let title = svg.lines().find(|l| l.contains("font-weight=\"bold\"")).expect("a panel title");
        let at = title.find("y=\"").expect("y") + 3;
        let title_y: f64 = title[at..at + title[at..].find('"').expect("quote")].parse().expect("number");
        assert!(title_y > last_line + 10.0, "title at {title_y}, legend to {last_line}");

        // Only what was measured, with a correct answer, is named.
        let mut failed = test_row(Kind::Standalone, 64);
        failed.ok = 0;
        let two: Vec<Row> =
            [Kind::Rmcp, Kind::Microservices].into_iter().map(|k| test_row(k, 64)).chain([failed]).collect();
        let names: Vec<String> = legend(&render(&two, &[64])).into_iter().map(|e| e.2).collect();
        assert_eq!(names, ["rmcp", "microservices"]);
    }

    #[test]
    fn labels_decades() {
        assert_eq!(si(1e3), "1k");
        assert_eq!(si(1e6), "1M");
        assert_eq!(si(0.1), "0.1");
    }
}
