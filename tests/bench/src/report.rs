//! The report: `report.md` (tables with ratios against the references), `report.json` (every
//! number) and `chart.svg` (throughput and p99 latency by concurrency).

mod markdown;
mod svg;

use std::path::Path;

use crate::measure::{Plan, Results};

/// Where and on what the run happened.
#[derive(Debug, serde::Serialize)]
pub struct Environment {
    pub date: String,
    pub cpu: String,
    pub cores: usize,
    pub kernel: String,
    pub load_average_before: String,
    pub load_average_after: String,
    pub rmcp_version: String,
}

impl Environment {
    /// What can be known before the run (the load average after is filled in at the end).
    pub fn now() -> Environment {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':').map(|(_, v)| v.trim().to_owned()))
            .unwrap_or_default();
        // Counted from cpuinfo: this process may already be pinned to one of them.
        let cores = cpuinfo.lines().filter(|l| l.starts_with("processor")).count();
        Environment {
            date: command("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            cpu,
            cores,
            kernel: command("uname", &["-r"]),
            load_average_before: load_average(),
            load_average_after: String::new(),
            rmcp_version: rmcp::model::Implementation::from_build_env().version,
        }
    }
}

pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn command(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

#[derive(serde::Serialize)]
struct Json<'a> {
    environment: &'a Environment,
    plan: &'a Plan,
    #[serde(flatten)]
    results: &'a Results,
}

/// Write the three files into `dir`; the markdown is returned too.
pub fn write(dir: &Path, env: &Environment, plan: &Plan, results: &Results) -> anyhow::Result<String> {
    std::fs::create_dir_all(dir)?;
    let md = markdown::render(env, plan, results);
    std::fs::write(dir.join("report.md"), &md)?;
    std::fs::write(dir.join("report.json"), serde_json::to_vec_pretty(&Json { environment: env, plan, results })?)?;
    std::fs::write(dir.join("chart.svg"), svg::render(&results.rows, &plan.concurrency))?;
    Ok(md)
}
